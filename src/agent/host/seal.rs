//! Sealing the agent process: what it starts from and what it can reach.
//!
//! Pure functions, argv and environment in, argv and environment out; the
//! spawn in `process` runs what [`plan`] returns. A process is started
//! from an empty environment plus a small base ([`BASE_ENV`], `LC_*`), the
//! names in `agent.pass_env` and `agent.env`; never the bot token or a
//! `TURNSTILE_*` variable. It runs in its chat's own working directory,
//! created 0700 on first use. With `agent.sandbox = "bubblewrap"` (the
//! default) it runs under `bwrap` ([`bwrap_base`]): no capability, the
//! system read-only, the state and config directories and the directories
//! holding every chat's workdir and home hidden whole under a tmpfs (what
//! the CLI itself is run from bound back read-only), a fresh `/tmp`,
//! `/proc` and `/dev`, its own PID namespace, which ends with it, and only
//! its own workdir and home writable. `agent.launcher` goes first of all
//! (`ssh HOST`, `docker run -i …`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::agent::network::Isolation;
use crate::config::{ENV_PREFIX, Sandbox, TOKEN_ENV};
use mounts::{Bind, TMP, bwrap_argv, mounts, place_roots_to_make};
use network::isolate_network;
pub(crate) use network::isolation;
use program::cli_files;
pub(crate) use program::find_program;

/// Variables of turnstile's own environment every agent gets (and `LC_*`).
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ", "TMPDIR"];

/// The placeholder for the chat id in `agent.workdir` and `agent.launcher`.
pub const CHAT: &str = "{chat}";
/// The placeholder for the chat's workdir in `agent.launcher`.
pub const WORKDIR: &str = "{workdir}";

/// The sandbox program.
pub const BWRAP: &str = "bwrap";

/// Directories never hidden whole under a tmpfs (the sandbox covers only
/// the secret files in them): the system itself.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/var/lib",
];

/// How every agent process of a backend is sealed; built once from the
/// config.
#[derive(Debug, Clone)]
pub struct Seal {
    /// `agent.workdir`, absolute, with its `{chat}` placeholder.
    pub workdir: PathBuf,
    /// The agent's HOME and `CLAUDE_CONFIG_DIR` under the sandbox (unless
    /// `agent.env` sets them), absolute, with a `{chat}` placeholder:
    /// writable and kept between processes so `--resume` finds the session.
    pub home: PathBuf,
    /// `agent.pass_env`.
    pub pass_env: Vec<String>,
    /// `agent.sandbox`.
    pub sandbox: Sandbox,
    /// `agent.launcher`, placeholders unfilled.
    pub launcher: Vec<String>,
    /// Files the sandbox must hide (the state file, the config file),
    /// absolute: their whole directories are hidden.
    pub secrets: Vec<PathBuf>,
    /// Whether bwrap makes its own user namespace (`--unshare-user`): the
    /// start probe sets it when turnstile does not run as root and bwrap
    /// can.
    pub user_ns: bool,
    /// Whether bwrap also forbids the agent user namespaces of its own
    /// ([`NO_NESTED_USERNS`], which needs `user_ns`): the start probe sets
    /// it when bwrap can.
    pub no_nested_userns: bool,
    /// Where every chat's directories lie, of every place (the default
    /// workdirs, the homes, each project's workdirs): each root, absolute,
    /// hidden under the sandbox but for this chat's own directories, and
    /// made before the spawn, so that none appears in a running sandbox.
    pub places: Vec<PathBuf>,
    /// The agent's own network (`agent.network`): under bubblewrap, a
    /// namespace whose only way out is the proxy; `None` shares the
    /// host's.
    pub network: Option<Arc<Isolation>>,
    /// One process's chat tools directory (the `acp` backend's, in a
    /// network of its own): bound read-only into its sandbox, its socket
    /// relayed to the agent on the sandbox's loopback. Set per process,
    /// never in the backend's own settings.
    pub tools: Option<PathBuf>,
}

/// bwrap's flag that leaves the sandbox unable to make user namespaces
/// (bubblewrap 0.8 and later; it needs `--unshare-user`): in one of its
/// own, the agent would hold every capability again, over its own mounts.
pub const NO_NESTED_USERNS: &str = "--disable-userns";

/// A process to start: what `process` hands the OS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The whole argv: launcher, bwrap, the CLI and its arguments.
    pub argv: Vec<String>,
    /// The whole environment (the child's starts empty).
    pub env: BTreeMap<OsString, OsString>,
    /// The working directory, also the sandbox's writable one.
    pub workdir: PathBuf,
    /// Directories to create (mode 0700) before the spawn.
    pub create: Vec<PathBuf>,
}

/// A path with its `{chat}` placeholders filled.
#[must_use]
pub fn chat_path(template: &Path, chat: &str) -> PathBuf {
    PathBuf::from(template.to_string_lossy().replace(CHAT, chat))
}

/// Whether `name` may never reach an agent: the bot token, `TURNSTILE_*`.
#[must_use]
pub fn is_forbidden_var(name: &str) -> bool {
    name == TOKEN_ENV || name.starts_with(ENV_PREFIX)
}

/// The clean environment: the base and `pass_env` taken from `parent`,
/// then `extra` (`agent.env`), minus anything [`is_forbidden_var`].
#[must_use]
pub fn clean_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    pass_env: &[String],
    extra: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let wanted = |name: &str| {
        BASE_ENV.contains(&name) || name.starts_with("LC_") || pass_env.iter().any(|p| p == name)
    };
    let mut env: BTreeMap<OsString, OsString> = parent
        .into_iter()
        .filter(|(name, _)| name.to_str().is_some_and(wanted))
        .collect();
    env.extend(
        extra
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    env.retain(|name, _| !name.to_str().is_none_or(is_forbidden_var));
    env
}

/// Whether `id` looks like one of the CLI's session ids (a UUID), so it can
/// be passed as `--resume=<id>` and never read as anything else.
#[must_use]
pub fn is_session_id(id: &str) -> bool {
    id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The variables that say where a Claude Code session lives.
pub const HOME_VARS: [&str; 2] = ["HOME", "CLAUDE_CONFIG_DIR"];

/// The [`HOME_VARS`] a process of `chat` gets, as [`plan`] sets them:
/// under the sandbox the chat's own home unless `extra` (`agent.env`)
/// names one, otherwise what the clean environment passes on from
/// `parent`; a variable the process does not get is left out.
#[must_use]
pub fn homes(
    seal: &Seal,
    chat: &str,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &BTreeMap<String, String>,
) -> Vec<(&'static str, OsString)> {
    let env = clean_env(parent, &seal.pass_env, extra);
    let home = chat_path(&seal.home, chat);
    HOME_VARS
        .into_iter()
        .filter_map(|var| {
            let value = match (seal.sandbox, extra.contains_key(var)) {
                (Sandbox::Bubblewrap, false) => Some(home.clone().into_os_string()),
                _ => env.get(&OsString::from(var)).cloned(),
            };
            value.map(|value| (var, value))
        })
        .collect()
}

/// `word` as one word for a POSIX shell: as it is when it holds only
/// characters no shell reads specially, otherwise in single quotes (a `'`
/// in it written `'\''`).
#[must_use]
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:@%+,".contains(&b));
    if plain {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `agent.launcher` with `{chat}` and `{workdir}` filled.
#[must_use]
pub fn launcher_argv(launcher: &[String], chat: &str, workdir: &Path) -> Vec<String> {
    let workdir = workdir.to_string_lossy();
    launcher
        .iter()
        .map(|arg| arg.replace(CHAT, chat).replace(WORKDIR, &workdir))
        .collect()
}

/// The process for `chat`: `command` and `args` sealed as `seal` says,
/// environment from `parent`, `extra` (`agent.env`) and the protocol's own
/// variables. `exists` tells which files are there (the sandbox hides the
/// ones that are); under the sandbox the CLI's own files are looked up
/// (on `PATH`, through symlinks and its `#!` line) to bind them back.
pub fn plan(
    seal: &Seal,
    chat: &str,
    command: &str,
    args: &[String],
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &BTreeMap<String, String>,
    exists: impl Fn(&Path) -> bool,
) -> Plan {
    let workdir = chat_path(&seal.workdir, chat);
    let mut env = clean_env(parent, &seal.pass_env, extra);
    env.insert("CLAUDE_CODE_ENTRYPOINT".into(), "sdk-ts".into());
    env.insert("CLAUDE_CODE_SDK_READS_SESSION_STATE".into(), "1".into());
    let mut create = vec![workdir.clone()];
    let mut argv = launcher_argv(&seal.launcher, chat, &workdir);
    if seal.sandbox == Sandbox::Bubblewrap {
        let home = chat_path(&seal.home, chat);
        let mut writable = vec![Bind::Made(workdir.clone())];
        for var in HOME_VARS {
            match extra.get(var) {
                Some(given) => writable.push(Bind::Given(PathBuf::from(given))),
                None => {
                    env.insert(var.into(), home.clone().into());
                    if !create.contains(&home) {
                        create.push(home.clone());
                        writable.push(Bind::Made(home.clone()));
                    }
                }
            }
        }
        create.extend(place_roots_to_make(seal, &create));
        let cli = cli_files(
            command,
            env.get(&OsString::from("PATH")).map(OsString::as_os_str),
        );
        env.insert("TMPDIR".into(), "/tmp".into());
        let mut cli = cli;
        if let Some(isolation) = &seal.network {
            cli.extend(cli_files(&isolation.relay().to_string_lossy(), None));
        }
        let base = argv.len() + bwrap_base(seal.user_ns).len();
        argv.extend(bwrap_argv(
            seal,
            &mounts(seal, writable, &cli, &exists),
            &workdir,
        ));
        if let Some(isolation) = &seal.network {
            isolate_network(isolation, seal.tools.as_deref(), base, &mut argv, &mut env);
        }
    }
    argv.push(command.to_owned());
    argv.extend(args.iter().cloned());
    Plan {
        argv,
        env,
        workdir,
        create,
    }
}

/// `bwrap` and the flags every sandbox starts with (and the start probe
/// runs `true` under): a new session; its own PID, IPC, UTS and cgroup
/// namespaces, and its own user namespace when `user_ns`; no capability
/// at all, even for root (so no mount can be undone or made writable);
/// the system read-only; fresh `/dev`, `/proc` and `/tmp`; killed with its
/// parent, and then, as its PID namespace's init is gone, every process
/// in it.
#[must_use]
pub fn bwrap_base(user_ns: bool) -> Vec<String> {
    let mut argv = vec![
        BWRAP,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ];
    if user_ns {
        argv.push("--unshare-user");
    }
    argv.extend([
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        TMP,
    ]);
    argv.into_iter().map(str::to_owned).collect()
}

/// The flags after [`bwrap_base`] that forbid nested user namespaces:
/// [`NO_NESTED_USERNS`] when `no_nested` and bwrap has its own user
/// namespace (`user_ns`), which the flag needs.
#[must_use]
pub fn userns_seal(user_ns: bool, no_nested: bool) -> Vec<String> {
    if user_ns && no_nested {
        vec![NO_NESTED_USERNS.to_owned()]
    } else {
        Vec::new()
    }
}

/// Whether `dir` is one the sandbox never hides whole: the system itself.
#[must_use]
pub fn is_system(dir: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| Path::new(d) == dir)
}

/// The directory holding every chat's directory made from `template`
/// (the path before its first `{chat}`); `None` when there is no
/// placeholder (one directory for every chat).
pub fn chat_root(template: &Path) -> Option<PathBuf> {
    let mut root = PathBuf::new();
    for part in template.components() {
        if part.as_os_str().to_string_lossy().contains(CHAT) {
            return Some(root);
        }
        root.push(part);
    }
    None
}

/// `path` with the symlinks of its longest existing ancestor resolved
/// (the rest, not there yet, as it is).
#[must_use]
pub fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

mod mounts;
mod network;
mod program;

#[cfg(test)]
mod tests;

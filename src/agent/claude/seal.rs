//! Sealing the agent process: what it starts from and what it can reach.
//!
//! Pure functions, argv and environment in, argv and environment out; the
//! spawn in `process` runs what [`plan`] returns. A process is started
//! from an empty environment plus a small base ([`BASE_ENV`], `LC_*`), the
//! names in `agent.pass_env` and `agent.env`; never the bot token or a
//! `TURNSTILE_*` variable. It runs in its chat's own working directory,
//! created 0700 on first use. With `agent.sandbox = "bubblewrap"` it runs
//! under `bwrap`: the system read-only, the state and config directories
//! hidden under a tmpfs, a fresh `/tmp`, `/proc` and `/dev`, its own PID
//! namespace, and only the workdir and its home writable. `agent.launcher`
//! goes first of all (`ssh HOST`, `docker run -i …`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{ENV_PREFIX, Sandbox, TOKEN_ENV};

/// Variables of turnstile's own environment every agent gets (and `LC_*`).
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TZ", "TMPDIR"];

/// The placeholder for the chat id in `agent.workdir` and `agent.launcher`.
pub const CHAT: &str = "{chat}";
/// The placeholder for the chat's workdir in `agent.launcher`.
pub const WORKDIR: &str = "{workdir}";

/// The sandbox program.
pub const BWRAP: &str = "bwrap";

/// Directories never hidden under a tmpfs (the sandbox hides only the
/// files in them): the system itself.
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
    /// absolute.
    pub secrets: Vec<PathBuf>,
}

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
/// ones that are).
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
        for var in ["HOME", "CLAUDE_CONFIG_DIR"] {
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
        env.insert("TMPDIR".into(), "/tmp".into());
        let keep: Vec<PathBuf> = writable.iter().map(|b| b.path().to_owned()).collect();
        argv.extend(bwrap_argv(
            &hides(&seal.secrets, &keep, command, &exists),
            &writable,
            &workdir,
            &under_tmp(command),
        ));
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

/// A writable directory in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bind {
    /// Made by turnstile before the spawn: must be there.
    Made(PathBuf),
    /// Named by `agent.env`: bound when it exists.
    Given(PathBuf),
}

impl Bind {
    fn path(&self) -> &Path {
        match self {
            Self::Made(path) | Self::Given(path) => path,
        }
    }
}

/// What the sandbox covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hide {
    /// A directory under an empty tmpfs.
    Dir(PathBuf),
    /// A file under `/dev/null`.
    File(PathBuf),
}

/// How to hide each secret file: its whole directory under a tmpfs, unless
/// that is a system directory or holds the CLI or a writable directory
/// (then only the file and its SQLite companions that exist).
fn hides(
    secrets: &[PathBuf],
    writable: &[PathBuf],
    command: &str,
    exists: &impl Fn(&Path) -> bool,
) -> Vec<Hide> {
    let command = Path::new(command);
    let mut out: Vec<Hide> = Vec::new();
    for file in secrets {
        let Some(dir) = file.parent() else { continue };
        let system = SYSTEM_DIRS.iter().any(|d| Path::new(d) == dir);
        let needed = command.is_absolute() && command.starts_with(dir)
            || writable.iter().any(|w| dir.starts_with(w));
        if !system && !needed {
            let hide = Hide::Dir(dir.to_owned());
            if !out.contains(&hide) {
                out.push(hide);
            }
            continue;
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = file.clone().into_os_string();
            name.push(suffix);
            let path = PathBuf::from(name);
            if exists(&path) {
                out.push(Hide::File(path));
            }
        }
    }
    out
}

/// The directories of the command (and of the file it links to) that lie
/// under `/tmp`, which the sandbox replaces with an empty tmpfs: they are
/// bound back read-only so the command can still be run.
fn under_tmp(command: &str) -> Vec<PathBuf> {
    let path = Path::new(command);
    if !path.is_absolute() {
        return Vec::new();
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    let real = std::fs::canonicalize(path).ok();
    for file in [Some(path.to_path_buf()), real].into_iter().flatten() {
        if let Some(dir) = file.parent()
            && dir.starts_with("/tmp")
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// `bwrap` and its arguments up to the command.
fn bwrap_argv(hides: &[Hide], writable: &[Bind], workdir: &Path, tools: &[PathBuf]) -> Vec<String> {
    let mut argv: Vec<String> = [
        BWRAP,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let text = |p: &Path| p.to_string_lossy().into_owned();
    for dir in tools {
        argv.extend(["--ro-bind".into(), text(dir), text(dir)]);
    }
    // Directories first, so the writable binds show through them; files
    // last, so no bind shows them again.
    for hide in hides {
        if let Hide::Dir(dir) = hide {
            argv.extend(["--tmpfs".into(), text(dir)]);
        }
    }
    for bind in writable {
        let flag = match bind {
            Bind::Made(_) => "--bind",
            Bind::Given(_) => "--bind-try",
        };
        let path = text(bind.path());
        argv.extend([flag.into(), path.clone(), path]);
    }
    for hide in hides {
        if let Hide::File(file) = hide {
            argv.extend(["--ro-bind".into(), "/dev/null".into(), text(file)]);
        }
    }
    argv.extend(["--chdir".into(), text(workdir), "--".into()]);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &BTreeMap<OsString, OsString>) -> Vec<String> {
        env.keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_clean_env_is_the_base_pass_env_and_agent_env_only() {
        let parent = os(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("TZ", "UTC"),
            ("TMPDIR", "/var/tmp"),
            ("TELEGRAM_BOT_TOKEN", "123:secret"),
            ("TURNSTILE_AGENT_ENV_X", "1"),
            ("AWS_SECRET_ACCESS_KEY", "nope"),
            ("ANTHROPIC_API_KEY", "key"),
        ]);
        let extra = BTreeMap::from([("DEBUG".to_owned(), "1".to_owned())]);
        let env = clean_env(parent, &["ANTHROPIC_API_KEY".into()], &extra);
        assert_eq!(
            names(&env),
            [
                "ANTHROPIC_API_KEY",
                "DEBUG",
                "HOME",
                "LANG",
                "LC_ALL",
                "PATH",
                "TMPDIR",
                "TZ"
            ]
        );
    }

    #[test]
    fn the_token_and_turnstile_vars_never_pass_even_when_named() {
        let parent = os(&[("TELEGRAM_BOT_TOKEN", "t"), ("TURNSTILE_LOG", "debug")]);
        let extra = BTreeMap::from([("TURNSTILE_X".to_owned(), "1".to_owned())]);
        let pass = ["TELEGRAM_BOT_TOKEN".into(), "TURNSTILE_LOG".into()];
        assert!(clean_env(parent, &pass, &extra).is_empty());
    }

    #[test]
    fn session_ids_are_uuids() {
        assert!(is_session_id("0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3c"));
        assert!(is_session_id("0B5E4C2A-1F3D-4E6A-9B7C-8D9E0F1A2B3C"));
        for bad in [
            "",
            "fake-session-1",
            "--help",
            "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3",
            "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3cd",
            "0b5e4c2a 1f3d-4e6a-9b7c-8d9e0f1a2b3c",
            "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3g",
        ] {
            assert!(!is_session_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn placeholders_are_filled() {
        assert_eq!(
            chat_path(Path::new("/srv/ws/{chat}"), "-1001"),
            PathBuf::from("/srv/ws/-1001")
        );
        let launcher = [
            "ssh".into(),
            "box".into(),
            "cd {workdir} && run {chat}".into(),
        ];
        assert_eq!(
            launcher_argv(&launcher, "7", Path::new("/w/7")),
            ["ssh", "box", "cd /w/7 && run 7"]
        );
    }

    fn seal(sandbox: Sandbox) -> Seal {
        Seal {
            workdir: PathBuf::from("/var/lib/turnstile/workspaces/{chat}"),
            home: PathBuf::from("/var/lib/turnstile/homes/{chat}"),
            pass_env: Vec::new(),
            sandbox,
            launcher: Vec::new(),
            secrets: vec![
                PathBuf::from("/var/lib/turnstile/turnstile.db"),
                PathBuf::from("/etc/turnstile.toml"),
            ],
        }
    }

    #[test]
    fn without_a_sandbox_the_cli_runs_directly_in_its_workdir() {
        let parent = os(&[("HOME", "/root"), ("TELEGRAM_BOT_TOKEN", "t")]);
        let plan = plan(
            &seal(Sandbox::None),
            "5",
            "claude",
            &["-p".into()],
            parent,
            &BTreeMap::new(),
            |_| true,
        );
        assert_eq!(plan.argv, ["claude", "-p"]);
        assert_eq!(
            plan.workdir,
            PathBuf::from("/var/lib/turnstile/workspaces/5")
        );
        assert_eq!(plan.create, std::slice::from_ref(&plan.workdir));
        assert_eq!(
            names(&plan.env),
            [
                "CLAUDE_CODE_ENTRYPOINT",
                "CLAUDE_CODE_SDK_READS_SESSION_STATE",
                "HOME"
            ]
        );
    }

    #[test]
    fn bubblewrap_hides_the_state_dir_and_binds_the_workdir_and_home() {
        let plan = plan(
            &seal(Sandbox::Bubblewrap),
            "5",
            "/usr/bin/claude",
            &[],
            os(&[("HOME", "/root")]),
            &BTreeMap::new(),
            |p| p == Path::new("/etc/turnstile.toml"),
        );
        let argv = plan.argv.join(" ");
        assert!(argv.starts_with("bwrap --die-with-parent "), "{argv}");
        for part in [
            "--unshare-pid",
            "--ro-bind / /",
            "--proc /proc",
            "--tmpfs /tmp",
            "--tmpfs /var/lib/turnstile",
            "--ro-bind /dev/null /etc/turnstile.toml",
            "--bind /var/lib/turnstile/workspaces/5 /var/lib/turnstile/workspaces/5",
            "--bind /var/lib/turnstile/homes/5 /var/lib/turnstile/homes/5",
            "--chdir /var/lib/turnstile/workspaces/5 -- /usr/bin/claude",
        ] {
            assert!(argv.contains(part), "{part:?} not in {argv}");
        }
        // The hide comes before the binds, which show through it.
        assert!(argv.find("--tmpfs /var/lib").unwrap() < argv.find("--bind ").unwrap());
        assert!(!argv.contains("--unshare-net"), "the agent needs its API");
        assert_eq!(
            plan.env[&OsString::from("HOME")],
            "/var/lib/turnstile/homes/5"
        );
        assert_eq!(
            plan.env[&OsString::from("CLAUDE_CONFIG_DIR")],
            "/var/lib/turnstile/homes/5"
        );
        assert_eq!(plan.env[&OsString::from("TMPDIR")], "/tmp");
        assert_eq!(plan.create.len(), 2);
    }

    #[test]
    fn a_secret_beside_the_cli_or_a_writable_dir_is_hidden_file_by_file() {
        let mut seal = seal(Sandbox::Bubblewrap);
        seal.secrets = vec![PathBuf::from("/opt/bot/state.db")];
        seal.workdir = PathBuf::from("/opt/bot/ws/{chat}");
        let plan = plan(
            &seal,
            "1",
            "/opt/bot/bin/claude",
            &[],
            Vec::new(),
            &BTreeMap::from([("HOME".to_owned(), "/h".to_owned())]),
            |p| p.to_string_lossy().ends_with(".db") || p.ends_with("state.db-wal"),
        );
        let argv = plan.argv.join(" ");
        assert!(!argv.contains("--tmpfs /opt/bot"), "{argv}");
        assert!(
            argv.contains("--ro-bind /dev/null /opt/bot/state.db "),
            "{argv}"
        );
        assert!(
            argv.contains("--ro-bind /dev/null /opt/bot/state.db-wal "),
            "{argv}"
        );
        assert!(!argv.contains("state.db-shm"), "{argv}");
        assert!(argv.contains("--bind-try /h /h"), "{argv}");
        assert_eq!(plan.env[&OsString::from("HOME")], "/h");
    }

    #[test]
    fn the_launcher_goes_first() {
        let mut seal = seal(Sandbox::Bubblewrap);
        seal.launcher = vec!["/wrap.sh".into(), "{chat}".into(), "{workdir}".into()];
        let plan = plan(
            &seal,
            "3",
            "claude",
            &[],
            Vec::new(),
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(
            plan.argv[..4],
            ["/wrap.sh", "3", "/var/lib/turnstile/workspaces/3", "bwrap"]
        );
    }
}

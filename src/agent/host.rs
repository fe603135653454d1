//! The agent host: what every process backend shares, whatever protocol
//! its agent speaks.
//!
//! A backend is a protocol plus its settings; this room owns the rest:
//! [`ProcessSpec`] (how an agent process starts: command, arguments,
//! environment, seal, kill grace), `seal` (what the process starts from and
//! can reach: clean environment, per-chat workdir and home, bubblewrap,
//! launcher argv), `process` (spawn, process group, signals, reaping, the
//! leftover ledger), `lines` (the one bounded line reader), `jsonrpc` (the
//! one JSON-RPC codec), `mcp` (the chat tools' MCP server), `permissions`
//! (the order of the permission rules) and the session task generic over a
//! protocol. No file here imports a backend.

pub mod handover;
pub mod jsonrpc;
pub mod lines;
pub mod mcp;
pub mod permissions;
pub(crate) mod process;
pub mod seal;
pub mod session;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Config, Sandbox, TOKEN_CREDENTIAL};

pub use process::{RunningProcesses, boot_id, kill_leftover_groups};
pub use seal::{Seal, is_session_id};

/// How an agent process starts, whatever protocol it then speaks.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The executable.
    pub command: String,
    /// `agent.args`: the operator's arguments (a backend puts them after its
    /// protocol's own, or uses them whole).
    pub args: Vec<String>,
    /// `agent.env`: set on top of the clean environment.
    pub env: BTreeMap<String, String>,
    /// What each process starts from and can reach (workdir, environment,
    /// sandbox, launcher).
    pub seal: Seal,
    /// Between SIGTERM and SIGKILL, and for a graceful close.
    pub kill_grace: Duration,
}

impl ProcessSpec {
    /// The spec in a config: `agent.command`, `agent.args`, `agent.env`,
    /// the seal of `agent.workdir`, `agent.home`, `agent.pass_env`,
    /// `agent.sandbox` and `agent.launcher`, with every secret the sandbox
    /// hides, and `turn.post_result_grace`.
    pub fn from_config(config: &Config) -> Self {
        let agent = &config.agent;
        Self {
            command: agent.command.clone(),
            args: agent.args.clone(),
            env: agent.env.clone(),
            seal: Seal {
                workdir: config.agent_workdir(),
                home: config.agent_home(),
                pass_env: agent.pass_env.clone(),
                sandbox: agent.sandbox,
                launcher: agent.launcher.clone(),
                secrets: config
                    .state_file()
                    .into_iter()
                    .chain(config.file.clone())
                    .chain(
                        config
                            .credentials
                            .as_ref()
                            .map(|dir| dir.join(TOKEN_CREDENTIAL)),
                    )
                    .collect(),
                user_ns: false,
                no_nested_userns: false,
                places: config.place_roots(),
                network: seal::isolation(config),
                tools: None,
            },
            kill_grace: config.turn.post_result_grace,
        }
    }

    /// With `agent.sandbox = "bubblewrap"`, runs `bwrap` once as every
    /// session will ([`seal::bwrap_base`], the command `true`), taking its
    /// own user namespace when turnstile is not root and that works. Not
    /// under `agent.launcher`, which may start it elsewhere.
    ///
    /// # Errors
    ///
    /// bwrap is missing or cannot make its namespaces: the message names
    /// `agent.sandbox`, the package and the opt-out.
    pub fn probe_sandbox(&mut self) -> Result<(), String> {
        if self.seal.sandbox != Sandbox::Bubblewrap || !self.seal.launcher.is_empty() {
            return Ok(());
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        match process::probe_bubblewrap(root) {
            Ok((user_ns, no_nested_userns)) => {
                tracing::info!(
                    user_ns,
                    no_nested_userns,
                    "bubblewrap works: the agent runs sandboxed"
                );
                if !no_nested_userns {
                    tracing::warn!(
                        "bwrap cannot forbid the agent user namespaces of its own \
                         (`--disable-userns` needs bubblewrap 0.8 or later, not set-user-ID): \
                         inside one, the agent holds every capability over its own mounts"
                    );
                }
                self.seal.user_ns = user_ns;
                self.seal.no_nested_userns = no_nested_userns;
                Ok(())
            }
            Err(why) => Err(format!(
                "agent.sandbox = \"bubblewrap\" (the default), but bubblewrap cannot \
                 sandbox the agent (or the voice transcriber) here: {why}. Install the package \
                 `bubblewrap` (its `bwrap` on PATH, able to make namespaces: as root, or \
                 with user namespaces allowed), or set agent.sandbox = \"none\" to run the \
                 agent without a sandbox"
            )),
        }
    }

    /// The spec of a session in `project`: its workdir instead of
    /// `agent.workdir`. The directory holding the default workdirs stays
    /// hidden under the sandbox (as a secret's directory is), so a
    /// project's agent sees no chat's default workdir.
    pub fn for_project(&self, project: &crate::agent::ProjectPlace) -> Self {
        let mut spec = self.clone();
        let default = &self.seal.workdir;
        let root = seal::chat_root(default).unwrap_or_else(|| default.clone());
        spec.seal.secrets.push(root.join(".workdirs"));
        spec.seal.workdir = project.workdir.clone();
        spec
    }

    /// How a process of this spec for the conversation `key` with `args`
    /// starts now (`seal::plan` with this process's environment).
    pub(crate) fn plan(&self, key: &str, args: &[String]) -> seal::Plan {
        seal::plan(
            &self.seal,
            key,
            &self.command,
            args,
            std::env::vars_os(),
            &self.env,
            |path| path.exists(),
        )
    }

    /// The conversation's working directory, absolute: where the sealed
    /// process starts.
    pub fn cwd(&self, key: &str) -> std::path::PathBuf {
        let dir = seal::chat_path(&self.seal.workdir, key);
        if dir.is_absolute() {
            return dir;
        }
        std::env::current_dir().map_or(dir.clone(), |here| here.join(&dir))
    }
}

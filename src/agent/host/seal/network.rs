//! The agent's own network in its sandbox (see `agent::network`): the
//! bwrap flags, the relay before the command, the proxy variables.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Sandbox, Seal};
use crate::agent::network::{self, Isolation};

/// Where the host's daemons keep their sockets (`docker.sock`,
/// containerd's, D-Bus's): empty in a sandbox with its own network.
const RUN: &str = "/run";

impl Seal {
    /// Starts the proxy of the agent's own network, when it has one and
    /// runs under bubblewrap (once; later calls answer as the first).
    ///
    /// # Errors
    ///
    /// The proxy's socket could not be made.
    pub fn start_network(&self) -> Result<(), String> {
        match &self.network {
            Some(isolation) if self.isolates_network() => isolation.start(),
            _ => Ok(()),
        }
    }

    /// Whether the agent runs in a network of its own.
    #[must_use]
    pub fn isolates_network(&self) -> bool {
        self.network.is_some() && self.sandbox == Sandbox::Bubblewrap
    }

    /// Relays the agent's own network with `relay` (a `turnstile`
    /// binary) instead of this one; before any process starts.
    pub fn relay_network_with(&mut self, relay: PathBuf) {
        if let Some(isolation) = &self.network {
            self.network = Some(Arc::new(isolation.relayed_by(relay)));
        }
    }
}

/// The agent's own network, in a planned bwrap `argv` (up to its `--`)
/// and `env`: a network namespace of its own (`--unshare-net`), the
/// proxy's socket bound read-only at [`network::SANDBOX_SOCKET`] (and
/// the process's chat tools directory `tools` at
/// [`network::SANDBOX_TOOLS`]), the relay run first (`turnstile net-relay
/// --no-unix-sockets [--tools …] SOCKET --` before the command), and the
/// proxy variables pointing at it; no variable that would let the agent's
/// HTTP go around it.
pub(super) fn isolate_network(
    isolation: &Isolation,
    tools: Option<&Path>,
    base: usize,
    argv: &mut Vec<String>,
    env: &mut BTreeMap<OsString, OsString>,
) {
    // Right after bwrap's base, before any bind (a workdir may lie under
    // /run): an empty /run, where the host's sockets live.
    argv.splice(base..base, ["--tmpfs".to_owned(), RUN.to_owned()]);
    // Before bwrap's own `--`, which ends its arguments.
    let at = argv.len().saturating_sub(1);
    let mut flags = vec![
        "--unshare-net".to_owned(),
        "--ro-bind".to_owned(),
        isolation.socket().to_string_lossy().into_owned(),
        network::SANDBOX_SOCKET.to_owned(),
    ];
    if let Some(dir) = tools {
        flags.extend([
            "--ro-bind".to_owned(),
            dir.to_string_lossy().into_owned(),
            network::SANDBOX_TOOLS.to_owned(),
        ]);
    }
    argv.splice(at..at, flags);
    argv.push(isolation.relay().to_string_lossy().into_owned());
    argv.push(network::RELAY_COMMAND.to_owned());
    argv.push(network::NO_UNIX_SOCKETS.to_owned());
    if tools.is_some() {
        let socket = Path::new(network::SANDBOX_TOOLS).join(network::TOOLS_SOCKET);
        argv.push(network::TOOLS_FLAG.to_owned());
        argv.push(socket.to_string_lossy().into_owned());
    }
    argv.extend([network::SANDBOX_SOCKET.to_owned(), "--".to_owned()]);
    let url = format!("http://127.0.0.1:{}", network::RELAY_PORT);
    for var in network::BYPASS_VARS {
        env.remove(&OsString::from(var));
    }
    for var in network::PROXY_VARS {
        env.insert(var.into(), url.clone().into());
    }
}

/// The agent's own network as `config` says (`None`: the host's), relayed
/// in the sandbox by this binary; turnstile's environment is read for an
/// `ANTHROPIC_BASE_URL` that `agent.pass_env` passes on.
pub(crate) fn isolation(config: &crate::config::Config) -> Option<Arc<Isolation>> {
    match config.network_policy(|var| std::env::var(var).ok()) {
        crate::config::NetworkPolicy::Shared(_) => None,
        crate::config::NetworkPolicy::Isolated(rules) => {
            let relay = std::env::current_exe().unwrap_or_else(|_| "turnstile".into());
            Some(Arc::new(Isolation::new(rules, relay)))
        }
    }
}

//! The agent's own network. Under bubblewrap (`agent.network.mode =
//! "isolated"`, the default) the agent runs in a network namespace of its
//! own: only its own loopback, none of the host's loopback services, UNIX
//! or abstract sockets. Its one way out is turnstile's proxy (`proxy`),
//! which listens on a UNIX socket outside the sandbox, bound read-only
//! into it at [`SANDBOX_SOCKET`]; inside, `turnstile net-relay` (`relay`)
//! listens on `127.0.0.1:`[`RELAY_PORT`] of the sandbox's loopback and
//! relays each connection to that socket before it becomes the agent,
//! whose `HTTPS_PROXY` and `HTTP_PROXY` point at it. The proxy lets
//! through only what the allowlist names (the model API's host and port,
//! `agent.network.allow`), and answers anything else with a 403 naming
//! the host and the key. The agent can make no UNIX socket (a seccomp
//! filter, installed by the relay before it becomes the agent): the
//! `acp` backend's chat tools are reached the same way, the relay taking
//! each connection to `127.0.0.1:`[`TOOLS_PORT`] to the session's socket
//! in a directory of its own, bound read-only at [`SANDBOX_TOOLS`].

mod local;
mod proxy;
mod relay;
mod tunnel;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

pub use proxy::{Limits, Proxy};
pub use relay::{
    NO_UNIX_SOCKETS, RELAY_COMMAND, TOOLS_FLAG, forbid_unix_sockets, run_relay, unix_socket_filter,
};

use crate::agent::host::handover;
use crate::config::HostRule;

/// The port the relay listens on, on the sandbox's own loopback.
pub const RELAY_PORT: u16 = 3128;

/// Where the proxy's socket is in the sandbox (on its own `/tmp`).
pub const SANDBOX_SOCKET: &str = "/tmp/.turnstile-proxy.sock";

/// The port the relay takes the chat tools' connections on (the `acp`
/// backend's stdio bridge connects there), on the sandbox's own loopback.
pub const TOOLS_PORT: u16 = 3129;

/// Where a process's chat tools directory is in the sandbox (read-only).
pub const SANDBOX_TOOLS: &str = "/tmp/.turnstile-tools";

/// The chat tools' socket's name in that directory.
pub const TOOLS_SOCKET: &str = "mcp.sock";

/// The variables that send the agent's HTTP through the relay; and the
/// ones that would send some of it around, which the agent never gets.
pub const PROXY_VARS: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"];
/// See [`PROXY_VARS`].
pub const BYPASS_VARS: [&str; 4] = ["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"];

/// The isolated network of every agent process of a backend: the
/// allowlist, the program that relays inside the sandbox, and the proxy,
/// started at the first spawn on a thread of its own.
#[derive(Debug)]
pub struct Isolation {
    /// What the proxy lets through.
    rules: Vec<HostRule>,
    /// `turnstile`, run in the sandbox as `net-relay`.
    relay: PathBuf,
    /// The proxy's socket outside the sandbox, in a directory of its own
    /// (mode 0700).
    socket: PathBuf,
    /// The proxy's listening socket handed over across `/restart`'s exec,
    /// until the proxy starts on it.
    inherited: Mutex<Option<std::os::fd::OwnedFd>>,
    /// The proxy, once started (or why it could not be).
    started: OnceLock<Result<(), String>>,
    /// Stops the proxy when the isolation goes.
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Isolation {
    /// An isolation allowing `rules`, relayed by `relay`; nothing is
    /// started yet.
    #[must_use]
    pub fn new(rules: Vec<HostRule>, relay: PathBuf) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "turnstile-net-{}-{}-{nanos:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // The previous process's socket, when `/restart` handed it over: the
        // sandboxes it handed over too have it bound.
        let (socket, inherited) = match handover::take_socket() {
            Some(handed) => (handed.path, Some(handed.listener)),
            None => (dir.join("proxy.sock"), None),
        };
        Self {
            rules,
            relay,
            socket,
            inherited: Mutex::new(inherited),
            started: OnceLock::new(),
            stop: Mutex::new(None),
        }
    }

    /// The same isolation relayed by `relay` instead (nothing started).
    #[must_use]
    pub fn relayed_by(&self, relay: PathBuf) -> Self {
        Self::new(self.rules.clone(), relay)
    }

    /// What the proxy lets through.
    #[must_use]
    pub fn rules(&self) -> &[HostRule] {
        &self.rules
    }

    /// The relay program.
    #[must_use]
    pub fn relay(&self) -> &Path {
        &self.relay
    }

    /// The proxy's socket outside the sandbox.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Starts the proxy, once (later calls answer as the first did).
    ///
    /// # Errors
    ///
    /// Its directory or socket could not be made.
    pub fn start(&self) -> Result<(), String> {
        self.started
            .get_or_init(|| {
                let proxy = Proxy::new(self.rules.clone(), Limits::default());
                let inherited = self.inherited.lock().ok().and_then(|mut fd| fd.take());
                let listener = match inherited {
                    Some(fd) => std::os::unix::net::UnixListener::from(fd),
                    None => proxy::bind(&self.socket)?,
                };
                if handover::enabled()
                    && let Some(copy) = handover::keep(&listener)
                {
                    handover::give_socket(handover::HandedSocket {
                        path: self.socket.clone(),
                        listener: copy,
                    });
                }
                let stop = proxy.serve_listener_on_thread(listener)?;
                if let Ok(mut slot) = self.stop.lock() {
                    *slot = Some(stop);
                }
                tracing::info!(socket = %self.socket.display(), rules = self.rules.len(), "the agent's network proxy listens");
                Ok(())
            })
            .clone()
    }
}

/// One agent process's chat tools directory (mode 0700, beside the
/// proxy's socket, outside every sandbox): its socket is made there once
/// the session knows it serves the tools over stdio, and the sandbox sees
/// the directory read-only at [`SANDBOX_TOOLS`]. Dropped, it goes.
#[derive(Debug)]
pub struct ToolsDir {
    /// The directory.
    dir: PathBuf,
}

impl ToolsDir {
    /// The directory, outside the sandbox.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where the chat tools' socket goes, outside the sandbox.
    #[must_use]
    pub fn socket(&self) -> PathBuf {
        self.dir.join(TOOLS_SOCKET)
    }
}

impl Drop for ToolsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Isolation {
    /// A new chat tools directory for one agent process (the proxy is
    /// started first: the directory lies beside its socket).
    ///
    /// # Errors
    ///
    /// The proxy could not start, or the directory could not be made.
    pub fn tools_dir(&self) -> Result<ToolsDir, String> {
        use std::os::unix::fs::DirBuilderExt as _;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        self.start()?;
        let parent = self.socket.parent().unwrap_or_else(|| Path::new("/"));
        let dir = parent.join(format!("tools-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(ToolsDir { dir })
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.stop.lock()
            && let Some(stop) = slot.take()
        {
            let _ = stop.send(());
            let _ = std::fs::remove_file(&self.socket);
            if let Some(dir) = self.socket.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

#[cfg(test)]
mod tests;

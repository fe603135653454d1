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
//! the host and the key.

mod local;
mod proxy;
mod relay;
mod tunnel;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

pub use proxy::{Limits, Proxy};
pub use relay::{
    NO_UNIX_SOCKETS, RELAY_COMMAND, forbid_unix_sockets, run_relay, unix_socket_filter,
};

use crate::config::HostRule;

/// The port the relay listens on, on the sandbox's own loopback.
pub const RELAY_PORT: u16 = 3128;

/// Where the proxy's socket is in the sandbox (on its own `/tmp`).
pub const SANDBOX_SOCKET: &str = "/tmp/.turnstile-proxy.sock";

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
    /// Whether the agent may make UNIX sockets (the `acp` backend's stdio
    /// bridge to the chat tools needs one); if not, a seccomp filter
    /// refuses them.
    unix_sockets: bool,
    /// The proxy's socket outside the sandbox, in a directory of its own
    /// (mode 0700).
    socket: PathBuf,
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
        Self {
            rules,
            relay,
            unix_sockets: false,
            socket: dir.join("proxy.sock"),
            started: OnceLock::new(),
            stop: Mutex::new(None),
        }
    }

    /// The same isolation relayed by `relay` instead (nothing started).
    #[must_use]
    pub fn relayed_by(&self, relay: PathBuf) -> Self {
        Self::new(self.rules.clone(), relay).with_unix_sockets(self.unix_sockets)
    }

    /// The same, the agent allowed UNIX sockets or not (not by default).
    #[must_use]
    pub fn with_unix_sockets(mut self, allowed: bool) -> Self {
        self.unix_sockets = allowed;
        self
    }

    /// Whether the agent may make UNIX sockets.
    #[must_use]
    pub fn unix_sockets(&self) -> bool {
        self.unix_sockets
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
                let stop = proxy.serve_on_thread(&self.socket)?;
                if let Ok(mut slot) = self.stop.lock() {
                    *slot = Some(stop);
                }
                tracing::info!(socket = %self.socket.display(), rules = self.rules.len(), "the agent's network proxy listens");
                Ok(())
            })
            .clone()
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

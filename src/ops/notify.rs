//! systemd's service notifications (`sd_notify`), for `Type=notify` with
//! `WatchdogSec=`: `READY=1` once the bot runs, then `WATCHDOG=1` every
//! half of `WATCHDOG_USEC`, but only while the health check of `/healthz`
//! ([`Probe::unhealthy`]) finds nothing wrong, so systemd restarts a bot
//! whose poller silently stopped. Datagrams to the unix socket named by
//! `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace); without
//! it nothing is sent. The variables are left in the environment: `/restart`
//! re-executes in the same process (the same pid), which says `READY=1`
//! again.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use super::server::Probe;

/// Where notifications go: `NOTIFY_SOCKET`.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names; `None` when it is unset or
    /// unusable (logged).
    pub fn from_env() -> Option<Self> {
        let name = std::env::var_os("NOTIFY_SOCKET")?;
        let name = name.to_string_lossy().into_owned();
        match Self::open(&name) {
            Ok(notifier) => Some(notifier),
            Err(err) => {
                tracing::warn!(socket = %name, cause = %err, "NOTIFY_SOCKET unusable; systemd is not notified");
                None
            }
        }
    }

    fn open(name: &str) -> std::io::Result<Self> {
        let to = match name.strip_prefix('@') {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name.as_bytes())?
            }
            None => SocketAddr::from_pathname(name)?,
        };
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Self { socket, to })
    }

    /// Sends one notification (`KEY=VALUE` lines); a failure is logged.
    pub fn send(&self, message: &str) {
        if let Err(err) = self.socket.send_to_addr(message.as_bytes(), &self.to) {
            tracing::warn!(cause = %err, message, "systemd notification not sent");
        }
    }
}

/// Half of `WATCHDOG_USEC` (when `WATCHDOG_PID`, if set, is this process):
/// how often the watchdog is pinged; `None` when systemd asks for none.
pub fn watchdog_interval() -> Option<Duration> {
    interval_from(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

fn interval_from(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(me)
    {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    Some(Duration::from_micros(usec / 2))
}

/// Tells systemd the bot is ready, then pings the watchdog every
/// `interval` while `probe` finds it healthy (a task on the current
/// runtime; it ends when aborted).
pub fn spawn(
    notifier: Notifier,
    interval: Option<Duration>,
    probe: Probe,
) -> tokio::task::JoinHandle<()> {
    notifier.send(&format!("READY=1\nMAINPID={}", std::process::id()));
    tracing::info!(watchdog = ?interval, "told systemd the bot is ready");
    tokio::spawn(async move {
        let Some(interval) = interval else { return };
        let mut healthy = true;
        loop {
            match probe.unhealthy().await {
                None => {
                    if !healthy {
                        tracing::info!("healthy again; pinging systemd's watchdog");
                    }
                    healthy = true;
                    notifier.send("WATCHDOG=1");
                }
                Some(reason) => {
                    if healthy {
                        tracing::warn!(%reason, "unhealthy; systemd's watchdog is not pinged");
                    }
                    healthy = false;
                    notifier.send(&format!("STATUS=unhealthy: {reason}"));
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// Tells systemd the bot is stopping (when it listens).
pub fn stopping() {
    if let Some(notifier) = Notifier::from_env() {
        notifier.send("STOPPING=1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_half_the_watchdog_and_only_for_this_process() {
        let half = Some(Duration::from_secs(30));
        assert_eq!(interval_from(Some("60000000"), None, 7), half);
        assert_eq!(interval_from(Some("60000000"), Some("7"), 7), half);
        assert_eq!(interval_from(Some("60000000"), Some("8"), 7), None);
        assert_eq!(interval_from(Some("0"), None, 7), None);
        assert_eq!(interval_from(Some("soon"), None, 7), None);
        assert_eq!(interval_from(None, None, 7), None);
    }

    #[test]
    fn a_notification_reaches_the_socket_named_by_path_or_abstract_name() {
        let dir = std::env::temp_dir().join(format!("turnstile-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).expect("bind");
        Notifier::open(path.to_str().expect("utf-8"))
            .expect("open")
            .send("READY=1");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");

        let name = format!("turnstile-notify-test-{}", std::process::id());
        let addr = {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes()).expect("name")
        };
        let listener = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        Notifier::open(&format!("@{name}"))
            .expect("open")
            .send("WATCHDOG=1");
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"WATCHDOG=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! systemd's `Type=notify` and `WatchdogSec=` with the real binary: it says
//! `READY=1` once started, pings the watchdog (`WATCHDOG=1`) only while
//! `/healthz` would say ok, stops when the poller is dead (Telegram
//! refusing `getUpdates` past the health window) and starts again when it
//! lives, and does the same after `/restart`'s re-exec.

mod support;

use std::time::Duration;

use support::process::BotProcess;
use support::*;
use tokio::net::UnixDatagram;

/// `WATCHDOG_USEC`: 1 s, so a ping every 0.5 s.
const WATCHDOG_USEC: &str = "1000000";

/// The notifications on `socket`, one datagram each.
struct Notifications {
    socket: UnixDatagram,
    seen: Vec<String>,
}

impl Notifications {
    /// The next notification, within `within`; `None` when none came.
    async fn next(&mut self, within: Duration) -> Option<String> {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(within, self.socket.recv(&mut buf))
            .await
            .ok()?
            .expect("recv");
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        self.seen.push(text.clone());
        Some(text)
    }

    /// Waits (up to `within`) for a notification with this line; panics
    /// listing what came instead.
    async fn expect(&mut self, line: &str, within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(text) if text.lines().any(|l| l.starts_with(line)) => return text,
                Some(_) => {}
                None => panic!("no {line:?} within {within:?}; seen: {:?}", self.seen),
            }
        }
    }

    /// Everything notified over `span` (it only watches: nothing to wait
    /// for but the clock).
    async fn over(&mut self, span: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + span;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return got;
            }
            if let Some(text) = self.next(left).await {
                got.push(text);
            }
        }
    }
}

/// A loopback address with a port free now, for `ops.listen`.
fn free_loopback_port() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    probe.local_addr().expect("addr").to_string()
}

/// `turnstile healthcheck` against `ops.listen = listen`: its exit code.
async fn healthcheck(listen: &str) -> Option<i32> {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("healthcheck")
        .env_clear()
        .env("TURNSTILE_OPS_LISTEN", listen)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("healthcheck ends")
        .expect("healthcheck runs");
    out.status.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_then_watchdog_pings_only_while_healthy_and_again_after_restart() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let mut notes = Notifications {
        socket: UnixDatagram::bind(&path).expect("bind the notify socket"),
        seen: Vec::new(),
    };
    let listen = free_loopback_port();
    let env = vec![
        ("TURNSTILE_OPS_LISTEN", listen.clone()),
        ("NOTIFY_SOCKET", path.display().to_string()),
        ("WATCHDOG_USEC", WATCHDOG_USEC.to_string()),
        (
            "TURNSTILE_STATE_PATH",
            dir.path().join("state.db").display().to_string(),
        ),
    ];
    let mut bot = BotProcess::spawn(&api, &dir.path().join("bot.log"), &env);
    let pid = bot.child.id().expect("running");
    let ready = notes.expect("READY=1", Duration::from_secs(30)).await;
    assert!(
        ready.lines().any(|l| l == format!("MAINPID={pid}")),
        "{ready}"
    );
    for _ in 0..2 {
        notes.expect("WATCHDOG=1", Duration::from_secs(10)).await;
    }
    assert_eq!(healthcheck(&listen).await, Some(0), "healthy");

    // The poller dies: getUpdates refused past the health window (twice the
    // 1 s poll timeout). The pings may have begun before the first long poll
    // answered: the reason names getUpdates either way.
    api.outage(Outage::Refused).await;
    notes
        .expect(
            "STATUS=unhealthy: telegram getUpdates",
            Duration::from_secs(15),
        )
        .await;
    let while_dead = notes.over(Duration::from_secs(3)).await;
    assert!(
        !while_dead.iter().any(|n| n == "WATCHDOG=1"),
        "pinged while the poller was dead: {while_dead:?}"
    );
    assert!(!while_dead.is_empty(), "the pinger went on looking");
    assert_eq!(healthcheck(&listen).await, Some(1), "unhealthy");

    api.clear_outage().await;
    notes.expect("WATCHDOG=1", Duration::from_secs(15)).await;

    // `/restart` re-executes the same process: READY again, then pings.
    api.push_text(9, 9, "/restart");
    notes.expect("STOPPING=1", Duration::from_secs(30)).await;
    let ready = notes.expect("READY=1", Duration::from_secs(30)).await;
    assert!(
        ready.lines().any(|l| l == format!("MAINPID={pid}")),
        "{ready}"
    );
    notes.expect("WATCHDOG=1", Duration::from_secs(10)).await;
    assert!(bot.log_text().contains("re-executing for /restart"));
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success());
}

//! The `[ops] listen` endpoint's wiring: bound before Telegram is asked
//! anything, served once the dispatcher runs, its health check pinging the
//! dispatcher through a [`Ping`] made here.

use std::sync::Arc;

use actix::Addr;

use super::StartError;
use crate::chat::dispatcher::{Dispatcher, RunningTurns};
use crate::config::Config;
use crate::events::{EventBus, Gauges};
use crate::ops::server::{OpsServer, Ping, Probe};
use crate::state::StoreHandle;

/// Binds `[ops] listen`, when set: before Telegram is asked anything, so a
/// taken port fails the start at once, with no actor to stop.
pub(super) fn bind_ops(config: &Config) -> Result<Option<std::net::TcpListener>, StartError> {
    if config.ops.listen.trim().is_empty() {
        return Ok(None);
    }
    crate::ops::server::bind(&config.ops.listen)
        .map(Some)
        .map_err(|source| StartError::Ops {
            listen: config.ops.listen.clone(),
            source,
        })
}

/// What `/healthz` and systemd's watchdog look at: the poll, the store
/// and the dispatcher.
pub(super) fn probe(
    config: &Config,
    events: &EventBus,
    gauges: &Arc<Gauges>,
    inbox: &StoreHandle,
    dispatcher: &Addr<Dispatcher>,
) -> Probe {
    Probe {
        metrics: Arc::clone(events.metrics()),
        gauges: Arc::clone(gauges),
        inbox: inbox.clone(),
        ping: ping(dispatcher),
        poll_timeout: config.telegram.poll_timeout,
    }
}

/// Serves `[ops] listen` on `listener` with `probe`: the health and the
/// metrics.
pub(super) fn serve_ops(
    config: &Config,
    listener: std::net::TcpListener,
    probe: Probe,
) -> Result<OpsServer, StartError> {
    crate::ops::server::serve(listener, probe).map_err(|source| StartError::Ops {
        listen: config.ops.listen.clone(),
        source,
    })
}

/// Tells systemd the bot is ready and pings its watchdog while `probe`
/// finds it healthy, when systemd listens (`NOTIFY_SOCKET`).
pub(super) fn notify_systemd(probe: Probe) -> Option<tokio::task::JoinHandle<()>> {
    let notifier = crate::ops::notify::Notifier::from_env()?;
    Some(crate::ops::notify::spawn(
        notifier,
        crate::ops::notify::watchdog_interval(),
        probe,
    ))
}

/// The health check's ping of the dispatcher: answered while it runs.
fn ping(dispatcher: &Addr<Dispatcher>) -> Ping {
    let dispatcher = dispatcher.clone();
    Arc::new(move || {
        let dispatcher = dispatcher.clone();
        Box::pin(async move { dispatcher.send(RunningTurns).await.is_ok() })
    })
}

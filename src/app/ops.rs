//! The `[ops] listen` endpoint's wiring: bound before Telegram is asked
//! anything, served once the dispatcher runs, its health check pinging the
//! dispatcher through a [`Ping`] made here.

use std::sync::Arc;

use actix::Addr;

use super::StartError;
use crate::chat::dispatcher::{Dispatcher, RunningTurns};
use crate::config::Config;
use crate::events::{EventBus, Gauges};
use crate::ops::notify::{Notifier, watchdog_interval};
use crate::ops::server::{OpsServer, Ping, Probe};
use crate::state::StoreHandle;
use tokio::task::JoinHandle;

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

/// Serves `[ops] listen` on `listener`, when bound, and tells systemd the
/// bot is ready (pinging its watchdog while healthy) when it listens: both
/// with one health check, of the poll, the store and the dispatcher.
pub(super) fn serve_ops(
    config: &Config,
    listener: Option<std::net::TcpListener>,
    events: &EventBus,
    gauges: &Arc<Gauges>,
    inbox: &StoreHandle,
    dispatcher: &Addr<Dispatcher>,
) -> Result<(Option<OpsServer>, Option<JoinHandle<()>>), StartError> {
    let probe = Probe {
        metrics: Arc::clone(events.metrics()),
        gauges: Arc::clone(gauges),
        inbox: inbox.clone(),
        ping: ping(dispatcher),
        poll_timeout: config.telegram.poll_timeout,
    };
    let ops = listener
        .map(|listener| crate::ops::server::serve(listener, probe.clone()))
        .transpose()
        .map_err(|source| StartError::Ops {
            listen: config.ops.listen.clone(),
            source,
        })?;
    let watchdog = Notifier::from_env()
        .map(|notifier| crate::ops::notify::spawn(notifier, watchdog_interval(), probe));
    Ok((ops, watchdog))
}

/// The health check's ping of the dispatcher: answered while it runs.
fn ping(dispatcher: &Addr<Dispatcher>) -> Ping {
    let dispatcher = dispatcher.clone();
    Arc::new(move || {
        let dispatcher = dispatcher.clone();
        Box::pin(async move { dispatcher.send(RunningTurns).await.is_ok() })
    })
}

//! What every turn shares ([`Services`]), made from the parts the start
//! made.

use std::sync::Arc;

use actix::Addr;

use crate::agent::AgentBackend;
use crate::chat::turn::{Forwarding, Services};
use crate::config::{Config, OnInterrupted};
use crate::events::{EventBus, Gauges};
use crate::schedule::ScheduleBook;
use crate::shutdown::Shutdown;
use crate::state::StoreHandle;
use crate::telegram::files::Files;
use crate::telegram::outbox::Outbox;

/// What every turn shares, from the parts
/// [`Turnstile::start_with_store`](super::Turnstile::start_with_store) started.
pub(super) fn services(
    config: &Config,
    backend: &Arc<dyn AgentBackend>,
    (outbox, events, gauges, inbox, shutdown): (
        &Addr<Outbox>,
        &EventBus,
        &Arc<Gauges>,
        &StoreHandle,
        &Shutdown,
    ),
    (files, forwarding, schedules): (&Files, &Forwarding, &ScheduleBook),
) -> Services {
    Services {
        backend: Arc::clone(backend),
        outbox: outbox.clone(),
        config: Arc::new(config.turn.clone()),
        progress: Arc::new(config.progress.clone()),
        events: events.clone(),
        gauges: Arc::clone(gauges),
        inbox: inbox.clone(),
        shutdown: shutdown.clone(),
        retry_interrupted: config.dispatcher.on_interrupted == OnInterrupted::Retry,
        limit_retry: config.agent.limit_retry,
        limit_retry_max: config.agent.limit_retry_max,
        files: files.clone(),
        workdir: config.agent_workdir(),
        forwarding: forwarding.clone(),
        schedules: schedules.clone(),
        choices: Arc::new(crate::chat::Choices::from_config(config)),
    }
}

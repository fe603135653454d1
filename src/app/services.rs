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

/// The parts the start made that the turns reach: the way out, the events
/// and gauges, the store, the stop, the files, the texts on their way and
/// the schedules.
pub(super) struct StartedParts<'a> {
    pub(super) outbox: &'a Addr<Outbox>,
    pub(super) events: &'a EventBus,
    pub(super) gauges: &'a Arc<Gauges>,
    pub(super) inbox: &'a StoreHandle,
    pub(super) shutdown: &'a Shutdown,
    pub(super) files: &'a Files,
    pub(super) forwarding: &'a Forwarding,
    pub(super) schedules: &'a ScheduleBook,
}

/// What every turn shares, from the parts
/// [`Turnstile::start_with_store`](super::Turnstile::start_with_store) started.
pub(super) fn services(
    config: &Config,
    backend: &Arc<dyn AgentBackend>,
    parts: &StartedParts<'_>,
) -> Services {
    let StartedParts {
        outbox,
        events,
        gauges,
        inbox,
        shutdown,
        files,
        forwarding,
        schedules,
    } = *parts;
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

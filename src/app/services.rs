//! What every turn shares ([`TurnServices`]), made from the parts the
//! start made.

use std::sync::Arc;

use actix::Addr;

use crate::agent::AgentBackend;
use crate::chat::turn::{AgentSetup, Books, Forwarding, TurnServices, WayOut};
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
) -> TurnServices {
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
    let agent = AgentSetup {
        backend: Arc::clone(backend),
        config: config.turn.clone(),
        progress: config.progress.clone(),
        retry_interrupted: config.dispatcher.on_interrupted == OnInterrupted::Retry,
        limit_retry: config.agent.limit_retry,
        workdir: config.agent_workdir(),
        choices: Arc::new(crate::chat::Choices::from_config(config)),
        config_file: config.file.clone(),
    };
    TurnServices {
        agent: Arc::new(agent),
        out: WayOut {
            outbox: outbox.clone(),
            forwarding: forwarding.clone(),
        },
        books: Books {
            inbox: inbox.clone(),
            events: events.clone(),
            gauges: Arc::clone(gauges),
            shutdown: shutdown.clone(),
        },
        files: files.clone(),
        schedules: schedules.clone(),
    }
}

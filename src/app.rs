//! Wiring: builds the Telegram client, the outbox, the dispatcher and the
//! intake from a [`Config`], and stops them in order.

mod housekeeping;
mod ops;
mod services;
mod start_error;
mod telegram;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use teloxide::Bot;
use teloxide::types::{ChatId, MessageId, ThreadId};
use tokio::sync::mpsc;

pub use self::housekeeping::{BLOCKING_THREADS, system, trim_memory};
use self::housekeeping::{kill_leftovers, start_pruning, start_trimming};
use self::ops::{bind_ops, serve_ops};
use self::services::{StartedParts, services};
pub use self::start_error::StartError;
pub use self::telegram::telegram_client;
use self::telegram::{check_webhook, identify};
use crate::agent::AgentBackend;
use crate::agent::backends::BackendError;
use crate::agent::host::ProcessSpec;
use crate::attach::{AttachServer, socket_path};
use crate::chat::dispatcher::{Dispatcher, DispatcherStart, HostRequest, Recover, StopDispatching};
use crate::chat::slots::TurnSlots;
use crate::chat::turn::Forwarding;
use crate::config::Config;
use crate::events::{EventBus, Gauges};
use crate::ids::{Conversation, Topics};
use crate::schedule::{ScheduleBook, Scheduler, StopScheduler};
use crate::shutdown::Shutdown;
use crate::state::{LeftToSend, OutgoingRow, Store, StoreHandle, TurnIds};
use crate::telegram::addressing::{Addressing, BotIdentity};
use crate::telegram::files::{Files, FilesPolicy};
use crate::telegram::intake::{Intake, StopIntake};
use crate::telegram::outbox::{Flush, Outbox, RateLimits, StopOutbox};

/// `setMyCommands`: the menu for everyone, and in each admin's private chat
/// the admin commands too. A failure is logged; the bot works without.
async fn set_commands(bot: &Bot, admins: &[i64]) {
    use crate::telegram::call::call;
    use teloxide::payloads::{SetMyCommands, SetMyCommandsSetters};
    use teloxide::types::{BotCommand, BotCommandScope, ChatId, Recipient};
    let list = |admin: bool| -> Vec<BotCommand> {
        crate::chat::notices::help::menu(admin)
            .into_iter()
            .map(|(c, d)| BotCommand::new(c, d))
            .collect()
    };
    if let Err(err) = call(bot, &SetMyCommands::new(list(false))).await {
        tracing::warn!(cause = %err, "setMyCommands failed; the command menu may be stale");
    }
    for &admin in admins {
        let scope = BotCommandScope::Chat {
            chat_id: Recipient::Id(ChatId(admin)),
        };
        let payload = SetMyCommands::new(list(true)).scope(scope);
        if let Err(err) = call(bot, &payload).await {
            tracing::warn!(admin, cause = %err, "setMyCommands for an admin failed");
        }
    }
}

/// The agent backend named by `agent.backend`.
///
/// Each backend parses the agent's tool calls with the chat tools and
/// `turn.terminator_tools`.
pub fn backend_from_config(config: &Config) -> Result<Arc<dyn AgentBackend>, StartError> {
    crate::agent::backends::from_config(config).map_err(|err| match err {
        BackendError::Script(err) => StartError::Backend(err),
        BackendError::Sandbox(why) => StartError::Sandbox(why),
    })
}

/// What a start checks of the agent before it meets Telegram, with nothing
/// started: the backend (the scripted one's `agent.script`, the sandbox
/// probe) and the voice transcriber's sandbox. `check-config` runs it.
///
/// # Errors
///
/// The [`StartError`] the start would fail with.
pub fn check_agent(config: &Config) -> Result<(), StartError> {
    backend_from_config(config)?;
    transcriber_seal(config).map(drop)
}

/// The transcriber's seal: the agent's, under a sandbox proven to work
/// (probed here when the backend itself did not need it).
fn transcriber_seal(config: &Config) -> Result<ProcessSpec, StartError> {
    let mut sealed = ProcessSpec::from_config(config);
    if !config.files.transcribe.is_empty() {
        sealed.probe_sandbox().map_err(StartError::Sandbox)?;
    }
    Ok(sealed)
}

/// Meets Telegram: a client, who the bot is, no webhook in the way, the
/// command menu set.
async fn meet_telegram(config: &Config) -> Result<(Bot, BotIdentity), StartError> {
    let bot = telegram_client(config)?;
    let me = identify(&bot).await?;
    check_webhook(&bot, config.telegram.delete_webhook).await?;
    set_commands(&bot, &config.access.admins).await;
    Ok((bot, me))
}

/// The outbox, with a client of its own: its connections are opened and
/// read on the outbox's thread only (see `Outbox`), never on the actors'
/// thread.
/// Each message is kept in `inbox` until Telegram takes it; what the
/// previous process left goes first, where `topics` says it goes now.
async fn start_outbox(
    config: &Config,
    mut limits: RateLimits,
    events: &EventBus,
    inbox: &StoreHandle,
    topics: Topics,
) -> Result<Addr<Outbox>, StartError> {
    let client = telegram_client(config)?;
    limits.max_pending_age = config.telegram.max_pending_age;
    let mut left = inbox.outgoing().await.unwrap_or_else(|_| {
        tracing::error!(
            "the messages the previous process left for telegram could not be read; \
             they stay in the state file for the next start"
        );
        LeftToSend::default()
    });
    to_topics_now(&mut left.rows, topics);
    if !left.rows.is_empty() {
        tracing::info!(
            messages = left.rows.len(),
            "messages the previous process left for telegram go first"
        );
    }
    let metrics = Arc::clone(events.metrics());
    let outbox = Outbox::durable(client, limits, metrics, events.clone(), inbox.clone(), left);
    Ok(outbox.start())
}

/// Rows kept in a topic of a private chat while the bot's topics mode was
/// on go to the chat itself when it is off now (`Topics::now`): Telegram
/// refuses a topic there, and the text would be lost.
fn to_topics_now(rows: &mut [OutgoingRow], topics: Topics) {
    let mut moved = 0;
    for row in rows {
        let topic = i32::try_from(row.topic)
            .ok()
            .filter(|t| *t > 0)
            .map(|t| ThreadId(MessageId(t)));
        let to = Conversation::new(ChatId(row.chat_id), topic);
        if topics.now(to) != to {
            row.topic = 0;
            moved += 1;
        }
    }
    if moved > 0 {
        tracing::info!(
            messages = moved,
            "messages left for topics of private chats go to the chats themselves: the topics mode is off"
        );
    }
}

/// The inbox on `store`, after what a `kill -9` of the previous process
/// left running has died, with its pruning started; and the question, asked
/// of the store thread before the intake writes anything, of what the
/// previous process left unfinished.
fn open_inbox(
    config: &Config,
    store: Arc<Store>,
    backend: &Arc<dyn AgentBackend>,
) -> (StoreHandle, Recover) {
    kill_leftovers(&store);
    let inbox = StoreHandle::start(store);
    backend.record_processes_in(inbox.clone());
    start_pruning(&inbox, config.state.retention, config.agent_workdir());
    start_trimming();
    let recovered = Recover(Box::pin(inbox.recover()));
    (inbox, recovered)
}

/// The scheduler, after the dispatcher was asked to recover the inbox (so
/// a run claimed now never overtakes what the previous process left).
fn start_scheduler(
    config: &Config,
    schedules: ScheduleBook,
    inbox: &StoreHandle,
    dispatcher: &Addr<Dispatcher>,
    events: &EventBus,
) -> Addr<Scheduler> {
    Scheduler::new(
        schedules,
        inbox.clone(),
        &config.schedules,
        dispatcher.clone().recipient(),
        Arc::clone(events.metrics()),
    )
    .start()
}

/// Says what started, in the log.
fn log_started(config: &Config) {
    tracing::info!(
        version = crate::VERSION,
        api = %config.telegram.api_url,
        backend = %config.agent.backend,
        state = %config.state.path.display(),
        max_concurrent_turns = config.dispatcher.max_concurrent_turns,
        "turnstile started"
    );
}

/// The received files' fetcher. The transcriber runs sealed as the agent
/// is, whatever the backend: under the sandbox that was proven to work
/// (probed here when the backend itself did not need it).
fn files_from_config(config: &Config, bot: &Bot) -> Result<Files, StartError> {
    let sealed = transcriber_seal(config)?;
    Ok(Files::new(
        bot.clone(),
        FilesPolicy {
            max_download: config.files.max_download,
            transcribe: config.files.transcribe.clone(),
            transcribe_timeout: config.files.transcribe_timeout,
            seal: sealed.seal,
            env: sealed.env,
        },
    ))
}

/// A running bot.
pub struct Turnstile {
    /// Routes updates to chats.
    pub dispatcher: Addr<Dispatcher>,
    /// Long-polls Telegram.
    pub intake: Addr<Intake>,
    /// Runs the schedules.
    pub scheduler: Addr<Scheduler>,
    /// The way out to Telegram.
    pub outbox: Addr<Outbox>,
    /// What the bot reports about itself.
    pub events: EventBus,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// The durable inbox and the rest of the state, on the store's thread.
    pub inbox: StoreHandle,
    /// Where received files are saved.
    pub files: Files,
    /// The running turns.
    slots: TurnSlots,
    /// Numbers turns; its mark is written back at the stop.
    turn_ids: Arc<TurnIds>,
    /// The reply relays' texts on their way to the outbox.
    forwarding: Forwarding,
    /// The Telegram client (for the offset confirmation at stop).
    bot: Bot,
    /// `/restart` and other requests for the host process.
    host_requests: tokio::sync::Mutex<mpsc::UnboundedReceiver<HostRequest>>,
    /// Begins the stop.
    shutdown: Shutdown,
    /// How long a stop waits for running turns.
    drain_timeout: Duration,
    /// Awaited last, so no agent process outlives the stop.
    backend: Arc<dyn AgentBackend>,
    /// The `[ops] listen` endpoint, when on.
    ops: Option<crate::ops::server::OpsServer>,
    /// The `turnstile attach` socket, when the state is a file.
    attach: Option<AttachServer>,
    /// Feeds the metrics from the event bus.
    _follower: AbortOnDrop,
    /// Pings systemd's watchdog while healthy, when systemd listens.
    _watchdog: Option<AbortOnDrop>,
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Turnstile {
    /// Starts the bot inside the current actix system.
    pub async fn start(
        config: &Config,
        backend: Arc<dyn AgentBackend>,
    ) -> Result<Self, StartError> {
        Self::start_with_limits(config, backend, RateLimits::default()).await
    }

    /// Starts the bot with explicit outbox limits.
    pub async fn start_with_limits(
        config: &Config,
        backend: Arc<dyn AgentBackend>,
        limits: RateLimits,
    ) -> Result<Self, StartError> {
        let store = Arc::new(Store::open(&config.state.path)?);
        Self::start_with_store(config, backend, limits, store).await
    }

    /// Starts the bot on an open state store.
    pub async fn start_with_store(
        config: &Config,
        backend: Arc<dyn AgentBackend>,
        limits: RateLimits,
        store: Arc<Store>,
    ) -> Result<Self, StartError> {
        let listener = bind_ops(config)?;
        let events = EventBus::new();
        let (bot, me) = meet_telegram(config).await?;
        // The poller's health counts from here until its first long poll
        // answers.
        events.metrics().met_telegram();
        let gauges = Arc::new(Gauges::default());
        let shutdown = Shutdown::new();
        let turn_ids = Arc::new(TurnIds::open(Arc::clone(&store))?);
        let (inbox, recovered) = open_inbox(config, store, &backend);
        let outbox = start_outbox(config, limits, &events, &inbox, me.topics).await?;
        let slots = TurnSlots::new(config.dispatcher.max_concurrent_turns);
        let files = files_from_config(config, &bot)?;
        let forwarding = Forwarding::default();
        let schedules = ScheduleBook::new(&inbox, config, me.topics);
        let parts = StartedParts {
            outbox: &outbox,
            events: &events,
            gauges: &gauges,
            inbox: &inbox,
            shutdown: &shutdown,
            files: &files,
            forwarding: &forwarding,
            schedules: &schedules,
        };
        let deps = services(config, &backend, &parts);
        let (host_tx, host_rx) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(
            deps,
            DispatcherStart {
                access: config.access.clone(),
                config: config.dispatcher.clone(),
                keep_warm: config.agent.keep_warm,
                max_warm: config.agent.max_warm,
                limit_retry_max: config.agent.limit_retry_max,
                host: host_tx,
                slots: slots.clone(),
                turn_ids: Arc::clone(&turn_ids),
                me: me.clone(),
            },
        )
        .start();
        // Before any new update: what the previous process left unfinished.
        dispatcher.do_send(recovered);
        let intake = Intake::new(
            bot.clone(),
            config.telegram.poll_timeout,
            dispatcher.clone().recipient(),
            shutdown.clone(),
            inbox.clone(),
            Addressing::new(me, config.access.group_mode),
            config.access.clone(),
        )
        .with_metrics(Arc::clone(events.metrics()))
        .start();
        let (ops, watchdog) = serve_ops(config, listener, &events, &gauges, &inbox, &dispatcher)?;
        let attach = socket_path(&config.state.path)
            .and_then(|path| AttachServer::start(path, &events, inbox.clone(), dispatcher.clone()));
        log_started(config);
        Ok(Self {
            scheduler: start_scheduler(config, schedules, &inbox, &dispatcher, &events),
            _follower: AbortOnDrop(crate::ops::follow(events.metrics(), &events)),
            dispatcher,
            intake,
            outbox,
            events,
            gauges,
            inbox,
            files,
            slots,
            turn_ids,
            forwarding,
            bot,
            host_requests: tokio::sync::Mutex::new(host_rx),
            shutdown,
            drain_timeout: config.dispatcher.drain_timeout,
            backend,
            ops,
            attach,
            _watchdog: watchdog.map(AbortOnDrop),
        })
    }

    /// Where `[ops] listen` serves, when on (the real port when 0 was asked).
    pub fn ops_addr(&self) -> Option<std::net::SocketAddr> {
        self.ops.as_ref().map(|ops| ops.addr)
    }

    /// The next request from a chat to the host process (`/restart`). Once
    /// it answers a restart, the next [`Turnstile::stop`] tells the chats
    /// whose turns it cuts short that the bot is restarting (otherwise, that
    /// it is stopping).
    pub async fn host_request(&self) -> Option<HostRequest> {
        let request = self.host_requests.lock().await.recv().await;
        if let Some(HostRequest::Restart { .. }) = request {
            self.shutdown.for_restart();
        }
        request
    }

    /// Stops in order: intake (confirming the offset with Telegram), then
    /// new turns; waits for running turns up to `dispatcher.drain_timeout`
    /// ("waiting for N in-flight turns"), ends the rest with `HostStopping`
    /// (their chats are told), flushes the outbox and waits for the agent
    /// processes. Returns how many turns had to be cut short.
    pub async fn stop(&self) -> usize {
        self.shutdown.trigger();
        let _ = self.intake.send(StopIntake).await;
        let _ = self.scheduler.send(StopScheduler).await;
        self.confirm_offset().await;
        let start = Instant::now();
        let deadline = start
            .checked_add(self.drain_timeout)
            .unwrap_or(start + Duration::from_secs(86_400 * 365));
        let running = self
            .dispatcher
            .send(StopDispatching { end_running: false })
            .await
            .unwrap_or(0);
        if running > 0 {
            tracing::info!(running, "waiting for {running} in-flight turns");
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(wait, self.slots.all_free()).await;
        let cut = self.slots.running();
        self.shutdown.begin_closing();
        if cut > 0 {
            tracing::warn!(
                running = cut,
                "drain timeout passed; ending the turns still running"
            );
            let _ = self
                .dispatcher
                .send(StopDispatching { end_running: true })
                .await;
            let _ = tokio::time::timeout(Duration::from_secs(5), self.slots.all_free()).await;
        }
        // Every store write asked so far lands before the offset is final.
        self.inbox.flushed().await;
        // What the turns queued as they ended (a "cut short" notice) goes
        // to the outbox after its turn's "replied" write: in the outbox
        // before the flush, or the stopped outbox would refuse it.
        let _ = tokio::time::timeout(Duration::from_secs(10), self.forwarding.drained()).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.outbox.send(Flush)).await;
        let _ = self.outbox.send(StopOutbox).await;
        if let Some(attach) = &self.attach {
            attach.close(self.shutdown.is_restarting()).await;
        }
        self.backend.closed().await;
        // No turn starts any more: the next process goes on from the last id.
        self.turn_ids.release();
        // What the outbox settled as it drained (a sent message's row) is
        // committed before the process ends or re-executes, or the next
        // process would send that message again.
        self.inbox.flushed().await;
        tracing::info!(cut_short = cut, "stopped");
        cut
    }

    /// Tells Telegram every update below the stored offset was handled, so
    /// none (a `/restart` above all) is delivered again to the next process.
    async fn confirm_offset(&self) {
        use teloxide::payloads::{GetUpdates, GetUpdatesSetters};
        let Some(offset) = self.inbox.offset().await else {
            return;
        };
        let payload = GetUpdates::new()
            .offset(i32::try_from(offset).unwrap_or(i32::MAX))
            .timeout(0)
            .limit(1);
        let request = crate::telegram::call::call(&self.bot, &payload);
        match tokio::time::timeout(Duration::from_secs(5), request).await {
            Ok(Ok(_)) => tracing::debug!(offset, "update offset confirmed"),
            Ok(Err(err)) => {
                tracing::warn!(offset, cause = %err, "could not confirm the update offset")
            }
            Err(_) => tracing::warn!(offset, "confirming the update offset timed out"),
        }
    }
}

#[cfg(test)]
mod tests;

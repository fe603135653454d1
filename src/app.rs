//! Wiring: builds the Telegram client, the outbox, the dispatcher and the
//! intake from a [`Config`], and stops them in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use teloxide::Bot;
use tokio::sync::mpsc;

use crate::agent::claude::{ClaudeBackend, ClaudeSettings};
use crate::agent::tools::ToolRegistry;
use crate::agent::{AgentBackend, Scenario, ScriptedBackend};
use crate::chat::dispatcher::{Dispatcher, HostRequest, Recover, StopDispatching};
use crate::chat::slots::TurnSlots;
use crate::chat::turn::{Forwarding, TurnDeps};
use crate::config::{Backend, Config, OnInterrupted};
use crate::events::{EventBus, Gauges};
use crate::shutdown::Shutdown;
use crate::state::{Inbox, Store};
use crate::telegram::addressing::{Addressing, BotIdentity};
use crate::telegram::files::{Files, FilesPolicy};
use crate::telegram::intake::{Intake, StopIntake};
use crate::telegram::outbox::{Flush, Outbox, RateLimits, StopOutbox};

/// Errors that stop the bot from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `telegram.api_url` is not a URL.
    #[error("telegram.api_url {url:?} is not a valid URL: {source}")]
    BadApiUrl {
        /// The value.
        url: String,
        /// Why it does not parse.
        source: url_parse::Error,
    },
    /// The HTTP client could not be built.
    #[error("could not build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The agent backend could not be set up.
    #[error("agent backend: {0}")]
    Backend(String),
    /// `agent.sandbox` asks for bubblewrap and it cannot run: a
    /// configuration error, exit 2.
    #[error("{0}")]
    Sandbox(String),
    /// `ops.listen` could not be bound (taken, or not this host's): a
    /// configuration error, exit 2.
    #[error("ops.listen {listen}: cannot listen there: {source}")]
    Ops {
        /// The value.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The state store could not be opened.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// `getMe` answered 401 or 404: the token is wrong or revoked.
    #[error("Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN)")]
    TokenRejected,
    /// A webhook is set on the token and `telegram.delete_webhook` is off.
    #[error(
        "a webhook is set on this bot token ({url}): Telegram refuses getUpdates while one is set; \
         remove it, or set telegram.delete_webhook = true to have turnstile remove it"
    )]
    WebhookSet {
        /// Where it points.
        url: String,
    },
}

impl StartError {
    /// The process exit code for this error: 3 for a rejected token (a
    /// service manager should not restart on it), 2 for a sandbox that
    /// cannot run or an `ops.listen` that cannot be bound (as for bad
    /// configuration), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::TokenRejected | Self::WebhookSet { .. } => 3,
            Self::Sandbox(_) | Self::Ops { .. } => 2,
            _ => 1,
        }
    }
}

/// A webhook on the token makes every `getUpdates` fail with 409: with
/// `delete`, it is removed (and said so); otherwise it is an error. A
/// failure to ask is logged and start-up goes on (the poll would say more).
async fn check_webhook(bot: &Bot, delete: bool) -> Result<(), StartError> {
    use teloxide::prelude::Requester;
    let info = match bot.get_webhook_info().await {
        Ok(info) => info,
        Err(err) => {
            tracing::warn!(cause = %err, "getWebhookInfo failed; going on");
            return Ok(());
        }
    };
    let Some(url) = info.url else {
        return Ok(());
    };
    let url = url.to_string();
    if !delete {
        return Err(StartError::WebhookSet { url });
    }
    match bot.delete_webhook().await {
        Ok(_) => {
            tracing::warn!(url = %url, "a webhook was set on the token; removed (telegram.delete_webhook)");
            Ok(())
        }
        Err(err) => {
            tracing::error!(url = %url, cause = %err, "the webhook could not be removed");
            Err(StartError::WebhookSet { url })
        }
    }
}

/// `setMyCommands`: the menu for everyone, and in each admin's private chat
/// the admin commands too. A failure is logged; the bot works without.
async fn set_commands(bot: &Bot, admins: &[i64]) {
    use teloxide::payloads::SetMyCommandsSetters;
    use teloxide::prelude::Requester;
    use teloxide::types::{BotCommand, BotCommandScope, ChatId, Recipient};
    let list = |admin: bool| -> Vec<BotCommand> {
        crate::chat::commands::menu(admin)
            .into_iter()
            .map(|(c, d)| BotCommand::new(c, d))
            .collect()
    };
    if let Err(err) = bot.set_my_commands(list(false)).await {
        tracing::warn!(cause = %err, "setMyCommands failed; the command menu may be stale");
    }
    for &admin in admins {
        let scope = BotCommandScope::Chat {
            chat_id: Recipient::Id(ChatId(admin)),
        };
        let request = bot.set_my_commands(list(true)).scope(scope);
        if let Err(err) = request.await {
            tracing::warn!(admin, cause = %err, "setMyCommands for an admin failed");
        }
    }
}

/// Asks Telegram who the bot is (`getMe`): a 401 or 404 is
/// [`StartError::TokenRejected`] at once; any other failure is logged with
/// its cause and retried with backoff (250 ms doubling to 30 s).
pub async fn identify(bot: &Bot) -> Result<BotIdentity, StartError> {
    use teloxide::prelude::Requester;
    let mut backoff = Duration::from_millis(250);
    loop {
        match bot.get_me().await {
            Ok(me) => {
                let username = me.user.username.clone().unwrap_or_default();
                tracing::info!(bot_id = me.user.id.0, username = %username, "telegram knows the bot");
                return Ok(BotIdentity {
                    id: me.user.id,
                    username,
                });
            }
            Err(teloxide::RequestError::Api(teloxide::ApiError::InvalidToken)) => {
                return Err(StartError::TokenRejected);
            }
            Err(err) => {
                let (kind, cause) = request_failure(&err);
                let host = api_host(bot.api_url());
                let retry_at =
                    chrono::Utc::now() + chrono::Duration::from_std(backoff).unwrap_or_default();
                let retry_at = retry_at.format("%H:%M:%SZ");
                let retry_in = humantime::format_duration(backoff);
                tracing::warn!(
                    kind,
                    "getMe failed: {kind} error reaching {host}: {cause}; retrying in {retry_in} (at {retry_at})"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// `host:port` of the Bot API, for the log (never the path: it holds the
/// token).
fn api_host(url: reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// What kind of failure a request met, and its root cause: for a network
/// error the class found along its source chain ("DNS", "connect", "TLS",
/// "timeout", …) and the innermost cause (`Connection refused (os error
/// 111)`) instead of reqwest's "error sending request"; otherwise what the
/// Bot API said.
fn request_failure(err: &teloxide::RequestError) -> (&'static str, String) {
    use std::error::Error as _;
    let teloxide::RequestError::Network(network) = err else {
        return ("Bot API", err.to_string());
    };
    let network: &reqwest::Error = network;
    let mut texts = Vec::new();
    let mut io_kinds = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = network.source();
    while let Some(cause) = source {
        texts.push(cause.to_string());
        // An I/O error's `source()` skips the error it wraps (rustls's,
        // itself often wrapped in another I/O error): go into it.
        source = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => {
                io_kinds.push(io.kind());
                io.get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static))
            }
            None => cause.source(),
        };
    }
    let all = texts.join(": ").to_lowercase();
    let kind = if network.is_timeout() || io_kinds.contains(&std::io::ErrorKind::TimedOut) {
        "timeout"
    } else if all.contains("dns error") || all.contains("failed to lookup address") {
        "DNS"
    } else if ["certificate", "tls", "handshake", "ssl"]
        .iter()
        .any(|w| all.contains(w))
        // rustls's errors reach here as invalid data on the connection,
        // which a TCP connect alone never is.
        || (network.is_connect() && io_kinds.contains(&std::io::ErrorKind::InvalidData))
    {
        "TLS"
    } else if network.is_connect() {
        "connect"
    } else if network.is_body() || network.is_decode() {
        "response"
    } else {
        "network"
    };
    let cause = texts.last().cloned().unwrap_or_else(|| network.to_string());
    (kind, cause)
}

/// The agent backend named by `agent.backend`.
///
/// Each backend parses the agent's tool calls with the chat tools and
/// `turn.terminator_tools`.
pub fn backend_from_config(config: &Config) -> Result<Arc<dyn AgentBackend>, StartError> {
    let tools = Arc::new(ToolRegistry::new(&config.turn.terminator_tools));
    match config.agent.backend {
        Backend::Scripted => {
            let scenario = if config.agent.script.as_os_str().is_empty() {
                Scenario::default()
            } else {
                Scenario::from_file(&config.agent.script).map_err(StartError::Backend)?
            };
            Ok(Arc::new(ScriptedBackend::new(scenario).with_tools(tools)))
        }
        Backend::Claude => {
            let mut settings = ClaudeSettings::from_config(config);
            settings.probe_sandbox().map_err(StartError::Sandbox)?;
            Ok(Arc::new(ClaudeBackend::new(settings, tools)))
        }
    }
}

/// A Telegram client for `config`, with an HTTP timeout longer than the long poll.
pub fn telegram_client(config: &Config) -> Result<Bot, StartError> {
    let url =
        reqwest::Url::parse(&config.telegram.api_url).map_err(|source| StartError::BadApiUrl {
            url: config.telegram.api_url.clone(),
            source,
        })?;
    let client = teloxide::net::default_reqwest_settings()
        .timeout(
            config
                .telegram
                .poll_timeout
                .saturating_add(Duration::from_secs(15)),
        )
        // Never write a request to a connection the server may be closing
        // for idleness: a message on it would be lost, not known to be.
        .pool_idle_timeout(config.telegram.pool_idle_timeout)
        .build()
        .map_err(StartError::Client)?;
    Ok(Bot::with_client(config.telegram.token.0.clone(), client).set_api_url(url))
}

/// Prunes old state now and then once a day, on the store thread; and as
/// often the files in each conversation's `inbox/` as old, off the actors'
/// thread.
fn start_pruning(inbox: &Inbox, retention: Duration, workdirs: std::path::PathBuf) {
    inbox.prune(retention);
    let inbox = inbox.clone();
    actix_rt::spawn(async move {
        let day = Duration::from_secs(86_400);
        let mut every_day = tokio::time::interval(day);
        let mut first = true;
        loop {
            every_day.tick().await;
            if !std::mem::take(&mut first) {
                inbox.prune(retention);
            }
            let workdirs = workdirs.clone();
            let files = tokio::task::spawn_blocking(move || {
                crate::telegram::files::prune_inboxes(&workdirs, retention)
            })
            .await
            .unwrap_or(0);
            if files > 0 {
                tracing::info!(files, "pruned inbox files older than the retention");
            }
        }
    });
}

mod url_parse {
    pub type Error = <reqwest::Url as std::str::FromStr>::Err;
}

/// A running bot.
pub struct Turnstile {
    /// Routes updates to chats.
    pub dispatcher: Addr<Dispatcher>,
    /// Long-polls Telegram.
    pub intake: Addr<Intake>,
    /// The way out to Telegram.
    pub outbox: Addr<Outbox>,
    /// What the bot reports about itself.
    pub events: EventBus,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// The durable inbox and the rest of the state, on the store's thread.
    pub inbox: Inbox,
    /// Where received files are saved.
    pub files: Files,
    /// The running turns.
    slots: TurnSlots,
    /// The reply lanes' texts on their way to the outbox.
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
    /// Feeds the metrics from the event bus.
    _follower: AbortOnDrop,
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
        // Bound before Telegram is asked anything: a taken port fails the
        // start at once, with no actor to stop.
        let listener = if config.ops.listen.trim().is_empty() {
            None
        } else {
            let listener =
                crate::ops::server::bind(&config.ops.listen).map_err(|source| StartError::Ops {
                    listen: config.ops.listen.clone(),
                    source,
                })?;
            Some(listener)
        };
        let bot = telegram_client(config)?;
        let me = identify(&bot).await?;
        check_webhook(&bot, config.telegram.delete_webhook).await?;
        set_commands(&bot, &config.access.admins).await;
        let events = EventBus::new();
        let gauges = Arc::new(Gauges::default());
        let shutdown = Shutdown::new();
        // A client of its own: its connections are opened and read on the
        // outbox's thread only (see `Outbox`), never on the actors' thread.
        let outbox = Outbox::new(
            telegram_client(config)?,
            limits,
            Arc::clone(events.metrics()),
            events.clone(),
        )
        .start();
        // What a `kill -9` of the previous process left running dies first.
        match store.groups() {
            Ok(groups) if !groups.is_empty() => {
                let boot = crate::agent::claude::boot_id();
                let killed = crate::agent::claude::kill_leftover_groups(&groups, boot.as_deref());
                tracing::info!(
                    recorded = groups.len(),
                    killed,
                    "agent process groups of the previous run checked"
                );
                for group in groups {
                    let _ = store.forget_group(group.pgid);
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(cause = %err, "recorded agent process groups could not be read")
            }
        }
        let inbox = Inbox::start(store);
        backend.record_processes_in(inbox.clone());
        start_pruning(&inbox, config.state.retention, config.agent_workdir());
        // Asked of the store thread before the intake writes anything: what
        // the previous process left unfinished.
        let recovered = Box::pin(inbox.recover());
        let slots = TurnSlots::new(config.dispatcher.max_concurrent_turns);
        // The transcriber runs sealed as the agent is, whatever the backend:
        // under the sandbox that was proven to work (probed here when the
        // backend itself did not need it).
        let mut sealed = crate::agent::claude::ClaudeSettings::from_config(config);
        if !config.files.transcribe.is_empty() {
            sealed.probe_sandbox().map_err(StartError::Sandbox)?;
        }
        let files = Files::new(
            bot.clone(),
            FilesPolicy {
                max_download: config.files.max_download,
                transcribe: config.files.transcribe.clone(),
                transcribe_timeout: config.files.transcribe_timeout,
                seal: sealed.seal,
                env: sealed.env,
            },
        );
        let forwarding = Forwarding::default();
        let deps = TurnDeps {
            backend: Arc::clone(&backend),
            outbox: outbox.clone(),
            config: Arc::new(config.turn.clone()),
            progress: Arc::new(config.progress.clone()),
            events: events.clone(),
            gauges: Arc::clone(&gauges),
            inbox: inbox.clone(),
            shutdown: shutdown.clone(),
            retry_interrupted: config.dispatcher.on_interrupted == OnInterrupted::Retry,
            files: files.clone(),
            workdir: config.agent_workdir(),
            forwarding: forwarding.clone(),
        };
        let (host_tx, host_rx) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(
            deps,
            config.access.clone(),
            config.dispatcher.clone(),
            (config.agent.keep_warm, config.agent.max_warm),
            host_tx,
            slots.clone(),
            me.username.clone(),
        )
        .start();
        // Before any new update: what the previous process left unfinished.
        dispatcher.do_send(Recover(recovered));
        let intake = Intake::new(
            bot.clone(),
            config.telegram.poll_timeout,
            dispatcher.clone().recipient(),
            shutdown.clone(),
            inbox.clone(),
            (
                Addressing::new(me, config.access.group_mode),
                config.access.clone(),
            ),
        )
        .with_metrics(Arc::clone(events.metrics()))
        .start();
        let follower = crate::ops::follow(events.metrics(), &events);
        let ops = if let Some(listener) = listener {
            let probe = crate::ops::server::Probe {
                metrics: Arc::clone(events.metrics()),
                gauges: Arc::clone(&gauges),
                inbox: inbox.clone(),
                dispatcher: dispatcher.clone(),
                poll_timeout: config.telegram.poll_timeout,
            };
            let server =
                crate::ops::server::serve(listener, probe).map_err(|source| StartError::Ops {
                    listen: config.ops.listen.clone(),
                    source,
                })?;
            Some(server)
        } else {
            None
        };
        tracing::info!(
            api = %config.telegram.api_url,
            backend = %config.agent.backend,
            state = %config.state.path.display(),
            max_concurrent_turns = config.dispatcher.max_concurrent_turns,
            "turnstile started"
        );
        Ok(Self {
            dispatcher,
            intake,
            outbox,
            events,
            gauges,
            inbox,
            files,
            slots,
            forwarding,
            bot,
            host_requests: tokio::sync::Mutex::new(host_rx),
            shutdown,
            drain_timeout: config.dispatcher.drain_timeout,
            backend,
            ops,
            _follower: AbortOnDrop(follower),
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
        let _ = tokio::time::timeout(Duration::from_secs(10), self.forwarding.settled()).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.outbox.send(Flush)).await;
        let _ = self.outbox.send(StopOutbox).await;
        self.backend.closed().await;
        tracing::info!(cut_short = cut, "stopped");
        cut
    }

    /// Tells Telegram every update below the stored offset was handled, so
    /// none (a `/restart` above all) is delivered again to the next process.
    async fn confirm_offset(&self) {
        use teloxide::payloads::GetUpdatesSetters;
        use teloxide::prelude::Requester;
        use teloxide::requests::Request;
        let Some(offset) = self.inbox.offset().await else {
            return;
        };
        let request = self
            .bot
            .get_updates()
            .offset(i32::try_from(offset).unwrap_or(i32::MAX))
            .timeout(0)
            .limit(1)
            .send();
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
mod tests {
    use std::time::Duration;

    use teloxide::types::ChatId;

    use super::*;
    use crate::agent::{AgentEvent, OpenSession, SessionCommand, ToolReply};

    /// The backend made from the config parses the agent's calls with its
    /// `turn.terminator_tools`: a batch calling a configured terminator
    /// (of any server) ends the turn.
    #[tokio::test]
    async fn the_configured_terminators_reach_the_backend() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let script = dir.path().join("finish.json");
        std::fs::write(
            &script,
            serde_json::json!({"default": {"steps": [{"do": "tools", "calls": [
                {"name": "mcp__telegram-tools__send", "input": {"text": "hi"}},
                {"name": "mcp__other__finish"}
            ]}]}})
            .to_string(),
        )
        .expect("the script is written");
        let mut config = Config::default();
        config.agent.backend = Backend::Scripted;
        config.agent.script = script;
        config.turn.terminator_tools = vec!["end_turn".into(), "finish".into()];
        let backend = backend_from_config(&config).expect("the scripted backend");
        let mut session = backend
            .open(OpenSession::fresh(ChatId(1)))
            .await
            .expect("a session opens");
        session
            .commands
            .send(SessionCommand::UserTurn("go".into()))
            .expect("the agent runs");
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), session.events.recv())
                .await
                .expect("an event within 10 s")
                .expect("the session goes on");
            match event {
                AgentEvent::ToolCall(call) => {
                    call.reply.answer(ToolReply::Ok("ok".into()));
                }
                AgentEvent::BatchResolved(batch) => {
                    assert_eq!(batch.terminator(), Some("finish"), "{:?}", batch.calls);
                    return;
                }
                AgentEvent::Result(result) => panic!("no batch before the result: {result:?}"),
                _ => {}
            }
        }
    }
}

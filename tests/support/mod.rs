//! Shared fakes and a harness that starts the real bot against the fake
//! Bot API on 127.0.0.1:0 with the scripted backend.
#![allow(dead_code)]

pub mod anthropic;
pub mod bot_api;
pub mod config;
pub mod fake_cli;
pub mod process;
#[cfg(feature = "real-cli")]
pub mod real_cli;
pub mod terminal;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use teloxide::types::ChatId;
use tokio::sync::broadcast;
use turnstile::agent::ToolRegistry;
use turnstile::agent::backends::{ClaudeBackend, ClaudeSettings};
use turnstile::agent::{AgentBackend, Scenario, ScriptTool, ScriptTurn, ScriptedBackend, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;
use turnstile::telegram::RateLimits;
use turnstile::{Config, Turnstile};

#[allow(unused_imports)]
pub use bot_api::{Call, FakeBotApi, Fault, Outage, buttons_of};
#[allow(unused_imports)]
pub use config::ConfigVars;

/// An allowed user.
pub const USER: i64 = 1001;
/// An admin.
pub const ADMIN: i64 = 9;
/// Someone not on the allowlist.
pub const STRANGER: i64 = 666;
/// A generous upper bound for events that should come quickly.
pub const SOON: Duration = Duration::from_secs(10);

/// What [`Harness`] sets on top of [`ConfigVars::new`]: short polls and
/// typing renewals, three users, one admin, state in memory, and no live
/// view (no status message, no preview: the tests of the live view turn it
/// on), so other tests see only the messages they are about.
pub const TEST_DEFAULTS: &[(&str, &str)] = &[
    ("TURNSTILE_PROGRESS_AFTER", "1h"),
    ("TURNSTILE_PROGRESS_STREAM", "off"),
    ("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s"),
    ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001,1002,1003"),
    ("TURNSTILE_ACCESS_ADMINS", "9"),
    ("TURNSTILE_TURN_TYPING_INTERVAL", "40ms"),
    ("TURNSTILE_STATE_PATH", ":memory:"),
    // A message for a running turn waits for the next one, as the tests of
    // queueing, ordering, wedges and recovery expect; the tests of
    // steering (the default) turn it on.
    ("TURNSTILE_DISPATCHER_BUSY", "queue"),
];

/// The `claude` backend's settings from `config`, the agent's network
/// relayed by the `turnstile` binary (a test binary has no `net-relay`).
pub fn claude_settings(config: &Config) -> ClaudeSettings {
    let mut settings = ClaudeSettings::from_config(config);
    settings
        .process
        .seal
        .relay_network_with(std::path::PathBuf::from(env!("CARGO_BIN_EXE_turnstile")));
    settings
}

/// The bot running against the fake Bot API.
pub struct Harness {
    /// The fake Telegram.
    pub api: FakeBotApi,
    /// The bot.
    pub bot: Turnstile,
    /// The scripted agent (an unused one when another backend runs).
    pub backend: Arc<ScriptedBackend>,
    /// The effective configuration.
    pub config: Config,
    /// Every event seen so far, in order.
    pub seen: Vec<BotEvent>,
    events: broadcast::Receiver<BotEvent>,
}

impl Harness {
    /// Waits for an edit in `chat` whose text contains `needle`.
    pub async fn edited(&self, chat: i64, needle: &str) -> String {
        self.api
            .wait_for(SOON, &format!("an edit with {needle:?}"), |calls| {
                calls
                    .iter()
                    .filter(|c| {
                        c.method == "editmessagetext" && c.params["chat_id"].as_i64() == Some(chat)
                    })
                    .filter_map(|c| c.params["text"].as_str())
                    .find(|t| t.contains(needle))
                    .map(str::to_string)
            })
            .await
    }

    /// Waits for the answer to callback `id` and returns its text.
    pub async fn callback_answer(&self, id: &str) -> String {
        self.api
            .wait_for(SOON, &format!("the answer to callback {id}"), |calls| {
                calls
                    .iter()
                    .find(|c| {
                        c.method == "answercallbackquery"
                            && c.params["callback_query_id"].as_str() == Some(id)
                    })
                    .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
            })
            .await
    }

    /// Starts with test defaults plus `env` overrides (`TURNSTILE_*` names).
    pub async fn start(scenario: Scenario, env: &[(&str, &str)]) -> Self {
        Self::start_with_limits(scenario, env, Self::fast_limits()).await
    }

    /// Starts with explicit outbox limits.
    pub async fn start_with_limits(
        scenario: Scenario,
        env: &[(&str, &str)],
        limits: RateLimits,
    ) -> Self {
        Self::start_scripted(scenario, env, limits, |_| {}).await
    }

    /// Starts with the backend `make` builds from the effective config.
    pub async fn launch(
        env: &[(&str, &str)],
        limits: RateLimits,
        make: impl FnOnce(&Config) -> Arc<dyn AgentBackend>,
    ) -> Self {
        Self::launch_edited(env, limits, |_| {}, make).await
    }

    /// As [`Harness::launch`], the config changed by `edit` first (what
    /// no `TURNSTILE_*` variable sets, such as `[[schedules.list]]`).
    pub async fn launch_edited(
        env: &[(&str, &str)],
        limits: RateLimits,
        edit: impl FnOnce(&mut Config),
        make: impl FnOnce(&Config) -> Arc<dyn AgentBackend>,
    ) -> Self {
        Self::launch_on(FakeBotApi::start().await, env, limits, edit, make).await
    }

    /// As [`Harness::launch_edited`], against `api` as it was set up.
    async fn launch_on(
        api: FakeBotApi,
        env: &[(&str, &str)],
        limits: RateLimits,
        edit: impl FnOnce(&mut Config),
        make: impl FnOnce(&Config) -> Arc<dyn AgentBackend>,
    ) -> Self {
        let mut config = ConfigVars::new(&api.url())
            .set_all(TEST_DEFAULTS.iter().copied())
            .set_all(env.iter().copied())
            .load();
        edit(&mut config);
        let backend = make(&config);
        let bot = Turnstile::start_with_limits(&config, backend, limits)
            .await
            .expect("bot starts");
        let events = bot.events.subscribe();
        Self {
            api,
            bot,
            backend: Arc::new(ScriptedBackend::new(Scenario::default())),
            config,
            seen: Vec::new(),
            events,
        }
    }

    /// Starts with the `claude` backend configured by `env`.
    pub async fn launch_claude(env: &[(String, String)]) -> (Self, Arc<ClaudeBackend>) {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut slot = None;
        let harness = Self::launch(&pairs, Self::fast_limits(), |config| {
            let backend = Arc::new(ClaudeBackend::new(
                claude_settings(config),
                Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
            ));
            slot = Some(Arc::clone(&backend));
            backend
        })
        .await;
        (harness, slot.expect("backend built"))
    }

    /// Starts the scripted `scenario` with the config changed by `edit`.
    pub async fn start_edited(
        scenario: Scenario,
        env: &[(&str, &str)],
        edit: impl FnOnce(&mut Config),
    ) -> Self {
        Self::start_scripted(scenario, env, Self::fast_limits(), edit).await
    }

    /// Starts the scripted `scenario` for a bot whose topics mode in private
    /// chats is on (`getMe`'s `has_topics_enabled`).
    pub async fn start_with_private_topics(scenario: Scenario, env: &[(&str, &str)]) -> Self {
        let api = FakeBotApi::start().await;
        api.set_private_topics(true);
        Self::start_scripted_on(api, scenario, env, Self::fast_limits(), |_| {}).await
    }

    /// The scripted `scenario` under `limits`, the config changed by `edit`.
    async fn start_scripted(
        scenario: Scenario,
        env: &[(&str, &str)],
        limits: RateLimits,
        edit: impl FnOnce(&mut Config),
    ) -> Self {
        let api = FakeBotApi::start().await;
        Self::start_scripted_on(api, scenario, env, limits, edit).await
    }

    /// [`Harness::start_scripted`] against `api`.
    pub async fn start_scripted_on(
        api: FakeBotApi,
        scenario: Scenario,
        env: &[(&str, &str)],
        limits: RateLimits,
        edit: impl FnOnce(&mut Config),
    ) -> Self {
        let mut slot = None;
        let harness = Self::launch_on(api, env, limits, edit, |config| {
            let backend = Arc::new(
                ScriptedBackend::new(scenario)
                    .with_tools(Arc::new(ToolRegistry::new(&config.turn.terminator_tools))),
            );
            slot = Some(Arc::clone(&backend));
            backend
        })
        .await;
        let backend = slot.expect("backend built");
        harness.with_scripted(backend)
    }

    fn with_scripted(mut self, backend: Arc<ScriptedBackend>) -> Self {
        self.backend = backend;
        self
    }

    /// Test defaults with no backend-specific limits.
    pub fn fast_limits() -> RateLimits {
        RateLimits {
            chat_burst: 1000.0,
            chat_per_sec: 1000.0,
            group_per_sec: 1000.0,
            global_burst: 1000.0,
            global_per_sec: 1000.0,
            backoff: Duration::from_millis(20),
            ..RateLimits::default()
        }
    }

    /// Pushes a text message from `user` in the private chat `chat`.
    pub fn say(&self, chat: i64, user: i64, text: &str) -> i64 {
        self.api.push_text(chat, user, text)
    }

    /// Waits for the next event matching `pred` (keeping every event seen).
    pub async fn event(&mut self, what: &str, mut pred: impl FnMut(&BotEvent) -> bool) -> BotEvent {
        if let Some(found) = self.seen.iter().find(|e| pred(e)) {
            return found.clone();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => {
                    self.seen.push(event.clone());
                    if pred(&event) {
                        return event;
                    }
                }
                Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                    panic!("event bus lagged by {n}")
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    panic!("event bus closed while waiting for {what}")
                }
                Err(_) => panic!("timed out waiting for {what}; seen: {:#?}", self.seen),
            }
        }
    }

    /// Waits for the `n`-th (1-based) TurnEnded of `chat`; returns (turn, outcome, at).
    pub async fn turn_ended(&mut self, chat: i64, n: usize) -> (u64, TurnOutcome, Instant) {
        let mut count = 0;
        let found = self
            .event(&format!("TurnEnded #{n} in chat {chat}"), |e| {
                if matches!(e, BotEvent::TurnEnded { chat: c, .. } if *c == ChatId(chat)) {
                    count += 1;
                }
                count == n
            })
            .await;
        match found {
            BotEvent::TurnEnded {
                turn, outcome, at, ..
            } => (turn.get(), outcome, at),
            _ => unreachable!(),
        }
    }

    /// Events seen so far for `chat` of one kind.
    pub fn chat_actions_sent(&self, chat: i64) -> Vec<Instant> {
        self.seen
            .iter()
            .filter_map(|e| match e {
                BotEvent::ChatActionSent { chat: c, at } if *c == ChatId(chat) => Some(*at),
                _ => None,
            })
            .collect()
    }

    /// The bot's metrics line that starts with `name` (labels included),
    /// or "(no such line)".
    pub fn metric_line(&self, name: &str) -> String {
        let gauges = &self.bot.gauges;
        let text = self.bot.events.metrics().render(
            gauges.supervisors.load(std::sync::atomic::Ordering::SeqCst),
            gauges.turns.load(std::sync::atomic::Ordering::SeqCst),
            0,
        );
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or("(no such line)")
            .to_string()
    }

    /// The value of the bot's metric `name` (its whole name, labels
    /// included), 0 when it has no line.
    pub fn metric_value(&self, name: &str) -> f64 {
        self.bot
            .events
            .metrics()
            .render(0, 0, 0)
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// The inbox rows not finished yet, once every store write asked so
    /// far has run.
    pub async fn unfinished(&self) -> Vec<turnstile::state::InboxRow> {
        self.bot.inbox.flushed().await;
        self.bot.inbox.recover().await.expect("the store reads")
    }

    /// Texts the fake Bot API accepted for `chat`.
    pub fn texts(&self, chat: i64) -> Vec<String> {
        self.api.texts_to(chat)
    }

    /// Chat actions the fake Bot API received for `chat`.
    pub fn chat_actions_received(&self, chat: i64) -> Vec<Call> {
        self.api
            .calls_of("sendChatAction")
            .into_iter()
            .filter(|c| c.params["chat_id"] == json!(chat))
            .collect()
    }
}

/// A tool call with no delay.
pub fn tool(name: &str, input: serde_json::Value) -> ScriptTool {
    ScriptTool::new(name, input)
}

/// A tool call the agent takes `ms` to make.
pub fn slow_tool(name: &str, input: serde_json::Value, ms: u64) -> ScriptTool {
    ScriptTool {
        ms,
        ..ScriptTool::new(name, input)
    }
}

/// `send {text}` then `end_turn` in one batch.
pub fn reply(text: &str) -> ScriptTurn {
    turn(vec![Step::Tools {
        calls: vec![
            tool("mcp__telegram-tools__send", json!({ "text": text })),
            tool("mcp__telegram-tools__end_turn", json!({})),
        ],
    }])
}

/// A turn of these steps that goes idle after its result.
pub fn turn(steps: Vec<Step>) -> ScriptTurn {
    ScriptTurn {
        steps,
        after_result: Default::default(),
    }
}

/// A successful `result` step with this text.
pub fn result(text: &str) -> Step {
    Step::Result {
        text: text.into(),
        subtype: "success".into(),
        is_error: false,
        terminal_reason: None,
        num_turns: None,
        limited: false,
        resets_at: None,
    }
}

/// Captures this thread's log lines (the actix test runtime is one thread).
pub struct LogCapture {
    lines: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

/// A writer appending to the capture.
struct CaptureWriter(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Starts capturing (info and above) until dropped.
    pub fn start() -> Self {
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || CaptureWriter(Arc::clone(&writer)))
            .finish();
        // Each callsite caches whether any subscriber wants it. While only
        // one subscriber is registered, tracing asks the registering
        // thread's own default instead of the list: a span first hit by a
        // test on another thread (no subscriber there) is then cached as
        // wanted by none, and this capture's lines lack it (`lane{chat_id}`
        // in tests/outbox.rs, twice in CI). A second one, kept for the
        // process, makes every registration ask the whole list.
        static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        Self {
            lines,
            _guard: guard,
        }
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lines.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

/// Waits until `done()` holds, checking every 10 ms, for state that sends
/// no notification (a process count, a file): panics naming `what` after
/// `timeout`.
/// Runs `probe` until it answers `Ok`, every 20 ms, within `timeout`;
/// panics naming `what` and the last `Err` (what was seen instead).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(found) => return found,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; last: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A test's own `sleep` argument: `sleep` with it is a process no one
/// else runs, found by its argv in `/proc` from outside any PID namespace.
pub fn marker() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("300.{}{n:04}", std::process::id())
}

/// The pids (as seen here) of the live processes running `sleep marker`.
pub fn sleeping(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A zombie's cmdline is empty: only the living match.
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|argv| argv == format!("sleep\0{marker}\0").as_bytes())
        })
        .collect()
}

/// Waits until the wall clock reaches `unix_ms`: for tests where time
/// passing (slots going by while the bot is down) is itself the event.
pub async fn until_unix_ms(unix_ms: i64) {
    let left = unix_ms - turnstile::state::now_ms();
    if let Ok(left) = u64::try_from(left) {
        tokio::time::sleep(std::time::Duration::from_millis(left)).await;
    }
}

/// The `n`-th (1-based) question with buttons sent to `chat`: its text and
/// its buttons' callback data by label.
pub async fn question(h: &Harness, chat: i64, n: usize) -> (String, Vec<(String, String)>) {
    question_in(&h.api, chat, n).await
}

/// [`question`], asked through `api` (a bot run as a child process).
pub async fn question_in(api: &FakeBotApi, chat: i64, n: usize) -> (String, Vec<(String, String)>) {
    let call = api
        .wait_for(SOON, &format!("question #{n} in chat {chat}"), |calls| {
            calls
                .iter()
                .filter(|c| {
                    c.method == "sendmessage"
                        && c.params["chat_id"].as_i64() == Some(chat)
                        && !buttons_of(c).is_empty()
                })
                .nth(n - 1)
                .cloned()
        })
        .await;
    let text = call.params["text"].as_str().unwrap_or_default().to_string();
    (text, buttons_of(&call).into_iter().flatten().collect())
}

/// The callback data of the button labelled `label`.
pub fn data(buttons: &[(String, String)], label: &str) -> String {
    buttons
        .iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no {label} button in {buttons:?}"))
        .1
        .clone()
}

/// A GET of the ops endpoint at `addr` (`/healthz`, `/metrics`): its status
/// and body.
pub async fn ops_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("the ops endpoint answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

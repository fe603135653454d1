//! A fake Telegram Bot API server for the integration tests and the
//! benchmarks (which include this file from `benches/support/mod.rs`).
//!
//! [`FakeBotApi::start`] serves HTTP/1.1 on an ephemeral port of `127.0.0.1`
//! from a task on the current tokio runtime (a benchmark starts it on its own
//! runtime with `Fakes::run`). Point teloxide at it with [`FakeBotApi::bot`]
//! or `Bot::new(token).set_api_url(fake.url().parse()?)`, feed it updates
//! with [`FakeBotApi::push_text`] / [`FakeBotApi::push_update`] /
//! [`FakeBotApi::push_many`], make calls fail with [`FakeBotApi::inject`],
//! and check what the bot did with [`FakeBotApi::calls`] and the sleep-free
//! [`FakeBotApi::wait_for`].
//!
//! What it keeps of each call is [`Record`]: every call with its parameters
//! (the tests), only when each `sendChatAction` and `sendMessage` arrived
//! (the latency benchmarks), or only totals (at 100,000 turns a recording
//! fake would itself look like a leak in the process's RSS). The totals
//! ([`FakeBotApi::counts`]) are always kept.
//!
//! Answered methods: `getMe`, `getUpdates` (long polling; `offset`
//! acknowledges), `sendMessage`, and `true` for `deleteWebhook`,
//! `sendChatAction`, `setMessageReaction` and `setMyCommands`; anything else
//! gets a 404 Bot API error. Method names are matched case-insensitively and
//! recorded lowercased (`sendmessage`).
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode, body::Incoming, server::conn::http1};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::task::{JoinHandle, JoinSet};
use tokio::{net::TcpListener, sync::Notify, time::timeout_at};

/// Token used by [`FakeBotApi::bot`] and the shared configuration; any token
/// works against the fake.
pub const TOKEN: &str = "123456:fake-token";

/// One request the fake received (kept with [`Record::Calls`]).
#[derive(Clone, Debug)]
pub struct Call {
    /// Arrival number, from 1; `clear_calls` does not reset it.
    pub seq: u64,
    /// Bot API method, lowercased (`sendmessage`).
    pub method: String,
    /// The JSON body; form fields as an object of strings; `{}` for an empty
    /// body; `Null` for a body that could not be parsed.
    pub params: Value,
    /// When the request arrived (calls are recorded on arrival).
    pub at: Instant,
    /// HTTP status of the answer.
    pub status: u16,
}

/// A one-shot failure of the next call of a method, see [`FakeBotApi::inject`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after`.
    RetryAfter(u32),
    /// This 5xx status (500 if invalid), its reason as description.
    /// Note that teloxide sleeps 10 s after any 5xx before returning.
    ServerError(u16),
    /// 400 with this description, e.g. `"Bad Request: can't parse entities: …"`.
    BadRequest(String),
    /// 403 with this description, e.g. `"Forbidden: bot was blocked by the user"`.
    Forbidden(String),
    /// Answer normally after this delay (the call is recorded before it).
    Delay(Duration),
}

/// What the fake keeps of each call besides the totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Record {
    /// Every call with its parameters: [`FakeBotApi::calls`].
    #[default]
    Calls,
    /// The chat and arrival `Instant` of each `sendChatAction` and
    /// `sendMessage` (and the text): [`FakeBotApi::log`].
    Arrivals,
    /// Nothing: only [`FakeBotApi::counts`].
    Counts,
}

/// How a fake is started, see [`FakeBotApi::start_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// What is kept of each call.
    pub record: Record,
    /// Close a keep-alive connection that carried no request for this long
    /// (as Telegram's servers close idle connections), so a process at rest
    /// holds no HTTP connection; `None` keeps connections open.
    pub idle_close: Option<Duration>,
}

/// What the fake has seen with [`Record::Arrivals`].
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// `sendChatAction` arrivals: chat and when.
    pub chat_actions: Vec<(i64, Instant)>,
    /// Successful `sendMessage` arrivals: chat, when, text.
    pub messages: Vec<(i64, Instant, String)>,
}

/// Totals, always kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Successful `sendMessage` calls.
    pub messages: u64,
    /// Successful `sendMessage` calls whose text starts with "⚠️" (the bot's
    /// notices of a turn that went wrong).
    pub notices: u64,
    /// `sendChatAction` calls.
    pub chat_actions: u64,
    /// `getUpdates` calls.
    pub polls: u64,
    /// Calls answered with an error status (an unknown method, a bad
    /// request, an injected fault).
    pub errors: u64,
}

/// A running fake Bot API server; dropping it stops the server.
pub struct FakeBotApi {
    /// What the server's tasks and this handle both see.
    shared: Arc<Shared>,
    /// Where it listens, for [`FakeBotApi::url`].
    addr: SocketAddr,
    /// The accept loop; taken by `shutdown` and aborted on drop.
    server: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    /// How the fake was started.
    options: Options,
    /// Pending updates and the id counters.
    queue: Mutex<Queue>,
    /// Recorded calls ([`Record::Calls`]); locked before `queue` when both are.
    calls: Mutex<Calls>,
    /// Recorded arrivals ([`Record::Arrivals`]).
    log: Mutex<Log>,
    /// Queued faults per lowercased method.
    faults: Mutex<HashMap<String, VecDeque<Fault>>>,
    /// Set by the first `inject`: until then no call looks for a fault.
    faulty: AtomicBool,
    /// Woken when updates are pushed.
    pushed: Notify,
    /// Woken when a call or an arrival is recorded.
    recorded: Notify,
    /// [`Counts::messages`], kept whatever the recording.
    messages: AtomicU64,
    /// [`Counts::notices`].
    notices: AtomicU64,
    /// [`Counts::chat_actions`].
    chat_actions: AtomicU64,
    /// [`Counts::polls`].
    polls: AtomicU64,
    /// [`Counts::errors`].
    errors: AtomicU64,
}

#[derive(Default)]
struct Queue {
    /// Unacknowledged updates as `(update_id, JSON)`, sorted by id.
    updates: VecDeque<(i64, String)>,
    /// The highest id pushed: the next update without one gets the one after.
    last_update_id: i64,
    /// Shared by pushed and sent messages, so ids never collide.
    last_message_id: i64,
}

#[derive(Default)]
struct Calls {
    /// Since the last `clear_calls`, in order of arrival.
    calls: Vec<Call>,
    /// Numbers calls across `clear_calls`.
    last_seq: u64,
}

/// The answer to a call: a status and JSON body, or a `getUpdates` long poll
/// (offset, limit, timeout).
enum Answer {
    Json(u16, String),
    Poll(Option<i64>, usize, Duration),
}

impl Answer {
    fn status(&self) -> u16 {
        match self {
            Answer::Json(status, _) => *status,
            Answer::Poll(..) => 200,
        }
    }
}

const OK_TRUE: &str = r#"{"ok":true,"result":true}"#;
const NO_UPDATES: &str = r#"{"ok":true,"result":[]}"#;

impl FakeBotApi {
    /// Binds `127.0.0.1:0` and serves from a task on the current runtime,
    /// recording every call.
    pub async fn start() -> FakeBotApi {
        Self::start_with(Options::default()).await
    }

    /// Like [`FakeBotApi::start`], with these options.
    pub async fn start_with(options: Options) -> FakeBotApi {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await;
        let listener = listener.expect("bind the fake Bot API to 127.0.0.1:0");
        let addr = listener.local_addr().expect("address of the fake Bot API");
        let shared = Arc::new(Shared {
            options,
            ..Shared::default()
        });
        let server = tokio::spawn(accept_loop(listener, shared.clone()));
        let server = Mutex::new(Some(server));
        FakeBotApi {
            shared,
            addr,
            server,
        }
    }

    /// Base URL for `Bot::set_api_url`: `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A teloxide bot with [`TOKEN`] that talks to this fake.
    pub fn bot(&self) -> teloxide::Bot {
        teloxide::Bot::new(TOKEN).set_api_url(self.url().parse().expect("fake URL"))
    }

    /// Stops accepting, drops open connections and waits until the listener is closed.
    pub async fn shutdown(&self) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
    }

    /// Stores an update (assigning the next `update_id` if it has none),
    /// wakes long-polling `getUpdates` calls and returns the update's id.
    pub fn push_update(&self, update: Value) -> i64 {
        let id = lock(&self.shared.queue).push(update);
        self.shared.pushed.notify_waiters();
        id
    }

    /// Pushes a private-chat text message from user `user_id` and returns
    /// its update id; a text that starts with `/` gets a `bot_command`
    /// entity for its first word.
    pub fn push_text(&self, chat_id: i64, user_id: i64, text: &str) -> i64 {
        let id = lock(&self.shared.queue).push_text(chat_id, user_id, text, unix_now());
        self.shared.pushed.notify_waiters();
        id
    }

    /// Pushes many text messages `(chat, user, text)` at once, as
    /// [`FakeBotApi::push_text`] does; returns the moment before the first
    /// (before any long poll could see it).
    pub fn push_many(&self, messages: impl IntoIterator<Item = (i64, i64, String)>) -> Instant {
        let at = Instant::now();
        let date = unix_now();
        {
            let mut queue = lock(&self.shared.queue);
            for (chat, user, text) in messages {
                queue.push_text(chat, user, &text, date);
            }
        }
        self.shared.pushed.notify_waiters();
        at
    }

    /// Makes the next call of `method` (case-insensitive) fail with `fault`;
    /// faults queued for one method apply in order, one per call.
    pub fn inject(&self, method: &str, fault: Fault) {
        let mut faults = lock(&self.shared.faults);
        let queued = faults.entry(method.to_ascii_lowercase()).or_default();
        queued.push_back(fault);
        self.shared.faulty.store(true, Ordering::SeqCst);
    }

    /// All recorded calls in order of arrival (none unless [`Record::Calls`]).
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.shared.calls).calls.clone()
    }

    /// Recorded calls of `method` (case-insensitive).
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Texts of successful `sendMessage` calls to `chat_id`, in order.
    pub fn texts_to(&self, chat_id: i64) -> Vec<String> {
        texts_in(&lock(&self.shared.calls).calls, chat_id)
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        lock(&self.shared.calls).calls.clear();
    }

    /// Runs `check` on the recorded calls now and after every new call until
    /// it returns `Some`; panics naming `what` and listing the calls if
    /// `timeout` passes first.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&[Call]) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Created before looking, so a call recorded meanwhile still wakes us.
            let recorded = self.shared.recorded.notified();
            let calls = self.calls();
            if let Some(found) = check(&calls) {
                return found;
            }
            if timeout_at(deadline, recorded).await.is_err() {
                let calls = self.calls();
                if let Some(found) = check(&calls) {
                    return found;
                }
                let list: Vec<String> = calls.iter().map(describe).collect();
                let n = calls.len();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; {n} recorded calls:\n{}",
                    list.join("\n")
                );
            }
        }
    }

    /// Waits until at least `n` texts were sent to `chat_id`; returns them all.
    pub async fn wait_for_texts(&self, chat_id: i64, n: usize, timeout: Duration) -> Vec<String> {
        let what = format!("{n} text message(s) to chat {chat_id}");
        self.wait_for(timeout, &what, |calls| {
            Some(texts_in(calls, chat_id)).filter(|t| t.len() >= n)
        })
        .await
    }

    /// Waits for the first recorded call of `method` (case-insensitive).
    pub async fn wait_for_call(&self, method: &str, timeout: Duration) -> Call {
        let method = method.to_ascii_lowercase();
        let what = format!("a {method} call");
        self.wait_for(timeout, &what, |calls| {
            calls.iter().find(|c| c.method == method).cloned()
        })
        .await
    }

    /// The totals so far.
    pub fn counts(&self) -> Counts {
        let s = &self.shared;
        Counts {
            messages: s.messages.load(Ordering::SeqCst),
            notices: s.notices.load(Ordering::SeqCst),
            chat_actions: s.chat_actions.load(Ordering::SeqCst),
            polls: s.polls.load(Ordering::SeqCst),
            errors: s.errors.load(Ordering::SeqCst),
        }
    }

    /// A copy of the arrivals (empty unless [`Record::Arrivals`]).
    pub fn log(&self) -> Log {
        lock(&self.shared.log).clone()
    }

    /// The first `sendMessage` to `chat` that arrived at or after `after`,
    /// waiting up to `timeout` for it ([`Record::Arrivals`]).
    pub async fn message_after(
        &self,
        chat: i64,
        after: Instant,
        timeout: Duration,
    ) -> Option<(Instant, String)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let recorded = self.shared.recorded.notified();
            let found = lock(&self.shared.log)
                .messages
                .iter()
                .find(|(c, at, _)| *c == chat && *at >= after)
                .map(|(_, at, text)| (*at, text.clone()));
            if found.is_some() {
                return found;
            }
            if timeout_at(deadline, recorded).await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        if let Some(server) = lock(&self.server).take() {
            server.abort();
        }
    }
}

/// Locks, ignoring poisoning: a failed assertion must not break later calls.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// Decides the answer (applying a queued fault), counts it and records
    /// the call.
    fn dispatch(&self, method: String, params: Value, at: Instant) -> (Answer, Duration) {
        // Held across the answer, so calls are numbered in the order they
        // were answered (and sent messages got their ids).
        let calls = (self.options.record == Record::Calls).then(|| lock(&self.calls));
        let fault = if self.faulty.load(Ordering::Relaxed) {
            lock(&self.faults)
                .get_mut(&method)
                .and_then(VecDeque::pop_front)
        } else {
            None
        };
        let (answer, delay) = match fault {
            None => (self.answer(&method, &params, at), Duration::ZERO),
            Some(Fault::Delay(delay)) => (self.answer(&method, &params, at), delay),
            Some(fault) => (fault_answer(fault), Duration::ZERO),
        };
        let status = answer.status();
        if status != 200 {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(mut calls) = calls {
            calls.last_seq += 1;
            let seq = calls.last_seq;
            calls.calls.push(Call {
                seq,
                method,
                params,
                at,
                status,
            });
            drop(calls);
            self.recorded.notify_waiters();
        }
        (answer, delay)
    }

    fn answer(&self, method: &str, params: &Value, at: Instant) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        match method {
            "getupdates" => {
                self.polls.fetch_add(1, Ordering::Relaxed);
                let limit = int("limit").unwrap_or(100).clamp(1, 100) as usize;
                let timeout = Duration::from_secs(int("timeout").unwrap_or(0).max(0) as u64);
                Answer::Poll(int("offset"), limit, timeout)
            }
            "sendmessage" => self.send_message(params, at),
            "sendchataction" => {
                self.chat_actions.fetch_add(1, Ordering::Relaxed);
                if self.options.record == Record::Arrivals {
                    let chat = int("chat_id").unwrap_or(0);
                    lock(&self.log).chat_actions.push((chat, at));
                    self.recorded.notify_waiters();
                }
                Answer::Json(200, OK_TRUE.to_string())
            }
            "deletewebhook" | "setmessagereaction" | "setmycommands" => {
                Answer::Json(200, OK_TRUE.to_string())
            }
            // teloxide's `Me` needs the bot-only flags that Telegram sends.
            "getme" => ok(json!({
                "id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot",
                "can_join_groups": true, "can_read_all_group_messages": false,
                "supports_inline_queries": false, "has_main_web_app": false,
            })),
            _ => error(404, "Not Found: method not found", None),
        }
    }

    fn send_message(&self, params: &Value, at: Instant) -> Answer {
        let text = params
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let chat_id = match params.get("chat_id").and_then(as_i64) {
            None => return error(400, "Bad Request: chat not found", None),
            Some(_) if text.trim().is_empty() => {
                return error(400, "Bad Request: message text is empty", None);
            }
            Some(chat_id) => chat_id,
        };
        self.messages.fetch_add(1, Ordering::Relaxed);
        if text.starts_with('⚠') {
            self.notices.fetch_add(1, Ordering::Relaxed);
        }
        if self.options.record == Record::Arrivals {
            lock(&self.log)
                .messages
                .push((chat_id, at, text.to_string()));
            self.recorded.notify_waiters();
        }
        let message_id = lock(&self.queue).next_message_id();
        ok(json!({
            "message_id": message_id,
            "date": unix_now(),
            "chat": {"id": chat_id, "type": "private", "first_name": "user"},
            "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
            "text": text,
        }))
    }

    /// Long-polls for updates at or past `offset`.
    async fn poll(&self, offset: Option<i64>, limit: usize, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pushed = self.pushed.notified();
            if let Some(batch) = lock(&self.queue).take_updates(offset, limit) {
                return batch;
            }
            if timeout_at(deadline, pushed).await.is_err() {
                return NO_UPDATES.to_string();
            }
        }
    }
}

impl Queue {
    fn next_message_id(&mut self) -> i64 {
        self.last_message_id += 1;
        self.last_message_id
    }

    /// Queues a private text message; returns its update id.
    fn push_text(&mut self, chat_id: i64, user_id: i64, text: &str, date: u64) -> i64 {
        let id = self.last_update_id + 1;
        let mut message = json!({
            "message_id": self.next_message_id(),
            "date": date,
            "from": {"id": user_id, "is_bot": false, "first_name": "u"},
            "chat": {"id": chat_id, "type": "private", "first_name": "c"},
            "text": text,
        });
        if text.starts_with('/') {
            let command = text.split_whitespace().next().unwrap_or_default();
            let length = command.encode_utf16().count();
            message["entities"] = json!([{"type": "bot_command", "offset": 0, "length": length}]);
        }
        self.insert(id, json!({"update_id": id, "message": message}).to_string());
        id
    }

    /// Queues an update, assigning the next id if it has none; returns the id.
    fn push(&mut self, mut update: Value) -> i64 {
        let id = update.get("update_id").and_then(as_i64);
        let id = id.unwrap_or(self.last_update_id + 1);
        if let Some(fields) = update.as_object_mut() {
            fields.insert("update_id".into(), id.into());
        }
        self.insert(id, update.to_string());
        id
    }

    /// Keeps the queue sorted by id (pushes come in order but for an
    /// explicit `update_id`).
    fn insert(&mut self, id: i64, update: String) {
        self.last_update_id = self.last_update_id.max(id);
        if self.updates.back().is_none_or(|(last, _)| *last <= id) {
            self.updates.push_back((id, update));
        } else {
            let at = self.updates.partition_point(|(other, _)| *other <= id);
            self.updates.insert(at, (id, update));
        }
    }

    /// Acknowledges updates below a positive `offset` and answers up to
    /// `limit` of the rest (a negative offset `-n`: the last `n`); `None`
    /// when there are none.
    fn take_updates(&mut self, offset: Option<i64>, limit: usize) -> Option<String> {
        let skip = match offset {
            Some(offset) if offset < 0 => self
                .updates
                .len()
                .saturating_sub(offset.unsigned_abs() as usize),
            Some(offset) => {
                while self.updates.front().is_some_and(|(id, _)| *id < offset) {
                    self.updates.pop_front();
                }
                0
            }
            None => 0,
        };
        if skip >= self.updates.len() {
            return None;
        }
        let mut out = String::from(r#"{"ok":true,"result":["#);
        for (i, (_, update)) in self.updates.iter().skip(skip).take(limit).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(update);
        }
        out.push_str("]}");
        Some(out)
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Aborting this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors, most likely: let connections finish.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let idle_close = shared.options.idle_close;
                let activity = Arc::new(Activity::default());
                let seen = Arc::clone(&activity);
                let shared = Arc::clone(&shared);
                let service = hyper::service::service_fn(move |request| {
                    let shared = Arc::clone(&shared);
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.begin();
                        let response = handle(&shared, request).await;
                        seen.end();
                        Ok::<_, Infallible>(response)
                    }
                });
                let connection = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                connections.spawn(serve(connection, activity, idle_close));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Requests in flight on a connection and when the last one ended.
#[derive(Default)]
struct Activity {
    /// A connection with a request in flight is never idle.
    inflight: AtomicU64,
    /// When the last request ended (`None`: none yet).
    last: Mutex<Option<Instant>>,
}

impl Activity {
    fn begin(&self) {
        self.inflight.fetch_add(1, Ordering::SeqCst);
    }

    fn end(&self) {
        *lock(&self.last) = Some(Instant::now());
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    fn idle_for(&self) -> Duration {
        if self.inflight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        lock(&self.last).map_or(Duration::MAX, |at| at.elapsed())
    }
}

/// Serves one connection, closing it gracefully once idle for `idle_close`.
async fn serve<C>(connection: C, activity: Arc<Activity>, idle_close: Option<Duration>)
where
    C: std::future::Future + GracefulShutdown,
{
    let mut connection = std::pin::pin!(connection);
    let Some(idle) = idle_close else {
        let _ = connection.await;
        return;
    };
    loop {
        tokio::select! {
            _ = connection.as_mut() => return,
            () = tokio::time::sleep(idle) => {
                if activity.idle_for() >= idle {
                    connection.as_mut().shutdown();
                    let _ = connection.await;
                    return;
                }
            }
        }
    }
}

/// hyper's graceful shutdown, behind a trait so [`serve`] stays generic.
trait GracefulShutdown {
    fn shutdown(self: std::pin::Pin<&mut Self>);
}

impl<I, S> GracefulShutdown for http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S::ResBody: hyper::body::Body + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shutdown(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let at = Instant::now();
    let headers = request.headers();
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let form = content_type
        .unwrap_or_default()
        .contains("x-www-form-urlencoded");
    // `/bot<TOKEN>/<Method>`; any other path is recorded as `?<path>` and gets a 404.
    let path = request.uri().path();
    let method = match path.trim_start_matches('/').split_once('/') {
        Some((bot, method)) if bot.starts_with("bot") && !method.contains('/') => {
            method.to_ascii_lowercase()
        }
        _ => format!("?{path}"),
    };
    let params = match request.into_body().collect().await {
        Ok(body) => parse_params(&body.to_bytes(), form),
        Err(_) => Value::Null,
    };
    let (answer, delay) = shared.dispatch(method, params, at);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let (status, body) = match answer {
        Answer::Json(status, body) => (status, body),
        Answer::Poll(offset, limit, timeout) => (200, shared.poll(offset, limit, timeout).await),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or_default();
    let json = HeaderValue::from_static("application/json");
    response.headers_mut().insert(CONTENT_TYPE, json);
    response
}

fn parse_params(body: &[u8], form: bool) -> Value {
    if body.trim_ascii().is_empty() {
        return Value::Object(Map::new());
    }
    if !form {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    let fields = body
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |&b| b == b'=');
            let key = url_decode(parts.next().unwrap_or_default());
            (
                key,
                Value::String(url_decode(parts.next().unwrap_or_default())),
            )
        });
    Value::Object(fields.collect())
}

/// Decodes the `+` and `%XX` escapes of a form field.
fn url_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let (byte, used) = match (raw[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => (byte, 3),
            (b'+', _) => (b' ', 1),
            (byte, _) => (byte, 1),
        };
        out.push(byte);
        i += used;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn fault_answer(fault: Fault) -> Answer {
    match fault {
        Fault::RetryAfter(secs) => {
            let description = format!("Too Many Requests: retry after {secs}");
            error(429, &description, Some(json!({"retry_after": secs})))
        }
        Fault::ServerError(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error(
                status.as_u16(),
                status.canonical_reason().unwrap_or("Server Error"),
                None,
            )
        }
        Fault::BadRequest(description) => error(400, &description, None),
        Fault::Forbidden(description) => error(403, &description, None),
        Fault::Delay(_) => unreachable!("dispatch applies delays"),
    }
}

fn ok(result: Value) -> Answer {
    Answer::Json(200, json!({"ok": true, "result": result}).to_string())
}

fn error(code: u16, description: &str, parameters: Option<Value>) -> Answer {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    Answer::Json(code, body.to_string())
}

fn texts_in(calls: &[Call], chat_id: i64) -> Vec<String> {
    let sent = calls
        .iter()
        .filter(|c| c.method == "sendmessage" && c.status == 200);
    let to_chat = sent.filter(|c| c.params.get("chat_id").and_then(as_i64) == Some(chat_id));
    to_chat
        .filter_map(|c| Some(c.params.get("text")?.as_str()?.to_owned()))
        .collect()
}

fn describe(call: &Call) -> String {
    format!(
        "  #{} {} -> {} {}",
        call.seq, call.method, call.status, call.params
    )
}

/// An integer from a JSON number or a numeric string (form fields).
fn as_i64(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_str()?.trim().parse().ok())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

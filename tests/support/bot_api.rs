//! A fake Telegram Bot API server for integration tests.
//!
//! [`FakeBotApi::start`] serves HTTP/1.1 on an ephemeral port of `127.0.0.1`
//! from a task on the current tokio runtime. Point teloxide at it with
//! [`FakeBotApi::bot`] (or `Bot::new(token).set_api_url(fake.url().parse()?)`),
//! feed it updates with [`FakeBotApi::push_text`] / [`FakeBotApi::push_update`],
//! make calls fail with [`FakeBotApi::inject`], and check what the bot did
//! with [`FakeBotApi::calls`] and the sleep-free [`FakeBotApi::wait_for`].
//!
//! Answered methods: `getMe`, `getUpdates` (long polling, `offset`
//! acknowledges), `sendMessage`, and `true` for `deleteWebhook`,
//! `sendChatAction`, `setMessageReaction` and `setMyCommands`; anything else
//! gets a 404 Bot API error. Method names are matched case-insensitively and
//! recorded lowercased (`sendmessage`).
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

/// Token used by [`FakeBotApi::bot`]; any token works against the fake.
pub const TOKEN: &str = "123456:fake-token";

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Call {
    /// Arrival number, from 1, never reset (not even by `clear_calls`).
    pub seq: u64,
    /// Bot API method, lowercased (`sendmessage`).
    pub method: String,
    /// JSON body, form fields as an object of strings, `{}` for an empty
    /// body, `Null` for a body that could not be parsed.
    pub params: Value,
    /// When the request arrived.
    pub at: Instant,
    /// HTTP status the fake answered with.
    pub status: u16,
}

/// A one-shot failure for the next call of a method, see [`FakeBotApi::inject`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 429 with `parameters.retry_after` = N seconds.
    RetryAfter(u32),
    /// That 5xx status (500 if invalid) with its reason as description.
    /// teloxide sleeps 10 s after any 5xx before returning the error.
    ServerError(u16),
    /// 400 with this description, e.g. `"Bad Request: can't parse entities: …"`.
    BadRequest(String),
    /// 403 with this description, e.g. `"Forbidden: bot was blocked by the user"`.
    Forbidden(String),
    /// Answer normally, but only after this delay.
    Delay(Duration),
}

/// A running fake Bot API server; dropping it stops the server.
pub struct FakeBotApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Woken whenever a call is recorded.
    calls_changed: Notify,
    /// Woken whenever an update is pushed.
    updates_changed: Notify,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    last_seq: u64,
    /// Unacknowledged updates, sorted by `update_id`.
    updates: Vec<Value>,
    last_update_id: i64,
    /// Shared by pushed and sent messages, so ids never collide.
    last_message_id: i64,
    faults: HashMap<String, VecDeque<Fault>>,
}

/// What to answer once the call is recorded.
enum Answer {
    Json(u16, Value),
    Poll {
        offset: Option<i64>,
        limit: usize,
        timeout: Duration,
    },
}

impl FakeBotApi {
    /// Binds `127.0.0.1:0` and serves from a task on the current runtime.
    pub async fn start() -> FakeBotApi {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the fake Bot API to 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("local address of the fake Bot API");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            calls_changed: Notify::new(),
            updates_changed: Notify::new(),
        });
        let server = tokio::spawn(accept_loop(listener, shared.clone()));
        FakeBotApi {
            shared,
            addr,
            server: Mutex::new(Some(server)),
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
        teloxide::Bot::new(TOKEN).set_api_url(self.url().parse().expect("valid fake URL"))
    }

    /// Stops accepting and drops open connections; waits until the listener is closed.
    pub async fn shutdown(&self) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
    }

    /// Stores an update (assigning the next `update_id` if it has none),
    /// wakes long-polling `getUpdates` calls and returns the update's id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let id = {
            let mut state = self.shared.lock();
            let id = match update.get("update_id").and_then(as_i64) {
                Some(id) => id,
                None => state.last_update_id + 1,
            };
            if let Some(fields) = update.as_object_mut() {
                fields.insert("update_id".into(), id.into());
            }
            state.last_update_id = state.last_update_id.max(id);
            state.updates.push(update);
            state.updates.sort_by_key(update_id);
            id
        };
        self.shared.updates_changed.notify_waiters();
        id
    }

    /// Pushes a private-chat text message from user `user_id`; a text that
    /// starts with `/` gets a `bot_command` entity for its first word.
    pub fn push_text(&self, chat_id: i64, user_id: i64, text: &str) -> i64 {
        let message_id = self.shared.lock().next_message_id();
        let mut message = json!({
            "message_id": message_id,
            "date": unix_now(),
            "from": {"id": user_id, "is_bot": false, "first_name": format!("u{user_id}")},
            "chat": {"id": chat_id, "type": "private", "first_name": "c"},
            "text": text,
        });
        if text.starts_with('/') {
            let command = text.split_whitespace().next().unwrap_or_default();
            let length = command.encode_utf16().count();
            message["entities"] = json!([{"type": "bot_command", "offset": 0, "length": length}]);
        }
        self.push_update(json!({ "message": message }))
    }

    /// Makes the next call of `method` (case-insensitive) fail with `fault`;
    /// faults queued for one method apply in order, one per call.
    pub fn inject(&self, method: &str, fault: Fault) {
        let mut state = self.shared.lock();
        let queue = state.faults.entry(method.to_ascii_lowercase()).or_default();
        queue.push_back(fault);
    }

    /// All recorded calls in order of arrival.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// Recorded calls of `method` (case-insensitive).
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        let state = self.shared.lock();
        state
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Texts of successful `sendMessage` calls to `chat_id`, in order.
    pub fn texts_to(&self, chat_id: i64) -> Vec<String> {
        texts_in(&self.shared.lock().calls, chat_id)
    }

    /// Forgets the recorded calls (`seq` keeps counting).
    pub fn clear_calls(&self) {
        self.shared.lock().calls.clear();
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
            // Register interest before looking, so no call slips in between.
            let changed = self.shared.calls_changed.notified();
            let calls = self.calls();
            if let Some(found) = check(&calls) {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let calls = self.calls();
                if let Some(found) = check(&calls) {
                    return found;
                }
                panic!(
                    "timed out after {timeout:?} waiting for {what}; {} recorded calls:\n{}",
                    calls.len(),
                    describe(&calls)
                );
            }
        }
    }

    /// Waits until at least `n` texts were sent to `chat_id` and returns them all.
    pub async fn wait_for_texts(&self, chat_id: i64, n: usize, timeout: Duration) -> Vec<String> {
        let what = format!("{n} text message(s) to chat {chat_id}");
        self.wait_for(timeout, &what, |calls| {
            let texts = texts_in(calls, chat_id);
            (texts.len() >= n).then_some(texts)
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
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        if let Some(server) = lock(&self.server).take() {
            server.abort();
        }
    }
}

/// Locks, ignoring poisoning (a failed assertion must not break later calls).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Records the call and decides the answer, applying a queued fault.
    fn dispatch(&self, method: String, params: Value, at: Instant) -> (Answer, Option<Duration>) {
        let mut state = self.lock();
        let fault = state.faults.get_mut(&method).and_then(VecDeque::pop_front);
        let (answer, delay) = match fault {
            None => (state.answer(&method, &params), None),
            Some(Fault::Delay(delay)) => (state.answer(&method, &params), Some(delay)),
            Some(fault) => (fault_answer(fault), None),
        };
        state.last_seq += 1;
        let status = match &answer {
            Answer::Json(status, _) => *status,
            Answer::Poll { .. } => 200,
        };
        let seq = state.last_seq;
        state.calls.push(Call {
            seq,
            method,
            params,
            at,
            status,
        });
        drop(state);
        self.calls_changed.notify_waiters();
        (answer, delay)
    }

    /// Long-polls for updates with `update_id >= offset`.
    async fn poll(&self, offset: Option<i64>, limit: usize, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pushed = self.updates_changed.notified();
            let batch = self.lock().take_updates(offset, limit);
            if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
                return Value::Array(batch);
            }
            let _ = tokio::time::timeout_at(deadline, pushed).await;
        }
    }
}

impl State {
    fn next_message_id(&mut self) -> i64 {
        self.last_message_id += 1;
        self.last_message_id
    }

    fn answer(&mut self, method: &str, params: &Value) -> Answer {
        match method {
            "getme" => {
                // teloxide's `Me` requires the bot-only flags real Telegram sends.
                let mut me = bot_user();
                me["can_join_groups"] = json!(true);
                me["can_read_all_group_messages"] = json!(false);
                me["supports_inline_queries"] = json!(false);
                me["has_main_web_app"] = json!(false);
                ok(me)
            }
            "deletewebhook" | "sendchataction" | "setmessagereaction" | "setmycommands" => {
                ok(Value::Bool(true))
            }
            "sendmessage" => {
                let chat_id = params.get("chat_id").and_then(as_i64);
                let text = params
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match chat_id {
                    None => error(400, "Bad Request: chat not found", None),
                    Some(_) if text.trim().is_empty() => {
                        error(400, "Bad Request: message text is empty", None)
                    }
                    Some(chat_id) => ok(json!({
                        "message_id": self.next_message_id(),
                        "date": unix_now(),
                        "chat": {"id": chat_id, "type": "private", "first_name": "user"},
                        "from": bot_user(),
                        "text": text,
                    })),
                }
            }
            "getupdates" => Answer::Poll {
                offset: params.get("offset").and_then(as_i64),
                limit: params
                    .get("limit")
                    .and_then(as_i64)
                    .unwrap_or(100)
                    .clamp(1, 100) as usize,
                timeout: Duration::from_secs(
                    params.get("timeout").and_then(as_i64).unwrap_or(0).max(0) as u64,
                ),
            },
            _ => error(404, "Not Found: method not found", None),
        }
    }

    /// Acknowledges updates below a positive `offset` and returns up to
    /// `limit` of the rest; a negative offset `-n` returns the last `n`.
    fn take_updates(&mut self, offset: Option<i64>, limit: usize) -> Vec<Value> {
        let skip = match offset {
            Some(offset) if offset < 0 => self
                .updates
                .len()
                .saturating_sub(offset.unsigned_abs() as usize),
            Some(offset) => {
                self.updates.retain(|u| update_id(u) >= offset);
                0
            }
            None => 0,
        };
        self.updates
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect()
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Dropping the set (when this task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(&shared, request).await) }
                    });
                    let io = TokioIo::new(stream);
                    let _ = http1::Builder::new().keep_alive(true).serve_connection(io, service).await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let at = Instant::now();
    let (method, known_path) = method_of(request.uri().path());
    let form = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    let params = match request.into_body().collect().await {
        Ok(body) => parse_params(&body.to_bytes(), form),
        Err(_) => Value::Null,
    };
    let (answer, delay) = if known_path {
        shared.dispatch(method, params, at)
    } else {
        shared.dispatch(format!("?{method}"), params, at)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    match answer {
        Answer::Json(status, body) => respond(status, &body),
        Answer::Poll {
            offset,
            limit,
            timeout,
        } => respond(
            200,
            &json!({"ok": true, "result": shared.poll(offset, limit, timeout).await}),
        ),
    }
}

/// Method of a `/bot<TOKEN>/<Method>` path, lowercased; `false` for other paths.
fn method_of(path: &str) -> (String, bool) {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [bot, method] if bot.starts_with("bot") => (method.to_ascii_lowercase(), true),
        _ => (path.to_ascii_lowercase(), false),
    }
}

fn parse_params(body: &[u8], form: bool) -> Value {
    if body.trim_ascii().is_empty() {
        Value::Object(Map::new())
    } else if form {
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
    } else {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    }
}

/// Decodes `+` and `%XX` escapes of a form field.
fn url_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (raw[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn fault_answer(fault: Fault) -> Answer {
    match fault {
        Fault::RetryAfter(secs) => error(
            429,
            &format!("Too Many Requests: retry after {secs}"),
            Some(json!({"retry_after": secs})),
        ),
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
        Fault::Delay(_) => unreachable!("delays are applied by dispatch"),
    }
}

fn ok(result: Value) -> Answer {
    Answer::Json(200, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str, parameters: Option<Value>) -> Answer {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    Answer::Json(code, body)
}

fn respond(status: u16, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn bot_user() -> Value {
    json!({"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"})
}

fn texts_in(calls: &[Call], chat_id: i64) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.method == "sendmessage" && c.status == 200)
        .filter(|c| c.params.get("chat_id").and_then(as_i64) == Some(chat_id))
        .filter_map(|c| {
            c.params
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

fn describe(calls: &[Call]) -> String {
    let lines: Vec<String> = calls
        .iter()
        .map(|c| format!("  #{} {} -> {} {}", c.seq, c.method, c.status, c.params))
        .collect();
    lines.join("\n")
}

/// An integer from a JSON number or a numeric string (form fields).
fn as_i64(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_str()?.trim().parse().ok())
}

fn update_id(update: &Value) -> i64 {
    update.get("update_id").and_then(as_i64).unwrap_or(0)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

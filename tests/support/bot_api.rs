//! A fake Telegram Bot API server for integration tests.
//!
//! [`FakeBotApi::start`] serves HTTP/1.1 on an ephemeral port of `127.0.0.1`
//! from a task on the current tokio runtime. Point teloxide at it with
//! [`FakeBotApi::bot`] or `Bot::new(token).set_api_url(fake.url().parse()?)`,
//! feed it updates with [`FakeBotApi::push_text`] / [`FakeBotApi::push_update`],
//! make calls fail with [`FakeBotApi::inject`], and check what the bot did
//! with [`FakeBotApi::calls`] and the sleep-free [`FakeBotApi::wait_for`].
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

/// Token used by [`FakeBotApi::bot`]; any token works against the fake.
pub const TOKEN: &str = "123456:fake-token";

/// One request the fake received.
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

/// A running fake Bot API server; dropping it stops the server.
pub struct FakeBotApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken whenever a call is recorded or an update pushed.
    changed: Notify,
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

/// The answer to a call: a status and body, or a `getUpdates` long poll
/// (offset, limit, timeout).
enum Answer {
    Json(u16, Value),
    Poll(Option<i64>, usize, Duration),
}

impl FakeBotApi {
    /// Binds `127.0.0.1:0` and serves from a task on the current runtime.
    pub async fn start() -> FakeBotApi {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await;
        let listener = listener.expect("bind the fake Bot API to 127.0.0.1:0");
        let addr = listener.local_addr().expect("address of the fake Bot API");
        let shared = Arc::new(Shared::default());
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
    pub fn push_update(&self, mut update: Value) -> i64 {
        let mut state = self.shared.lock();
        let id = update.get("update_id").and_then(as_i64);
        let id = id.unwrap_or(state.last_update_id + 1);
        if let Some(fields) = update.as_object_mut() {
            fields.insert("update_id".into(), id.into());
        }
        state.last_update_id = state.last_update_id.max(id);
        state.updates.push(update);
        state.updates.sort_by_key(update_id);
        drop(state);
        self.shared.changed.notify_waiters();
        id
    }

    /// Pushes a private-chat text message from user `user_id`; a text that
    /// starts with `/` gets a `bot_command` entity for its first word.
    pub fn push_text(&self, chat_id: i64, user_id: i64, text: &str) -> i64 {
        let mut message = json!({
            "message_id": self.shared.lock().next_message_id(),
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
        let faults = state.faults.entry(method.to_ascii_lowercase()).or_default();
        faults.push_back(fault);
    }

    /// All recorded calls in order of arrival.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
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
        texts_in(&self.shared.lock().calls, chat_id)
    }

    /// Forgets the recorded calls.
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
            // Created before looking, so a call recorded meanwhile still wakes us.
            let changed = self.shared.changed.notified();
            let calls = self.calls();
            if let Some(found) = check(&calls) {
                return found;
            }
            if timeout_at(deadline, changed).await.is_err() {
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
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Decides the answer (applying a queued fault) and records the call.
    fn dispatch(&self, method: String, params: Value, at: Instant) -> (Answer, Duration) {
        let mut state = self.lock();
        let (answer, delay) = match state.faults.get_mut(&method).and_then(VecDeque::pop_front) {
            None => (state.answer(&method, &params), Duration::ZERO),
            Some(Fault::Delay(delay)) => (state.answer(&method, &params), delay),
            Some(fault) => (fault_answer(fault), Duration::ZERO),
        };
        let status = match answer {
            Answer::Json(status, _) => status,
            Answer::Poll(..) => 200,
        };
        state.last_seq += 1;
        let seq = state.last_seq;
        state.calls.push(Call {
            seq,
            method,
            params,
            at,
            status,
        });
        drop(state);
        self.changed.notify_waiters();
        (answer, delay)
    }

    /// Long-polls for updates with `update_id >= offset`.
    async fn poll(&self, offset: Option<i64>, limit: usize, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            let batch = self.lock().take_updates(offset, limit);
            if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
                return Value::Array(batch);
            }
            let _ = timeout_at(deadline, changed).await;
        }
    }
}

impl State {
    fn next_message_id(&mut self) -> i64 {
        self.last_message_id += 1;
        self.last_message_id
    }

    fn answer(&mut self, method: &str, params: &Value) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        match method {
            // teloxide's `Me` needs the bot-only flags that Telegram sends.
            "getme" => ok(json!({
                "id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot",
                "can_join_groups": true, "can_read_all_group_messages": false,
                "supports_inline_queries": false, "has_main_web_app": false,
            })),
            "deletewebhook" | "sendchataction" | "setmessagereaction" | "setmycommands" => {
                ok(json!(true))
            }
            "sendmessage" => {
                let text = params
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match int("chat_id") {
                    None => error(400, "Bad Request: chat not found", None),
                    Some(_) if text.trim().is_empty() => {
                        error(400, "Bad Request: message text is empty", None)
                    }
                    Some(chat_id) => ok(json!({
                        "message_id": self.next_message_id(),
                        "date": unix_now(),
                        "chat": {"id": chat_id, "type": "private", "first_name": "user"},
                        "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
                        "text": text,
                    })),
                }
            }
            "getupdates" => {
                let limit = int("limit").unwrap_or(100).clamp(1, 100) as usize;
                let timeout = Duration::from_secs(int("timeout").unwrap_or(0).max(0) as u64);
                Answer::Poll(int("offset"), limit, timeout)
            }
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
    // Aborting this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let shared = shared.clone();
                let service = hyper::service::service_fn(move |request| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(handle(&shared, request).await) }
                });
                let connection = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), service);
                connections.spawn(async move { let _ = connection.await; });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
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
        Answer::Poll(offset, limit, timeout) => (
            200,
            json!({"ok": true, "result": shared.poll(offset, limit, timeout).await}),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
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
    Answer::Json(200, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str, parameters: Option<Value>) -> Answer {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    Answer::Json(code, body)
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

fn update_id(update: &Value) -> i64 {
    update.get("update_id").and_then(as_i64).unwrap_or(0)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

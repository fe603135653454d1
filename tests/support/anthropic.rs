//! A fake Anthropic Messages API for driving the real Claude Code CLI offline.
//!
//! [`FakeAnthropic::start`] serves HTTP/1.1 (keep-alive) on an ephemeral port
//! of `127.0.0.1` from a task on the current tokio runtime; point the CLI at
//! it with `ANTHROPIC_BASE_URL=`[`FakeAnthropic::base_url`]. Dropping it stops
//! the server and every open connection.
//!
//! Routes (the query string, such as `?beta=true`, is ignored):
//! - `POST /v1/messages` with a JSON object body. With a non-empty `tools`
//!   array it is a *model call* of the agent loop: the next [`Reply`] queued
//!   with [`FakeAnthropic::push`] answers it (or a plain
//!   [`NO_SCRIPTED_REPLY`] text when the queue is empty), after the latency
//!   set with [`FakeAnthropic::set_delay`]. Without tools it is a *side call*
//!   (titles, probes) and gets the text [`SIDE_CALL_TEXT`] at once. With
//!   `"stream": true` the answer is Server-Sent Events in the order the
//!   Messages API uses (a [`Reply::TextInChunks`] or [`Reply::ToolInChunks`]
//!   with a pause goes out chunked, one piece after another); otherwise it
//!   is one JSON `Message`.
//! - `POST /v1/messages/count_tokens` → `{"input_tokens": 10}`.
//! - Anything else → 404; a body that is not a JSON object → 400; both with
//!   an Anthropic-style error body `{"type":"error","error":{…}}`.
//!
//! Every request is recorded on arrival ([`FakeAnthropic::requests`]), and
//! [`FakeAnthropic::wait_for_model_calls`] waits for calls without sleeping.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri, body::Incoming, server::conn::http1};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout_at;

/// Text answered to a model call when no scripted reply is queued.
pub const NO_SCRIPTED_REPLY: &str = "(no scripted reply)";
/// Text answered to a side call (a `/v1/messages` request without tools).
pub const SIDE_CALL_TEXT: &str = "ok";
/// `input_tokens` reported by `count_tokens` and in every message's usage.
pub const INPUT_TOKENS: u64 = 10;

/// A scripted answer to one model call.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// One text block; `stop_reason` `end_turn`.
    Text(String),
    /// One `tool_use` block per `(name, input)`, named as the model sends it
    /// (`mcp__telegram-tools__end_turn`); `stop_reason` `tool_use`. Block
    /// `i` of the answer to the `N`-th `/v1/messages` request gets the id
    /// `toolu_fake_N_i` (the message is `msg_fake_N`).
    Tools(Vec<(String, Value)>),
    /// A text block, then one `tool_use` block per tool; `stop_reason` `tool_use`.
    TextThenTools(String, Vec<(String, Value)>),
    /// This HTTP status with an error body of this type (`overloaded_error`);
    /// an invalid status becomes 500.
    Status(u16, String),
    /// A 429 `rate_limit_error` as the API sends for a usage limit: with
    /// `retry-after` and the `anthropic-ratelimit-unified-*` headers
    /// (status `rejected`, reset this many seconds from now), which the CLI
    /// does not retry.
    UsageLimit(u64),
    /// One text block streamed as one `text_delta` per piece, the pause
    /// between two pieces (a non-zero pause sends the answer chunked, so a
    /// client sees each piece separately); `stop_reason` `end_turn`.
    TextInChunks(Vec<String>, Duration),
    /// One `tool_use` block (named as the model sends it) whose input JSON
    /// streams as one `input_json_delta` per piece, the pause between two
    /// pieces; the pieces must concatenate to a JSON object (anything else
    /// is sent all the same, with `{}` as the non-streamed input);
    /// `stop_reason` `tool_use`.
    ToolInChunks(String, Vec<String>, Duration),
}

impl Reply {
    /// A [`Reply::Tools`] from borrowed names.
    pub fn tools(calls: &[(&str, Value)]) -> Reply {
        Reply::Tools(owned_calls(calls))
    }

    /// A [`Reply::TextThenTools`] from borrowed text and names.
    pub fn text_then_tools(text: &str, calls: &[(&str, Value)]) -> Reply {
        Reply::TextThenTools(text.to_owned(), owned_calls(calls))
    }

    /// A [`Reply::TextInChunks`] from borrowed pieces.
    pub fn text_in_chunks(pieces: &[&str], pause: Duration) -> Reply {
        Reply::TextInChunks(pieces.iter().map(|p| (*p).to_owned()).collect(), pause)
    }

    /// A [`Reply::ToolInChunks`] calling `tool` with `{"text": <the chunks
    /// joined>}`, its input JSON cut so that each piece carries one chunk
    /// of the text (JSON-escaped whole): a client decoding the `text` field
    /// as it streams sees exactly the chunks.
    pub fn tool_text_in_chunks(tool: &str, chunks: &[&str], pause: Duration) -> Reply {
        let escaped = |chunk: &str| {
            let quoted = Value::String(chunk.to_owned()).to_string();
            quoted[1..quoted.len() - 1].to_owned()
        };
        let mut pieces: Vec<String> = chunks.iter().map(|c| escaped(c)).collect();
        if pieces.is_empty() {
            pieces.push(String::new());
        }
        pieces[0].insert_str(0, r#"{"text": ""#);
        if let Some(last) = pieces.last_mut() {
            last.push_str(r#""}"#);
        }
        Reply::ToolInChunks(tool.to_owned(), pieces, pause)
    }
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The URI path without the query (`/v1/messages`).
    pub path: String,
    /// The query string without `?` (`beta=true`), if any.
    pub query: Option<String>,
    /// The JSON body; `Null` when the body was not JSON.
    pub body: Value,
    /// When the request arrived (requests are recorded on arrival, before
    /// any delay).
    pub at: Instant,
    /// Whether it was a model call (a `/v1/messages` request with tools).
    pub model_call: bool,
}

/// A running fake Messages API; dropping it stops the server.
pub struct FakeAnthropic {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken whenever a request is recorded.
    changed: Notify,
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    model_calls: usize,
    side_calls: usize,
    delay: Duration,
    /// Number of the last `/v1/messages` request with a JSON body (model,
    /// side and error answers alike): the `N` of `msg_fake_N` and
    /// `toolu_fake_N_i`.
    last_message: u64,
    /// When the answer to each model call started to go out (after the
    /// delay; a streamed answer's first frame holds its first delta).
    answered: Vec<Instant>,
}

/// How to answer one request.
enum Plan {
    Json(u16, Value),
    Message(MessagePlan),
}

struct MessagePlan {
    reply: Reply,
    model: String,
    stream: bool,
    number: u64,
    delay: Duration,
    model_call: bool,
}

/// One content block of an answer.
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        input: Value,
    },
    /// A text block streamed in these pieces.
    TextChunks(Vec<String>),
    /// A tool_use block whose input JSON streams in these pieces.
    ToolChunks {
        id: String,
        name: String,
        pieces: Vec<String>,
    },
}

impl FakeAnthropic {
    /// Binds `127.0.0.1:0` and serves from a task on the current runtime.
    pub async fn start() -> FakeAnthropic {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await;
        let listener = listener.expect("bind the fake Messages API to 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("address of the fake Messages API");
        let shared = Arc::new(Shared::default());
        let server = tokio::spawn(accept_loop(listener, shared.clone()));
        FakeAnthropic {
            shared,
            addr,
            server: Mutex::new(Some(server)),
        }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops open connections and waits until the listener
    /// is closed.
    pub async fn shutdown(&self) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
    }

    /// Queues `reply` for the next model call that has none (FIFO).
    pub fn push(&self, reply: Reply) {
        self.shared.lock().replies.push_back(reply);
    }

    /// Scripted replies not yet used.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().replies.len()
    }

    /// Makes every later model call wait `delay` before its first byte
    /// (side calls and other routes are not delayed).
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Model calls so far (`/v1/messages` with tools, whatever the answer,
    /// including [`Reply::Status`] errors).
    pub fn model_calls(&self) -> usize {
        self.shared.lock().model_calls
    }

    /// Side calls so far (`/v1/messages` without tools).
    pub fn side_calls(&self) -> usize {
        self.shared.lock().side_calls
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Bodies of the model calls so far, in order of arrival.
    pub fn model_requests(&self) -> Vec<Value> {
        let state = self.shared.lock();
        let calls = state.requests.iter().filter(|r| r.model_call);
        calls.map(|r| r.body.clone()).collect()
    }

    /// When the first model call arrived.
    pub fn first_model_call_at(&self) -> Option<Instant> {
        let state = self.shared.lock();
        state.requests.iter().find(|r| r.model_call).map(|r| r.at)
    }

    /// When each model call arrived, in order.
    pub fn model_call_times(&self) -> Vec<Instant> {
        let state = self.shared.lock();
        let calls = state.requests.iter().filter(|r| r.model_call);
        calls.map(|r| r.at).collect()
    }

    /// When the answer to each model call started to go out, in order: after
    /// the delay, as its body is handed to the connection (a streamed
    /// answer's first frame carries its first `content_block_delta`).
    pub fn answer_times(&self) -> Vec<Instant> {
        self.shared.lock().answered.clone()
    }

    /// Waits until at least `n` model calls have arrived; panics describing
    /// every recorded request if `timeout` passes first.
    pub async fn wait_for_model_calls(&self, n: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Created before looking, so a call recorded meanwhile still wakes us.
            let changed = self.shared.changed.notified();
            if self.model_calls() >= n {
                return;
            }
            if timeout_at(deadline, changed).await.is_err() && self.model_calls() < n {
                panic!(
                    "timed out after {timeout:?} waiting for {n} model call(s); {}",
                    self.describe()
                );
            }
        }
    }

    /// A summary of what was recorded, for failure messages.
    pub fn describe(&self) -> String {
        let state = self.shared.lock();
        let mut out = format!(
            "{} model call(s), {} side call(s), {} scripted repl(ies) pending, {} request(s):",
            state.model_calls,
            state.side_calls,
            state.replies.len(),
            state.requests.len()
        );
        let start = state.requests.first().map(|r| r.at);
        for (i, request) in state.requests.iter().enumerate() {
            let offset = start.map(|s| request.at - s).unwrap_or_default();
            let kind = if request.model_call { "model" } else { "other" };
            let mut body = request.body.to_string();
            if body.len() > 300 {
                let mut cut = 300;
                while !body.is_char_boundary(cut) {
                    cut -= 1;
                }
                body.truncate(cut);
                body.push('…');
            }
            let _ = write!(
                out,
                "\n  #{} +{offset:?} {} [{kind}] {body}",
                i + 1,
                request.path
            );
        }
        out
    }
}

impl Drop for FakeAnthropic {
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

fn owned_calls(calls: &[(&str, Value)]) -> Vec<(String, Value)> {
    let owned = calls
        .iter()
        .map(|(name, input)| ((*name).to_owned(), input.clone()));
    owned.collect()
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Decides the answer (taking a scripted reply) and records the request.
    fn dispatch(&self, method: &Method, uri: &Uri, body: Option<Value>, at: Instant) -> Plan {
        let path = uri.path();
        let mut state = self.lock();
        let object = body.as_ref().filter(|b| b.is_object());
        let mut model_call = false;
        let plan = match (method == Method::POST, path, object) {
            (true, "/v1/messages", Some(body)) => {
                let tools = body.get("tools").and_then(Value::as_array);
                model_call = tools.is_some_and(|tools| !tools.is_empty());
                let (reply, delay) = if model_call {
                    state.model_calls += 1;
                    let reply = state.replies.pop_front();
                    let reply = reply.unwrap_or_else(|| Reply::Text(NO_SCRIPTED_REPLY.into()));
                    (reply, state.delay)
                } else {
                    state.side_calls += 1;
                    (Reply::Text(SIDE_CALL_TEXT.into()), Duration::ZERO)
                };
                state.last_message += 1;
                let model = body.get("model").and_then(Value::as_str);
                Plan::Message(MessagePlan {
                    reply,
                    model: model.unwrap_or("claude-fake").to_owned(),
                    stream: body.get("stream").and_then(Value::as_bool) == Some(true),
                    number: state.last_message,
                    delay,
                    model_call,
                })
            }
            (true, "/v1/messages/count_tokens", Some(_)) => {
                Plan::Json(200, json!({ "input_tokens": INPUT_TOKENS }))
            }
            (true, "/v1/messages" | "/v1/messages/count_tokens", None) => Plan::Json(
                400,
                error_body(
                    "invalid_request_error",
                    "the request body is not a JSON object",
                ),
            ),
            _ => Plan::Json(
                404,
                error_body("not_found_error", &format!("no route for {method} {path}")),
            ),
        };
        state.requests.push(RecordedRequest {
            path: path.to_owned(),
            query: uri.query().map(str::to_owned),
            body: body.unwrap_or(Value::Null),
            at,
            model_call,
        });
        drop(state);
        self.changed.notify_waiters();
        plan
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
                let connection = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                connections.spawn(async move { let _ = connection.await; });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let at = Instant::now();
    let method = request.method().clone();
    let uri = request.uri().clone();
    let body = match request.into_body().collect().await {
        Ok(body) => serde_json::from_slice::<Value>(&body.to_bytes()).ok(),
        Err(_) => None,
    };
    match shared.dispatch(&method, &uri, body, at) {
        Plan::Json(status, body) => json_response(status, &body),
        Plan::Message(plan) => {
            if !plan.delay.is_zero() {
                tokio::time::sleep(plan.delay).await;
            }
            let model_call = plan.model_call;
            let response = message_response(plan);
            if model_call {
                shared.lock().answered.push(Instant::now());
            }
            response
        }
    }
}

/// What the fake answers with: one whole body, or a streamed one.
type Body = BoxBody<Bytes, Infallible>;

fn message_response(plan: MessagePlan) -> Response<Body> {
    let number = plan.number;
    let mut pause = Duration::ZERO;
    let (text, tools) = match plan.reply {
        Reply::UsageLimit(reset_in) => {
            let message =
                "This request would exceed your account's rate limit. Please try again later.";
            let mut response = json_response(429, &error_body("rate_limit_error", message));
            let reset = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
                + reset_in;
            let headers = response.headers_mut();
            for (name, value) in [
                ("retry-after", reset_in.to_string()),
                ("anthropic-ratelimit-unified-status", "rejected".to_string()),
                ("anthropic-ratelimit-unified-reset", reset.to_string()),
                (
                    "anthropic-ratelimit-unified-5h-status",
                    "rejected".to_string(),
                ),
                ("anthropic-ratelimit-unified-5h-reset", reset.to_string()),
            ] {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            }
            return response;
        }
        Reply::Status(status, kind) => {
            let status = StatusCode::from_u16(status)
                .ok()
                .filter(|s| s.is_client_error() || s.is_server_error())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = format!("fake {kind} ({})", status.as_u16());
            return json_response(status.as_u16(), &error_body(&kind, &message));
        }
        Reply::Text(text) => (Some(Block::Text(text)), Vec::new()),
        Reply::Tools(tools) => (None, tools),
        Reply::TextThenTools(text, tools) => (Some(Block::Text(text)), tools),
        Reply::TextInChunks(pieces, between) => {
            pause = between;
            (Some(Block::TextChunks(pieces)), Vec::new())
        }
        Reply::ToolInChunks(name, pieces, between) => {
            pause = between;
            let id = format!("toolu_fake_{number}_0");
            (Some(Block::ToolChunks { id, name, pieces }), Vec::new())
        }
    };
    let mut blocks: Vec<Block> = text.into_iter().collect();
    for (name, input) in tools {
        let id = format!("toolu_fake_{number}_{}", blocks.len());
        blocks.push(Block::Tool { id, name, input });
    }
    let calls_a_tool = blocks
        .iter()
        .any(|b| matches!(b, Block::Tool { .. } | Block::ToolChunks { .. }));
    let stop_reason = if calls_a_tool { "tool_use" } else { "end_turn" };
    let id = format!("msg_fake_{number}");
    let output_tokens: u64 = blocks.iter().map(Block::tokens).sum();
    if !plan.stream {
        let content: Vec<Value> = blocks.iter().map(Block::complete).collect();
        let message = json!({
            "id": id, "type": "message", "role": "assistant", "model": plan.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": usage(output_tokens),
        });
        return json_response(200, &message);
    }
    // The body in segments, each sent after its pause.
    let mut segments: Vec<(Duration, String)> = vec![(Duration::ZERO, String::new())];
    let mut sse = String::new();
    let start = json!({
        "id": id, "type": "message", "role": "assistant", "model": plan.model,
        "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(1),
    });
    event(
        &mut sse,
        "message_start",
        &json!({"type": "message_start", "message": start}),
    );
    event(&mut sse, "ping", &json!({"type": "ping"}));
    for (index, block) in blocks.iter().enumerate() {
        let start =
            json!({"type": "content_block_start", "index": index, "content_block": block.empty()});
        event(&mut sse, "content_block_start", &start);
        for (i, delta) in block.deltas().into_iter().enumerate() {
            if i > 0 && !pause.is_zero() {
                if let Some(last) = segments.last_mut() {
                    last.1.push_str(&std::mem::take(&mut sse));
                }
                segments.push((pause, String::new()));
            }
            let delta = json!({"type": "content_block_delta", "index": index, "delta": delta});
            event(&mut sse, "content_block_delta", &delta);
        }
        let stop = json!({"type": "content_block_stop", "index": index});
        event(&mut sse, "content_block_stop", &stop);
    }
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output_tokens},
    });
    event(&mut sse, "message_delta", &delta);
    event(&mut sse, "message_stop", &json!({"type": "message_stop"}));
    let body = if segments.len() == 1 {
        Full::new(Bytes::from(sse)).boxed()
    } else {
        if let Some(last) = segments.last_mut() {
            last.1.push_str(&sse);
        }
        let frames = futures_util::stream::unfold(segments.into_iter(), |mut rest| async move {
            let (pause, text) = rest.next()?;
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), rest))
        });
        StreamBody::new(frames).boxed()
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    let content_type = HeaderValue::from_static("text/event-stream");
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

impl Block {
    /// The block as `content_block_start` announces it.
    fn empty(&self) -> Value {
        match self {
            Block::Text(_) | Block::TextChunks(_) => json!({"type": "text", "text": ""}),
            Block::Tool { id, name, .. } | Block::ToolChunks { id, name, .. } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        }
    }

    /// The whole block, for a non-streaming answer.
    fn complete(&self) -> Value {
        match self {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Tool { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Block::TextChunks(pieces) => json!({"type": "text", "text": pieces.concat()}),
            Block::ToolChunks { id, name, pieces } => {
                let input = serde_json::from_str::<Value>(&pieces.concat())
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        }
    }

    /// The `delta` objects: the text, or the input JSON in two pieces.
    fn deltas(&self) -> Vec<Value> {
        match self {
            Block::Text(text) => vec![json!({"type": "text_delta", "text": text})],
            Block::Tool { input, .. } => {
                let input = input.to_string();
                let (first, second) = split_in_two(&input);
                [first, second]
                    .iter()
                    .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                    .collect()
            }
            Block::TextChunks(pieces) => pieces
                .iter()
                .map(|piece| json!({"type": "text_delta", "text": piece}))
                .collect(),
            Block::ToolChunks { pieces, .. } => pieces
                .iter()
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect(),
        }
    }

    /// A rough token count (a quarter of the characters, at least 1).
    fn tokens(&self) -> u64 {
        let chars = match self {
            Block::Text(text) => text.chars().count(),
            Block::Tool { name, input, .. } => name.len() + input.to_string().len(),
            Block::TextChunks(pieces) => pieces.concat().chars().count(),
            Block::ToolChunks { name, pieces, .. } => name.len() + pieces.concat().len(),
        };
        chars.div_ceil(4).max(1) as u64
    }
}

/// Splits `text` near its middle on a character boundary.
fn split_in_two(text: &str) -> (&str, &str) {
    let mut middle = text.len() / 2;
    while !text.is_char_boundary(middle) {
        middle += 1;
    }
    text.split_at(middle)
}

fn usage(output_tokens: u64) -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

/// Appends one Server-Sent Event.
fn event(out: &mut String, name: &str, data: &Value) {
    let _ = write!(out, "event: {name}\ndata: {data}\n\n");
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or_default();
    let json = HeaderValue::from_static("application/json");
    response.headers_mut().insert(CONTENT_TYPE, json);
    response
}

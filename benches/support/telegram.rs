//! A lean fake Telegram Bot API for the benchmarks.
//!
//! Like `tests/support/bot_api.rs` it serves HTTP/1.1 on `127.0.0.1:0`
//! (teloxide needs a real HTTP endpoint), but it keeps no per-call record
//! unless asked to: at 100,000 turns a recording fake would itself look
//! like a leak in the process's RSS. With `record` it keeps, per call of
//! `sendChatAction` and `sendMessage`, the chat and the arrival `Instant`
//! (and the text); without, only counters. It runs on the [`Fakes`]
//! runtime (its own thread, in process).
//!
//! Answered: `getUpdates` (long poll, `offset` acknowledges), `sendMessage`,
//! `getMe`, and `true` for `sendChatAction`, `setMessageReaction`,
//! `deleteWebhook`, `setMyCommands`; anything else is a 404 Bot API error.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, body::Incoming, server::conn::http1};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use super::Fakes;

/// The bot token the benches use.
pub const TOKEN: &str = "123456:bench-token";

/// What the fake has seen, per call, when recording.
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// `sendChatAction` arrivals: chat and when.
    pub chat_actions: Vec<(i64, Instant)>,
    /// `sendMessage` arrivals: chat, when, text.
    pub messages: Vec<(i64, Instant, String)>,
}

/// Totals, always kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// `sendMessage` calls.
    pub messages: u64,
    /// `sendMessage` calls whose text starts with "⚠️" (the bot's notices of
    /// a turn that went wrong).
    pub notices: u64,
    /// `sendChatAction` calls.
    pub chat_actions: u64,
    /// `getUpdates` calls.
    pub polls: u64,
    /// Calls answered with an error (unknown method, unreadable body).
    pub errors: u64,
}

#[derive(Default)]
struct Queue {
    /// Unacknowledged updates: id and JSON.
    updates: VecDeque<(i64, String)>,
    last_update_id: i64,
    last_message_id: i64,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Woken when updates are pushed.
    pushed: Notify,
    /// Woken when a call is recorded.
    recorded: Notify,
    record: bool,
    /// Close a keep-alive connection idle this long (none: keep it open).
    idle_close: Option<Duration>,
    log: Mutex<Log>,
    messages: AtomicU64,
    notices: AtomicU64,
    chat_actions: AtomicU64,
    polls: AtomicU64,
    errors: AtomicU64,
}

/// A running fake; dropping it stops the server.
pub struct FakeTelegram {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeTelegram {
    /// Binds `127.0.0.1:0` and serves from the fakes' runtime.
    pub async fn start(fakes: &Fakes, record: bool) -> FakeTelegram {
        Self::start_with(fakes, record, None).await
    }

    /// Like [`FakeTelegram::start`]; with `idle_close`, a connection that
    /// carried no request for that long is closed (as Telegram's servers
    /// close idle keep-alive connections), so a process at rest holds no
    /// HTTP connection and its memory shows the bot's own state.
    pub async fn start_with(
        fakes: &Fakes,
        record: bool,
        idle_close: Option<Duration>,
    ) -> FakeTelegram {
        let shared = Arc::new(Shared {
            record,
            idle_close,
            ..Shared::default()
        });
        let serving = Arc::clone(&shared);
        let (addr, server) = fakes
            .run(async move {
                let listener = match TcpListener::bind(("127.0.0.1", 0)).await {
                    Ok(l) => l,
                    Err(e) => panic!("bind the fake Bot API: {e}"),
                };
                let addr = match listener.local_addr() {
                    Ok(a) => a,
                    Err(e) => panic!("address of the fake Bot API: {e}"),
                };
                (addr, tokio::spawn(accept_loop(listener, serving)))
            })
            .await;
        FakeTelegram {
            shared,
            addr,
            server,
        }
    }

    /// Base URL for `telegram.api_url`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Queues a private text message from `user` in `chat`; returns the
    /// moment it was queued (before any long poll could see it).
    pub fn push_text(&self, chat: i64, user: i64, text: &str) -> Instant {
        self.push_many(std::iter::once((chat, user, text.to_string())))
    }

    /// Queues many messages at once; returns the moment before the first.
    pub fn push_many(&self, messages: impl IntoIterator<Item = (i64, i64, String)>) -> Instant {
        let at = Instant::now();
        let date = unix_now();
        {
            let mut q = lock(&self.shared.queue);
            for (chat, user, text) in messages {
                q.last_update_id += 1;
                q.last_message_id += 1;
                let update = json!({
                    "update_id": q.last_update_id,
                    "message": {
                        "message_id": q.last_message_id,
                        "date": date,
                        "from": {"id": user, "is_bot": false, "first_name": "u"},
                        "chat": {"id": chat, "type": "private", "first_name": "c"},
                        "text": text,
                    },
                });
                let id = q.last_update_id;
                q.updates.push_back((id, update.to_string()));
            }
        }
        self.shared.pushed.notify_waiters();
        at
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

    /// A copy of the per-call log (empty unless recording).
    pub fn log(&self) -> Log {
        lock(&self.shared.log).clone()
    }

    /// The first `sendMessage` to `chat` that arrived at or after `after`,
    /// waiting up to `timeout` for it.
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
            if tokio::time::timeout_at(deadline, recorded).await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
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
                let idle_close = shared.idle_close;
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
    inflight: AtomicU64,
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
    let method = request
        .uri()
        .path()
        .trim_start_matches('/')
        .split_once('/')
        .map(|(_, m)| m.to_ascii_lowercase())
        .unwrap_or_default();
    let params: Value = match request.into_body().collect().await {
        Ok(body) => serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let body = match method.as_str() {
        "getupdates" => {
            shared.polls.fetch_add(1, Ordering::Relaxed);
            poll(shared, &params).await
        }
        "sendmessage" => send_message(shared, &params, at),
        "sendchataction" => {
            shared.chat_actions.fetch_add(1, Ordering::Relaxed);
            if shared.record {
                let chat = params.get("chat_id").and_then(as_i64).unwrap_or(0);
                lock(&shared.log).chat_actions.push((chat, at));
                shared.recorded.notify_waiters();
            }
            r#"{"ok":true,"result":true}"#.to_string()
        }
        "setmessagereaction" | "deletewebhook" | "setmycommands" => {
            r#"{"ok":true,"result":true}"#.to_string()
        }
        "getme" => json!({"ok": true, "result": {
            "id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot",
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "has_main_web_app": false,
        }})
        .to_string(),
        _ => {
            shared.errors.fetch_add(1, Ordering::Relaxed);
            return json_response(
                404,
                r#"{"ok":false,"error_code":404,"description":"Not Found: method not found"}"#
                    .to_string(),
            );
        }
    };
    json_response(200, body)
}

fn send_message(shared: &Shared, params: &Value, at: Instant) -> String {
    let chat = params.get("chat_id").and_then(as_i64).unwrap_or(0);
    let text = params.get("text").and_then(Value::as_str).unwrap_or("");
    shared.messages.fetch_add(1, Ordering::Relaxed);
    if text.starts_with('⚠') {
        shared.notices.fetch_add(1, Ordering::Relaxed);
    }
    if shared.record {
        lock(&shared.log)
            .messages
            .push((chat, at, text.to_string()));
        shared.recorded.notify_waiters();
    }
    let id = {
        let mut q = lock(&shared.queue);
        q.last_message_id += 1;
        q.last_message_id
    };
    json!({"ok": true, "result": {
        "message_id": id,
        "date": unix_now(),
        "chat": {"id": chat, "type": "private", "first_name": "user"},
        "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
        "text": text,
    }})
    .to_string()
}

/// Long-polls for updates at or past `offset`.
async fn poll(shared: &Shared, params: &Value) -> String {
    let offset = params.get("offset").and_then(as_i64);
    let limit = params
        .get("limit")
        .and_then(as_i64)
        .unwrap_or(100)
        .clamp(1, 100) as usize;
    let timeout = params.get("timeout").and_then(as_i64).unwrap_or(0).max(0) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let pushed = shared.pushed.notified();
        {
            let mut q = lock(&shared.queue);
            if let Some(offset) = offset {
                while q.updates.front().is_some_and(|(id, _)| *id < offset) {
                    q.updates.pop_front();
                }
            }
            if !q.updates.is_empty() {
                let mut out = String::from(r#"{"ok":true,"result":["#);
                for (i, (_, update)) in q.updates.iter().take(limit).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(update);
                }
                out.push_str("]}");
                return out;
            }
        }
        if tokio::time::timeout_at(deadline, pushed).await.is_err() {
            return r#"{"ok":true,"result":[]}"#.to_string();
        }
    }
}

fn json_response(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

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

//! A fake Telegram Bot API server for the integration tests and the
//! benchmarks (which include this file from `benches/support/mod.rs`).
//!
//! [`FakeBotApi::start`] serves HTTP/1.1 on an ephemeral port of `127.0.0.1`
//! from a task on the current tokio runtime (a benchmark starts it on its own
//! runtime with `Fakes::run`). Point teloxide at it with [`FakeBotApi::bot`]
//! or `Bot::new(token).set_api_url(fake.url().parse()?)`, feed it updates
//! with [`FakeBotApi::push_text`] / [`FakeBotApi::push_update`] /
//! [`FakeBotApi::push_many`] / [`FakeBotApi::push_callback`] (a button
//! press), make calls fail with [`FakeBotApi::inject`], and check what the
//! bot did with [`FakeBotApi::calls`] (and [`buttons_of`] a call) and the
//! sleep-free [`FakeBotApi::wait_for`].
//!
//! What it keeps of each call is [`Record`]: every call with its parameters
//! (the tests), only when each `sendChatAction` and `sendMessage` arrived
//! (the latency benchmarks), or only totals (at 100,000 turns a recording
//! fake would itself look like a leak in the process's RSS). The totals
//! ([`FakeBotApi::counts`]) are always kept.
//!
//! Answered methods: `getMe`, `getUpdates` (long polling; `offset`
//! acknowledges), `sendMessage` (an inline keyboard in `reply_markup` comes
//! back in the message), `editMessageText` and `editMessageReplyMarkup` (the
//! edited message; a missing `reply_markup` removes the buttons; "message is
//! not modified" and "message to edit not found" as Telegram says them),
//! `answerCallbackQuery` (`true` once per id from
//! [`FakeBotApi::push_callback`], else "query is too old"), and `true` for
//! `deleteWebhook`, `sendChatAction`, `setMessageReaction` and
//! `setMyCommands`, `createForumTopic` (in a group, a name of 1 to 128
//! characters: a new thread id); anything else gets a 404 Bot API error. Method names are matched case-insensitively and
//! recorded lowercased (`sendmessage`). The server side is in
//! `bot_api_server.rs`, a child module of this one.
//!
//! Besides the one-shot per-method faults of [`FakeBotApi::inject`], a
//! test can break the whole transport, every method (`getUpdates` and
//! downloads included), for a while: [`FakeBotApi::outage`] switches an
//! [`Outage`] on until [`FakeBotApi::clear_outage`], [`FakeBotApi::outage_for`]
//! for a duration (it clears itself; a later outage is not cleared by an
//! earlier one's timer). The knobs:
//!
//! - [`Outage::Refused`]: the listener is closed and every open connection
//!   reset (closed with `SO_LINGER` 0), so new connections are refused and
//!   requests in flight fail; once cleared the fake listens on the same
//!   port again.
//! - [`Outage::HalfOpen`]: connections are accepted and requests read, but
//!   none is answered; they are held until the outage ends and then their
//!   connections closed unanswered. With `carried: true` the fake carried
//!   each request out before it died (recorded with its real status: a sent
//!   message exists, with its id); with `carried: false` it did not
//!   (recorded with status 0, nothing done). A request already being
//!   answered when it starts (a long poll) is held and dropped too.
//! - [`Outage::Storm502`]: every request is answered 502 with an HTML body
//!   (recorded with status 502, nothing done).
//! - [`Outage::Slow`]: every answer leaves this long after the request was
//!   read (recorded, and carried out, on arrival).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::{net::TcpListener, sync::Notify, time::timeout_at};

/// The server side: answering, recording and long polls; HTTP connections.
#[path = "bot_api_server.rs"]
mod server;

/// `getFile`, downloads, uploads; group, topic and media messages.
#[path = "bot_api_files.rs"]
pub mod files;

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
    /// 409 with this description, e.g. another poller's
    /// `"Conflict: terminated by other getUpdates request; …"`.
    Conflict(String),
    /// The request is read (and recorded, status 0) and the connection
    /// closed without an answer, as when a connection fails after the
    /// request was sent: the client cannot tell whether it arrived.
    NoAnswer,
    /// The request is carried out (a message gets its id and shows in the
    /// chat) and then the connection closed without an answer: the message
    /// arrived, but the client cannot tell.
    DoneNoAnswer,
    /// An answer that is not JSON (a proxy's HTML page) with this status.
    NotJson(u16),
}

/// A transport-level fault of every call while it lasts, see
/// [`FakeBotApi::outage`] and the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outage {
    /// Connections refused, open ones reset.
    Refused,
    /// Requests read and held with no answer, then their connections
    /// closed; `carried`: the fake did what each asked before it died.
    HalfOpen { carried: bool },
    /// Every request answered 502 with an HTML page.
    Storm502,
    /// Every answer delayed this long.
    Slow(Duration),
}

/// The outage in force and a number that changes with every switch.
#[derive(Clone, Copy, Debug, Default)]
struct OutageState {
    generation: u64,
    outage: Option<Outage>,
}

impl OutageState {
    fn refused(&self) -> bool {
        self.outage == Some(Outage::Refused)
    }

    fn half_open(&self) -> bool {
        matches!(self.outage, Some(Outage::HalfOpen { .. }))
    }
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

/// How many of the bot's last messages a fake that does not record
/// [`Record::Calls`] keeps for edits, deletes and button presses.
pub const SENT_WINDOW: usize = 1_024;

/// How many notices the fake keeps the text of ([`FakeBotApi::notices`]).
pub const NOTICES_KEPT: usize = 5;

/// How a fake is started, see [`FakeBotApi::start_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// What is kept of each call.
    pub record: Record,
    /// Close a keep-alive connection that carried no request for this long
    /// (as Telegram's servers close idle connections), so a process at rest
    /// holds no HTTP connection; `None` keeps connections open. The close
    /// is checked every `idle_close`, so it comes between one and two times
    /// that after the last request.
    pub idle_close: Option<Duration>,
    /// With `idle_close`: a request that arrives on a connection already
    /// idle that long crossed the close, as if it had come exactly then: it
    /// is dropped unread with the connection, as a closed socket drops it,
    /// and the client cannot tell whether it arrived. Deterministic, for
    /// tests; on a loaded machine a late fake would drop requests that were
    /// sent in time.
    pub strict_idle: bool,
}

/// What the fake has seen with [`Record::Arrivals`].
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// `sendChatAction` arrivals: chat and when.
    pub chat_actions: Vec<(i64, Instant)>,
    /// Successful `sendMessage` arrivals: chat, when, text.
    pub messages: Vec<(i64, Instant, String)>,
    /// Successful `editMessageText` arrivals: chat, when, the new text.
    pub edits: Vec<(i64, Instant, String)>,
}

/// A request that reached the fake once its connection had been idle for
/// `idle_close` (by the kernel's receive time): a punctual server would
/// have closed the connection first, and the client could not tell whether
/// the request arrived ([`FakeBotApi::crossings`]). With `strict_idle` it
/// is dropped unread; otherwise it is answered all the same.
#[derive(Debug, Clone)]
pub struct Crossing {
    /// When the connection's last answer left: its idle time began.
    pub idle_since: SystemTime,
    /// When the kernel received the request's bytes (its receive stamp),
    /// when it gave one.
    pub arrived: Option<SystemTime>,
    /// When the fake came to it (its thread may run late on a loaded
    /// machine).
    pub seen: SystemTime,
    /// Dropped unread with its connection (`strict_idle`).
    pub dropped: bool,
    /// The request: its method and path, and as much of its body as was
    /// read or waiting.
    pub head: String,
}

impl Crossing {
    /// How long the connection had been idle when the request arrived.
    pub fn idle_at_arrival(&self) -> Option<Duration> {
        let arrived = self.arrived?;
        Some(arrived.duration_since(self.idle_since).unwrap_or_default())
    }

    /// How long after its arrival the fake came to it.
    pub fn late(&self) -> Option<Duration> {
        Some(self.seen.duration_since(self.arrived?).unwrap_or_default())
    }
}

/// How requests met their connections' idle time, by the kernel's receive
/// stamps ([`FakeBotApi::timing`]).
#[derive(Debug, Default, Clone)]
pub struct Timing {
    /// Requests on a connection that had answered one before.
    pub reused: u64,
    /// The longest such a connection sat idle before a request reached it.
    pub max_idle: Duration,
    /// The longest from a request reaching the socket to the fake taking it
    /// up (its thread running late).
    pub max_late: Duration,
    /// The idle times, counted below each of [`Timing::BOUNDS_MS`] (and past
    /// the last).
    pub idle: [u64; 8],
    /// The fake's lateness, likewise.
    pub late: [u64; 8],
    /// The longest idle time before a request, by method (lowercased).
    pub max_idle_by_method: std::collections::BTreeMap<String, Duration>,
}

impl Timing {
    /// The upper bounds of the buckets, in ms.
    pub const BOUNDS_MS: [u64; 7] = [1, 10, 50, 100, 200, 300, 400];

    fn bucket(d: Duration) -> usize {
        let ms = d.as_millis() as u64;
        Self::BOUNDS_MS.iter().position(|b| ms < *b).unwrap_or(7)
    }

    pub(crate) fn add(&mut self, method: &str, idle: Duration, late: Duration) {
        let longest = self
            .max_idle_by_method
            .entry(method.to_string())
            .or_default();
        *longest = (*longest).max(idle);
        self.reused += 1;
        self.max_idle = self.max_idle.max(idle);
        self.max_late = self.max_late.max(late);
        self.idle[Self::bucket(idle)] += 1;
        self.late[Self::bucket(late)] += 1;
    }
}

/// Rows of inline buttons as `(label, callback data)`.
pub type Buttons = Vec<Vec<(String, String)>>;

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
    /// The most requests other than `getUpdates` the fake was answering at
    /// once (read to its answer, delays included).
    pub peak_in_flight: u64,
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
    /// The bot's topics mode in private chats (BotFather), as `getMe`'s
    /// `has_topics_enabled` says: with it off, a private chat has no topics.
    private_topics: AtomicBool,
    /// The topics of private chats, as (chat, thread): those the bot made
    /// (`createForumTopic`) and those a pushed message was in (the user
    /// made). Telegram refuses a send to any other.
    private_topic_ids: Mutex<HashSet<(i64, i64)>>,
    /// Woken when updates are pushed.
    pushed: Notify,
    /// Woken when a call or an arrival is recorded.
    recorded: Notify,
    /// [`Counts::messages`], kept whatever the recording.
    messages: AtomicU64,
    /// [`Counts::notices`].
    notices: AtomicU64,
    /// Requests other than `getUpdates` being answered now.
    in_flight: AtomicU64,
    /// [`Counts::peak_in_flight`].
    peak_in_flight: AtomicU64,
    /// The first few notices' chats and texts ([`FakeBotApi::notices`]),
    /// kept whatever the recording, so a run that counts notices can say
    /// which.
    notice_texts: Mutex<Vec<(i64, String)>>,
    /// [`Counts::chat_actions`].
    chat_actions: AtomicU64,
    /// [`Counts::polls`].
    polls: AtomicU64,
    /// [`Counts::errors`].
    errors: AtomicU64,
    /// The bot's messages by `(chat, message_id)`, as Telegram returned
    /// them, for edits, deletes and callback queries: all of them with
    /// [`Record::Calls`], the last [`SENT_WINDOW`] otherwise (a fake that
    /// keeps every reply would itself grow with every turn).
    sent: Mutex<HashMap<(i64, i64), Value>>,
    /// The keys of `sent` in the order sent, when it is a window.
    sent_order: Mutex<VecDeque<(i64, i64)>>,
    /// Successful `sendMessage` calls per chat, whatever the recording.
    per_chat: Mutex<HashMap<i64, u64>>,
    /// Callback query ids pushed and not yet answered.
    unanswered: Mutex<HashSet<String>>,
    /// Registered files and received uploads.
    files: Mutex<files::FileStore>,
    /// The webhook URL set on the token (`getWebhookInfo`); empty: none.
    webhook: Mutex<String>,
    /// Requests that arrived on a connection past its keep-alive.
    crossings: Mutex<Vec<Crossing>>,
    /// How requests met their connections' idle time.
    timing: Mutex<Timing>,
    /// The transport outage in force ([`FakeBotApi::outage`]).
    outage: tokio::sync::watch::Sender<OutageState>,
    /// Whether the listener is open (false during [`Outage::Refused`]).
    listening: tokio::sync::watch::Sender<bool>,
    /// How many [`FakeBotApi::outage_for`] timers have run out (whether
    /// they ended their outage or found another in force).
    timers: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Queue {
    /// Unacknowledged updates as `(update_id, JSON)`, sorted by id.
    updates: VecDeque<(i64, String)>,
    /// The highest id pushed: the next update without one gets the one after.
    last_update_id: i64,
    /// Per chat, as Telegram numbers them ("unique inside this chat"):
    /// shared by pushed and sent messages, so ids never collide in a chat
    /// and grow in order.
    last_message_id: std::collections::HashMap<i64, i64>,
    /// The last callback query id handed out.
    last_callback_id: u64,
}

#[derive(Default)]
struct Calls {
    /// Since the last `clear_calls`, in order of arrival.
    calls: Vec<Call>,
    /// Numbers calls across `clear_calls`.
    last_seq: u64,
}

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
        shared.listening.send_replace(true);
        let server = tokio::spawn(server::accept_loop(listener, shared.clone()));
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

    /// Turns the bot's topics mode in private chats on or off: `getMe`'s
    /// `has_topics_enabled`, `createForumTopic` and `editForumTopic` in a
    /// private chat, and a `message_thread_id` on a send to one.
    pub fn set_private_topics(&self, on: bool) {
        self.shared.private_topics.store(on, Ordering::Relaxed);
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

    /// Pushes a press by user `user_id` of a button with callback `data` on
    /// the bot's message `message_id` in chat `chat_id` (a `callback_query`
    /// update carrying that message as the fake last returned it, or an
    /// inaccessible message when it never sent one); returns the callback
    /// query's id, for `answerCallbackQuery`.
    pub fn push_callback(&self, chat_id: i64, user_id: i64, message_id: i32, data: &str) -> String {
        let message = lock(&self.shared.sent)
            .get(&(chat_id, i64::from(message_id)))
            .cloned();
        let message = message.unwrap_or_else(|| {
            // Telegram's shape for a message the bot can no longer see.
            json!({"chat": private_chat(chat_id), "message_id": message_id, "date": 0})
        });
        let id = {
            let mut queue = lock(&self.shared.queue);
            queue.last_callback_id += 1;
            let id = format!("{}", 4_000_000_000_000 + queue.last_callback_id);
            queue.push(json!({"callback_query": {
                "id": id,
                "from": {"id": user_id, "is_bot": false, "first_name": format!("u{user_id}")},
                "message": message,
                "chat_instance": format!("instance-{chat_id}"),
                "data": data,
            }}));
            id
        };
        lock(&self.shared.unanswered).insert(id.clone());
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

    /// Switches `outage` on (replacing any other) until
    /// [`FakeBotApi::clear_outage`]; returns once it is in force (for
    /// [`Outage::Refused`]: the listener is closed).
    pub async fn outage(&self, outage: Outage) {
        self.shared.set_outage(Some(outage)).await;
    }

    /// Like [`FakeBotApi::outage`], cleared after `duration` (by a task on
    /// the current runtime) unless another outage or a clear came first.
    pub async fn outage_for(&self, outage: Outage, duration: Duration) {
        let generation = self.shared.set_outage(Some(outage)).await;
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            if shared.outage.borrow().generation == generation {
                shared.set_outage(None).await;
            }
            shared.timers.send_modify(|n| *n += 1);
        });
    }

    /// Waits up to `timeout` until `n` [`FakeBotApi::outage_for`] timers
    /// have run out (and done what they do); false if they did not.
    pub async fn outage_timers_run_out(&self, n: u64, timeout: Duration) -> bool {
        let mut timers = self.shared.timers.subscribe();
        tokio::time::timeout(timeout, timers.wait_for(|run_out| *run_out >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Ends the outage in force; returns once the fake listens again.
    pub async fn clear_outage(&self) {
        self.shared.set_outage(None).await;
    }

    /// Waits up to `timeout` until no outage is in force and the fake
    /// listens (an [`FakeBotApi::outage_for`] ended); false if it did not.
    pub async fn outage_over(&self, timeout: Duration) -> bool {
        let mut state = self.shared.outage.subscribe();
        let mut listening = self.shared.listening.subscribe();
        tokio::time::timeout(timeout, async {
            let _ = state.wait_for(|s| s.outage.is_none()).await;
            let _ = listening.wait_for(|l| *l).await;
        })
        .await
        .is_ok()
    }

    /// The outage in force, if any.
    pub fn current_outage(&self) -> Option<Outage> {
        self.shared.outage.borrow().outage
    }

    /// The message `id` of `chat` the bot sent, as the chat shows it now.
    pub fn sent_message(&self, chat: i64, id: i64) -> Option<Value> {
        lock(&self.shared.sent).get(&(chat, id)).cloned()
    }

    /// Drops every fault still queued (Telegram is back).
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
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

    /// The first [`NOTICES_KEPT`] notices sent (chat, text).
    pub fn notices(&self) -> Vec<(i64, String)> {
        lock(&self.shared.notice_texts).clone()
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
            peak_in_flight: s.peak_in_flight.load(Ordering::SeqCst),
        }
    }

    /// How requests met their connections' idle time so far.
    pub fn timing(&self) -> Timing {
        lock(&self.shared.timing).clone()
    }

    /// The requests that arrived on a connection idle for `idle_close` so
    /// far (dropped unread with `strict_idle`, answered otherwise).
    pub fn crossings(&self) -> Vec<Crossing> {
        lock(&self.shared.crossings).clone()
    }

    /// Takes the arrivals recorded so far ([`Record::Arrivals`]), so a long
    /// run can check them as it goes without the fake keeping them all.
    pub fn take_log(&self) -> Log {
        std::mem::take(&mut *lock(&self.shared.log))
    }

    /// The newest message with buttons the bot sent to `chat` (among those
    /// the fake still keeps): its id and its buttons' `(label, data)`.
    pub fn last_buttons(&self, chat: i64) -> Option<(i64, Buttons)> {
        let sent = lock(&self.shared.sent);
        let (id, message) = sent
            .iter()
            .filter(|((c, _), m)| *c == chat && m.get("reply_markup").is_some())
            .max_by_key(|((_, id), _)| *id)?;
        let rows = message["reply_markup"]["inline_keyboard"].as_array()?;
        let buttons = rows
            .iter()
            .map(|row| {
                row.as_array()
                    .into_iter()
                    .flatten()
                    .map(|b| {
                        let field = |k: &str| b[k].as_str().unwrap_or_default().to_string();
                        (field("text"), field("callback_data"))
                    })
                    .collect()
            })
            .collect();
        Some((id.1, buttons))
    }

    /// Successful `sendMessage` calls per chat so far, whatever the recording.
    pub fn messages_by_chat(&self) -> HashMap<i64, u64> {
        lock(&self.shared.per_chat).clone()
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

impl Shared {
    /// Puts `outage` in force and waits until the listener agrees (closed
    /// when refused, open otherwise); returns the new generation.
    async fn set_outage(&self, outage: Option<Outage>) -> u64 {
        let mut generation = 0;
        self.outage.send_modify(|state| {
            state.generation += 1;
            state.outage = outage;
            generation = state.generation;
        });
        let open = outage != Some(Outage::Refused);
        let mut listening = self.listening.subscribe();
        let agreed =
            tokio::time::timeout(Duration::from_secs(30), listening.wait_for(|l| *l == open));
        assert!(
            matches!(agreed.await, Ok(Ok(_))),
            "the fake Bot API's listener did not follow the outage {outage:?} (was it shut down?)"
        );
        generation
    }
}

/// Locks, ignoring poisoning: a failed assertion must not break later calls.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// The inline keyboard a call sent (`reply_markup`), each button read by
/// `each`, row by row; empty when it sent none.
fn keyboard_of<T>(call: &Call, each: impl Fn(&Value) -> T) -> Vec<Vec<T>> {
    let Some(markup) = markup_of(&call.params) else {
        return Vec::new();
    };
    let rows = markup["inline_keyboard"].as_array().cloned();
    let rows = rows.unwrap_or_default().into_iter();
    rows.map(|row| {
        row.as_array()
            .map_or_else(Vec::new, |b| b.iter().map(&each).collect())
    })
    .collect()
}

/// A button's `key` as text, empty without one.
fn button_text(button: &Value, key: &str) -> String {
    button
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The inline keyboard a call sent (`reply_markup`), as rows of
/// `(label, callback data)`; empty when it sent none.
pub fn buttons_of(call: &Call) -> Vec<Vec<(String, String)>> {
    keyboard_of(call, |b| {
        (button_text(b, "text"), button_text(b, "callback_data"))
    })
}

/// The inline keyboard a call sent, as rows of `(label, style)`: the
/// button's `style` (`success`, `danger`, `primary`) or `None` without one.
pub fn styles_of(call: &Call) -> Vec<Vec<(String, Option<String>)>> {
    keyboard_of(call, |b| {
        (
            button_text(b, "text"),
            b["style"].as_str().map(str::to_string),
        )
    })
}

/// The inline keyboard in a call's `reply_markup` (a JSON string in a form
/// body), if it has one.
fn markup_of(params: &Value) -> Option<Value> {
    let markup = match params.get("reply_markup")? {
        Value::String(raw) => serde_json::from_str(raw).ok()?,
        markup => markup.clone(),
    };
    markup.get("inline_keyboard").is_some().then_some(markup)
}

/// A private chat as Telegram describes it.
fn private_chat(chat_id: i64) -> Value {
    json!({"id": chat_id, "type": "private", "first_name": "user"})
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

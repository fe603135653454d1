//! The server side of the fake Bot API (a child module of `bot_api.rs`):
//! the answer to each method, recording, faults, long polls, and serving
//! HTTP/1.1 connections (keep-alive, no Nagle delay, optionally closed once
//! idle).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode, body::Incoming, server::conn::http1};
use hyper_util::rt::TokioIo;
use serde_json::{Map, json};
use tokio::task::JoinSet;

use super::*;

/// The answer to a call: a status and JSON body, or a `getUpdates` long poll
/// (offset, limit, timeout).
pub(super) enum Answer {
    Json(u16, String),
    Poll(Option<i64>, usize, Duration),
    /// An HTML page with this status.
    Html(u16, String),
    /// No answer: the connection is closed.
    Hangup,
}

impl Answer {
    fn status(&self) -> u16 {
        match self {
            Answer::Json(status, _) | Answer::Html(status, _) => *status,
            Answer::Poll(..) => 200,
            Answer::Hangup => 0,
        }
    }
}

const OK_TRUE: &str = r#"{"ok":true,"result":true}"#;
const NO_UPDATES: &str = r#"{"ok":true,"result":[]}"#;
/// Telegram's answer to an edit that changes nothing.
const NOT_MODIFIED: &str = "Bad Request: message is not modified: specified new message content \
                            and reply markup are exactly the same as a current content and reply \
                            markup of the message";
/// The answer to an unknown or already answered callback query (as teloxide
/// spells it, so it parses as `ApiError::InvalidQueryId`).
const QUERY_TOO_OLD: &str =
    "Bad Request: query is too old and response timeout expired or query id is invalid";

impl Shared {
    /// Decides the answer (applying a queued fault), counts it and records
    /// the call.
    fn dispatch(
        &self,
        method: String,
        params: Value,
        at: Instant,
        file: Option<files::Part>,
        forced: Option<Fault>,
    ) -> (Answer, Duration) {
        // Held across the answer, so calls are numbered in the order they
        // were answered (and sent messages got their ids).
        let calls = (self.options.record == Record::Calls).then(|| lock(&self.calls));
        let fault = if forced.is_some() {
            forced
        } else if self.faulty.load(Ordering::Relaxed) {
            lock(&self.faults)
                .get_mut(&method)
                .and_then(VecDeque::pop_front)
        } else {
            None
        };
        if let Some(part) = &file {
            self.received_file(&part.bytes);
        }
        let (answer, delay) = match fault {
            None => (self.answer(&method, &params, at, file), Duration::ZERO),
            Some(Fault::Delay(delay)) => (self.answer(&method, &params, at, file), delay),
            Some(Fault::DoneNoAnswer) => {
                drop(self.answer(&method, &params, at, file));
                (Answer::Hangup, Duration::ZERO)
            }
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

    fn answer(
        &self,
        method: &str,
        params: &Value,
        at: Instant,
        file: Option<files::Part>,
    ) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        if let Err(refusal) = self.check_thread(method, params) {
            return refusal;
        }
        match method {
            "getupdates" => {
                self.polls.fetch_add(1, Ordering::Relaxed);
                let limit = int("limit").unwrap_or(100).clamp(1, 100) as usize;
                let timeout = Duration::from_secs(int("timeout").unwrap_or(0).max(0) as u64);
                Answer::Poll(int("offset"), limit, timeout)
            }
            "sendmessage" => self.send_message(params, at),
            "getfile" => self.get_file(params),
            "senddocument" | "sendphoto" => self.upload(method, params, file),
            "editmessagetext" => self.edit_message(params, true),
            "deletemessage" => self.delete_message(params),
            "sendmessagedraft" => send_draft(params),
            "editmessagereplymarkup" => self.edit_message(params, false),
            "answercallbackquery" => {
                let id = params.get("callback_query_id").and_then(Value::as_str);
                match id {
                    Some(id) if lock(&self.unanswered).remove(id) => {
                        Answer::Json(200, OK_TRUE.to_string())
                    }
                    _ => error(400, QUERY_TOO_OLD, None),
                }
            }
            "sendchataction" => {
                self.chat_actions.fetch_add(1, Ordering::Relaxed);
                if self.options.record == Record::Arrivals {
                    let chat = int("chat_id").unwrap_or(0);
                    lock(&self.log).chat_actions.push((chat, at));
                    self.recorded.notify_waiters();
                }
                Answer::Json(200, OK_TRUE.to_string())
            }
            "getwebhookinfo" => ok(json!({
                "url": lock(&self.webhook).clone(),
                "has_custom_certificate": false, "pending_update_count": 0,
            })),
            "deletewebhook" => {
                lock(&self.webhook).clear();
                Answer::Json(200, OK_TRUE.to_string())
            }
            "setmessagereaction" | "setmycommands" => Answer::Json(200, OK_TRUE.to_string()),
            "createforumtopic" => self.create_topic(params),
            "editforumtopic" => self.edit_topic(params),
            // teloxide's `Me` needs the bot-only flags that Telegram sends.
            "getme" => ok(json!({
                "id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot",
                "can_join_groups": true, "can_read_all_group_messages": false,
                "supports_inline_queries": false, "has_main_web_app": false,
                "has_topics_enabled": self.private_topics.load(Ordering::Relaxed),
            })),
            _ => error(404, "Not Found: method not found", None),
        }
    }

    /// Whether `chat` can have topics: a group (a negative chat id), or a
    /// private chat while the bot's topics mode is on.
    fn has_topics(&self, chat: i64) -> bool {
        chat < 0 || self.private_topics.load(Ordering::Relaxed)
    }

    /// A pushed message in a topic of a private chat: the user made that
    /// topic.
    pub(super) fn saw_topic(&self, message: &Value) {
        let chat = message["chat"]["id"].as_i64().unwrap_or_default();
        if let Some(thread) = message["message_thread_id"].as_i64()
            && chat > 0
        {
            lock(&self.private_topic_ids).insert((chat, thread));
        }
    }

    /// Whether `thread` is a topic of `chat` as far as Telegram knows: any
    /// in a group; in a private chat, one made there.
    fn knows_topic(&self, chat: i64, thread: i64) -> bool {
        chat < 0 || lock(&self.private_topic_ids).contains(&(chat, thread))
    }

    /// Every send method refuses a `message_thread_id` where the chat has
    /// no topics, or (in a private chat) no such topic, as Telegram does.
    fn check_thread(&self, method: &str, params: &Value) -> Result<(), Answer> {
        const SENDS: [&str; 5] = [
            "sendmessage",
            "senddocument",
            "sendphoto",
            "sendchataction",
            "sendmessagedraft",
        ];
        let thread = params.get("message_thread_id").and_then(as_i64);
        let chat = params.get("chat_id").and_then(as_i64);
        match (thread, chat) {
            (Some(thread), Some(chat))
                if SENDS.contains(&method)
                    && (!self.has_topics(chat) || !self.knows_topic(chat, thread)) =>
            {
                Err(error(400, "Bad Request: message thread not found", None))
            }
            _ => Ok(()),
        }
    }

    /// `createForumTopic`: in a group (a negative chat id), or a private chat
    /// with the bot's topics mode on, with a name of 1 to 128 characters, a
    /// new topic numbered as messages are.
    fn create_topic(&self, params: &Value) -> Answer {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match params.get("chat_id").and_then(as_i64) {
            None => error(400, "Bad Request: chat not found", None),
            Some(chat) if !self.has_topics(chat) => {
                error(400, "Bad Request: the chat is not a forum", None)
            }
            Some(_) if name.is_empty() || name.chars().count() > 128 => {
                error(400, "Bad Request: TOPIC_NAME_INVALID", None)
            }
            Some(chat) => {
                let thread = lock(&self.queue).next_message_id(chat);
                if chat > 0 {
                    lock(&self.private_topic_ids).insert((chat, thread));
                }
                ok(json!({"message_thread_id": thread, "name": name, "icon_color": 7_322_096}))
            }
        }
    }

    /// `editForumTopic`: renames a topic (a positive `message_thread_id`) of
    /// a chat that has topics to a name of 1 to 128 characters.
    fn edit_topic(&self, params: &Value) -> Answer {
        let name = params.get("name").and_then(Value::as_str);
        let thread = params.get("message_thread_id").and_then(as_i64);
        match params.get("chat_id").and_then(as_i64) {
            None => error(400, "Bad Request: chat not found", None),
            Some(chat) if !self.has_topics(chat) => {
                error(400, "Bad Request: the chat is not a forum", None)
            }
            Some(chat) if thread.is_none_or(|t| t <= 0 || !self.knows_topic(chat, t)) => {
                error(400, "Bad Request: message thread not found", None)
            }
            Some(_) if name.is_some_and(|n| n.is_empty() || n.chars().count() > 128) => {
                error(400, "Bad Request: TOPIC_NAME_INVALID", None)
            }
            Some(_) => Answer::Json(200, OK_TRUE.to_string()),
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
        if let Err(refusal) = check_entities(text, params) {
            return refusal;
        }
        if let Err(refusal) = check_styles(params) {
            return refusal;
        }
        self.messages.fetch_add(1, Ordering::Relaxed);
        *lock(&self.per_chat).entry(chat_id).or_default() += 1;
        if text.starts_with('⚠') {
            self.notices.fetch_add(1, Ordering::Relaxed);
            let mut kept = lock(&self.notice_texts);
            if kept.len() < NOTICES_KEPT {
                kept.push((chat_id, text.to_string()));
            }
        }
        if self.options.record == Record::Arrivals {
            lock(&self.log)
                .messages
                .push((chat_id, at, text.to_string()));
            self.recorded.notify_waiters();
        }
        let message_id = lock(&self.queue).next_message_id(chat_id);
        let mut message = json!({
            "message_id": message_id,
            "date": unix_now(),
            "chat": private_chat(chat_id),
            "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
            "text": text,
        });
        // In a forum topic Telegram's answer says so, as a press under it will.
        if let Some(thread) = params.get("message_thread_id").and_then(as_i64) {
            message["message_thread_id"] = thread.into();
            message["is_topic_message"] = true.into();
        }
        if let Some(entities) = params.get("entities") {
            message["entities"] = entities.clone();
        }
        if let Some(markup) = markup_of(params) {
            message["reply_markup"] = markup;
        }
        // Kept, as Telegram keeps it: it can be edited or deleted later.
        self.keep_sent((chat_id, message_id), message.clone());
        ok(message)
    }

    /// Keeps a sent message; unless every call is recorded, only the last
    /// [`SENT_WINDOW`] are kept.
    fn keep_sent(&self, key: (i64, i64), message: Value) {
        let mut sent = lock(&self.sent);
        sent.insert(key, message);
        if self.options.record != Record::Calls {
            let mut order = lock(&self.sent_order);
            order.push_back(key);
            while order.len() > SENT_WINDOW {
                if let Some(old) = order.pop_front() {
                    sent.remove(&old);
                }
            }
        }
    }

    /// `editMessageText` (`text`) or `editMessageReplyMarkup`: replaces the
    /// text and the buttons (none without a `reply_markup`) of a message the
    /// bot sent, answering the edited message.
    fn edit_message(&self, params: &Value, text: bool) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        let new_text = params.get("text").and_then(Value::as_str);
        if text && new_text.is_none_or(|t| t.trim().is_empty()) {
            return error(400, "Bad Request: message text is empty", None);
        }
        if let Some(new_text) = new_text.filter(|_| text)
            && let Err(refusal) = check_entities(new_text, params)
        {
            return refusal;
        }
        let key = (int("chat_id").unwrap_or(0), int("message_id").unwrap_or(0));
        let mut sent = lock(&self.sent);
        let Some(message) = sent.get_mut(&key) else {
            return error(400, "Bad Request: message to edit not found", None);
        };
        let markup = markup_of(params);
        let same_text = !text
            || (message.get("text").and_then(Value::as_str) == new_text
                && message.get("entities") == params.get("entities"));
        if same_text && message.get("reply_markup") == markup.as_ref() {
            return error(400, NOT_MODIFIED, None);
        }
        let fields = message
            .as_object_mut()
            .expect("a stored message is an object");
        if let Some(new_text) = new_text.filter(|_| text) {
            fields.insert("text".into(), new_text.into());
            match params.get("entities") {
                Some(entities) => fields.insert("entities".into(), entities.clone()),
                None => fields.remove("entities"),
            };
        }
        match markup {
            Some(markup) => fields.insert("reply_markup".into(), markup),
            None => fields.remove("reply_markup"),
        };
        fields.insert("edit_date".into(), unix_now().into());
        if let Some(new_text) = new_text.filter(|_| text)
            && self.options.record == Record::Arrivals
        {
            lock(&self.log)
                .edits
                .push((key.0, Instant::now(), new_text.to_string()));
            self.recorded.notify_waiters();
        }
        ok(message.clone())
    }

    /// `deleteMessage`: a message the bot sent goes.
    fn delete_message(&self, params: &Value) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        let key = (int("chat_id").unwrap_or(0), int("message_id").unwrap_or(0));
        match lock(&self.sent).remove(&key) {
            Some(_) => {
                // The window holds messages that still exist.
                lock(&self.sent_order).retain(|k| *k != key);
                Answer::Json(200, OK_TRUE.to_string())
            }
            None => error(400, "Bad Request: message to delete not found", None),
        }
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

/// `sendMessageDraft` (Bot API 9.3): private chats only, a non-zero
/// `draft_id`, 1-4096 units of text with valid entities.
fn send_draft(params: &Value) -> Answer {
    let text = params
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match (
        params.get("chat_id").and_then(as_i64),
        params.get("draft_id").and_then(as_i64),
    ) {
        (Some(chat), _) if chat <= 0 => error(400, "Bad Request: TEXTDRAFT_PEER_INVALID", None),
        (None, _) => error(400, "Bad Request: chat not found", None),
        (_, None | Some(0)) => error(400, "Bad Request: draft_id must be non-zero", None),
        _ if text.trim().is_empty() => error(400, "Bad Request: message text is empty", None),
        _ => match check_entities(text, params) {
            Ok(()) => Answer::Json(200, OK_TRUE.to_string()),
            Err(refusal) => refusal,
        },
    }
}

/// Refuses a button `style` other than Telegram's three (`danger`,
/// `success`, `primary`).
fn check_styles(params: &Value) -> Result<(), Answer> {
    let Some(markup) = markup_of(params) else {
        return Ok(());
    };
    let rows = markup["inline_keyboard"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let styles = rows
        .iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|b| b.get("style"));
    for style in styles {
        if !matches!(style.as_str(), Some("danger" | "success" | "primary")) {
            return Err(error(400, "Bad Request: invalid button style", None));
        }
    }
    Ok(())
}

/// Telegram's checks of a text and its `entities`: at most 4096 UTF-16
/// units, and entities that keep the rules (`telegram::format::validate`);
/// a 400 "can't parse entities" otherwise, as Telegram answers.
fn check_entities(text: &str, params: &Value) -> Result<(), Answer> {
    if text.encode_utf16().count() > 4096 {
        return Err(error(400, "Bad Request: message is too long", None));
    }
    let Some(raw) = params.get("entities") else {
        return Ok(());
    };
    let entities: Vec<teloxide::types::MessageEntity> = match serde_json::from_value(raw.clone()) {
        Ok(entities) => entities,
        Err(err) => {
            let why = format!("Bad Request: can't parse entities: {err}");
            return Err(error(400, &why, None));
        }
    };
    turnstile::telegram::format::validate(text, &entities).map_err(|why| {
        error(
            400,
            &format!("Bad Request: can't parse entities: {why}"),
            None,
        )
    })
}

impl Queue {
    /// The next message id of `chat`.
    pub(super) fn next_message_id(&mut self, chat: i64) -> i64 {
        let last = self.last_message_id.entry(chat).or_default();
        *last += 1;
        *last
    }

    /// Queues a private text message; returns its update id.
    pub(super) fn push_text(&mut self, chat_id: i64, user_id: i64, text: &str, date: u64) -> i64 {
        let id = self.last_update_id + 1;
        let mut message = json!({
            "message_id": self.next_message_id(chat_id),
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
    pub(super) fn push(&mut self, mut update: Value) -> i64 {
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

/// Binds `addr` again after a refusing outage (retrying while the port is
/// briefly in use).
async fn rebind(addr: SocketAddr) -> TcpListener {
    let mut tries = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(err) if tries >= 500 => panic!("re-bind the fake Bot API to {addr}: {err}"),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Accepts while no [`Outage::Refused`] is in force: the listener is closed
/// for its length and bound to the same address after.
pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let addr = listener.local_addr().expect("address of the fake Bot API");
    let mut listener = Some(listener);
    let mut outage = shared.outage.subscribe();
    // Aborting this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let refused = outage.borrow_and_update().refused();
        if refused && listener.is_some() {
            listener = None;
            shared.listening.send_replace(false);
        } else if !refused && listener.is_none() {
            listener = Some(rebind(addr).await);
            shared.listening.send_replace(true);
        }
        let accept = async {
            match &listener {
                Some(listener) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = outage.changed() => {}
            accepted = accept => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors, most likely: let connections finish.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let activity = Arc::new(Activity::new());
                let stream = Stamped::new(stream, Arc::clone(&activity));
                let fd = stream.fd();
                let idle_close = shared.options.idle_close;
                let strict = idle_close.filter(|_| shared.options.strict_idle);
                let seen = Arc::clone(&activity);
                let served = Arc::clone(&shared);
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let shared = Arc::clone(&served);
                    let seen = Arc::clone(&seen);
                    async move {
                        let arrival = seen.begin();
                        if arrival.reused
                            && let Some(at) = arrival.at
                        {
                            let idle = at.duration_since(arrival.idle_since).unwrap_or_default();
                            let late = SystemTime::now().duration_since(at).unwrap_or_default();
                            let method = request.uri().path().rsplit('/').next().unwrap_or_default();
                            let method = method.to_ascii_lowercase();
                            lock(&shared.timing).add(&method, idle, late);
                        }
                        if let Some(idle) = idle_close
                            && arrival.past(idle)
                        {
                            // It reached the socket once the connection had
                            // been idle for the keep-alive: a punctual
                            // server had closed it. Judged by when the
                            // kernel received it, not by when this thread
                            // got to it, so a fake running late drops
                            // nothing that was sent in time.
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let head = format!(
                                "{} {} {}",
                                parts.method,
                                parts.uri.path(),
                                String::from_utf8_lossy(&body)
                            );
                            shared.crossed(&arrival, head, strict.is_some());
                            if strict.is_some() {
                                // Unread, unanswered: the connection goes.
                                return Err(Unanswered::ClosedWhileIdle);
                            }
                            let request = Request::from_parts(parts, Full::new(body));
                            let response = handle(&shared, request).await;
                            seen.end();
                            return response.ok_or(Unanswered::Injected);
                        }
                        let response = handle(&shared, request).await;
                        seen.end();
                        response.ok_or(Unanswered::Injected)
                    }
                });
                let connection = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let watch = Watch {
                    activity,
                    fd,
                    shared: Arc::clone(&shared),
                    strict: strict.is_some(),
                };
                connections.spawn(serve(connection, watch, idle_close));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

impl Shared {
    /// Records a request that arrived past its connection's keep-alive.
    fn crossed(&self, arrival: &Arrival, head: String, dropped: bool) {
        lock(&self.crossings).push(Crossing {
            idle_since: arrival.idle_since,
            arrived: arrival.at,
            seen: SystemTime::now(),
            dropped,
            head,
        });
    }
}

/// Why a request gets no answer: the connection is dropped without one.
#[derive(Debug)]
enum Unanswered {
    /// It arrived on a connection past its idle time: the server had closed
    /// it (as Telegram's servers close idle keep-alive connections).
    ClosedWhileIdle,
    /// An injected [`Fault::NoAnswer`].
    Injected,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClosedWhileIdle => "request on a connection closed for idleness",
            Self::Injected => "no answer (injected)",
        })
    }
}

impl std::error::Error for Unanswered {}

/// A connection's requests in flight, when its last answer left and when
/// the next request's bytes reached the socket, in wall-clock time (the
/// kernel's receive stamps are).
struct Activity {
    /// A connection with a request in flight is never idle.
    inflight: AtomicU64,
    state: Mutex<Idle>,
}

struct Idle {
    /// When the last answer left (at first: when the connection opened).
    since: SystemTime,
    /// Whether an answer left yet.
    answered: bool,
    /// When the first bytes read since then reached the socket (a request
    /// on its way in, not begun yet).
    arrived: Option<SystemTime>,
}

/// When a request came, against when its connection went idle.
struct Arrival {
    idle_since: SystemTime,
    /// When its bytes reached the socket (unknown for the first request of
    /// a connection whose bytes hyper read before any stamp).
    at: Option<SystemTime>,
    /// The connection had answered a request before.
    reused: bool,
}

impl Arrival {
    /// Whether it reached the socket once the connection had been idle for
    /// `idle`.
    fn past(&self, idle: Duration) -> bool {
        self.at
            .is_some_and(|at| at.duration_since(self.idle_since).unwrap_or_default() >= idle)
    }
}

impl Activity {
    fn new() -> Self {
        Self {
            inflight: AtomicU64::new(0),
            state: Mutex::new(Idle {
                since: SystemTime::now(),
                answered: false,
                arrived: None,
            }),
        }
    }

    /// Bytes that reached the socket at `at` were read.
    fn received(&self, at: SystemTime) {
        let mut state = lock(&self.state);
        if self.inflight.load(Ordering::SeqCst) == 0 && state.arrived.is_none() {
            state.arrived = Some(at);
        }
    }

    /// A request begins: when it came, against the idle time before it.
    fn begin(&self) -> Arrival {
        let mut state = lock(&self.state);
        self.inflight.fetch_add(1, Ordering::SeqCst);
        Arrival {
            idle_since: state.since,
            at: state.arrived.take(),
            reused: state.answered,
        }
    }

    fn end(&self) {
        let mut state = lock(&self.state);
        state.since = SystemTime::now();
        state.answered = true;
        drop(state);
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }

    /// How long the connection has been idle, with nothing in flight nor
    /// read: `None` when it is not idle.
    fn idle(&self) -> Option<(SystemTime, Duration)> {
        let state = lock(&self.state);
        if self.inflight.load(Ordering::SeqCst) > 0 || state.arrived.is_some() {
            return None;
        }
        let idle_for = SystemTime::now()
            .duration_since(state.since)
            .unwrap_or_default();
        Some((state.since, idle_for))
    }
}

/// What the idle check of a connection looks at.
struct Watch {
    activity: Arc<Activity>,
    /// The connection's socket, peeked at (never read) from beside hyper.
    fd: std::os::fd::RawFd,
    shared: Arc<Shared>,
    strict: bool,
}

/// Serves one connection, closing it gracefully once idle for `idle_close`
/// (checked every `idle_close`). Bytes waiting unread at the check are a
/// request on its way in: answered when they reached the socket in time
/// (or when not `strict`), else dropped with the connection, as a punctual
/// server that had closed it would.
async fn serve<C>(connection: C, watch: Watch, idle_close: Option<Duration>)
where
    C: std::future::Future + GracefulShutdown,
{
    let mut connection = std::pin::pin!(connection);
    let mut outage = watch.shared.outage.subscribe();
    // Without an idle close the check never fires.
    let idle = idle_close.unwrap_or(Duration::MAX);
    loop {
        tokio::select! {
            // The connection first: a request already waiting is read
            // before the idle check looks.
            biased;
            _ = connection.as_mut() => return,
            _ = async { outage.wait_for(OutageState::refused).await.is_ok() } => {
                // Dropped with a reset, as a dead peer's connection is.
                reset(watch.fd);
                return;
            }
            () = tokio::time::sleep(idle), if idle_close.is_some() => {
                let Some((since, idle_for)) = watch.activity.idle() else { continue };
                if idle_for < idle {
                    continue;
                }
                if let Some((head, at)) = waiting(watch.fd) {
                    let arrival = Arrival {
                        idle_since: since,
                        at,
                        reused: true,
                    };
                    let past = arrival.past(idle);
                    if past {
                        watch.shared.crossed(&arrival, head, watch.strict);
                    }
                    if !(past && watch.strict) {
                        // Answered: hyper reads it at the next poll.
                        continue;
                    }
                }
                connection.as_mut().shutdown();
                let _ = connection.await;
                return;
            }
        }
    }
}

/// Makes the close of `fd` a reset (`SO_LINGER` 0).
fn reset(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid descriptor (the connection's, open while it is
    // served) and an option value of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// A TCP stream whose reads note when the kernel received their bytes
/// (`SO_TIMESTAMPNS`), for the idle rules.
struct Stamped {
    inner: tokio::net::TcpStream,
    activity: Arc<Activity>,
}

impl Stamped {
    fn new(inner: tokio::net::TcpStream, activity: Arc<Activity>) -> Self {
        let on: libc::c_int = 1;
        // SAFETY: a valid descriptor and an option value of the right size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&inner),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Self { inner, activity }
    }

    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.inner)
    }
}

impl tokio::io::AsyncRead for Stamped {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let fd = this.fd();
        loop {
            std::task::ready!(this.inner.poll_read_ready(cx))?;
            // SAFETY: recvmsg only writes into the buffer; the bytes it
            // wrote are marked filled below, no others.
            let unfilled = unsafe { buf.unfilled_mut() };
            let (ptr, len) = (unfilled.as_mut_ptr().cast::<u8>(), unfilled.len());
            let read = this.inner.try_io(tokio::io::Interest::READABLE, || {
                recv_stamped(fd, ptr, len, 0)
            });
            match read {
                Ok((n, at)) => {
                    if n > 0 {
                        this.activity.received(at.unwrap_or_else(SystemTime::now));
                    }
                    // SAFETY: recvmsg wrote these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return std::task::Poll::Ready(Err(e)),
            }
        }
    }
}

impl tokio::io::AsyncWrite for Stamped {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// `recvmsg` into `buf` with `flags`: how many bytes, and when the kernel
/// received them (its `SO_TIMESTAMPNS` stamp, when it gave one).
/// (Into `len` bytes at `buf`, not zeroed first: a fake that cleared
/// hyper's whole read buffer before every read spent 5 % of the scale
/// benchmark's instructions doing so.)
fn recv_stamped(
    fd: std::os::fd::RawFd,
    buf: *mut u8,
    len: usize,
    flags: libc::c_int,
) -> std::io::Result<(usize, Option<SystemTime>)> {
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: a zeroed msghdr is valid; its pointers point to live buffers
    // of the lengths given (the control buffer aligned for cmsghdr); the
    // descriptor is the connection's, open while it is served.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(fd, &raw mut msg, flags | libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut at = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                at = Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
        Ok((n as usize, at))
    }
}

/// The bytes waiting unread on `fd` (a request hyper has not read yet) and
/// when they reached the socket; `None` when nothing waits.
fn waiting(fd: std::os::fd::RawFd) -> Option<(String, Option<SystemTime>)> {
    let mut buf = [0u8; 2048];
    let (n, at) = recv_stamped(fd, buf.as_mut_ptr(), buf.len(), libc::MSG_PEEK).ok()?;
    (n > 0).then(|| (String::from_utf8_lossy(&buf[..n]).into_owned(), at))
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

/// The answer to `request`; `None`: none (the connection is dropped).
async fn handle<B: hyper::body::Body>(
    shared: &Shared,
    request: Request<B>,
) -> Option<Response<Full<Bytes>>> {
    let at = Instant::now();
    let headers = request.headers();
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let form = content_type
        .unwrap_or_default()
        .contains("x-www-form-urlencoded");
    let boundary = content_type
        .filter(|t| t.starts_with("multipart/form-data"))
        .and_then(|t| t.split("boundary=").nth(1))
        .map(|b| b.trim_matches('"').to_string());
    // `/file/bot<TOKEN>/<file_path>`: a download.
    if let Some(file_path) = request
        .uri()
        .path()
        .trim_start_matches('/')
        .strip_prefix("file/bot")
        .and_then(|rest| rest.split_once('/'))
        // teloxide sends the path as one segment (`photos%2Ffile_1.jpg`).
        .map(|(_, file_path)| url_decode(file_path.as_bytes()))
    {
        let outage = shared.outage.borrow().outage;
        match outage {
            Some(Outage::Storm502) => return Some(proxy_page(502)),
            Some(Outage::HalfOpen { .. }) => return held(shared).await,
            Some(Outage::Slow(delay)) => tokio::time::sleep(delay).await,
            _ => {}
        }
        let (status, body) = match shared.download(&file_path) {
            Some(bytes) => (StatusCode::OK, bytes),
            None => (StatusCode::NOT_FOUND, b"Not Found".to_vec()),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        return Some(response);
    }
    // `/bot<TOKEN>/<Method>`; any other path is recorded as `?<path>` and gets a 404.
    let path = request.uri().path();
    let method = match path.trim_start_matches('/').split_once('/') {
        Some((bot, method)) if bot.starts_with("bot") && !method.contains('/') => {
            method.to_ascii_lowercase()
        }
        _ => format!("?{path}"),
    };
    let (params, file) = match (request.into_body().collect().await, boundary) {
        (Ok(body), Some(boundary)) => files::parse_multipart(&body.to_bytes(), &boundary),
        (Ok(body), None) => (parse_params(&body.to_bytes(), form), None),
        (Err(_), _) => (Value::Null, None),
    };
    let _answering = (method != "getupdates").then(|| InFlight::enter(shared));
    let outage = shared.outage.borrow().outage;
    let (forced, slow) = outage_fault(outage);
    let (answer, delay) = shared.dispatch(method, params, at, file, forced);
    if !(delay + slow).is_zero() {
        tokio::time::sleep(delay + slow).await;
    }
    let (status, body, kind) = match answer {
        Answer::Json(status, body) => (status, body, "application/json"),
        Answer::Poll(offset, limit, timeout) => (
            200,
            shared.poll(offset, limit, timeout).await,
            "application/json",
        ),
        Answer::Html(status, body) => (status, body, "text/html"),
        Answer::Hangup if outage.is_some() => return held(shared).await,
        Answer::Hangup => return None,
    };
    let half_open = shared.outage.borrow().half_open();
    if half_open {
        // Carried out (or begun before the outage), never answered.
        return held(shared).await;
    }
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or_default();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    Some(response)
}

/// The fault an outage forces on every call (instead of a queued one), and
/// the delay it adds to every answer.
fn outage_fault(outage: Option<Outage>) -> (Option<Fault>, Duration) {
    match outage {
        Some(Outage::Storm502) => (Some(Fault::NotJson(502)), Duration::ZERO),
        Some(Outage::HalfOpen { carried: false }) => (Some(Fault::NoAnswer), Duration::ZERO),
        Some(Outage::Slow(delay)) => (None, delay),
        _ => (None, Duration::ZERO),
    }
}

/// Holds a request until the half-open outage ends: then no answer, its
/// connection is closed.
async fn held(shared: &Shared) -> Option<Response<Full<Bytes>>> {
    let mut outage = shared.outage.subscribe();
    let _ = outage.wait_for(|state| !state.half_open()).await;
    None
}

/// A proxy's HTML error page with this status.
fn proxy_page(status: u16) -> Response<Full<Bytes>> {
    let Answer::Html(status, body) = fault_answer(Fault::NotJson(status)) else {
        unreachable!("NotJson answers HTML")
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or_default();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/html"));
    response
}

/// A request being answered, counted in [`Counts::peak_in_flight`].
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
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
        Fault::Conflict(description) => error(409, &description, None),
        Fault::NoAnswer => Answer::Hangup,
        Fault::NotJson(status) => Answer::Html(
            status,
            format!("<html><body><h1>{status}</h1>The proxy could not answer.</body></html>"),
        ),
        Fault::Delay(_) | Fault::DoneNoAnswer => unreachable!("dispatch applies these"),
    }
}

pub(super) fn ok(result: Value) -> Answer {
    Answer::Json(200, json!({"ok": true, "result": result}).to_string())
}

pub(super) fn error(code: u16, description: &str, parameters: Option<Value>) -> Answer {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    Answer::Json(code, body.to_string())
}

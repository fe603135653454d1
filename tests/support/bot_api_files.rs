//! Files and chats beyond private text for the fake Bot API (a child module
//! of `bot_api.rs`): `getFile` and file downloads from files the test
//! registers, multipart `sendDocument` / `sendPhoto` recorded as
//! [`Upload`]s, and builders for group, forum-topic and media messages.

use serde_json::Map;

use super::server::{Answer, error, ok};
use super::*;

/// A file the bot uploaded (`sendDocument` or `sendPhoto`).
#[derive(Clone, Debug)]
pub struct Upload {
    /// `senddocument` or `sendphoto`.
    pub method: String,
    /// Where it went.
    pub chat_id: i64,
    /// Its topic (`message_thread_id`), if any.
    pub thread: Option<i64>,
    /// Its caption, if any.
    pub caption: Option<String>,
    /// The file name the multipart part carried.
    pub file_name: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Files the test registered, and uploads received.
#[derive(Default)]
pub(super) struct FileStore {
    /// `file_id` → (`file_path`, bytes, the size `getFile` announces).
    by_id: HashMap<String, (String, Vec<u8>, u64)>,
    /// Uploads in order of arrival.
    uploads: Vec<Upload>,
    /// The bytes of every file part received, answered or failed (an
    /// injected fault) alike, in order of arrival.
    received: Vec<Vec<u8>>,
}

impl FakeBotApi {
    /// Registers a file: `getFile(file_id)` answers `path`, and a download of
    /// `path` answers `bytes`.
    pub fn add_file(&self, file_id: &str, path: &str, bytes: &[u8]) {
        self.add_file_announcing(file_id, path, bytes, bytes.len() as u64);
    }

    /// Like [`FakeBotApi::add_file`], with the size `getFile` announces
    /// (which a lying server may set lower than the bytes).
    pub fn add_file_announcing(&self, file_id: &str, path: &str, bytes: &[u8], size: u64) {
        lock(&self.shared.files)
            .by_id
            .insert(file_id.into(), (path.into(), bytes.to_vec(), size));
    }

    /// The uploads so far.
    pub fn uploads(&self) -> Vec<Upload> {
        lock(&self.shared.files).uploads.clone()
    }

    /// The bytes of every file part received so far, including those of
    /// requests answered with an injected fault.
    pub fn received_files(&self) -> Vec<Vec<u8>> {
        lock(&self.shared.files).received.clone()
    }

    /// Waits until `n` uploads arrived; returns them all.
    pub async fn wait_for_uploads(&self, n: usize, timeout: Duration) -> Vec<Upload> {
        let what = format!("{n} upload(s)");
        self.wait_for(timeout, &what, |_| {
            Some(self.uploads()).filter(|u| u.len() >= n)
        })
        .await
    }

    /// Pushes a message (`message_id` and `date` filled when missing);
    /// returns its update id.
    pub fn push_message(&self, message: Value) -> i64 {
        self.push_message_as(None, message)
    }

    /// Pushes messages at once, as one `getUpdates` answer sees them (the
    /// bot reads them as one delivery); returns their update ids.
    pub fn push_messages(&self, messages: impl IntoIterator<Item = Value>) -> Vec<i64> {
        let ids = {
            let mut queue = lock(&self.shared.queue);
            messages
                .into_iter()
                .map(|mut message| {
                    if message.get("message_id").is_none() {
                        message["message_id"] = queue.next_message_id(chat_of(&message)).into();
                    }
                    if message.get("date").is_none() {
                        message["date"] = unix_now().into();
                    }
                    self.shared.saw_topic(&message);
                    queue.push(json!({"message": message}))
                })
                .collect()
        };
        self.shared.pushed.notify_waiters();
        ids
    }

    /// Like [`FakeBotApi::push_message`], with this update id when given
    /// (a second fake after a restart must go past the stored offset).
    pub fn push_message_as(&self, update_id: Option<i64>, mut message: Value) -> i64 {
        let id = {
            let mut queue = lock(&self.shared.queue);
            if message.get("message_id").is_none() {
                message["message_id"] = queue.next_message_id(chat_of(&message)).into();
            }
            if message.get("date").is_none() {
                message["date"] = unix_now().into();
            }
            self.shared.saw_topic(&message);
            let mut update = json!({"message": message});
            if let Some(id) = update_id {
                update["update_id"] = id.into();
            }
            queue.push(update)
        };
        self.shared.pushed.notify_waiters();
        id
    }

    /// Sets a webhook on the token, as `getWebhookInfo` then reports it
    /// (`deleteWebhook` removes it).
    pub fn set_webhook(&self, url: &str) {
        *lock(&self.shared.webhook) = url.to_string();
    }

    /// The newest message with buttons the bot sent to `chat`, by id.
    pub fn last_question(&self, chat: i64) -> Option<i32> {
        lock(&self.shared.sent)
            .iter()
            .filter(|((c, _), m)| *c == chat && m.get("reply_markup").is_some())
            .map(|((_, id), _)| *id)
            .max()
            .and_then(|id| i32::try_from(id).ok())
    }

    /// The newest message with buttons the bot sent to `chat` in topic
    /// `thread` (`None`: outside any topic), by id.
    pub fn last_question_in(&self, chat: i64, thread: Option<i64>) -> Option<i32> {
        lock(&self.shared.sent)
            .iter()
            .filter(|((c, _), m)| *c == chat && m.get("reply_markup").is_some())
            .filter(|(_, m)| m.get("message_thread_id").and_then(as_i64) == thread)
            .map(|((_, id), _)| *id)
            .max()
            .and_then(|id| i32::try_from(id).ok())
    }

    /// The next message id the fake hands out in `chat` (shared with sent
    /// messages; Telegram numbers each chat's messages on their own).
    pub fn next_message_id(&self, chat: i64) -> i64 {
        lock(&self.shared.queue).next_message_id(chat)
    }
}

/// A user as Telegram describes one.
/// The chat a pushed message is in (0 when it names none).
fn chat_of(message: &Value) -> i64 {
    message["chat"]["id"].as_i64().unwrap_or_default()
}

pub fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": format!("u{id}")})
}

/// A private chat with user `id`.
pub fn private(id: i64) -> Value {
    private_chat(id)
}

/// A supergroup (a forum when `forum`).
pub fn supergroup(id: i64, forum: bool) -> Value {
    json!({"id": id, "type": "supergroup", "title": "group", "is_forum": forum})
}

/// A text message from `from` in `chat`, with a `mention` entity for each
/// `@word` and a `bot_command` entity for a leading command.
pub fn text_message(chat: Value, from: i64, text: &str) -> Value {
    let mut entities = Vec::new();
    let mut offset = 0;
    for word in text.split(' ') {
        let len = word.encode_utf16().count();
        if word.starts_with('@') && len > 1 {
            entities.push(json!({"type": "mention", "offset": offset, "length": len}));
        }
        if offset == 0 && word.starts_with('/') {
            entities.push(json!({"type": "bot_command", "offset": 0, "length": len}));
        }
        offset += len + 1;
    }
    let mut message = json!({"chat": chat, "from": user(from), "text": text});
    if !entities.is_empty() {
        message["entities"] = entities.into();
    }
    message
}

/// The same message, in forum topic `thread`.
pub fn in_topic(mut message: Value, thread: i64) -> Value {
    message["message_thread_id"] = thread.into();
    message["is_topic_message"] = true.into();
    message
}

/// The same message, a reply to `replied` (a message as the fake sent it).
pub fn replying_to(mut message: Value, replied: Value) -> Value {
    message["reply_to_message"] = replied;
    message
}

/// A document message (`caption` optional).
pub fn document(chat: Value, from: i64, file_id: &str, name: &str, size: u64) -> Value {
    json!({
        "chat": chat, "from": user(from),
        "document": {"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                     "file_name": name, "file_size": size},
    })
}

/// A photo message: two sizes, the larger `file_id`.
pub fn photo(chat: Value, from: i64, file_id: &str, size: u64) -> Value {
    json!({
        "chat": chat, "from": user(from),
        "photo": [
            {"file_id": "small", "file_unique_id": "u-small", "width": 90, "height": 60, "file_size": 100},
            {"file_id": file_id, "file_unique_id": format!("u-{file_id}"), "width": 1280, "height": 853, "file_size": size},
        ],
    })
}

/// A voice note.
pub fn voice(chat: Value, from: i64, file_id: &str, size: u64) -> Value {
    json!({
        "chat": chat, "from": user(from),
        "voice": {"file_id": file_id, "file_unique_id": format!("u-{file_id}"), "duration": 2,
                  "mime_type": "audio/ogg", "file_size": size},
    })
}

/// The message with a caption.
pub fn captioned(mut message: Value, caption: &str) -> Value {
    message["caption"] = caption.into();
    message
}

/// The message as an item of album `group`.
pub fn in_album(mut message: Value, group: &str) -> Value {
    message["media_group_id"] = group.into();
    message
}

impl Shared {
    /// Keeps the bytes of a file part, whatever the answer.
    pub(super) fn received_file(&self, bytes: &[u8]) {
        lock(&self.files).received.push(bytes.to_vec());
    }

    /// `getFile`.
    pub(super) fn get_file(&self, params: &Value) -> Answer {
        let id = params.get("file_id").and_then(Value::as_str).unwrap_or("");
        match lock(&self.files).by_id.get(id) {
            Some((path, _, size)) => ok(json!({
                "file_id": id, "file_unique_id": format!("u-{id}"),
                "file_size": size, "file_path": path,
            })),
            None => error(400, "Bad Request: invalid file_id", None),
        }
    }

    /// The bytes of a registered file, by its `file_path`.
    pub(super) fn download(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.files)
            .by_id
            .values()
            .find(|(p, _, _)| p == path)
            .map(|(_, bytes, _)| bytes.clone())
    }

    /// Records a multipart upload; answers the message Telegram would.
    pub(super) fn upload(&self, method: &str, params: &Value, file: Option<Part>) -> Answer {
        let int = |name: &str| params.get(name).and_then(as_i64);
        let Some(chat_id) = int("chat_id") else {
            return error(400, "Bad Request: chat not found", None);
        };
        let Some(file) = file else {
            return error(400, "Bad Request: there is no file in the request", None);
        };
        if file.bytes.is_empty() {
            return error(400, "Bad Request: file must be non-empty", None);
        }
        let size = file.bytes.len();
        lock(&self.files).uploads.push(Upload {
            method: method.to_string(),
            chat_id,
            thread: int("message_thread_id"),
            caption: params
                .get("caption")
                .and_then(Value::as_str)
                .map(str::to_string),
            file_name: file.file_name.clone(),
            bytes: file.bytes,
        });
        self.recorded.notify_waiters();
        let message_id = lock(&self.queue).next_message_id(chat_id);
        let mut message = json!({
            "message_id": message_id, "date": unix_now(), "chat": private_chat(chat_id),
            "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
        });
        let meta = json!({"file_id": format!("up-{message_id}"), "file_unique_id": format!("uu-{message_id}"), "file_size": size});
        if method == "sendphoto" {
            let mut photo = meta;
            photo["width"] = 1.into();
            photo["height"] = 1.into();
            message["photo"] = json!([photo]);
        } else {
            let mut document = meta;
            document["file_name"] = file.file_name.into();
            message["document"] = document;
        }
        ok(message)
    }
}

/// A file part of a multipart body.
pub(super) struct Part {
    pub(super) file_name: String,
    pub(super) bytes: Vec<u8>,
}

/// Parses a `multipart/form-data` body: the text fields as an object of
/// strings, and the first file part.
pub(super) fn parse_multipart(body: &[u8], boundary: &str) -> (Value, Option<Part>) {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut fields = Map::new();
    let mut file = None;
    for chunk in split_bytes(body, &delimiter).into_iter().skip(1) {
        if chunk.starts_with(b"--") {
            break;
        }
        let chunk = chunk.strip_prefix(b"\r\n").unwrap_or(chunk);
        let Some(split) = find(chunk, b"\r\n\r\n") else {
            continue;
        };
        let headers = String::from_utf8_lossy(&chunk[..split]).to_string();
        let mut content = &chunk[split + 4..];
        content = content.strip_suffix(b"\r\n").unwrap_or(content);
        let disposition = headers
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .unwrap_or_default();
        let attr = |key: &str| {
            let marker = format!("{key}=\"");
            let start = disposition.find(&marker)? + marker.len();
            let end = disposition[start..].find('"')? + start;
            Some(disposition[start..end].to_string())
        };
        let Some(name) = attr("name") else {
            continue;
        };
        match attr("filename") {
            Some(file_name) if file.is_none() => {
                file = Some(Part {
                    file_name,
                    bytes: content.to_vec(),
                });
                fields.insert(name, Value::String("<file>".into()));
            }
            _ => {
                fields.insert(
                    name,
                    Value::String(String::from_utf8_lossy(content).into_owned()),
                );
            }
        }
    }
    (Value::Object(fields), file)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn split_bytes<'a>(mut body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(at) = find(body, delimiter) {
        out.push(&body[..at]);
        body = &body[at + delimiter.len()..];
    }
    out.push(body);
    out
}

//! The fuzz harnesses: one function per boundary where outside data comes
//! in, each running its input through the code the bot runs on that data and
//! asserting the boundary's invariants; a panic is a finding. The cargo-fuzz
//! targets in `fuzz/` (nightly) call them, and `tests/fuzz_corpus.rs`
//! replays every committed corpus and crash input through them on stable.
//! Not part of turnstile's API.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Value, json};
use teloxide::types::{CallbackQuery, ChatId, Message, Update, UpdateKind, UserId};

use crate::agent::claude::driver::live::Live;
use crate::agent::claude::permissions::answer_unasked;
use crate::agent::claude::protocol::{
    self, CliLine, ControlRequest, HookCallback, HookInput, Line, McpMessage, McpRequest,
    SHOWN_CHARS, SystemLine,
};
use crate::agent::claude::{MAX_LINE_BYTES, is_session_id};
use crate::agent::partial_json::StringField;
use crate::agent::tools::{TOOL_SERVER, ToolName, ToolRegistry, terminator};
use crate::agent::{Activity, AgentResult, HookReply, ToolReply};
use crate::chat::turn::ButtonPressed;
use crate::chat::turn::approval::{self, Choice};
use crate::chat::turn::live;
use crate::config::{AccessConfig, Config, GroupMode};
use crate::incoming::{Ask, MAX_INPUT_CHARS};
use crate::telegram::addressing::{Addressing, BotIdentity};
use crate::telegram::files::{attachments, safe_component};
use crate::telegram::format::{Rendered, TELEGRAM_TEXT_LIMIT, render, split, validate};
use crate::telegram::intake::read;

/// A harness: runs one input, panics on a finding.
pub type Harness = fn(&[u8]);

/// Every target: its name (the cargo-fuzz target and the corpus directory
/// `fuzz/corpus/<name>`) and its harness.
pub const TARGETS: [(&str, Harness); 7] = [
    ("telegram_update", telegram_update),
    ("callback_data", callback_data),
    ("stream_json", stream_json),
    ("mcp_server", mcp_server),
    ("partial_json", partial_json),
    ("format", format),
    ("config", config),
];

/// The bot the updates are for.
const BOT_ID: u64 = 4242;
/// Its username.
const BOT_USERNAME: &str = "TurnBot";
/// The token the config harness sets, which nothing shown may contain.
const TOKEN: &str = "123456:SECRET-fuzz-token-value";

// Telegram.

/// A `getUpdates` answer's body, as the intake reads it (lossily decoded,
/// then parsed by the same code), then each update through what the intake
/// and the dispatcher read of it: addressing (both group modes), the row's
/// fields and attachments, the file names made safe, the address stripped,
/// the command parsed; a button press's chat, topic and callback data.
pub fn telegram_update(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let Ok(updates) = crate::telegram::call::parse::<Vec<Update>>(&raw, 200) else {
        return;
    };
    let me = BotIdentity {
        id: UserId(BOT_ID),
        username: BOT_USERNAME.to_owned(),
    };
    let mut mention = Addressing::new(me.clone(), GroupMode::Mention);
    let mut all = Addressing::new(me, GroupMode::All);
    for update in &updates {
        match &update.kind {
            UpdateKind::Message(message) => {
                let _ = mention.check(message);
                let _ = all.check(message);
                taken_message(message);
            }
            UpdateKind::CallbackQuery(query) => button(query),
            UpdateKind::Error(raw) => {
                let _shown: String = raw.to_string().chars().take(200).collect();
            }
            _ => {}
        }
    }
}

/// What the intake reads of a message taken: the one [`Incoming`] the
/// inbox stores and the dispatcher acts on, for a sender let in and for a
/// stranger (whose text and files are never kept).
fn taken_message(message: &Message) {
    for name in attachments(message)
        .iter()
        .filter_map(|f| f.name.as_deref())
    {
        check_safe_component(name);
    }
    let mut admitted = AccessConfig::default();
    admitted.allowed_chats.push(message.chat.id.0);
    if let Some(stranger) = read(1, message, BOT_USERNAME, &AccessConfig::default()) {
        assert!(
            stranger.text.is_empty() && stranger.files.is_empty() && stranger.ask == Ask::Agent,
            "a stranger's message kept {stranger:?}"
        );
    }
    let Some(m) = read(1, message, BOT_USERNAME, &admitted) else {
        return;
    };
    assert!(m.text.chars().count() <= MAX_INPUT_CHARS);
    match &m.ask {
        Ask::Unknown(word) => assert!(
            !word.is_empty()
                && word.len() <= 32
                && word
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'_'),
            "command word {word:?} of {m:?}"
        ),
        Ask::Command(_) => assert_eq!(m.text, m.text.trim(), "arguments of {m:?}"),
        Ask::Agent => {}
    }
    assert_eq!(Ask::from_stored(m.ask.stored()), m.ask);
}

/// A name made safe for `inbox/` is one plain path component.
fn check_safe_component(name: &str) {
    let Some(safe) = safe_component(name) else {
        return;
    };
    assert!(
        !safe.is_empty()
            && safe.chars().count() <= 64
            && !safe.starts_with('.')
            && safe
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
        "{name:?} made safe as {safe:?}"
    );
}

/// A button press as the dispatcher reads it.
fn button(query: &CallbackQuery) {
    let user = query.from.id;
    let chat = crate::chat::dispatcher::press_conversation(query).chat;
    let name = query
        .from
        .username
        .clone()
        .map_or_else(|| query.from.first_name.clone(), |u| format!("@{u}"));
    if let Some(data) = query.data.as_deref() {
        press(data, chat, user, name);
    }
}

/// Callback data of a button press, alone.
pub fn callback_data(data: &[u8]) {
    // Telegram's callback data is a string.
    let Ok(data) = std::str::from_utf8(data) else {
        return;
    };
    press(data, ChatId(-100_123), UserId(7), "@someone".to_owned());
}

/// Parses callback data; what parses is in one of the shapes the approval
/// questions use (`ap:<token>:<y|a|n>`, `aq:<token>:<question>:<option>`),
/// and written back it parses the same.
fn press(data: &str, chat: ChatId, user: UserId, name: String) {
    let parse =
        |data: &str| ButtonPressed::parse(data, chat, user, name.clone(), false, "cb".into());
    let Some(pressed) = parse(data) else {
        return;
    };
    assert!(
        pressed.token.len() == 32 && pressed.token.bytes().all(|b| b.is_ascii_hexdigit()),
        "token {:?} of {data:?}",
        pressed.token
    );
    let token = &pressed.token;
    let written = match pressed.choice {
        Choice::Allow => format!("ap:{token}:y"),
        Choice::Always => format!("ap:{token}:a"),
        Choice::Deny => format!("ap:{token}:n"),
        Choice::Option { question, option } => format!("aq:{token}:{question}:{option}"),
    };
    assert!(
        data.split(':').count() == written.split(':').count() && data.get(..3) == written.get(..3),
        "{data:?} parsed as {written:?}"
    );
    let again = parse(&written)
        .unwrap_or_else(|| panic!("{data:?} written back as {written:?} does not parse"));
    assert_eq!(
        (again.choice, &again.token),
        (pressed.choice, &pressed.token),
        "{data:?} written back as {written:?}"
    );
}

// The agent.

/// The host's tools, with the usual terminator.
fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_owned()])
}

/// The CLI's stdout, line by line, through what the driver does with each
/// line: parsed, its live activity (stream events, tool calls and their
/// status lines) followed across lines, its text and result read, each
/// control request answered (`can_use_tool` from config and as the approval
/// question shows it, hooks, `mcp_message`, unknown ones), and the chat
/// tool calls parsed.
pub fn stream_json(data: &[u8]) {
    let tools = registry();
    let allowed = ["Read".to_owned(), "WebSearch".to_owned()];
    let mut live = Live::default();
    for line in data.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = if line.len() > MAX_LINE_BYTES {
            Line::Oversized(line.len())
        } else {
            Line::parse(line)
        };
        let line = match line {
            Line::Cli(line) => line,
            Line::Unknown(shown) | Line::Malformed(shown) => {
                assert!(shown.chars().count() <= SHOWN_CHARS, "{shown:?}");
                continue;
            }
            Line::Oversized(_) => continue,
        };
        match line {
            CliLine::System(SystemLine::Init { session_id }) => {
                let _ = is_session_id(&session_id);
            }
            CliLine::Assistant { message } => {
                for activity in live.on_assistant(&message) {
                    check_activity(&activity);
                }
                let _ = message.text();
                for (_, name, input) in message.tool_uses() {
                    let _ = tools.call(&ToolName::parse(name), input);
                }
            }
            CliLine::StreamEvent {
                event,
                parent_tool_use_id: None,
            } => {
                if let Some(activity) = live.on_stream(event) {
                    check_activity(&activity);
                }
            }
            CliLine::Result(result) => {
                live.turn_ended();
                let _ = AgentResult::from(result);
            }
            CliLine::ControlRequest {
                request_id: Some(id),
                request,
            } => {
                let answer = control_request(request, &tools, &allowed);
                let line = protocol::control_success(&id, answer);
                assert!(serde_json::to_string(&line).is_ok());
            }
            _ => {}
        }
    }
}

/// A streamed piece is never empty; a tool call gets its status line.
fn check_activity(activity: &Activity) {
    match activity {
        Activity::Writing { appended, .. } => {
            assert!(!appended.is_empty(), "an empty piece: {activity:?}");
        }
        Activity::ToolStarted { name, input, .. } => {
            let _ = live::summary(name, input, "/var/lib/turnstile/work/5");
        }
    }
}

/// What an approval question shows of a tool call leaves nothing out and
/// hides nothing: every top-level string of the input (a Bash command with
/// its blank runs collapsed) is in it, each character that shows in order,
/// and no character that would not show is left in it (such characters
/// are written out, as `⟦U+202E⟧`).
fn check_question(tool: &ToolName, input: &Value) {
    let shown = approval::summary(tool, input);
    if let Some(c) = shown.chars().find(|&c| invisible(c)) {
        panic!("U+{:04X} left in the question: {shown:?}", u32::from(c));
    }
    let Some(fields) = input.as_object() else {
        return;
    };
    // A character the question writes out (`⟦U+206E⟧`) is not itself in it.
    let showing = |text: &str| -> Vec<char> {
        text.chars()
            .filter(|&c| {
                !c.is_whitespace()
                    && !invisible(c)
                    && !shown.contains(&format!("⟦U+{:04X}", u32::from(c)))
            })
            .collect()
    };
    for (name, value) in fields {
        if let Value::String(text) = value {
            assert!(
                is_subsequence(&showing(text), &showing(&shown)),
                "{tool}'s `{name}` is not whole in the question: {shown:?}"
            );
        }
    }
}

/// A character that would not show in a message, or would change how what
/// follows shows: controls but line breaks and tabs, zero-width and
/// direction marks, embeddings, overrides and isolates, the BOM.
fn invisible(c: char) -> bool {
    (c.is_control() && !matches!(c, '\n' | '\t'))
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// The answer to a control request, as the driver makes it.
fn control_request(request: ControlRequest, tools: &ToolRegistry, allowed: &[String]) -> Value {
    match request {
        ControlRequest::CanUseTool(ask) => {
            check_question(&ToolName::parse(ask.tool_name.as_str()), &ask.input);
            answer_unasked(&ask, tools, allowed)
        }
        ControlRequest::HookCallback(HookCallback {
            input: HookInput::PostToolBatch(batch),
            ..
        }) => {
            let _ = terminator(&batch.calls(tools));
            protocol::hook_output(&HookReply::Continue).unwrap_or_default()
        }
        ControlRequest::HookCallback(_) => json!({}),
        ControlRequest::McpMessage(McpMessage {
            server_name,
            message,
        }) => {
            if server_name == TOOL_SERVER {
                mcp_answer(message.serve(tools), tools)
            } else {
                json!({})
            }
        }
        ControlRequest::Unknown { subtype } => {
            let _shown: String = subtype.chars().take(SHOWN_CHARS).collect();
            json!({})
        }
    }
}

/// A JSON-RPC message for `telegram-tools`, served as the driver serves
/// the `mcp_message` that carries it; reading it inside a whole
/// `control_request` line gives the same request.
pub fn mcp_server(data: &[u8]) {
    let Ok(message) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tools = registry();
    let served = protocol::mcp(&message, &tools);
    let line = json!({
        "type": "control_request",
        "request_id": "req_1",
        "request": {"subtype": "mcp_message", "server_name": TOOL_SERVER, "message": message},
    });
    match Line::from_value(&line) {
        Line::Cli(CliLine::ControlRequest {
            request: ControlRequest::McpMessage(carried),
            ..
        }) => assert_eq!(carried.message.serve(&tools), served, "{message}"),
        other => panic!("an mcp_message line read as {other:?}"),
    }
    let answer = mcp_answer(served, &tools);
    assert!(serde_json::to_string(&protocol::mcp_response("req_1", answer)).is_ok());
}

/// The JSON-RPC answer to a served MCP request (a tool call parsed and
/// answered each way it can be).
fn mcp_answer(served: McpRequest, tools: &ToolRegistry) -> Value {
    match served {
        McpRequest::Answer(answer) => {
            assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
            answer
        }
        McpRequest::Call { rpc_id, call, .. } => {
            assert!(
                tools.get(&call.name).is_some(),
                "a call of {:?} served",
                call.name
            );
            for reply in [
                ToolReply::Error("e".into()),
                ToolReply::Refused("r".into()),
                ToolReply::Failed("f".into()),
            ] {
                let _ = protocol::tool_reply(&rpc_id, &reply);
            }
            protocol::tool_reply(&rpc_id, &ToolReply::Ok("sent".into()))
        }
    }
}

/// A tool call's input JSON, as `input_json_delta` pieces: the `text`
/// field extracted from it is the same whatever the pieces (whole, byte
/// by byte, cut at spots drawn from the input), and, when the input is a
/// JSON object, it is the value of its first top-level `text` string.
pub fn partial_json(data: &[u8]) {
    let whole = extract([data].into_iter());
    let bytewise = extract(data.chunks(1));
    assert_eq!(bytewise, whole, "byte by byte");
    let mut draw = Draw::new(data);
    for _ in 0..4 {
        let mut cuts: Vec<usize> = (0..draw.next() % 9)
            .map(|_| draw.next() % (data.len() + 1))
            .collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&data.len()]) {
            pieces.push(&data[from..cut]);
            from = cut;
        }
        assert_eq!(extract(pieces.into_iter()), whole, "cut at {cuts:?}");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let mut field = StringField::new("text");
        let mut got = String::new();
        for (at, c) in text.char_indices() {
            got.push_str(&field.push(&text[at..at + c.len_utf8()]));
        }
        assert_eq!((got, field.is_complete()), whole, "char by char");
    }
    if let Ok(Entries(entries)) = serde_json::from_slice::<Entries>(data) {
        let first = entries.into_iter().find_map(|(key, value)| match value {
            Value::String(text) if key == "text" => Some(text),
            _ => None,
        });
        match first {
            Some(text) => assert_eq!(whole, (text, true), "the first `text` string"),
            None => assert_eq!(whole, (String::new(), false), "no `text` string"),
        }
    }
}

/// The text extracted from `pieces`, and whether it was read to its end.
fn extract<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> (String, bool) {
    let mut field = StringField::new("text");
    let text = pieces.map(|piece| field.push_bytes(piece)).collect();
    (text, field.is_complete())
}

/// A JSON object's entries in order, duplicates kept.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Reads a map's entries.
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Each)
    }
}

/// Numbers drawn from the input (xorshift seeded with its FNV-1a hash): the
/// same input always draws the same.
struct Draw {
    state: u64,
}

impl Draw {
    fn new(data: &[u8]) -> Self {
        let hash = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Self { state: hash | 1 }
    }

    fn next(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        usize::try_from(self.state % (1 << 31)).unwrap_or(0)
    }
}

// Telegram formatting.

/// The agent's Markdown rendered, then split at Telegram's limit and at
/// two small ones: the whole rendering validates when it fits, every piece
/// validates and fits its limit, and no non-whitespace char is lost; the
/// Markdown split as plain text (as the outbox sends a plain text) too.
pub fn format(data: &[u8]) {
    let markdown = String::from_utf8_lossy(data);
    let rendered = render(&markdown);
    if !rendered.text.is_empty()
        && rendered.units() <= TELEGRAM_TEXT_LIMIT
        && let Err(why) = validate(&rendered.text, &rendered.entities)
    {
        panic!("the rendering is refused: {why}");
    }
    let small = 2 + Draw::new(data).next() % 60;
    for limit in [TELEGRAM_TEXT_LIMIT, 64, small] {
        let pieces = split(&rendered, limit);
        check_pieces(&rendered, &pieces, limit);
        let plain = Rendered::plain(markdown.as_ref());
        check_pieces(&plain, &split(&plain, limit), limit);
    }
}

/// Every piece fits `limit` and validates; together they keep every
/// non-whitespace char of `rendered`.
fn check_pieces(rendered: &Rendered, pieces: &[Rendered], limit: usize) {
    for (i, piece) in pieces.iter().enumerate() {
        assert!(
            piece.units() <= limit.max(2),
            "piece {i} has {} units at limit {limit}",
            piece.units()
        );
        if let Err(why) = validate(&piece.text, &piece.entities) {
            panic!("piece {i} at limit {limit} is refused: {why}");
        }
    }
    let joined: String = pieces.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(
        non_whitespace(&joined),
        non_whitespace(&rendered.text),
        "content lost at limit {limit}"
    );
}

fn non_whitespace(text: &str) -> Vec<char> {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Whether `part` appears in `whole` in order (not necessarily together).
fn is_subsequence(part: &[char], whole: &[char]) -> bool {
    let mut rest = whole.iter();
    part.iter().all(|c| rest.any(|w| w == c))
}

// Config.

/// Tells the config harness's files apart.
static CONFIG_FILES: AtomicU64 = AtomicU64::new(0);

/// A config file and an environment: the TOML text up to the first NUL
/// byte, then `NAME=VALUE` lines (only `TURNSTILE_*` and
/// `TELEGRAM_BOT_TOKEN` are kept). Loading gives a config or an error,
/// never a panic; neither the error nor the config `check-config` prints
/// (nor its warnings) shows the token.
pub fn config(data: &[u8]) {
    let (text, vars) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let mut env: BTreeMap<String, String> = String::from_utf8_lossy(vars)
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(name, _)| name.starts_with("TURNSTILE_") || *name == "TELEGRAM_BOT_TOKEN")
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let ours = !env.contains_key("TELEGRAM_BOT_TOKEN");
    if ours {
        env.insert("TELEGRAM_BOT_TOKEN".to_owned(), TOKEN.to_owned());
    }
    let file = ConfigFile::new(text);
    let shown = match Config::load(Some(&file.0), &env) {
        Ok(config) => {
            let mut shown = config.to_redacted_toml();
            for warning in config.warnings() {
                shown.push_str(&warning);
            }
            shown
        }
        Err(err) => err.to_string(),
    };
    assert!(
        !(ours && shown.contains(TOKEN)),
        "the token is shown: {shown}"
    );
}

/// A config file holding the harness's text, removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(text: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!(
            "turnstile-fuzz-{}-{}.toml",
            std::process::id(),
            CONFIG_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(err) = std::fs::write(&path, text) {
            panic!("{}: {err}", path.display());
        }
        Self(path)
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

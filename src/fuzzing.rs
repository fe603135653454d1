//! The fuzz harnesses: one function per boundary where outside data comes
//! in, each running its input through the code the bot runs on that data and
//! asserting the boundary's invariants; a panic is a finding. The cargo-fuzz
//! targets in `fuzz/` (nightly) call them, and `tests/fuzz_corpus.rs`
//! replays every committed corpus and crash input through them on stable.
//! Not part of turnstile's API.

mod agent;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use teloxide::types::{CallbackQuery, Message, Update, UpdateKind, UserId};

use crate::chat::turn::ButtonPressed;
use crate::config::{AccessConfig, Config, GroupMode};
use crate::incoming::{Ask, Callback, CallbackKind, KINDS, MAX_INPUT_CHARS, Press, TOKEN_LEN};
use crate::telegram::addressing::{Addressing, BotIdentity};
use crate::telegram::files::{attachments, safe_component};
use crate::telegram::format::{Rendered, TELEGRAM_TEXT_LIMIT, render, split, validate};
use crate::telegram::intake::read;

pub use self::agent::{mcp_server, partial_json, stream_json};

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
/// the command parsed; a button press read once ([`Press::read`]).
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

/// A button press as the intake reads it, and what the dispatcher makes
/// of an approval.
fn button(query: &CallbackQuery) {
    let press = Press::read(query);
    check_callback(query.data.as_deref().unwrap_or(""), &press.data);
    if let Callback::Approval(approval) = press.data.clone() {
        let pressed = ButtonPressed::new(press, approval, false);
        assert_eq!(pressed.token.len(), TOKEN_LEN);
    }
}

/// Callback data of a button press, alone, through the one table that reads
/// every kind of button.
pub fn callback_data(data: &[u8]) {
    // Telegram's callback data is a string.
    let Ok(data) = std::str::from_utf8(data) else {
        return;
    };
    check_callback(data, &Callback::parse(data));
}

/// `data` read as `read`: what one kind reads is written back as exactly
/// `data`, under the prefix of that kind alone, and reads back the same;
/// what none reads starts with no prefix, or is not in its kind's shape.
fn check_callback(data: &str, read: &Callback) {
    let prefixed: Vec<CallbackKind> = KINDS
        .iter()
        .filter(|(_, prefix)| data.starts_with(prefix))
        .map(|(kind, _)| *kind)
        .collect();
    assert!(prefixed.len() <= 1, "{data:?} starts {prefixed:?}");
    let Some(kind) = read.kind() else {
        return;
    };
    assert_eq!(prefixed, [kind], "{data:?} read as {read:?}");
    let written = read.data();
    assert_eq!(written, data, "{data:?} read as {read:?}");
    assert_eq!(&Callback::parse(&written), read, "{data:?} written back");
    if let Callback::Approval(approval) = read {
        assert!(
            approval.token.len() == TOKEN_LEN
                && approval
                    .token
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "token {:?} of {data:?}",
            approval.token
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::{Approval, Choice, ListKind, Pick};

    #[test]
    fn callback_data_takes_every_kind_and_anything_else() {
        let token = "0123456789abcdef0123456789abcdef".to_owned();
        let buttons = [
            Callback::Unschedule(3),
            Callback::Pick(Pick {
                kind: ListKind::Projects,
                list: 2,
                entry: 0,
            }),
            Callback::Approval(Approval {
                token: token.clone(),
                choice: Choice::Always,
            }),
            Callback::Approval(Approval {
                token,
                choice: Choice::Option {
                    question: 0,
                    option: 1,
                },
            }),
        ];
        for button in &buttons {
            let data = button.data();
            assert_eq!(&Callback::parse(&data), button);
            callback_data(data.as_bytes());
        }
        for junk in ["", "pick:s01:1", "unsched:+1", "ap:x:y", "\u{0}", "aq:"] {
            callback_data(junk.as_bytes());
        }
        callback_data(&[0xff, 0xfe]);
    }
}

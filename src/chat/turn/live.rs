//! What the chat sees while a turn works: one status message (the tool
//! running now, the tool calls so far, the time) once the turn has run for
//! `progress.after`, and a preview of the answer as the agent writes it,
//! which then becomes the answer. Both are live slots of the outbox: it
//! sends them once, edits them, drops an edit a newer one replaced, and
//! lets them give way to real messages. The same status line, and the
//! answer's growth in pieces, go to the attach feed as they happen (a
//! terminal has no rate limit to respect, but pieces are gathered: at most
//! one every [`WRITING_EVERY`] unless [`WRITING_PIECE_BYTES`] wait, within
//! [`PREVIEW_KEPT_BYTES`] a text). Nothing here decides the turn.

use std::time::{Duration, Instant};

use actix::Addr;
use serde_json::Value;
use teloxide::types::MessageId;

use super::TurnSpec;
use crate::agent::tools::ToolName;
use crate::config::{Keep, ProgressConfig, Stream};
use crate::events::{EventBus, FeedItem};
use crate::ids::{Conversation, TurnId};
use crate::telegram::outbox::{Clear, Outbox, Show, ShowAs, Slot};

/// The preview appears once the text has this many characters.
pub const PREVIEW_AFTER_CHARS: usize = 40;

/// A preview keeps at most this much of its text: it shows 4096 UTF-16
/// units at most (the answer itself comes whole from the tool call).
pub const PREVIEW_KEPT_BYTES: usize = 16 * 1024;

/// The attach feed gets a piece of the answer at most this often...
pub const WRITING_EVERY: Duration = Duration::from_millis(250);

/// ... unless this many bytes of it wait.
pub const WRITING_PIECE_BYTES: usize = 512;

/// Appends `appended` to a preview's `text` within [`PREVIEW_KEPT_BYTES`]
/// (cut at a char); whether the text changed.
fn grow(text: &mut String, appended: &str) -> bool {
    let room = PREVIEW_KEPT_BYTES.saturating_sub(text.len());
    push_within(text, appended, room) > 0
}

/// Appends at most `room` bytes of `appended` to `text` (cut at a char);
/// how many it appended.
fn push_within(text: &mut String, appended: &str, room: usize) -> usize {
    let mut end = appended.len().min(room);
    while !appended.is_char_boundary(end) {
        end -= 1;
    }
    text.push_str(&appended[..end]);
    end
}

/// The longest summary of a tool's input on the status line.
const SUMMARY_CHARS: usize = 60;

/// The turn's live view.
pub(crate) struct LiveView {
    config: ProgressConfig,
    to: Conversation,
    /// The turn it shows: a `/stop` of it drops its live text still queued.
    turn: TurnId,
    outbox: Addr<Outbox>,
    started: Instant,
    /// The working directory, cut from paths on the status line.
    workdir: String,
    /// What the preview replies to (the answer's place in a group).
    answer_to: Option<MessageId>,
    status: Status,
    preview: Option<Preview>,
    /// Where the attach feed is told.
    events: EventBus,
    /// What the feed was given of the text being written.
    fed: Fed,
    /// Set at the end of the turn: nothing more is shown.
    over: bool,
}

/// The answer being written, as the attach feed gets it: in pieces.
#[derive(Default)]
struct Fed {
    /// Which growing text (a new one starts afresh).
    stream: String,
    /// Written and not given yet.
    pending: String,
    /// Bytes of this text given or pending, within [`PREVIEW_KEPT_BYTES`].
    bytes: usize,
    /// When a piece was last given.
    at: Option<Instant>,
    /// The next piece begins a new text.
    fresh: bool,
}

impl Fed {
    /// Takes `appended` to the text `stream` at `now`: the pieces due (the
    /// rest of a text it replaces, then this one's when
    /// [`WRITING_EVERY`] passed or [`WRITING_PIECE_BYTES`] wait).
    fn write(&mut self, stream: &str, appended: &str, now: Instant) -> Vec<FeedItem> {
        let mut due = Vec::new();
        if self.stream != stream {
            due.extend(self.give(now));
            *self = Fed {
                stream: stream.to_string(),
                fresh: true,
                ..Fed::default()
            };
        }
        let room = PREVIEW_KEPT_BYTES.saturating_sub(self.bytes);
        self.bytes += push_within(&mut self.pending, appended, room);
        let every = self
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= WRITING_EVERY);
        if every || self.pending.len() >= WRITING_PIECE_BYTES {
            due.extend(self.give(now));
        }
        due
    }

    /// What was written and not given yet, as one piece given at `now`.
    fn give(&mut self, now: Instant) -> Option<FeedItem> {
        if self.pending.is_empty() {
            return None;
        }
        self.at = Some(now);
        Some(FeedItem::Writing {
            text: std::mem::take(&mut self.pending),
            fresh: std::mem::take(&mut self.fresh),
        })
    }
}

#[derive(Default)]
struct Status {
    /// Its slot, once it was shown.
    slot: Option<Slot>,
    /// Tool calls so far.
    calls: u32,
    /// The tool running now, summarised.
    current: Option<String>,
    /// What it last showed, and when.
    shown: Option<(String, Instant)>,
}

/// The answer being written.
struct Preview {
    slot: Slot,
    /// Which growing text it shows (a new one replaces the old).
    stream: String,
    text: String,
    /// When it was last shown; `None` before the first time.
    shown: Option<Instant>,
    /// Text arrived since.
    dirty: bool,
    /// When its text began: it shows only once the text is still being
    /// written `progress.preview_after` later, so an answer written sooner
    /// is one message, not a preview and an edit.
    began: Instant,
}

impl LiveView {
    /// The view of the turn `spec`, its status and preview shown through
    /// `outbox` and fed to `events`.
    pub(crate) fn new(
        config: ProgressConfig,
        spec: &TurnSpec,
        outbox: Addr<Outbox>,
        workdir: String,
        events: EventBus,
    ) -> Self {
        Self {
            config,
            to: spec.to,
            turn: spec.turn,
            outbox,
            started: Instant::now(),
            workdir,
            answer_to: spec.answer_to,
            status: Status::default(),
            preview: None,
            events,
            fed: Fed::default(),
            over: false,
        }
    }

    /// When the next [`tick`](Self::tick) is due.
    pub(crate) fn interval(&self) -> Duration {
        self.config.interval
    }

    /// When the status message may first appear.
    pub(crate) fn after(&self) -> Duration {
        self.config.after
    }

    /// The agent called a tool.
    pub(crate) fn tool_started(&mut self, name: &ToolName, input: &Value) {
        self.status.calls = self.status.calls.saturating_add(1);
        self.status.current = Some(summary(name, input, &self.workdir));
        if self.over {
            return;
        }
        // What was written before the call comes first.
        self.give_writing();
        let text = status_text(
            self.status.current.as_deref(),
            self.status.calls,
            self.started.elapsed(),
        );
        self.events.feed(self.to, FeedItem::Status { text });
    }

    /// The agent wrote `appended` to the growing text `stream`.
    pub(crate) fn writing(&mut self, stream: &str, appended: &str) {
        if self.over {
            return;
        }
        self.feed_writing(stream, appended);
        if self.config.stream == Stream::Off {
            return;
        }
        let preview = self.preview.get_or_insert_with(|| Preview {
            slot: Slot::next(),
            stream: String::new(),
            text: String::new(),
            shown: None,
            dirty: false,
            began: Instant::now(),
        });
        if preview.stream != stream {
            // A new text replaces the one shown (the agent's narration
            // before a tool call, say): same message, new text.
            preview.stream = stream.to_string();
            preview.text.clear();
            if preview.shown.is_none() {
                preview.began = Instant::now();
            }
        }
        if grow(&mut preview.text, appended) {
            preview.dirty = true;
            self.flush_preview(false);
        }
    }

    /// Gathers `appended` for the feed; gives it the pieces due.
    fn feed_writing(&mut self, stream: &str, appended: &str) {
        for piece in self.fed.write(stream, appended, Instant::now()) {
            self.events.feed(self.to, piece);
        }
    }

    /// Gives the feed what was written and not given yet.
    fn give_writing(&mut self) {
        if let Some(piece) = self.fed.give(Instant::now()) {
            self.events.feed(self.to, piece);
        }
    }

    /// How long until a preview not shown yet may show
    /// (`progress.preview_after` after its text began); `None` when there
    /// is nothing waiting to show.
    pub(crate) fn preview_due_in(&self) -> Option<std::time::Duration> {
        let preview = self
            .preview
            .as_ref()
            .filter(|p| p.shown.is_none() && p.dirty)?;
        Some(
            self.config
                .preview_after
                .saturating_sub(preview.began.elapsed()),
        )
    }

    /// Shows a preview that waited for `progress.preview_after`.
    pub(crate) fn preview_due(&mut self) {
        if !self.over {
            self.flush_preview(true);
        }
    }

    /// The working directory cut from paths on the status line (a
    /// project's, once the turn knows it is in one).
    pub(crate) fn set_workdir(&mut self, workdir: String) {
        self.workdir = workdir;
    }

    /// Refreshes the status and the preview when they are due.
    pub(crate) fn tick(&mut self) {
        if self.over {
            return;
        }
        self.give_writing();
        self.flush_preview(true);
        self.flush_status();
    }

    /// Shows the preview: the first time once it is long enough, later at
    /// most every interval (`due`: called by the ticker, which catches the
    /// last pieces).
    fn flush_preview(&mut self, due: bool) {
        let interval = self.config.interval;
        let Some(preview) = &mut self.preview else {
            return;
        };
        if !preview.dirty || preview.text.trim().chars().count() < PREVIEW_AFTER_CHARS {
            return;
        }
        let ready = match preview.shown {
            None => preview.began.elapsed() >= self.config.preview_after,
            Some(at) => at.elapsed() >= interval || (due && at.elapsed() >= interval / 2),
        };
        if !ready {
            return;
        }
        preview.dirty = false;
        preview.shown = Some(Instant::now());
        let show_as = if self.config.stream == Stream::Draft {
            ShowAs::Draft
        } else {
            ShowAs::Message
        };
        self.outbox.do_send(Show {
            to: self.to,
            slot: preview.slot,
            reply_to: self.answer_to,
            text: preview.text.clone(),
            markdown: true,
            show_as,
            turn: Some(self.turn),
        });
    }

    fn flush_status(&mut self) {
        // Ticks begin at `progress.after` (`arm_view`).
        let elapsed = self.started.elapsed();
        let previewing = self.preview.as_ref().is_some_and(|p| p.shown.is_some());
        if self.status.slot.is_none() && self.status.calls == 0 && previewing {
            // The answer shows as it is written: "working" adds nothing.
            return;
        }
        let text = status_text(self.status.current.as_deref(), self.status.calls, elapsed);
        if let Some((shown, at)) = &self.status.shown
            && (*shown == text || at.elapsed() < self.config.interval / 2)
        {
            return;
        }
        let slot = *self.status.slot.get_or_insert_with(Slot::next);
        self.status.shown = Some((text.clone(), Instant::now()));
        self.outbox.do_send(Show {
            to: self.to,
            slot,
            reply_to: None,
            text,
            markdown: false,
            show_as: ShowAs::Message,
            turn: Some(self.turn),
        });
    }

    /// The slot a text of the agent finishes: the preview, when one was
    /// shown (its message becomes the text). A later text gets a new one.
    pub(crate) fn take_preview(&mut self) -> Option<Slot> {
        // The feed's pieces end before the text comes whole.
        self.give_writing();
        self.fed = Fed::default();
        let preview = self.preview.take()?;
        preview.shown.map(|_| preview.slot)
    }

    /// The turn ended: the status is deleted or folded, a preview that did
    /// not become an answer goes, and nothing more is shown.
    pub(crate) fn finish(&mut self) {
        if std::mem::replace(&mut self.over, true) {
            return;
        }
        self.give_writing();
        if let Some(slot) = self.status.slot {
            let fold = (self.config.keep == Keep::Fold)
                .then(|| folded_text(self.status.calls, self.started.elapsed()));
            self.outbox.do_send(Clear {
                to: self.to,
                slot,
                fold,
            });
        }
        if let Some(slot) = self.take_preview() {
            self.outbox.do_send(Clear {
                to: self.to,
                slot,
                fold: None,
            });
        }
    }
}

pub(crate) use crate::chat::notices::progress::{folded_text, status_text};

/// One line about a tool call: `🔧 Bash: cargo test`, `📖 Read src/main.rs`,
/// `🔍 WebSearch "rust actors"`.
pub(crate) fn summary(name: &ToolName, input: &Value, workdir: &str) -> String {
    let field = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default();
    let path = |key: &str| short_path(field(key), workdir);
    let bare = name.bare();
    let line = crate::chat::notices::progress::tool_line(bare, &field, &path);
    crate::chat::notices::bounded(line.trim_end_matches([' ', ':']), SUMMARY_CHARS - 1)
}

/// A path inside the working directory without it.
fn short_path<'a>(path: &'a str, workdir: &str) -> &'a str {
    if workdir.is_empty() {
        return path;
    }
    path.strip_prefix(workdir)
        .map(|rest| rest.trim_start_matches('/'))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_call_is_summarised_in_one_short_line() {
        let dir = "/work/chats/42";
        assert_eq!(
            summary(
                &ToolName::parse("Bash"),
                &json!({"command": "cargo test\necho done"}),
                dir
            ),
            "🔧 Bash: cargo test"
        );
        assert_eq!(
            summary(
                &ToolName::parse("Read"),
                &json!({"file_path": "/work/chats/42/src/main.rs"}),
                dir
            ),
            "📖 Read src/main.rs"
        );
        assert_eq!(
            summary(
                &ToolName::parse("Read"),
                &json!({"file_path": "/etc/hosts"}),
                dir
            ),
            "📖 Read /etc/hosts"
        );
        assert_eq!(
            summary(
                &ToolName::parse("WebSearch"),
                &json!({"query": "actix actors"}),
                dir
            ),
            "🔍 WebSearch \"actix actors\""
        );
        assert_eq!(
            summary(
                &ToolName::parse("mcp__telegram-tools__send"),
                &json!({"text": "hi"}),
                dir
            ),
            "💬 Writing to the chat"
        );
        assert_eq!(
            summary(&ToolName::parse("mcp__github__search"), &json!({}), dir),
            "🔧 search"
        );
        assert_eq!(
            summary(&ToolName::parse("Bash"), &json!({"command": 7}), dir),
            "🔧 Bash"
        );
        let long = summary(
            &ToolName::parse("Bash"),
            &json!({"command": "x".repeat(500)}),
            dir,
        );
        assert_eq!(long.chars().count(), SUMMARY_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn a_preview_keeps_a_bounded_prefix_of_its_text() {
        let mut text = String::new();
        assert!(grow(&mut text, "Hello"));
        assert!(!grow(&mut text, ""));
        for _ in 0..10_000 {
            grow(&mut text, "🦀 and more text ");
        }
        assert!(text.len() <= PREVIEW_KEPT_BYTES, "{}", text.len());
        assert!(text.len() > PREVIEW_KEPT_BYTES - 8);
        assert!(text.starts_with("Hello🦀"));
        grow(&mut text, &"x".repeat(100));
        assert_eq!(text.len(), PREVIEW_KEPT_BYTES);
        assert!(!grow(&mut text, "more"), "full: nothing changes");
    }

    #[test]
    fn the_status_counts_calls_and_time() {
        assert_eq!(
            status_text(Some("🔧 Bash: ls"), 3, Duration::from_secs(12)),
            "🔧 Bash: ls\n3 tool calls · 12s"
        );
        assert_eq!(
            status_text(None, 0, Duration::from_secs(4)),
            "⏳ Working… · 4s"
        );
        assert_eq!(
            folded_text(1, Duration::from_secs(185)),
            "✅ 1 tool call · 3m 05s"
        );
    }

    fn piece(text: &str, fresh: bool) -> FeedItem {
        FeedItem::Writing {
            text: text.into(),
            fresh,
        }
    }

    #[test]
    fn the_feed_gets_an_answer_in_bounded_pieces_not_a_piece_a_token() {
        let mut fed = Fed::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            fed.write("a", "Hel", at(0)),
            [piece("Hel", true)],
            "the first at once"
        );
        assert!(fed.write("a", "lo", at(10)).is_empty(), "gathered");
        assert!(fed.write("a", " wor", at(20)).is_empty(), "gathered");
        let every = u64::try_from(WRITING_EVERY.as_millis()).unwrap();
        assert_eq!(
            fed.write("a", "ld", at(every)),
            [piece("lo world", false)],
            "one piece once the interval passed"
        );
        let big = "x".repeat(WRITING_PIECE_BYTES);
        assert_eq!(
            fed.write("a", &big, at(every + 1)),
            [piece(&big, false)],
            "enough bytes go at once"
        );
        assert!(fed.write("a", "!", at(every + 2)).is_empty());
        // A new text: the rest of the old one, then the new one's start.
        assert_eq!(
            fed.write("b", "New", at(every + 3)),
            [piece("!", false), piece("New", true)]
        );
        assert!(fed.write("b", " text", at(every + 4)).is_empty());
        assert_eq!(fed.give(at(every + 5)), Some(piece(" text", false)));
        assert_eq!(fed.give(at(every + 6)), None, "nothing left");
        // However much is written, a text gives at most PREVIEW_KEPT_BYTES.
        let mut given = 0;
        for n in 0..100 {
            for p in fed.write("c", &"y".repeat(1000), at(every * (n + 10))) {
                let FeedItem::Writing { text, .. } = p else {
                    panic!("{p:?}")
                };
                given += text.len();
            }
        }
        assert_eq!(given, PREVIEW_KEPT_BYTES);
    }
}

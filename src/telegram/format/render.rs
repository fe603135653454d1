//! Markdown (CommonMark + GFM) to plain text and entities, with pulldown-cmark.
//!
//! The renderer walks the parser's events with explicit stacks (no
//! recursion), writes plain text, and records an entity per formatting
//! span. Block separators are written lazily, just before the next content,
//! so no piece of output starts with or carries trailing whitespace, and an
//! entity opened but given no content has no length. A last pass
//! ([`repair`]) drops what Telegram would refuse: zero-length entities and
//! entities nested where the rules forbid (bold inside a bold heading, code
//! inside a link, a quote inside a quote, anything inside `pre`).

mod tags;

use pulldown_cmark::{Alignment, Event, Options, Parser};

use super::validate::containment_problem;
use super::{MessageEntity, MessageEntityKind, Rendered};

/// A bullet list item's marker.
const BULLET: &str = "• ";
/// Task list markers, replacing the bullet.
const TASK_OPEN: &str = "☐ ";
const TASK_DONE: &str = "☑ ";
/// A horizontal rule.
const RULE: &str = "———";
/// Separates table columns.
const COLUMN_GAP: &str = " | ";

/// Renders the agent's Markdown to plain text plus entities. Never panics:
/// should the parser ever panic, the Markdown comes back as plain text.
pub fn render(markdown: &str) -> Rendered {
    let rendered = crate::ops::panics::contain(|| Renderer::default().run(markdown));
    rendered.unwrap_or_else(|_| Rendered::plain(markdown.trim()))
}

/// An entity being written.
struct Open {
    kind: MessageEntityKind,
    /// UTF-16 offset of its first content, once some is written.
    start: Option<usize>,
    /// Order of opening, to keep outer before inner on equal ranges.
    seq: usize,
}

/// A finished entity.
struct Span {
    kind: MessageEntityKind,
    start: usize,
    end: usize,
    seq: usize,
}

/// What a `Start` event opened, popped by its `End`.
enum OpenTag {
    /// Nothing to undo.
    Plain,
    /// An entity (index into `Renderer::open`).
    Entity,
    /// A link or image: an entity or not, and its URL to show when it has no text.
    Link {
        entity: bool,
        url: String,
        written: usize,
    },
    /// A list item: restores the indentation.
    Item { indent: usize },
    /// A list.
    List,
    /// A code block: its text is collected, then written as one `pre`.
    Code { language: Option<String> },
    /// A table.
    Table,
    /// A block quote; `entity` when it opened one (quotes do not nest).
    Quote { entity: bool },
    /// A heading (bold).
    Heading,
}

/// A list being written: the next number of an ordered list.
struct List {
    next: Option<u64>,
}

/// A table being collected.
#[derive(Default)]
struct Table {
    alignments: Vec<Alignment>,
    rows: Vec<Vec<String>>,
    /// Rows of the head (usually one).
    head_rows: usize,
}

#[derive(Default)]
struct Renderer {
    out: String,
    /// UTF-16 length of `out`.
    units: usize,
    /// Newlines to write before the next content (0, 1 or 2).
    pending_breaks: usize,
    /// The list item marker to write before the item's first content.
    pending_marker: Option<String>,
    /// Spaces that start every line inside list items.
    indent: String,
    open: Vec<Open>,
    /// `open[unstarted..]` have no content yet.
    unstarted: usize,
    spans: Vec<Span>,
    seq: usize,
    frames: Vec<OpenTag>,
    lists: Vec<List>,
    /// Depth of block quotes with an entity (0 or 1).
    quotes: usize,
    /// Text of the code block being read.
    code: Option<String>,
    table: Option<Table>,
    /// Text of the table cell being read.
    cell: Option<String>,
}

impl Renderer {
    fn run(mut self, markdown: &str) -> Rendered {
        let options =
            Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
        for event in Parser::new_ext(markdown, options) {
            self.event(event);
        }
        self.finish()
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => {
                if self.inline_sink().is_some() {
                    self.text(&code);
                } else {
                    self.open_entity(MessageEntityKind::Code);
                    self.text(&code);
                    self.close_entity();
                }
            }
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
            Event::SoftBreak | Event::HardBreak => {
                if let Some(sink) = self.inline_sink() {
                    sink.push(' ');
                } else {
                    self.line_break(1);
                }
            }
            Event::Rule => {
                self.block_break();
                self.write(RULE);
            }
            Event::TaskListMarker(done) => {
                let marker = if done { TASK_DONE } else { TASK_OPEN };
                match &mut self.pending_marker {
                    Some(m) if m == BULLET => *m = marker.to_owned(),
                    Some(m) => m.push_str(marker),
                    None => self.write(marker),
                }
            }
        }
    }

    /// Where inline content goes instead of the output: a code block's or
    /// a table cell's text.
    fn inline_sink(&mut self) -> Option<&mut String> {
        self.code.as_mut().or(self.cell.as_mut())
    }

    /// A count that grows with every char written anywhere, to tell
    /// whether a link got any text.
    fn written(&self) -> usize {
        self.units
            + self
                .code
                .as_ref()
                .or(self.cell.as_ref())
                .map_or(0, String::len)
    }

    /// Asks for a blank line before the next content (a single line break
    /// inside list items, where blocks follow each other closely).
    fn block_break(&mut self) {
        self.line_break(if self.lists.is_empty() { 2 } else { 1 });
    }

    fn line_break(&mut self, n: usize) {
        self.pending_breaks = self.pending_breaks.max(n);
    }

    /// Inline text: into the code block or table cell being read, else the output.
    fn text(&mut self, text: &str) {
        if let Some(sink) = self.inline_sink() {
            sink.push_str(text);
            return;
        }
        let mut lines = text.split('\n');
        if let Some(first) = lines.next() {
            self.write(first.trim_end_matches('\r'));
        }
        for line in lines {
            self.line_break(1);
            self.write(line.trim_end_matches('\r'));
        }
    }

    /// Writes `s` (no newline) after any pending break, marker and indent.
    fn write(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        self.flush();
        self.push(s);
    }

    /// Writes a block of lines as they are (code, tables).
    fn write_raw(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        self.flush();
        self.push(s);
    }

    /// Writes what must come before the next content, and starts the
    /// entities waiting for it.
    fn flush(&mut self) {
        if self.pending_breaks > 0 {
            if !self.out.is_empty() {
                self.trim_tail();
                for _ in 0..self.pending_breaks {
                    self.push("\n");
                }
                let indent = std::mem::take(&mut self.indent);
                self.push(&indent);
                self.indent = indent;
            }
            self.pending_breaks = 0;
        }
        if let Some(marker) = self.pending_marker.take() {
            self.push(&marker);
            let width = marker.chars().count();
            self.indent.extend(std::iter::repeat_n(' ', width));
        }
        let units = self.units;
        for open in &mut self.open[self.unstarted..] {
            open.start = Some(units);
        }
        self.unstarted = self.open.len();
    }

    fn push(&mut self, s: &str) {
        self.out.push_str(s);
        self.units += s.encode_utf16().count();
    }

    /// Removes trailing spaces and tabs, pulling back entity bounds that
    /// pointed past the new end.
    fn trim_tail(&mut self) {
        let trimmed = self.out.trim_end_matches([' ', '\t']).len();
        if trimmed == self.out.len() {
            return;
        }
        let removed = self.out.len() - trimmed; // spaces and tabs: one unit per byte
        self.out.truncate(trimmed);
        self.units -= removed;
        let units = self.units;
        for span in self.spans.iter_mut().rev() {
            if span.end <= units {
                break;
            }
            span.end = units;
            span.start = span.start.min(units);
        }
        for open in self.open.iter_mut().rev() {
            match open.start {
                Some(start) if start > units => open.start = Some(units),
                Some(_) => break,
                None => {}
            }
        }
    }

    fn open_entity(&mut self, kind: MessageEntityKind) {
        self.seq += 1;
        self.open.push(Open {
            kind,
            start: None,
            seq: self.seq,
        });
    }

    fn close_entity(&mut self) {
        let Some(open) = self.open.pop() else {
            return;
        };
        self.unstarted = self.unstarted.min(self.open.len());
        if let Some(start) = open.start {
            self.spans.push(Span {
                kind: open.kind,
                start,
                end: self.units,
                seq: open.seq,
            });
        }
    }

    fn finish(mut self) -> Rendered {
        while !self.open.is_empty() {
            self.close_entity();
        }
        self.trim_tail();
        let text_end = self.out.trim_end().len();
        let cut = self.out.len() - text_end;
        if cut > 0 {
            let units = self.units - self.out[text_end..].encode_utf16().count();
            self.out.truncate(text_end);
            for span in &mut self.spans {
                span.end = span.end.min(units);
                span.start = span.start.min(units);
            }
        }
        let entities = repair(self.spans);
        Rendered {
            text: self.out,
            entities,
        }
    }
}

/// Sorts the spans into Telegram's order and keeps only those Telegram
/// accepts: no zero length, no partial overlap, no forbidden nesting (the
/// inner entity goes).
fn repair(mut spans: Vec<Span>) -> Vec<MessageEntity> {
    spans.retain(|s| s.end > s.start);
    spans.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end), s.seq));
    let mut kept: Vec<MessageEntity> = Vec::with_capacity(spans.len());
    // Indices into `kept` of the entities around the current position.
    let mut stack: Vec<usize> = Vec::new();
    for span in spans {
        while stack
            .last()
            .is_some_and(|&k| kept[k].offset + kept[k].length <= span.start)
        {
            stack.pop();
        }
        let fits = stack.iter().all(|&k| {
            let outer = &kept[k];
            span.end <= outer.offset + outer.length
                && containment_problem(&outer.kind, &span.kind).is_none()
        });
        if fits {
            stack.push(kept.len());
            kept.push(MessageEntity::new(
                span.kind,
                span.start,
                span.end - span.start,
            ));
        }
    }
    kept
}

#[cfg(test)]
mod tests;

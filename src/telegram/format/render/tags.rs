//! What each Markdown tag opens and closes: a frame pushed at its start
//! (with the entity, list marker, code or table it begins) and finished at
//! its end.

use pulldown_cmark::{Alignment, CodeBlockKind, Tag, TagEnd};

use super::{BULLET, COLUMN_GAP, List, OpenTag, Renderer, Table};
use crate::telegram::format::{MessageEntityKind, link_url_problem};

impl Renderer {
    pub(super) fn start(&mut self, tag: Tag<'_>) {
        let frame = match tag {
            Tag::Paragraph | Tag::HtmlBlock | Tag::MetadataBlock(_) => {
                self.block_break();
                OpenTag::Plain
            }
            Tag::Heading { .. } => {
                self.block_break();
                self.open_entity(MessageEntityKind::Bold);
                OpenTag::Heading
            }
            Tag::BlockQuote(_) => {
                self.block_break();
                let entity = self.quotes == 0;
                if entity {
                    self.quotes += 1;
                    self.open_entity(MessageEntityKind::Blockquote);
                }
                OpenTag::Quote { entity }
            }
            Tag::CodeBlock(kind) => {
                self.block_break();
                let language = match kind {
                    CodeBlockKind::Fenced(info) => language(&info),
                    CodeBlockKind::Indented => None,
                };
                self.code = Some(String::new());
                OpenTag::Code { language }
            }
            Tag::List(first) => {
                self.block_break();
                self.lists.push(List { next: first });
                OpenTag::List
            }
            Tag::Item => self.item(),
            Tag::Table(alignments) => {
                self.block_break();
                self.table = Some(Table {
                    alignments,
                    ..Table::default()
                });
                OpenTag::Table
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(table) = &mut self.table {
                    table.rows.push(Vec::new());
                }
                OpenTag::Plain
            }
            Tag::TableCell => {
                self.cell = Some(String::new());
                OpenTag::Plain
            }
            Tag::Emphasis => self.style(MessageEntityKind::Italic),
            Tag::Strong => self.style(MessageEntityKind::Bold),
            Tag::Strikethrough => self.style(MessageEntityKind::Strikethrough),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => self.link(&dest_url),
            Tag::FootnoteDefinition(name) => {
                self.block_break();
                self.write(&format!("[^{name}]: "));
                OpenTag::Plain
            }
            Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Superscript
            | Tag::Subscript => OpenTag::Plain,
        };
        self.frames.push(frame);
    }

    /// A list item: its marker (numbered or a bullet) waits for its content.
    fn item(&mut self) -> OpenTag {
        let marker = match self.lists.last_mut() {
            Some(List { next: Some(n) }) => {
                let marker = format!("{n}. ");
                *n = n.saturating_add(1);
                marker
            }
            _ => BULLET.to_owned(),
        };
        self.line_break(1);
        let indent = self.indent.len();
        self.pending_marker = Some(marker);
        OpenTag::Item { indent }
    }

    /// A link or an image: an entity when its URL is one Telegram takes
    /// and it is not inside code or a table cell.
    fn link(&mut self, dest_url: &str) -> OpenTag {
        let url = dest_url.trim().to_owned();
        let target = reqwest::Url::parse(&url)
            .ok()
            .filter(|u| link_url_problem(u).is_none());
        let entity = target.is_some() && self.inline_sink().is_none();
        if let Some(url) = target.filter(|_| entity) {
            self.open_entity(MessageEntityKind::TextLink { url });
        }
        OpenTag::Link {
            entity,
            url,
            written: self.written(),
        }
    }

    fn style(&mut self, kind: MessageEntityKind) -> OpenTag {
        if self.inline_sink().is_some() {
            return OpenTag::Plain;
        }
        self.open_entity(kind);
        OpenTag::Entity
    }

    pub(super) fn end(&mut self, tag: TagEnd) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        match frame {
            OpenTag::Plain => match tag {
                TagEnd::TableCell => {
                    let cell = self.cell.take().unwrap_or_default();
                    if let Some(row) = self.table.as_mut().and_then(|t| t.rows.last_mut()) {
                        row.push(cell.trim().to_owned());
                    }
                }
                TagEnd::TableHead => {
                    if let Some(table) = &mut self.table {
                        table.head_rows = table.rows.len();
                    }
                }
                _ => {}
            },
            OpenTag::Entity | OpenTag::Heading => self.close_entity(),
            OpenTag::Quote { entity } => {
                if entity {
                    self.close_entity();
                    self.quotes -= 1;
                }
            }
            OpenTag::Link {
                entity,
                url,
                written,
            } => {
                if self.written() == written {
                    self.text(&url);
                }
                if entity {
                    self.close_entity();
                }
            }
            OpenTag::Item { indent } => {
                if let Some(marker) = self.pending_marker.take() {
                    self.write(marker.trim_end());
                }
                self.indent.truncate(indent);
            }
            OpenTag::List => {
                self.lists.pop();
            }
            OpenTag::Code { language } => {
                let code = self.code.take().unwrap_or_default();
                let code = tidy_lines(&code.replace("\r\n", "\n"));
                if !code.trim().is_empty() {
                    self.open_entity(MessageEntityKind::Pre { language });
                    self.write_raw(code.trim_matches('\n'));
                    self.close_entity();
                }
            }
            OpenTag::Table => {
                if let Some(table) = self.table.take() {
                    let text = table_text(&table);
                    if !text.is_empty() {
                        self.open_entity(MessageEntityKind::Pre { language: None });
                        self.write_raw(&text);
                        self.close_entity();
                    }
                }
            }
        }
    }
}

/// The language of a fenced code block: the info string's first word, kept
/// only if it looks like a language name.
fn language(info: &str) -> Option<String> {
    let word = info.split_whitespace().next()?;
    let word = word.strip_prefix('{').unwrap_or(word);
    let word = word.split([',', '{', '}']).next()?;
    let ok = !word.is_empty()
        && word.len() <= 32
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-#._".contains(c));
    ok.then(|| word.to_owned())
}

/// `text` with trailing whitespace removed from every line.
fn tidy_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(line.trim_end());
    }
    out
}

/// A table as aligned monospace lines, with a rule under the head.
fn table_text(table: &Table) -> String {
    let columns = table.rows.iter().map(Vec::len).max().unwrap_or(0);
    if columns == 0 {
        return String::new();
    }
    let width = |s: &str| s.chars().count();
    let mut widths = vec![0; columns];
    for row in &table.rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let mut lines = Vec::with_capacity(table.rows.len() + 1);
    for (r, row) in table.rows.iter().enumerate() {
        let mut line = String::new();
        for (c, w) in widths.iter().enumerate() {
            if c > 0 {
                line.push_str(COLUMN_GAP);
            }
            let cell = row.get(c).map_or("", String::as_str);
            let pad = w - width(cell);
            let (left, right) = match table.alignments.get(c) {
                Some(Alignment::Right) => (pad, 0),
                Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                _ => (0, pad),
            };
            line.extend(std::iter::repeat_n(' ', left));
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', right));
        }
        lines.push(line.trim_end().to_owned());
        if r + 1 == table.head_rows {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w.max(1))).collect();
            lines.push(rule.join("-+-"));
        }
    }
    lines.join("\n")
}

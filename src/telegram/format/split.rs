//! Cutting rendered text into messages, entities sliced along, in linear time.
//!
//! One forward scan per piece looks at most `limit` units ahead and keeps
//! the furthest cut of each kind (paragraph, line, space, char), separately
//! for cuts outside and inside code (`pre` and `code` entities). Every
//! piece's scan starts where the previous piece ended, so the text is read a
//! bounded number of times whatever its size, and entities are handed out
//! with one pass over them (sorted by offset) with the few that span several
//! pieces kept aside.

use super::{MessageEntity, MessageEntityKind, Rendered};

/// Kinds of cut, best first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Paragraph = 0,
    Line = 1,
    Space = 2,
    Char = 3,
}

/// A possible end of the current piece.
#[derive(Clone, Copy, Debug)]
struct Cut {
    /// Byte index where the piece's raw text ends (the cut position).
    at: usize,
    /// UTF-16 offset of `at` in the whole text.
    at_units: usize,
    /// Byte index just after the piece's last non-whitespace char.
    content_end: usize,
    /// UTF-16 offset of `content_end` in the whole text.
    content_units: usize,
    kind: Kind,
}

/// Cuts `rendered` into pieces of at most `limit` UTF-16 units each (a
/// `limit` below 2 counts as 2, so that every char fits).
///
/// Prefers, in order: a paragraph break, a line break, then a space outside
/// code that fills at least half the piece; a line break inside code that
/// does; the furthest such break of any fill; a space inside code; a cut
/// between two chars (never inside one, hence never inside a surrogate
/// pair). Whitespace around a cut is dropped from both pieces, except the
/// spaces that indent the next line. Every entity is sliced with the text:
/// a `pre` block cut in two is a `pre` block with the same language in both
/// pieces. No piece is empty, no non-whitespace char is lost, and
/// whitespace-only text gives no pieces.
pub fn split(rendered: &Rendered, limit: usize) -> Vec<Rendered> {
    let limit = limit.max(2);
    let text = rendered.text.as_str();
    let bytes = text.as_bytes();
    // Past the last non-whitespace char there is nothing to send.
    let text_end = text.trim_end().len();
    let code = code_ranges(&rendered.entities);
    let mut entities = Entities::new(&rendered.entities);
    let mut pieces = Vec::new();

    let mut start = 0; // byte index of the current piece
    let mut start_units = 0;
    let mut skip_spaces = false;
    let mut code_at = 0; // index into `code` for the scan position
    while start < text_end {
        // Drop the newlines a cut left (and the spaces of a space cut).
        for c in text[start..].chars() {
            let skip = c == '\n' || c == '\r' || (skip_spaces && c.is_whitespace());
            if !skip {
                break;
            }
            start += c.len_utf8();
            start_units += c.len_utf16();
        }
        if start >= text_end {
            break;
        }
        let cut = choose_cut(text, bytes, start, start_units, limit, text_end, &code, &mut code_at);
        if cut.content_end > start {
            let piece_text = text[start..cut.content_end].to_owned();
            let piece_entities = entities.slice(start_units, cut.content_units);
            pieces.push(Rendered {
                text: piece_text,
                entities: piece_entities,
            });
        }
        skip_spaces = cut.kind == Kind::Space;
        start = cut.at;
        start_units = cut.at_units;
    }
    pieces
}

/// Scans from `start` for the best cut; the whole rest when it fits.
#[allow(clippy::too_many_arguments)]
fn choose_cut(
    text: &str,
    bytes: &[u8],
    start: usize,
    start_units: usize,
    limit: usize,
    text_end: usize,
    code: &[(usize, usize)],
    code_at: &mut usize,
) -> Cut {
    // Furthest fitting cut per [outside, inside code][kind].
    let mut best: [[Option<Cut>; 4]; 2] = [[None; 4]; 2];
    let mut units = start_units;
    let mut content_end = start;
    let mut content_units = start_units;
    let max_units = start_units + limit;
    for (offset, c) in text[start..text_end].char_indices() {
        let i = start + offset;
        let next_units = units + c.len_utf16();
        if i > start && content_end > start {
            // A cut before `c`: the piece is text[start..content_end].
            while *code_at < code.len() && code[*code_at].1 <= units {
                *code_at += 1;
            }
            let inside = code
                .get(*code_at)
                .is_some_and(|&(from, to)| from < units && units < to);
            let kind = if c == '\n' {
                let after = &bytes[i + 1..];
                if after.first() == Some(&b'\n') || after.starts_with(b"\r\n") {
                    Kind::Paragraph
                } else {
                    Kind::Line
                }
            } else if c.is_whitespace() {
                Kind::Space
            } else {
                Kind::Char
            };
            // Inside code a blank line is just a line break.
            let kind = if inside && kind == Kind::Paragraph {
                Kind::Line
            } else {
                kind
            };
            let cut = Cut {
                at: i,
                at_units: units,
                content_end,
                content_units,
                kind,
            };
            best[usize::from(inside)][kind as usize] = Some(cut);
            if kind != Kind::Char {
                best[usize::from(inside)][Kind::Char as usize] = Some(Cut {
                    kind: Kind::Char,
                    ..cut
                });
            }
        }
        if next_units > max_units {
            return pick(&best, limit, start_units).unwrap_or(Cut {
                // Only whitespace so far: drop it.
                at: i,
                at_units: units,
                content_end: start,
                content_units: start_units,
                kind: Kind::Space,
            });
        }
        units = next_units;
        if !c.is_whitespace() {
            content_end = i + c.len_utf8();
            content_units = units;
        }
    }
    Cut {
        at: text_end,
        at_units: units,
        content_end,
        content_units,
        kind: Kind::Char,
    }
}

/// The best cut by the order documented on [`split`].
fn pick(best: &[[Option<Cut>; 4]; 2], limit: usize, start_units: usize) -> Option<Cut> {
    let [outside, inside] = best;
    let full = |cut: &&Cut| (cut.content_units - start_units) * 2 >= limit;
    let line = Kind::Line as usize;
    let space = Kind::Space as usize;
    let chars = Kind::Char as usize;
    outside[..chars]
        .iter()
        .flatten()
        .find(full)
        .or(inside[line].as_ref().filter(full))
        .or(outside[..chars].iter().flatten().next())
        .or(inside[line].as_ref())
        .or(inside[space].as_ref())
        .or(match (&outside[chars], &inside[chars]) {
            (Some(a), Some(b)) => Some(if a.at >= b.at { a } else { b }),
            (a, b) => a.as_ref().or(b.as_ref()),
        })
        .copied()
}

/// The UTF-16 ranges of `pre` and `code` entities, sorted and merged.
fn code_ranges(entities: &[MessageEntity]) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = entities
        .iter()
        .filter(|e| matches!(e.kind, MessageEntityKind::Pre { .. } | MessageEntityKind::Code))
        .map(|e| (e.offset, e.offset.saturating_add(e.length)))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (from, to) in ranges {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// Hands out the entities piece by piece.
struct Entities<'a> {
    /// Entities sorted by offset (outer first on equal offsets).
    sorted: Vec<&'a MessageEntity>,
    /// `sorted[next..]` start after every piece so far.
    next: usize,
    /// Entities that started in an earlier piece and go on.
    active: Vec<&'a MessageEntity>,
}

impl<'a> Entities<'a> {
    fn new(entities: &'a [MessageEntity]) -> Self {
        let mut sorted: Vec<&MessageEntity> = entities.iter().collect();
        sorted.sort_by_key(|e| (e.offset, std::cmp::Reverse(e.length)));
        Entities {
            sorted,
            next: 0,
            active: Vec::new(),
        }
    }

    /// The entities of the piece `[from, to)` (UTF-16 offsets in the whole
    /// text), relative to the piece.
    fn slice(&mut self, from: usize, to: usize) -> Vec<MessageEntity> {
        while self.next < self.sorted.len() && self.sorted[self.next].offset < to {
            self.active.push(self.sorted[self.next]);
            self.next += 1;
        }
        let mut piece = Vec::new();
        for e in &self.active {
            let start = e.offset.max(from);
            let end = e.offset.saturating_add(e.length).min(to);
            if end > start {
                piece.push(MessageEntity::new(e.kind.clone(), start - from, end - start));
            }
        }
        self.active.retain(|e| e.offset.saturating_add(e.length) > to);
        piece.sort_by_key(|e| (e.offset, std::cmp::Reverse(e.length)));
        piece
    }
}

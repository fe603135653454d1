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
enum CutKind {
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
    kind: CutKind,
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
        let cut = choose_cut(
            text,
            bytes,
            start,
            start_units,
            limit,
            text_end,
            &code,
            &mut code_at,
        );
        if cut.content_end > start {
            let piece_text = text[start..cut.content_end].to_owned();
            let piece_entities = entities.slice(start_units, cut.content_units);
            pieces.push(Rendered {
                text: piece_text,
                entities: piece_entities,
            });
        }
        skip_spaces = cut.kind == CutKind::Space;
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
            let kind = cut_kind(c, &bytes[i + 1..], inside);
            let cut = Cut {
                at: i,
                at_units: units,
                content_end,
                content_units,
                kind,
            };
            best[usize::from(inside)][kind as usize] = Some(cut);
            if kind != CutKind::Char {
                best[usize::from(inside)][CutKind::Char as usize] = Some(Cut {
                    kind: CutKind::Char,
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
                kind: CutKind::Space,
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
        kind: CutKind::Char,
    }
}

/// What a cut before `c` (followed by `after`) would break: a paragraph,
/// a line, a space or a run of text. Inside code a blank line is just a
/// line break.
fn cut_kind(c: char, after: &[u8], inside: bool) -> CutKind {
    if c == '\n' {
        let blank = after.first() == Some(&b'\n') || after.starts_with(b"\r\n");
        if blank && !inside {
            CutKind::Paragraph
        } else {
            CutKind::Line
        }
    } else if c.is_whitespace() {
        CutKind::Space
    } else {
        CutKind::Char
    }
}

/// The best cut by the order documented on [`split`].
fn pick(best: &[[Option<Cut>; 4]; 2], limit: usize, start_units: usize) -> Option<Cut> {
    let [outside, inside] = best;
    let full = |cut: &&Cut| (cut.content_units - start_units) * 2 >= limit;
    let line = CutKind::Line as usize;
    let space = CutKind::Space as usize;
    let chars = CutKind::Char as usize;
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
        .filter(|e| {
            matches!(
                e.kind,
                MessageEntityKind::Pre { .. } | MessageEntityKind::Code
            )
        })
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
                piece.push(MessageEntity::new(
                    e.kind.clone(),
                    start - from,
                    end - start,
                ));
            }
        }
        self.active
            .retain(|e| e.offset.saturating_add(e.length) > to);
        piece.sort_by_key(|e| (e.offset, std::cmp::Reverse(e.length)));
        piece
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate;
    use super::*;

    fn pre(language: &str, offset: usize, length: usize) -> MessageEntity {
        MessageEntity::pre(Some(language.to_owned()), offset, length)
    }

    fn texts(pieces: &[Rendered]) -> Vec<&str> {
        pieces.iter().map(|p| p.text.as_str()).collect()
    }

    #[track_caller]
    fn check(rendered: &Rendered, limit: usize, pieces: &[Rendered]) {
        for (i, p) in pieces.iter().enumerate() {
            assert!(p.units() <= limit.max(2), "piece {i}: {} units", p.units());
            assert!(!p.text.trim().is_empty(), "piece {i} empty");
            assert_eq!(
                p.text.trim_end(),
                p.text,
                "piece {i} has trailing whitespace"
            );
            validate(&p.text, &p.entities).unwrap_or_else(|e| panic!("piece {i}: {e}"));
        }
        let kept: String = pieces
            .iter()
            .flat_map(|p| p.text.chars())
            .filter(|c| !c.is_whitespace())
            .collect();
        let all: String = rendered
            .text
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        assert_eq!(kept, all);
    }

    #[test]
    fn short_text_is_one_piece_and_blank_text_none() {
        let r = Rendered {
            text: "Hello world".into(),
            entities: vec![MessageEntity::bold(0, 5)],
        };
        assert_eq!(split(&r, 4096), vec![r.clone()]);
        assert!(split(&Rendered::plain(" \n\n\t "), 4096).is_empty());
        assert!(split(&Rendered::default(), 4096).is_empty());
    }

    #[test]
    fn prefers_paragraph_then_line_then_space() {
        let r = Rendered::plain("aaaa bbbb\ncccc\n\ndddd eeee");
        assert_eq!(texts(&split(&r, 16)), ["aaaa bbbb\ncccc", "dddd eeee"]);
        let r = Rendered::plain("aaaa bbbb\ncccc dddd eeee");
        assert_eq!(texts(&split(&r, 16)), ["aaaa bbbb", "cccc dddd eeee"]);
        let r = Rendered::plain("aaaa bbbb cccc dddd");
        assert_eq!(texts(&split(&r, 12)), ["aaaa bbbb", "cccc dddd"]);
        let r = Rendered::plain("x".repeat(10));
        assert_eq!(texts(&split(&r, 4)), ["xxxx", "xxxx", "xx"]);
    }

    #[test]
    fn never_cuts_inside_a_surrogate_pair() {
        let r = Rendered::plain("😀".repeat(5));
        for limit in [2, 3, 5] {
            let pieces = split(&r, limit);
            check(&r, limit, &pieces);
            assert!(pieces.iter().all(|p| p.text.chars().all(|c| c == '😀')));
        }
        assert_eq!(split(&r, 3).len(), 5);
    }

    #[test]
    fn entities_are_sliced_with_the_text() {
        // "intro\n\n" then a bold run across the cut.
        let text = "intro text\n\nbold bold bold bold";
        let r = Rendered {
            text: text.into(),
            entities: vec![MessageEntity::bold(12, 19), MessageEntity::italic(0, 5)],
        };
        let pieces = split(&r, 19);
        check(&r, 19, &pieces);
        assert_eq!(texts(&pieces), ["intro text", "bold bold bold bold"]);
        assert_eq!(pieces[0].entities, vec![MessageEntity::italic(0, 5)]);
        assert_eq!(pieces[1].entities, vec![MessageEntity::bold(0, 19)]);
        // Cut inside the bold run: bold in both pieces.
        let pieces = split(&r, 16);
        check(&r, 16, &pieces);
        assert_eq!(texts(&pieces), ["intro text", "bold bold bold", "bold"]);
        assert_eq!(pieces[1].entities, vec![MessageEntity::bold(0, 14)]);
        assert_eq!(pieces[2].entities, vec![MessageEntity::bold(0, 4)]);
    }

    #[test]
    fn a_pre_block_cut_is_pre_in_both_pieces_cut_at_a_line() {
        let code = "fn a() {\n    one(1, 2);\n    two(3, 4);\n}";
        let text = format!("Look:\n\n{code}\n\nDone.");
        let r = Rendered {
            entities: vec![pre("rust", 7, code.len())],
            text,
        };
        let pieces = split(&r, 30);
        check(&r, 30, &pieces);
        assert_eq!(
            texts(&pieces),
            [
                "Look:\n\nfn a() {\n    one(1, 2);",
                "    two(3, 4);\n}\n\nDone."
            ]
        );
        assert_eq!(pieces[0].entities, vec![pre("rust", 7, 23)]);
        assert_eq!(pieces[1].entities, vec![pre("rust", 0, 16)]);
    }

    #[test]
    fn a_break_outside_code_beats_one_inside() {
        // The limit could cut inside the block at a line; the paragraph
        // break before the block fills half the piece and wins.
        let code = "x = 1\ny = 2\nz = 3";
        let text = format!("{}\n\n{code}", "word ".repeat(5).trim_end());
        let r = Rendered {
            entities: vec![pre("py", 26, code.len())],
            text,
        };
        let pieces = split(&r, 36);
        check(&r, 36, &pieces);
        assert_eq!(
            texts(&pieces),
            ["word word word word word", "x = 1\ny = 2\nz = 3"]
        );
        assert_eq!(pieces[1].entities, vec![pre("py", 0, code.len())]);
    }

    #[test]
    fn inside_code_a_line_beats_a_space() {
        let code = "let a = 1; let b = 2;\nlet c = 3;";
        let r = Rendered {
            entities: vec![pre("rust", 0, code.len())],
            text: code.into(),
        };
        let pieces = split(&r, 25);
        assert_eq!(texts(&pieces), ["let a = 1; let b = 2;", "let c = 3;"]);
        check(&r, 25, &pieces);
    }

    #[test]
    fn leading_whitespace_only_window_gives_no_empty_piece() {
        let r = Rendered::plain(format!("{}x", " ".repeat(30)));
        let pieces = split(&r, 10);
        check(&r, 10, &pieces);
        assert_eq!(texts(&pieces), ["x"]);
    }

    #[test]
    fn malformed_entities_do_not_panic() {
        let r = Rendered {
            text: "abc def ghi".into(),
            entities: vec![
                MessageEntity::bold(usize::MAX - 1, 5),
                MessageEntity::italic(2, 100),
                MessageEntity::code(9, 0),
            ],
        };
        for limit in [0, 1, 2, 5, 4096] {
            let pieces = split(&r, limit);
            assert!(!pieces.is_empty());
        }
    }
}

//! Splitting long replies into messages that fit Telegram's text limit.
//!
//! Telegram rejects text messages longer than [`TELEGRAM_TEXT_LIMIT`]
//! characters, where a "character" is a UTF-16 code unit (an emoji outside
//! the Basic Multilingual Plane counts twice). [`split_message`] cuts a long
//! text into pieces that each fit, preferring natural boundaries and keeping
//! fenced code blocks (lines starting with three backticks) intact, or at
//! least well-formed, in every piece.

/// Maximum length of a Telegram text message, in UTF-16 code units.
pub const TELEGRAM_TEXT_LIMIT: usize = 4096;

/// Below this limit there is no room for a reopened and a closed fence plus
/// content, so fence lines are treated as plain text.
const MIN_FENCE_AWARE_LIMIT: usize = 32;

/// Marker that starts a fence line.
const FENCE: &str = "```";

/// Appended to a piece that is cut inside a code block.
const CLOSE: &str = "\n```";

/// Kinds of cut points, best first.
#[derive(Clone, Copy)]
enum Kind {
    Paragraph = 0,
    Line = 1,
    Space = 2,
    Char = 3,
}

/// A possible cut of the remaining text.
#[derive(Clone, Copy)]
struct Cut<'a> {
    /// Byte index where the piece ends (before trimming trailing whitespace).
    end: usize,
    /// Byte index where the next piece starts.
    next: usize,
    /// UTF-16 length of `rest[..end].trim_end()`.
    len: usize,
    /// Opening line of the code block the cut falls inside, if any.
    fence: Option<&'a str>,
}

/// Splits `text` into pieces of at most `limit` UTF-16 code units each.
///
/// Text within the limit comes back as one unchanged piece; empty or
/// whitespace-only text gives no pieces. Longer text is cut preferably at a
/// paragraph boundary (`\n\n`), else at a line boundary, else at a space,
/// else between two chars (never inside a char, hence never inside a UTF-16
/// surrogate pair; a multi-char grapheme such as a flag may be separated).
/// Boundaries outside fenced code blocks win over those inside; when a code
/// block has to be cut, the piece ends with a closing fence line and the next
/// piece reopens the block with the same opening line (e.g. ```` ```rust ````),
/// all within the limit. Newlines around a cut are trimmed, no piece is
/// empty, and no non-whitespace content is lost.
///
/// A `limit` below 2 is treated as 2 so that every char fits. Fences are
/// handled only for limits of at least 32, and an opening line longer than a
/// quarter of the limit is reopened as a bare fence.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let limit = limit.max(2);
    if units(text) <= limit {
        return vec![text.to_owned()];
    }
    let fence_aware = limit >= MIN_FENCE_AWARE_LIMIT;
    let mut pieces = Vec::new();
    let mut rest = text;
    let mut reopen: Option<String> = None;
    loop {
        rest = rest.trim_start_matches(['\n', '\r']);
        if rest.trim().is_empty() {
            break;
        }
        let mut piece = reopen
            .as_deref()
            .map(|l| format!("{l}\n"))
            .unwrap_or_default();
        let budget = limit - units(&piece);
        let tail = rest.trim_end();
        if units(tail) <= budget {
            piece.push_str(tail);
            pieces.push(piece);
            break;
        }
        let cut = choose_cut(rest, reopen.as_deref(), budget, fence_aware)
            .unwrap_or_else(|| hard_cut(rest, budget));
        let body = rest[..cut.end].trim_end();
        let next_reopen = cut.fence.map(|open| reopen_line(open, limit));
        if !body.is_empty() {
            piece.push_str(body);
            if next_reopen.is_some() {
                piece.push_str(CLOSE);
            }
            pieces.push(piece);
        }
        rest = &rest[cut.next..];
        reopen = next_reopen;
        if reopen.is_some() {
            // Our added closing fence replaces a closing line that follows the cut.
            let trimmed = rest.trim_start_matches(['\n', '\r']);
            let (line, after) = trimmed.split_once('\n').unwrap_or((trimmed, ""));
            if line.trim() == FENCE {
                rest = after;
                reopen = None;
            }
        }
    }
    pieces
}

/// Length of `s` in UTF-16 code units, as Telegram counts it.
fn units(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

fn is_fence_line(line: &str) -> bool {
    line.trim_start().starts_with(FENCE)
}

/// The line that reopens a code block in the next piece.
fn reopen_line(open: &str, limit: usize) -> String {
    if units(open) <= limit / 4 {
        open.to_owned()
    } else {
        FENCE.to_owned()
    }
}

/// Scanning state of [`choose_cut`].
struct Scan<'a> {
    budget: usize,
    /// Furthest fitting cut per `[outside, inside][kind]`.
    best: [[Option<Cut<'a>>; 4]; 2],
    /// Opening line of the code block at the current position.
    open: Option<&'a str>,
    /// Byte index after which the current block's content starts.
    content_from: usize,
    /// UTF-16 length of the text before the current position, trailing
    /// whitespace excluded.
    len: usize,
    /// Byte index just after the last non-whitespace char seen.
    content_end: usize,
}

impl<'a> Scan<'a> {
    /// Records a cut ending at `end` if its piece fits and is not empty.
    fn consider(&mut self, kind: Kind, end: usize, next: usize) {
        let inside = self.open.is_some();
        let close = if inside { units(CLOSE) } else { 0 };
        // A piece cut inside a block must hold some of the block's content.
        let has_content = self.len > 0 && (!inside || self.content_end > self.content_from);
        if has_content && self.len + close <= self.budget {
            self.best[usize::from(inside)][kind as usize] = Some(Cut {
                end,
                next,
                len: self.len,
                fence: self.open,
            });
        }
    }
}

/// Finds the best cut of `rest` whose piece fits in `budget` code units.
///
/// `carried` is the opening line of a code block that `rest` starts inside.
fn choose_cut<'a>(
    rest: &'a str,
    carried: Option<&'a str>,
    budget: usize,
    fence_aware: bool,
) -> Option<Cut<'a>> {
    let mut scan = Scan {
        budget,
        best: [[None; 4]; 2],
        open: carried,
        content_from: 0,
        len: 0,
        content_end: 0,
    };
    let mut used = 0; // UTF-16 length of rest[..i]
    let mut line_start = 0;
    let mut line_is_fence = false;
    for (i, c) in rest.char_indices() {
        if scan.len > budget {
            break;
        }
        if i == line_start {
            let line = rest[i..].split('\n').next().unwrap_or_default();
            line_is_fence = fence_aware && is_fence_line(line);
        }
        // Never cut inside a fence line.
        let within_fence_line = line_is_fence && i > line_start;
        if i > 0 && !within_fence_line {
            scan.consider(Kind::Char, i, i);
        }
        if c == '\n' {
            if line_is_fence {
                scan.open = match scan.open {
                    Some(_) => None,
                    None => {
                        scan.content_from = i;
                        Some(rest[line_start..i].trim_end())
                    }
                };
            }
            let paragraph = rest[i + 1..].trim_start_matches('\r').starts_with('\n');
            let kind = if paragraph {
                Kind::Paragraph
            } else {
                Kind::Line
            };
            scan.consider(kind, i, i + 1);
            line_start = i + 1;
        } else if c.is_whitespace() && !within_fence_line {
            scan.consider(Kind::Space, i, i + c.len_utf8());
        }
        used += c.len_utf16();
        if !c.is_whitespace() {
            scan.len = used;
            scan.content_end = i + c.len_utf8();
        }
    }
    pick(&scan.best[0], budget, false).or_else(|| pick(&scan.best[1], budget, true))
}

/// Picks the best kind of cut that fills at least half the budget, else the
/// best structural cut, else a cut between chars. Inside code a line break
/// always beats a space, since breaking a code line changes its meaning.
fn pick<'a>(cuts: &[Option<Cut<'a>>; 4], budget: usize, code: bool) -> Option<Cut<'a>> {
    let structural = if code { &cuts[..2] } else { &cuts[..3] };
    let structural = structural.iter().flatten();
    structural
        .clone()
        .find(|cut| cut.len * 2 >= budget)
        .or_else(|| structural.clone().next())
        .or(cuts[2].as_ref())
        .or(cuts[3].as_ref())
        .copied()
}

/// Last resort: the longest prefix that fits (at least one char), ignoring
/// fences. Only reached for fence lines that are longer than the budget.
fn hard_cut(rest: &str, budget: usize) -> Cut<'_> {
    let mut used = 0;
    let mut end = 0;
    for (i, c) in rest.char_indices() {
        if i > 0 && used + c.len_utf16() > budget {
            break;
        }
        used += c.len_utf16();
        end = i + c.len_utf8();
    }
    Cut {
        end,
        next: end,
        len: units(rest[..end].trim_end()),
        fence: None,
    }
}

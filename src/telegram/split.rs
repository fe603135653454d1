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
        if rest.trim_start().is_empty() {
            break;
        }
        let mut piece = reopen
            .as_deref()
            .map(|l| format!("{l}\n"))
            .unwrap_or_default();
        let budget = limit - units(&piece);
        let tail = rest.trim_end();
        if fits(tail, budget) {
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

/// Whether `s` is at most `budget` UTF-16 units long, reading no further
/// than the budget (the rest of a long text is measured once per piece, so
/// reading it all would make splitting quadratic).
fn fits(s: &str, budget: usize) -> bool {
    let mut used = 0;
    for c in s.chars() {
        used += c.len_utf16();
        if used > budget {
            return false;
        }
    }
    true
}

#[cfg(test)]
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
            // Only the line's start is read: finding its end could read
            // the whole rest of a text without newlines, once per piece.
            let indent = rest[i..]
                .find(|c: char| c == '\n' || !c.is_whitespace())
                .unwrap_or(rest.len() - i);
            line_is_fence = fence_aware && rest[i + indent..].starts_with(FENCE);
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = TELEGRAM_TEXT_LIMIT;

    fn fence_lines(piece: &str) -> usize {
        piece.lines().filter(|l| is_fence_line(l)).count()
    }

    /// Non-whitespace chars, optionally without fence lines.
    fn content(s: &str, skip_fences: bool) -> String {
        s.lines()
            .filter(|l| !(skip_fences && is_fence_line(l)))
            .flat_map(str::chars)
            .filter(|c| !c.is_whitespace())
            .collect()
    }

    /// Checks the invariants every split must satisfy.
    fn check(text: &str, limit: usize, pieces: &[String]) {
        let fence_aware = limit >= MIN_FENCE_AWARE_LIMIT;
        for (i, piece) in pieces.iter().enumerate() {
            assert!(
                units(piece) <= limit,
                "piece {i} has {} units > {limit}: {piece:?}",
                units(piece)
            );
            assert!(!piece.trim().is_empty(), "piece {i} is empty");
            if pieces.len() > 1 {
                assert!(
                    !piece.starts_with('\n') && !piece.ends_with('\n'),
                    "{piece:?}"
                );
            }
            if fence_aware && fence_lines(text).is_multiple_of(2) {
                assert!(
                    fence_lines(piece).is_multiple_of(2),
                    "unbalanced piece {i}: {piece:?}"
                );
            }
        }
        let joined = pieces.join("\n");
        assert_eq!(content(&joined, fence_aware), content(text, fence_aware));
    }

    fn paragraphs(total: usize, seed: &str) -> String {
        let mut text = String::new();
        let mut n = 0;
        while text.len() < total {
            let mut paragraph = format!("{seed} paragraph {n}:");
            while paragraph.len() < 280 {
                paragraph.push_str(" lorem ipsum");
            }
            paragraph.push_str(" end.\n\n");
            text.push_str(&paragraph);
            n += 1;
        }
        text.truncate(total);
        text
    }

    fn code_block(lang: &str, total: usize) -> String {
        let mut block = format!("```{lang}\n");
        let mut n = 0;
        while block.len() < total - 4 {
            block.push_str(&format!("    let value_{n} = compute({n}) + 1;\n"));
            n += 1;
        }
        block.push_str("```");
        block
    }

    #[test]
    fn short_text_is_one_unchanged_piece() {
        let text = "\nHello, *world*!\n\nSecond paragraph.  \n";
        assert_eq!(split_message(text, LIMIT), vec![text.to_owned()]);
    }

    #[test]
    fn empty_or_blank_text_gives_no_pieces() {
        assert!(split_message("", LIMIT).is_empty());
        assert!(split_message(" \n\n\t ", LIMIT).is_empty());
    }

    #[test]
    fn text_of_exactly_the_limit_is_not_split() {
        let text = "😀".repeat(LIMIT / 2);
        assert_eq!(split_message(&text, LIMIT), vec![text.clone()]);
        let longer = format!("{text}a");
        assert_eq!(split_message(&longer, LIMIT).len(), 2);
    }

    #[test]
    fn length_is_counted_in_utf16_units() {
        // 3000 chars but 6000 UTF-16 units.
        let text = "😀".repeat(3000);
        let pieces = split_message(&text, LIMIT);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].chars().count(), LIMIT / 2);
        check(&text, LIMIT, &pieces);
    }

    #[test]
    fn five_thousand_chars_of_paragraphs_give_two_pieces_cut_at_a_paragraph() {
        let text = paragraphs(5000, "Alpha");
        let pieces = split_message(&text, LIMIT);
        assert_eq!(pieces.len(), 2);
        assert!(
            pieces[0].ends_with("end."),
            "{:?}",
            &pieces[0][pieces[0].len() - 20..]
        );
        assert!(pieces[1].starts_with("Alpha paragraph"));
        check(&text, LIMIT, &pieces);
    }

    #[test]
    fn prefers_a_line_boundary_when_there_is_no_paragraph() {
        let text = "word ".repeat(30).trim_end().to_owned() + "\n";
        let text = text.repeat(40);
        let pieces = split_message(&text, 1000);
        assert!(pieces.len() > 1);
        for piece in &pieces {
            assert!(piece.ends_with("word"));
            assert_eq!(piece.lines().next().map(str::len), Some(149));
        }
        check(&text, 1000, &pieces);
    }

    #[test]
    fn prefers_a_space_when_there_is_no_newline() {
        let text = "abcdefghi ".repeat(100);
        let pieces = split_message(&text, 95);
        for piece in &pieces {
            assert!(piece.ends_with("abcdefghi") && piece.starts_with("abcdefghi"));
        }
        check(&text, 95, &pieces);
    }

    #[test]
    fn cuts_between_chars_when_there_is_no_whitespace() {
        let text = "x".repeat(10_000);
        let pieces = split_message(&text, LIMIT);
        let lens: Vec<usize> = pieces.iter().map(String::len).collect();
        assert_eq!(lens, vec![4096, 4096, 1808]);
    }

    #[test]
    fn emoji_and_surrogate_pairs_are_never_split() {
        let text = "a😀bц字🎉".repeat(1500);
        for limit in [2, 3, 5, 7, 31, 32, 33, 101, LIMIT] {
            let pieces = split_message(&text, limit);
            check(&text, limit, &pieces);
            assert_eq!(pieces.concat(), text, "limit {limit}");
        }
    }

    #[test]
    fn code_block_in_the_middle_lands_intact() {
        let block = code_block("rust", 1500);
        // The limit falls after the block ...
        let text = format!(
            "{}\n\n{block}\n\n{}",
            paragraphs(1800, "Before"),
            paragraphs(1700, "After")
        );
        // ... or inside it.
        let late = format!(
            "{}\n\n{block}\n\n{}",
            paragraphs(3000, "Before"),
            paragraphs(500, "After")
        );
        for text in [text, late] {
            assert!((4900..5100).contains(&text.len()));
            let pieces = split_message(&text, LIMIT);
            assert_eq!(pieces.len(), 2);
            assert!(pieces.iter().any(|p| p.contains(&block)), "{pieces:#?}");
            check(&text, LIMIT, &pieces);
        }
    }

    #[test]
    fn long_code_block_is_closed_and_reopened_in_every_piece() {
        let block = code_block("rust", 10_000);
        let text = format!("Here you go:\n\n{block}\n\nDone.");
        let pieces = split_message(&text, LIMIT);
        assert!(pieces.len() >= 3, "{}", pieces.len());
        assert_eq!(pieces[0], "Here you go:");
        let code_pieces = &pieces[1..];
        for (i, piece) in code_pieces.iter().enumerate() {
            assert!(piece.starts_with("```rust\n"), "piece {i}");
            if i + 1 < code_pieces.len() {
                assert!(piece.ends_with("\n```"), "piece {i}");
            }
        }
        assert!(code_pieces.last().unwrap().ends_with("```\n\nDone."));
        // Dropping the added fences gives back the original code lines.
        let code: Vec<&str> = code_pieces
            .iter()
            .flat_map(|p| p.lines())
            .filter(|l| !is_fence_line(l) && *l != "Done." && !l.is_empty())
            .collect();
        let original: Vec<&str> = block.lines().filter(|l| !is_fence_line(l)).collect();
        assert_eq!(code, original);
        check(&text, LIMIT, &pieces);
    }

    #[test]
    fn a_cut_just_before_the_closing_fence_does_not_leave_an_empty_block() {
        // Piece 1 is cut inside the block right before its closing line.
        let text = format!("```\n{}\n```\nafter", "y".repeat(40));
        let pieces = split_message(&text, 48);
        assert_eq!(
            pieces,
            vec![format!("```\n{}\n```", "y".repeat(40)), "after".into()]
        );
        // Piece 1 cannot even end after the opening line with no content.
        let text = format!("intro\n```\n{}\n```", "z ".repeat(30));
        for piece in split_message(&text, 40) {
            assert!(!piece.contains("```\n```"), "{piece:?}");
        }
    }

    #[test]
    fn inside_code_a_line_break_beats_a_space() {
        let text = "Intro.\n\n```python\ndef f(x):\n    return x + 1\n\n\ndef g(y):\n    return f(y) * 2\n```\n\nAfter the code comes a sentence.";
        let pieces = split_message(text, 40);
        assert_eq!(
            pieces,
            vec![
                "Intro.",
                "```python\ndef f(x):\n    return x + 1\n```",
                "```python\ndef g(y):\n```",
                "```python\n    return f(y) * 2\n```",
                "After the code comes a sentence.",
            ]
        );
        check(text, 40, &pieces);
    }

    #[test]
    fn newlines_at_a_cut_are_trimmed() {
        let text = format!("{}\n\n\n\n{}\n", "a".repeat(30), "b".repeat(30));
        assert_eq!(
            split_message(&text, 40),
            vec!["a".repeat(30), "b".repeat(30)]
        );
    }

    /// xorshift64*, good enough for test inputs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn random_text(rng: &mut Rng) -> String {
        const WORDS: [&str; 8] = [
            "lorem",
            "ipsum",
            "привет",
            "字字",
            "😀",
            "🇺🇦",
            "a",
            "mid-word",
        ];
        let mut text = String::new();
        let target = rng.below(3000);
        while text.len() < target {
            match rng.below(20) {
                0 => text.push_str("\n\n"),
                1 | 2 => text.push('\n'),
                3 => {
                    let lang = ["", "rust", "python", "sh"][rng.below(4)];
                    text.push_str(&format!("\n```{lang}\n"));
                    for _ in 0..rng.below(40) {
                        let indent = " ".repeat(rng.below(8));
                        text.push_str(&format!("{indent}code {}\n", rng.next() % 1000));
                        if rng.below(10) == 0 {
                            text.push('\n');
                        }
                    }
                    text.push_str("```\n");
                }
                4 => text.push_str(&"x".repeat(rng.below(300))),
                _ => {
                    text.push_str(WORDS[rng.below(WORDS.len())]);
                    text.push(' ');
                }
            }
        }
        text
    }

    #[test]
    fn pseudo_random_inputs_keep_limits_fences_and_content() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..600 {
            let text = random_text(&mut rng);
            let limit = match round % 3 {
                0 => 2 + rng.below(40),
                1 => 32 + rng.below(300),
                _ => 300 + rng.below(2000),
            };
            let pieces = split_message(&text, limit);
            check(&text, limit, &pieces);
            if limit < MIN_FENCE_AWARE_LIMIT {
                // Nothing is added: the pieces are the text minus whitespace at cuts.
                assert_eq!(content(&pieces.concat(), false), content(&text, false));
            }
        }
    }
}

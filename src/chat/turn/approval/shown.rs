//! What an agent's values look like in a question: every character that
//! would not show in a message written out, so nothing can hide or reorder
//! what follows it. Shared by the question (`question.rs`) and the summary
//! of an ACP request (`request.rs`).

use serde_json::Value;

/// The longest run of spaces a command shows as it is; a longer one is
/// written out (`⟦U+0020 ×700⟧`), so it cannot push what follows out of
/// sight.
const SHOWN_SPACES: usize = 8;

/// A command as a question shows it: its bytes, none folded or dropped,
/// with what would not show written out: as [`visible`], and also every
/// tab, every blank ending a line or the command (`\␠⏎` is not the
/// continuation `\⏎`), and a run of more than [`SHOWN_SPACES`] spaces.
pub(super) fn visible_command(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    for (i, line) in command.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let body = line.trim_end_matches([' ', '\t']);
        let mut rest = body;
        while let Some(at) = rest.find([' ', '\t']) {
            out.push_str(&visible(&rest[..at]));
            let blank = if rest[at..].starts_with(' ') {
                ' '
            } else {
                '\t'
            };
            let run = rest[at..].len() - rest[at..].trim_start_matches(blank).len();
            if blank == ' ' && run <= SHOWN_SPACES {
                out.push_str(&rest[at..at + run]);
            } else {
                out.push_str(&mark(blank, run));
            }
            rest = &rest[at + run..];
        }
        out.push_str(&visible(rest));
        let mut tail = line[body.len()..].chars().peekable();
        while let Some(c) = tail.next() {
            let mut n = 1;
            while tail.next_if_eq(&c).is_some() {
                n += 1;
            }
            out.push_str(&mark(c, n));
        }
    }
    out
}

/// `c`, `n` times over, written out: `⟦U+0009⟧`, `⟦U+0020 ×3⟧`.
pub(super) fn mark(c: char, n: usize) -> String {
    crate::chat::notices::approval::hidden(c, n)
}

/// Whether `c` would not show in a message (or would change how what
/// follows shows): controls other than line breaks and tabs, Unicode
/// spaces other than the plain one, zero-width, direction and other format
/// characters, variation selectors, tag characters, and the combining
/// marks that lay themselves over their neighbours (diacritics for symbols,
/// half marks, enclosing marks).
fn hidden(c: char) -> bool {
    match c {
        ' ' | '\n' | '\t' => false,
        c if c.is_control() || c.is_whitespace() => true,
        '\u{00AD}'
        | '\u{0300}'..='\u{036F}'
        | '\u{0488}'
        | '\u{0489}'
        | '\u{1AB0}'..='\u{1AFF}'
        | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}'
        | '\u{FE20}'..='\u{FE2F}'
        | '\u{061C}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{17B4}'
        | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}'
        | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFFB}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}' => true,
        _ => false,
    }
}

/// `text` as a question shows it: each character that would not show is
/// written out as `⟦U+202E⟧`, a run of the same one as `⟦U+00A0 ×700⟧`, so
/// nothing can hide, or reorder, what follows it.
pub(super) fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        let mut n = 1;
        while chars.next_if_eq(&c).is_some() {
            n += 1;
        }
        out.push_str(&mark(c, n));
    }
    out
}

/// A field of the input shown whole: text as it is (made visible), any
/// other value as JSON.
pub(super) fn shown_value(value: &Value) -> String {
    match value {
        Value::String(text) => visible(text),
        other => visible(&other.to_string()),
    }
}

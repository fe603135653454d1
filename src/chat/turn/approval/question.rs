//! An ask as the chat sees it: the question's text (the whole input, made
//! visible), its buttons, the file that carries what does not fit, and what
//! "always in this chat" remembers.

use std::io::Read;

use serde_json::Value;

use super::{QUESTION_PREFIX, TOOL_PREFIX};
use crate::agent::PermissionAsk;
use crate::agent::tools::ToolName;
use crate::chat::notices::bounded;
use crate::state::{AlwaysGrant, AlwaysRule};
use crate::telegram::format::TELEGRAM_TEXT_LIMIT;
use crate::telegram::outbox::{Button, QuestionFile};

/// Room a question's message keeps for the decision its edit appends
/// ("✅ Allowed by …"), so the edited question is not cut either.
pub(super) const VERDICT_ROOM: usize = 256;

/// The longest label on an option's button; the question's text lists a
/// longer one whole.
pub(super) const BUTTON_LABEL: usize = 60;

/// One question of an `AskUserQuestion` call.
#[derive(Debug, Clone)]
pub(super) struct Question {
    /// The question text (the key of its answer).
    pub(super) text: String,
    /// Option labels (the answer is one of them).
    pub(super) options: Vec<String>,
    /// Each option's description ("" when it has none), shown in the text.
    pub(super) descriptions: Vec<String>,
}

/// What "always in this chat" remembers for a call: for Bash, the exact
/// command (whitespace runs collapsed), nothing wider; for any other tool,
/// its name. `None` for a Bash call without a command.
pub(super) fn rule_for(tool: &str, input: &Value) -> Option<AlwaysRule> {
    match tool {
        "Bash" => input
            .get("command")
            .and_then(Value::as_str)
            .map(|command| AlwaysRule::BashCommand(collapse(command))),
        other => Some(AlwaysRule::Tool(other.to_string())),
    }
}

/// Whether a rule granted in the chat lets this call run without asking.
pub(super) fn always_allows(grants: &[AlwaysGrant], tool: &str, input: &Value) -> bool {
    rule_for(tool, input).is_some_and(|rule| grants.iter().any(|g| g.rule == rule))
}

/// A rule as `/permissions` lists it.
pub(crate) fn describe_rule(rule: &AlwaysRule) -> String {
    match rule {
        AlwaysRule::Tool(name) => format!("{} (every call)", visible(name)),
        AlwaysRule::BashCommand(command) => format!("Bash, exactly: $ {}", visible(command)),
    }
}

/// A Bash command as shown and remembered: every run of blanks (spaces,
/// tabs) and line breaks becomes one line break when it holds one and one
/// space otherwise; none is kept at either end. Nothing else changes: other
/// characters, even Unicode spaces, are not blanks to the shell.
pub(super) fn collapse(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    // Inside a run: whether it held a line break.
    let mut run: Option<bool> = None;
    for c in command.chars() {
        if matches!(c, ' ' | '\t' | '\n') {
            run = Some(run.unwrap_or(false) || c == '\n');
            continue;
        }
        if let Some(newline) = run.take()
            && !out.is_empty()
        {
            out.push(if newline { '\n' } else { ' ' });
        }
        out.push(c);
    }
    out
}

/// Whether `c` would not show in a message (or would change how what
/// follows shows): controls other than line breaks and tabs, Unicode
/// spaces other than the plain one, zero-width, direction and other format
/// characters, variation selectors and tag characters.
pub(super) fn hidden(c: char) -> bool {
    match c {
        ' ' | '\n' | '\t' => false,
        c if c.is_control() || c.is_whitespace() => true,
        '\u{00AD}'
        | '\u{034F}'
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
    use std::fmt::Write as _;
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
        let _ = if n == 1 {
            write!(out, "⟦U+{:04X}⟧", u32::from(c))
        } else {
            write!(out, "⟦U+{:04X} ×{n}⟧", u32::from(c))
        };
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

/// The input's fields other than `skip`, one `name: value` line each.
pub(super) fn other_fields(input: &Value, skip: &[&str]) -> String {
    let Some(fields) = input.as_object() else {
        return if input.is_null() {
            String::new()
        } else {
            format!("\n{}", shown_value(input))
        };
    };
    fields
        .iter()
        .filter(|(name, _)| !skip.contains(&name.as_str()))
        .map(|(name, value)| format!("\n{}: {}", visible(name), shown_value(value)))
        .collect()
}

/// What the tool would do, in full: nothing of the input is left out or
/// cut (a Bash command has its whitespace runs collapsed).
pub(crate) fn summary(tool: &ToolName, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let text = |name: &str| visible(field(name).unwrap_or(""));
    match tool.bare() {
        "Bash" if field("command").is_some() => format!(
            "$ {}{}",
            visible(&collapse(field("command").unwrap_or(""))),
            other_fields(input, &["command"])
        ),
        "Edit" if field("file_path").is_some() => format!(
            "{}\n- {}\n+ {}{}",
            text("file_path"),
            text("old_string"),
            text("new_string"),
            other_fields(input, &["file_path", "old_string", "new_string"])
        ),
        "Write" if field("file_path").is_some() && field("content").is_some() => {
            let content = field("content").unwrap_or("");
            format!(
                "{} ({} bytes):\n{}{}",
                text("file_path"),
                content.len(),
                visible(content),
                other_fields(input, &["file_path", "content"])
            )
        }
        "WebFetch" if field("url").is_some() => {
            format!("{}{}", text("url"), other_fields(input, &["url"]))
        }
        _ => other_fields(input, &[])
            .trim_start_matches('\n')
            .to_string(),
    }
}

/// The message a question goes in and, when the whole question does not
/// fit one (with room for the decision), the text file that holds it
/// whole, sent first; the message then says where the whole is.
pub(super) fn presented(
    whole: String,
    subject: &str,
    file_name: &str,
) -> (String, Option<QuestionFile>) {
    if whole.encode_utf16().count() + VERDICT_ROOM <= TELEGRAM_TEXT_LIMIT {
        return (whole, None);
    }
    let text = format!(
        "{subject}\nIt is too long for a message ({} characters): the whole of it is in {file_name} above. Read it before you answer.",
        whole.chars().count()
    );
    let file = QuestionFile {
        name: file_name.to_string(),
        caption: format!("The whole of: {subject}"),
        text: whole,
    };
    (text, Some(file))
}

/// One message of a question: its text, the file sent before it when the
/// whole does not fit, its buttons.
pub(super) struct Asked {
    pub(super) text: String,
    pub(super) file: Option<QuestionFile>,
    pub(super) keyboard: Vec<Vec<Button>>,
}

/// The question for a tool call: the tool and its whole input, with
/// **Allow**, **Always in this chat** (when `always` can be remembered) and
/// **Deny**.
pub(super) fn tool_message(ask: &PermissionAsk, always: bool, token: &str) -> Asked {
    let button = |label: &str, c: &str| Button {
        label: label.into(),
        data: format!("{TOOL_PREFIX}:{token}:{c}"),
    };
    let tool = visible(ask.tool.full());
    let whole = format!(
        "🔐 The agent asks to use {tool}:\n{}",
        summary(&ask.tool, &ask.input)
    );
    let file = if ask.tool.bare() == "Bash" {
        "command.txt"
    } else {
        "input.txt"
    };
    let (text, file) = presented(whole, &format!("🔐 The agent asks to use {tool}."), file);
    let mut first = vec![button("Allow", "y")];
    if always {
        first.push(button("Always in this chat", "a"));
    }
    Asked {
        text,
        file,
        keyboard: vec![first, vec![button("Deny", "n")]],
    }
}

/// One message per `AskUserQuestion` question, an option per button; the
/// text lists the options whole when one has a description or a label too
/// long for its button.
pub(super) fn question_messages(questions: &[Question], token: &str) -> Vec<Asked> {
    questions
        .iter()
        .enumerate()
        .map(|(qi, q)| {
            let mut whole = format!("❓ {}", visible(&q.text));
            let listed = q.options.iter().any(|o| o.chars().count() > BUTTON_LABEL)
                || q.descriptions.iter().any(|d| !d.is_empty());
            if listed {
                for (label, about) in q.options.iter().zip(&q.descriptions) {
                    whole.push_str(&format!("\n• {}", visible(label)));
                    if !about.is_empty() {
                        whole.push_str(&format!(": {}", visible(about)));
                    }
                }
            }
            let keyboard = q
                .options
                .iter()
                .enumerate()
                .map(|(oi, label)| {
                    vec![Button {
                        label: bounded(&visible(label), BUTTON_LABEL),
                        data: format!("{QUESTION_PREFIX}:{token}:{qi}:{oi}"),
                    }]
                })
                .collect();
            let (text, file) = presented(whole, "❓ The agent asks a question.", "question.txt");
            Asked {
                text,
                file,
                keyboard,
            }
        })
        .collect()
}

/// 128 random bits as hex, from the OS.
pub(super) fn token() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // Never reached on Linux; still no predictable token: hash fresh
        // random keys with the time.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `AskUserQuestion` questions, when the input has them.
pub(super) fn questions(input: &Value) -> Option<Vec<Question>> {
    let list = input.get("questions")?.as_array()?;
    let questions: Vec<Question> = list
        .iter()
        .filter_map(|q| {
            let text = q.get("question")?.as_str()?.to_string();
            let (options, descriptions): (Vec<String>, Vec<String>) = q
                .get("options")?
                .as_array()?
                .iter()
                .filter_map(|o| {
                    let label = o.get("label").and_then(Value::as_str)?.to_string();
                    let about = o.get("description").and_then(Value::as_str);
                    Some((label, about.unwrap_or("").to_string()))
                })
                .unzip();
            (!options.is_empty()).then_some(Question {
                text,
                options,
                descriptions,
            })
        })
        .collect();
    (!questions.is_empty() && questions.len() == list.len()).then_some(questions)
}

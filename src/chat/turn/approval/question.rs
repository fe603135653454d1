//! An ask as the chat sees it: the question's text (the whole input, made
//! visible), its buttons, the file that carries what does not fit, and what
//! "always in this chat" remembers.

use crate::chat::notices::approval as texts;
use std::io::Read;

use serde_json::Value;

use super::request::request_summary;
use super::shown::{mark, shown_value, visible, visible_command};
use crate::agent::tools::ToolName;
use crate::agent::{PermissionAsk, Remember};
use crate::chat::notices::bounded;
use crate::chat::turn::Sender;
use crate::incoming::{Approval, Callback, Choice};
use crate::state::{AlwaysGrant, AlwaysRule};
use crate::telegram::format::TELEGRAM_TEXT_LIMIT;
use crate::telegram::outbox::{Button, ButtonStyle, QuestionFile};

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

/// What "always in this chat" remembers for a call. Named by the agent's
/// CLI: for Bash, the exact command, byte for byte; for any other tool,
/// its name. Named by the agent's own words (an ACP request): the whole
/// request, byte for byte, or nothing. `None` when nothing can be named
/// (a Bash call without a command, a request a question cannot show).
pub(super) fn rule_for(ask: &PermissionAsk) -> Option<AlwaysRule> {
    match ask.remember {
        Remember::Never | Remember::Once => None,
        Remember::Exactly => Some(AlwaysRule::Request(ask.input.to_string())),
        Remember::ByTool => match ask.tool.full() {
            "Bash" => ask
                .input
                .get("command")
                .and_then(Value::as_str)
                .map(|command| AlwaysRule::BashCommand(command.to_owned())),
            other => Some(AlwaysRule::Tool(other.to_string())),
        },
    }
}

/// Whether a rule granted in the conversation lets this call run without
/// asking: the very rule it would remember, compared byte for byte.
pub(super) fn always_allows(grants: &[AlwaysGrant], ask: &PermissionAsk) -> bool {
    rule_for(ask).is_some_and(|rule| grants.iter().any(|g| g.rule == rule))
}

/// A rule as `/permissions` lists it.
pub(crate) fn describe_rule(rule: &AlwaysRule) -> String {
    match rule {
        AlwaysRule::Tool(name) => format!("{} (every call)", visible(name)),
        AlwaysRule::BashCommand(command) => {
            format!("Bash, exactly: $ {}", visible_command(command))
        }
        AlwaysRule::Request(request) => format!("exactly this request: {}", visible(request)),
    }
}

/// A rule as logged at INFO: its kind, its length and a fingerprint
/// (SipHash, for telling log lines apart), never its text, which can hold
/// a secret (the whole text is logged at DEBUG only).
pub(super) fn logged_rule(rule: &AlwaysRule) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let (kind, text) = match rule {
        AlwaysRule::Tool(name) => return format!("tool {}", visible(name)),
        AlwaysRule::BashCommand(command) => ("bash command", command),
        AlwaysRule::Request(request) => ("request", request),
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    format!("{kind} of {} bytes #{:016x}", text.len(), hasher.finish())
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

/// What the tool would do, in full: nothing of the input is left out,
/// cut or folded.
pub(crate) fn summary(tool: &ToolName, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    let text = |name: &str| visible(field(name).unwrap_or(""));
    match tool.bare() {
        "Bash" if field("command").is_some() => format!(
            "$ {}{}",
            visible_command(field("command").unwrap_or("")),
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
    let text = texts::too_long(subject, whole.chars().count(), file_name);
    let file = QuestionFile {
        name: file_name.to_string(),
        caption: texts::whole_of(subject),
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

/// The callback data of the button that answers the ask `token` with
/// `choice`.
pub(super) fn answer(token: &str, choice: Choice) -> String {
    let approval = Approval {
        token: token.to_owned(),
        choice,
    };
    Callback::Approval(approval).data()
}

/// The question for a tool call: the tool and its whole input, with
/// **Allow**, **Always in this chat** (when `always` can be remembered) and
/// **Deny**.
pub(super) fn tool_message(
    ask: &PermissionAsk,
    always: bool,
    project: &str,
    token: &str,
    whose: &str,
) -> Asked {
    let button =
        |label: &str, choice, style| Button::new(label, answer(token, choice)).styled(style);
    let tool = visible(ask.tool.full());
    let (whole, file) = match ask.remember {
        Remember::ByTool | Remember::Once => (
            texts::asks_to_use(whose, &tool, &summary(&ask.tool, &ask.input)),
            if ask.tool.bare() == "Bash" {
                "command.txt"
            } else {
                "input.txt"
            },
        ),
        Remember::Exactly | Remember::Never => {
            let never = if ask.remember == Remember::Never {
                texts::NO_ALWAYS
            } else {
                ""
            };
            (
                texts::asks_to_use(
                    whose,
                    &tool,
                    &format!("{}{never}", request_summary(&ask.input)),
                ),
                "request.txt",
            )
        }
    };
    let subject = texts::asks_to_use_subject(whose, &tool);
    let (text, file) = presented(whole, &subject, file);
    let mut first = vec![button(texts::ALLOW, Choice::Allow, ButtonStyle::Success)];
    if always {
        first.push(button(
            &always_label(project),
            Choice::Always,
            ButtonStyle::Success,
        ));
    }
    Asked {
        text,
        file,
        keyboard: vec![
            first,
            vec![button(texts::DENY, Choice::Deny, ButtonStyle::Danger)],
        ],
    }
}

/// What the "always" button says it covers: this conversation, and the
/// project it is in when it is in one (a rule never runs in another).
pub(super) fn always_label(project: &str) -> String {
    if project.is_empty() {
        texts::ALWAYS_HERE.to_string()
    } else {
        bounded(&texts::always_in_project(&visible(project)), BUTTON_LABEL)
    }
}

/// One message per `AskUserQuestion` question, an option per button; the
/// text lists the options whole when one has a description or a label too
/// long for its button.
pub(super) fn question_messages(questions: &[Question], token: &str, whose: &str) -> Vec<Asked> {
    questions
        .iter()
        .enumerate()
        .map(|(qi, q)| {
            let mut whole = texts::question(whose, &visible(&q.text));
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
                    vec![Button::new(
                        bounded(&visible(label), BUTTON_LABEL),
                        answer(
                            token,
                            Choice::Option {
                                question: qi,
                                option: oi,
                            },
                        ),
                    )]
                })
                .collect();
            let subject = texts::question_subject(whose);
            let (text, file) = presented(whole, &subject, "question.txt");
            Asked {
                text,
                file,
                keyboard,
            }
        })
        .collect()
}

/// The line a group's question begins with: whose messages the turn
/// answers, that led to the call (they, or an admin, decide it), each by
/// name and @username (or, with neither, user id; user 0 is the operator,
/// whose schedule ran), on one line, what would not show written out.
/// Empty in a private chat.
pub(super) fn whose(senders: &[Sender], group: bool) -> String {
    if !group || senders.is_empty() {
        return String::new();
    }
    let names: Vec<String> = senders
        .iter()
        .map(|s| {
            let shown = s.author.shown();
            if s.id.0 == 0 {
                "the operator (a schedule)".to_string()
            } else if shown.is_empty() {
                format!("user id {}", s.id.0)
            } else {
                one_line(&shown)
            }
        })
        .collect();
    texts::for_messages_from(&names.join(", "))
}

/// `text` made [`visible`], its line breaks written out too: a name
/// cannot start a line of its own in a question.
pub(super) fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut plain = String::new();
    for c in text.chars() {
        if c == '\n' || c == '\t' {
            out.push_str(&visible(&std::mem::take(&mut plain)));
            out.push_str(&mark(c, 1));
        } else {
            plain.push(c);
        }
    }
    out.push_str(&visible(&plain));
    out
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

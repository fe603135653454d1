//! The texts of a tool approval or an agent's question in the chat: the
//! question, its buttons, and the verdict it is edited to.

/// The button that allows a tool call once.
pub const ALLOW: &str = "Allow";

/// The button that denies it.
pub const DENY: &str = "Deny";

/// The "always" button, in a conversation outside any project.
pub const ALWAYS_HERE: &str = "Always in this chat";

/// The "always" button in `project` (already made visible).
pub fn always_in_project(project: &str) -> String {
    format!("Always in this chat, project {project}")
}

/// The question for a tool call; `whose` names whom it is for, `summary`
/// what the call does.
pub fn asks_to_use(whose: &str, tool: &str, summary: &str) -> String {
    format!("{whose}🔐 The agent asks to use {tool}:\n{summary}")
}

/// Its first line, as a subject.
pub fn asks_to_use_subject(whose: &str, tool: &str) -> String {
    format!("{whose}🔐 The agent asks to use {tool}.")
}

/// Under a request no rule can remember.
pub const NO_ALWAYS: &str = "\n(No \"always\": this request carries what cannot be shown as text, or is too large to remember.)";

/// The agent's question `text`.
pub fn question(whose: &str, text: &str) -> String {
    format!("{whose}❓ {text}")
}

/// Its subject.
pub fn question_subject(whose: &str) -> String {
    format!("{whose}❓ The agent asks a question.")
}

/// Whom a question in a group is for: `names`, joined.
pub fn for_messages_from(names: &str) -> String {
    format!("👥 For messages from {names}. Only they, or an admin, can answer.\n")
}

/// A question too long for a message: its `subject`, and where the whole
/// of it (`chars` characters) is.
pub fn too_long(subject: &str, chars: usize, file_name: &str) -> String {
    format!(
        "{subject}\nIt is too long for a message ({chars} characters): the whole of it is in {file_name} above. Read it before you answer."
    )
}

/// The caption of the file holding the whole question.
pub fn whole_of(subject: &str) -> String {
    format!("The whole of: {subject}")
}

/// `c`, `n` times over, written out: `⟦U+0009⟧`, `⟦U+0020 ×3⟧`.
pub fn hidden(c: char, n: usize) -> String {
    if n == 1 {
        format!("⟦U+{:04X}⟧", u32::from(c))
    } else {
        format!("⟦U+{:04X} ×{n}⟧", u32::from(c))
    }
}

/// What an "always" covers: a Bash call's exact command.
pub const ALWAYS_THIS_COMMAND: &str = " (always in this chat: exactly this command)";

/// What an "always" covers: this exact request.
pub const ALWAYS_THIS_REQUEST: &str = " (always in this chat: exactly this request)";

/// What an "always" covers: every call of the tool `name` (made visible).
pub fn always_every(name: &str) -> String {
    format!(" (always in this chat: every {name} call)")
}

/// The verdict: allowed by `by`, `how` saying for how long.
pub fn allowed_by(by: &str, how: &str) -> String {
    format!("✅ Allowed by {by}{how}")
}

/// The verdict on a question: answered by `by`.
pub fn answered_by(by: &str) -> String {
    format!("✅ Answered by {by}")
}

/// The verdict: denied by `by`.
pub fn denied_by(by: &str) -> String {
    format!("❌ Denied by {by}")
}

/// The verdict: nobody answered within `timeout`.
pub fn no_answer_in(timeout: &str) -> String {
    format!("⌛ No answer in {timeout}")
}

/// The verdict: the request ended, `why`.
pub fn not_run_because(why: &str) -> String {
    format!("❌ Not run: {why}")
}

/// The verdict when none other fits.
pub const NOT_RUN: &str = "❌ Not run";

/// A decided question pressed again, once its text is gone.
pub const QUESTION_CLOSED: &str = "⌛ This question is closed.";

/// The answer to a press by someone whose message the turn does not answer.
pub const NOT_YOURS: &str = "Only those whose messages led to this, or an admin, can answer it.";

/// The answer to "Allow", or to "Always" when a rule is remembered.
pub fn allowed(always: bool) -> &'static str {
    if always {
        "Allowed in this chat"
    } else {
        "Allowed"
    }
}

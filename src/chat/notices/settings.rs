//! What the chat is told about the choices it keeps: project, model,
//! session, fork, tool approvals and usage.

use super::{bounded, counted};

/// A session picked that is not the conversation's.
pub const NOT_THIS_SESSION: &str = "⚠️ That session is not one of this conversation's.";

/// A choice that could not be written.
pub const CHOICE_NOT_SAVED: &str = "⚠️ That could not be saved; try again.";

/// The conversation now works in `project` (empty: none).
pub fn moved(project: &str) -> String {
    match project {
        "" => "📁 This conversation now works in no project (the default workdir).".to_owned(),
        name => format!(
            "📁 This conversation now works in project {name}, in its own sessions (/sessions lists them)."
        ),
    }
}

/// The conversation's model is now `model`.
pub fn model_switched(model: &str) -> String {
    format!("🧠 From the next message on, this conversation runs with {model}.")
}

/// A session was picked from `/sessions`.
pub const SESSION_PICKED: &str =
    "🗂 The next message goes on in the session picked. /sessions lists them.";

/// `/project NAME` for no such project; `known` lists the projects.
pub fn no_such_project(name: &str, known: &[&str]) -> String {
    format!(
        "⚠️ There is no project {}. The projects: {}.",
        bounded(name, 40),
        known.join(", ")
    )
}

/// `/project NAME` for a project this person may not use.
pub fn project_refused(project: &str) -> String {
    format!("⚠️ You may not move this conversation to {project}.")
}

/// `/fork` done in place; `words` are the session's first words.
pub fn forked(words: &str) -> String {
    format!(
        "🍴 Forked. The next message goes on from a copy of the session “{}”; the original stays in /sessions.",
        bounded(words, 60)
    )
}

/// The name of a forum topic forked from the session `name`.
pub fn fork_topic_name(name: &str) -> String {
    format!("🍴 {name}")
}

/// No topic could be made for a fork: in a group the bot may lack the
/// right to manage topics; a private chat has no such right to give.
pub fn fork_topic_failed(err: &str, private: bool) -> String {
    if private {
        format!(
            "⚠️ No topic could be made for the fork ({err}); this conversation goes on as it was."
        )
    } else {
        format!(
            "⚠️ No topic could be made for the fork ({err}); the bot needs the right to manage topics here."
        )
    }
}

/// The first text in a topic forked from the session `name`.
pub fn fork_topic_opened(name: &str) -> String {
    format!("🍴 This topic goes on from a copy of the session “{name}”. Write here to continue it.")
}

/// The answer in the topic a fork left.
pub fn fork_topic_left(name: &str) -> String {
    format!("🍴 Forked into the new topic “{name}”; this topic goes on as it was.")
}

/// The name of the topic a past session opens in (until its first answer
/// names it).
pub fn session_topic_name(words: &str) -> String {
    match words {
        "" => "🗂 Past conversation".to_owned(),
        words => format!("🗂 {words}"),
    }
}

/// The first message in the topic a past session opened in.
pub fn session_topic_opened(words: &str) -> String {
    format!("🗂 This topic goes on in the session “{words}”. Write here to continue it.")
}

/// Where the past session was picked, once its topic is open.
pub fn session_topic_left(words: &str) -> String {
    format!(
        "🗂 The session “{words}” is open in the new topic; this conversation goes on as it was."
    )
}

/// No topic could be made for a past session.
pub fn session_topic_failed(err: &str) -> String {
    format!(
        "⚠️ No topic could be made for that session ({err}); this conversation goes on as it was."
    )
}

/// `/permissions clear` forgot `approvals` (already counted).
pub fn approvals_forgotten(approvals: &str) -> String {
    format!("🔐 Forgot {approvals}; every tool asks again.")
}

/// `/permissions clear` could not write.
pub const APPROVALS_NOT_CLEARED: &str = "⚠️ The approvals could not be cleared; try again.";

/// `/permissions` with tools allowed `here`; `rules` one per line.
pub fn approvals_listed(here: &str, rules: &str) -> String {
    format!("🔐 These run without asking {here}:\n{rules}\n/permissions clear forgets them.")
}

/// `/usage`'s heading, before the conversation's lines.
pub fn usage_here(lines: &str) -> String {
    format!("📊 This conversation:\n{lines}")
}

/// `/permissions clear` where no tool was allowed without asking.
pub const NO_APPROVALS: &str = "No tool was allowed without asking in this chat.";

/// Where `/permissions` speaks of: the chat, and its project when in one.
pub fn approvals_here(project: &str) -> String {
    if project.is_empty() {
        "in this chat".to_string()
    } else {
        format!("in this chat while in project {project}")
    }
}

/// `/permissions` where every tool asks before it runs.
pub fn no_approvals_listed(here: &str) -> String {
    format!("Every tool asks before it runs {here}.")
}

/// How many remembered tool approvals `/permissions clear` forgot.
pub fn tool_approvals(n: usize) -> String {
    counted(n, "tool approval", "tool approvals")
}

/// One rule `/permissions` lists.
pub fn rule_line(rule: &str) -> String {
    format!("• {rule}")
}

//! The texts of the conversation's menus: `/project`, `/model`,
//! `/sessions` and `/usage`, and their buttons' labels.

use super::{bounded, counted};
use crate::ids::Conversation;
use crate::state::{SessionRow, UsagePeriods, UsageTotals};

/// The word that names no project (`/project none`).
pub const NO_PROJECT: &str = "none";

/// `/project`'s text: where this conversation works and what is offered
/// (`names`, the projects set up).
pub fn projects_text(names: &[&str], current: &str) -> String {
    if names.is_empty() {
        return "📁 No projects are set up here (the operator adds [projects.NAME] tables)."
            .to_owned();
    }
    let now = match current {
        "" => "no project (the default workdir)".to_owned(),
        name => format!("project {name}"),
    };
    let mut text = format!(
        "📁 This conversation works in {now}. Each project keeps its own sessions. Choose, or write /project NAME (/project {NO_PROJECT} leaves it):"
    );
    for &name in names {
        let mark = if name == current { "▶" } else { "•" };
        text.push_str(&format!("\n{mark} {name}"));
    }
    text
}

/// A project's button label: the current one marked; the empty name is
/// "no project".
pub fn project_label(name: &str, current: &str) -> String {
    let label = match name {
        "" => format!("({NO_PROJECT})"),
        name => name.to_owned(),
    };
    if name == current {
        format!("▶ {label}")
    } else {
        label
    }
}

/// `/model` with switching off; `running` is what runs.
pub fn model_fixed(running: &str) -> String {
    format!(
        "🧠 This conversation runs with {running}. Switching is off (agent.models lists no models)."
    )
}

/// `/model`: what runs and what may be chosen.
pub fn model_menu(running: &str) -> String {
    format!("🧠 This conversation runs with {running}. Choose another, or write /model NAME:")
}

/// A model's button label: the current one marked.
pub fn model_label(model: &str, current: &str) -> String {
    if model == current {
        format!("✓ {model}")
    } else {
        model.to_owned()
    }
}

/// `/model NAME` for a name not on the list of `listed` models.
pub fn model_refused(name: &str, listed: &[String]) -> String {
    format!(
        "⚠️ {} is not a model this bot offers. Choose one of: {}.",
        bounded(name, 64),
        listed.join(", ")
    )
}

/// A time as the chat reads it: `2026-12-04 11:40 UTC`.
pub fn when(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| "?".to_owned())
}

/// `/sessions`: one line per session, the current one marked.
pub fn sessions_text(rows: &[SessionRow]) -> String {
    if rows.is_empty() {
        return "No sessions here yet: your next message starts one.".to_owned();
    }
    let mut text = "🗂 Sessions here, latest first (▶ the one the next message goes on). Press one to pick it up; /new starts afresh:".to_owned();
    for row in rows {
        let mark = if row.current { "▶" } else { "•" };
        text.push_str(&format!(
            "\n{mark} {} · {} · {}",
            when(row.started_at),
            counted(usize::try_from(row.turns).unwrap_or(0), "turn", "turns"),
            words(&row.first_words)
        ));
    }
    text
}

/// A session's button label.
pub fn session_label(row: &SessionRow) -> String {
    let mark = if row.current { "▶ " } else { "" };
    let started = when(row.started_at);
    let short = started.get(5..16).unwrap_or(&started);
    format!("{mark}{short} {}", bounded(&words(&row.first_words), 28))
}

/// A session's first words, or a stand-in.
fn words(first: &str) -> String {
    if first.is_empty() {
        "(no text)".to_owned()
    } else {
        first.to_owned()
    }
}

/// One period's line of `/usage`.
fn period(name: &str, t: &UsageTotals) -> String {
    format!(
        "{name}: {}, {}, {} in / {} out tokens, ${:.4}",
        counted(usize::try_from(t.turns).unwrap_or(0), "turn", "turns"),
        counted(
            usize::try_from(t.api_calls).unwrap_or(0),
            "model call",
            "model calls"
        ),
        t.input_tokens,
        t.output_tokens,
        t.cost_usd
    )
}

/// Said under the periods when turns ran but the agent reported no tokens
/// and no cost (the echo agent has no model): the zeros are not a measure.
pub const NO_USAGE_REPORTED: &str = "The agent reported no token use or cost for these turns.";

/// The three periods' lines, and [`NO_USAGE_REPORTED`] when it applies.
pub fn usage_lines(periods: &UsagePeriods) -> String {
    let mut lines = ["Today (UTC)", "7 days", "30 days"]
        .iter()
        .zip(periods)
        .map(|(name, t)| period(name, t))
        .collect::<Vec<_>>();
    let month = &periods[2];
    if month.turns > 0
        && month.input_tokens == 0
        && month.output_tokens == 0
        && month.cost_usd == 0.0
    {
        lines.push(NO_USAGE_REPORTED.to_owned());
    }
    lines.join("\n")
}

/// `/usage` for an admin, in a private chat: the bot's totals and the
/// conversations that cost most in 30 days.
pub fn usage_admin(all: &UsagePeriods, top: &[(Conversation, UsageTotals)]) -> String {
    let mut text = format!("\n\nThe whole bot:\n{}", usage_lines(all));
    if !top.is_empty() {
        text.push_str("\n\nTop conversations, 30 days:");
        for (to, t) in top {
            text.push_str(&format!(
                "\n{to}: {}",
                period("", t).trim_start_matches(": ")
            ));
        }
    }
    text
}

/// The answer to a press on a project the presser may not move to.
pub const PROJECT_NOT_ALLOWED: &str = "You may not move this conversation to that project.";

//! What a conversation may choose (`agent.models`) and what the chat is
//! told about its choices: `/model`, `/sessions` and `/usage` texts, and
//! the lists whose buttons a [`Pick`] names.

use crate::agent::ProjectPlace;
use crate::chat::notices::{bounded, counted};
use crate::ids::Conversation;
use crate::state::{SessionRow, UsagePeriods, UsageTotals};

/// The models a conversation may run with.
#[derive(Debug, Clone, Default)]
pub struct Models {
    /// `agent.model`: what runs unless a conversation chose (empty: the
    /// CLI's default).
    pub default: String,
    /// `agent.models`: what a conversation may choose; empty: no switching.
    pub listed: Vec<String>,
}

impl Models {
    /// The listed model `name` names (exactly, else in any case).
    pub fn find(&self, name: &str) -> Option<&str> {
        self.listed
            .iter()
            .find(|m| *m == name)
            .or_else(|| self.listed.iter().find(|m| m.eq_ignore_ascii_case(name)))
            .map(String::as_str)
    }

    /// A stored choice, if the list still has it (an operator may have
    /// taken it off): otherwise the configured model runs.
    pub fn allowed(&self, chosen: Option<String>) -> Option<String> {
        chosen.filter(|m| self.listed.contains(m))
    }

    /// What runs when `chosen` is the conversation's stored choice.
    pub fn running(&self, chosen: Option<&str>) -> String {
        match chosen.filter(|m| self.listed.iter().any(|l| l == m)) {
            Some(model) => model.to_owned(),
            None if self.default.is_empty() => "the agent's default model".to_owned(),
            None => self.default.clone(),
        }
    }
}

/// What a conversation may choose: the models and the projects.
#[derive(Debug, Clone, Default)]
pub struct Choices {
    /// `agent.model` and `agent.models`.
    pub models: Models,
    /// `[projects.NAME]`.
    pub projects: Projects,
}

impl Choices {
    /// The choices a config offers.
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            models: Models {
                default: config.agent.model.clone(),
                listed: config.agent.models.clone(),
            },
            projects: Projects::from_config(config),
        }
    }
}

/// A project a conversation may move to (`[projects.NAME]`).
#[derive(Debug, Clone, Default)]
pub struct Project {
    /// Where its agent works and what it may use there.
    pub place: ProjectPlace,
    /// Its model, unless the conversation chose one; empty: `agent.model`.
    pub model: String,
    /// Who may move a conversation here; empty: every allowed user.
    pub users: Vec<u64>,
}

impl Project {
    /// Whether `user` may move a conversation here.
    pub fn admits(&self, user: u64) -> bool {
        self.users.is_empty() || self.users.contains(&user)
    }
}

/// Every project, by name.
#[derive(Debug, Clone, Default)]
pub struct Projects {
    /// The projects.
    pub by_name: std::collections::BTreeMap<String, Project>,
}

impl Projects {
    /// The projects of a config.
    pub fn from_config(config: &crate::config::Config) -> Self {
        let by_name = config
            .projects
            .iter()
            .map(|(name, p)| {
                let place = ProjectPlace {
                    name: name.clone(),
                    workdir: config.project_workdir(p),
                    allowed_tools: p.allowed_tools.clone(),
                };
                let project = Project {
                    place,
                    model: p.model.clone(),
                    users: p.users.clone(),
                };
                (name.clone(), project)
            })
            .collect();
        Self { by_name }
    }

    /// The project `name` names (empty: none; one no longer configured:
    /// none, so the conversation works in `agent.workdir`).
    pub fn get(&self, name: &str) -> Option<&Project> {
        self.by_name.get(name)
    }

    /// What `/project` and a press read: `none` (or empty) is no project.
    pub fn find(&self, name: &str) -> Option<&str> {
        self.by_name
            .get_key_value(name)
            .or_else(|| {
                self.by_name
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
            })
            .map(|(n, _)| n.as_str())
    }
}

/// The word that names no project (`/project none`).
pub const NO_PROJECT: &str = "none";

/// `/project`'s text: where this conversation works and what is offered.
pub fn projects_text(projects: &Projects, current: &str) -> String {
    if projects.by_name.is_empty() {
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
    for name in projects.by_name.keys() {
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

pub use crate::incoming::{ListKind, Pick};

/// The latest list of each kind shown in each conversation: a press on
/// any other is answered "expired".
#[derive(Debug, Default)]
pub struct Lists {
    /// Numbers lists.
    next: u64,
    /// The live list of each kind per conversation: its number and entries.
    live: std::collections::HashMap<(Conversation, ListKind), (u64, Vec<String>)>,
}

/// At most this many live lists are kept; past it, all expire at once.
const MAX_LISTS: usize = 4096;

impl Lists {
    /// Makes `entries` the live list of `kind` in `to`; answers its number.
    pub fn show(&mut self, to: Conversation, kind: ListKind, entries: Vec<String>) -> u64 {
        if self.live.len() >= MAX_LISTS {
            self.live.clear();
        }
        self.next += 1;
        self.live.insert((to, kind), (self.next, entries));
        self.next
    }

    /// The entry a press in `to` chose, if its list is the live one.
    pub fn chosen(&self, to: Conversation, pick: Pick) -> Option<&str> {
        let (list, entries) = self.live.get(&(to, pick.kind))?;
        (*list == pick.list)
            .then(|| entries.get(pick.entry))
            .flatten()
            .map(String::as_str)
    }

    /// Ends the live list of `kind` in `to` (it was used).
    pub fn close(&mut self, to: Conversation, kind: ListKind) {
        self.live.remove(&(to, kind));
    }
}

/// `/model` with switching off.
pub fn model_fixed(models: &Models, chosen: Option<&str>) -> String {
    format!(
        "🧠 This conversation runs with {}. Switching is off (agent.models lists no models).",
        models.running(chosen)
    )
}

/// `/model`: what runs and what may be chosen.
pub fn model_menu(models: &Models, chosen: Option<&str>) -> String {
    format!(
        "🧠 This conversation runs with {}. Choose another, or write /model NAME:",
        models.running(chosen)
    )
}

/// A model's button label: the current one marked.
pub fn model_label(model: &str, current: &str) -> String {
    if model == current {
        format!("✓ {model}")
    } else {
        model.to_owned()
    }
}

/// `/model NAME` for a name not on the list.
pub fn model_refused(name: &str, models: &Models) -> String {
    format!(
        "⚠️ {} is not a model this bot offers. Choose one of: {}.",
        bounded(name, 64),
        models.listed.join(", ")
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

#[cfg(test)]
mod tests;

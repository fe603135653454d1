//! What a conversation may choose (`agent.models`, the projects) and the
//! lists whose buttons a [`Pick`] names; the menus' texts are in
//! `notices::menus`.

use crate::agent::ProjectPlace;
use crate::chat::notices;
use crate::ids::Conversation;

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

pub use crate::chat::notices::menus::{
    NO_PROJECT, model_label, project_label, session_label, sessions_text, usage_admin, usage_lines,
};

/// `/project`'s text: where this conversation works and what is offered.
pub fn projects_text(projects: &Projects, current: &str) -> String {
    let names: Vec<&str> = projects.by_name.keys().map(String::as_str).collect();
    notices::menus::projects_text(&names, current)
}

/// `/model` with switching off.
pub fn model_fixed(models: &Models, chosen: Option<&str>) -> String {
    notices::menus::model_fixed(&models.running(chosen))
}

/// `/model`: what runs and what may be chosen.
pub fn model_menu(models: &Models, chosen: Option<&str>) -> String {
    notices::menus::model_menu(&models.running(chosen))
}

/// `/model NAME` for a name not on the list.
pub fn model_refused(name: &str, models: &Models) -> String {
    notices::menus::model_refused(name, &models.listed)
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

#[cfg(test)]
mod tests;

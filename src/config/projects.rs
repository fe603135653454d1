//! `[projects.NAME]`: directories a conversation may move its agent to
//! (`/project NAME`), each with its own sessions, and optionally its own
//! model, tools allowed without asking, and who may switch to it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use toml::Value;

use super::sealing::absolute;
use super::validate::is_model_name;
use super::{Config, ConfigError, bad_value};

/// One `[projects.NAME]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectConfig {
    /// The agent's working directory in this project, `{chat}` filled with
    /// the conversation; relative to the state file's directory; the same
    /// checks as `agent.workdir` (made 0700; never containing the state or
    /// config file).
    pub workdir: PathBuf,
    /// The model here, unless the conversation chose one (`/model`); empty:
    /// `agent.model`.
    pub model: String,
    /// Tools allowed without asking here, besides `agent.allowed_tools`.
    pub allowed_tools: Vec<String>,
    /// Who may switch a conversation to it; empty: every allowed user.
    pub users: Vec<u64>,
}

/// The longest project name.
pub const MAX_PROJECT_NAME: usize = 32;

/// Whether `name` may name a project: 1 to [`MAX_PROJECT_NAME`] ASCII
/// letters, digits, `-` and `_`.
pub fn is_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PROJECT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ProjectConfig {
    /// Whether `user` may move a conversation here.
    pub fn admits(&self, user: u64) -> bool {
        self.users.is_empty() || self.users.contains(&user)
    }
}

impl Config {
    /// The project's workdir, absolute, `{chat}` unfilled.
    #[must_use]
    pub fn project_workdir(&self, project: &ProjectConfig) -> PathBuf {
        absolute(&self.state_dir(), &project.workdir)
    }

    /// Each `[projects.NAME]`: a good name, a workdir that passes the
    /// checks of `agent.workdir`, a model name or none, one tool per entry.
    pub(super) fn check_projects(&self) -> Result<(), ConfigError> {
        for (name, project) in &self.projects {
            let key = |k: &str| format!("projects.{name}.{k}");
            if !is_project_name(name) || name.eq_ignore_ascii_case("none") {
                return Err(bad_value(
                    "projects",
                    &Value::from(name.as_str()),
                    format!("a project's name is 1 to {MAX_PROJECT_NAME} letters, digits, - and _"),
                ));
            }
            let shown = project.workdir.to_string_lossy().into_owned();
            if shown.is_empty() {
                return Err(bad_value(&key("workdir"), &Value::from(""), "must be set"));
            }
            self.check_workdir_at(&key("workdir"), &shown, &self.project_workdir(project))?;
            if !project.model.is_empty() && !is_model_name(&project.model) {
                return Err(bad_value(
                    &key("model"),
                    &Value::from(project.model.as_str()),
                    "not a model name",
                ));
            }
            for tool in &project.allowed_tools {
                if tool.trim().is_empty() || tool.contains(',') {
                    return Err(bad_value(
                        &key("allowed_tools"),
                        &Value::from(tool.as_str()),
                        "one tool name (or pattern) per entry, without commas",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load_text;

    #[test]
    fn projects_load_and_are_checked_as_workdirs() {
        let config = load_text(
            "[projects.alpha]\nworkdir = \"/srv/alpha/{chat}\"\nmodel = \"opus\"\nusers = [1001]\n\
             [projects.beta]\nworkdir = \"beta\"\nallowed_tools = [\"Bash(make:*)\"]\n",
            &[],
        )
        .expect("loads");
        let alpha = &config.projects["alpha"];
        assert_eq!(alpha.model, "opus");
        assert!(alpha.admits(1001) && !alpha.admits(1002));
        assert!(config.projects["beta"].admits(1002), "everyone by default");
        for (bad, key) in [
            ("[projects.\"a b\"]\nworkdir = \"x\"\n", "projects"),
            ("[projects.None]\nworkdir = \"x\"\n", "projects"),
            ("[projects.a]\n", "projects.a.workdir"),
            ("[projects.a]\nworkdir = \"{user}\"\n", "projects.a.workdir"),
            ("[projects.a]\nworkdir = \"/\"\n", "projects.a.workdir"),
            (
                "[projects.a]\nworkdir = \"x\"\nmodel = \"-x\"\n",
                "projects.a.model",
            ),
            (
                "[projects.a]\nworkdir = \"x\"\nallowed_tools = [\"a,b\"]\n",
                "projects.a.allowed_tools",
            ),
        ] {
            let err = load_text(bad, &[]).expect_err(bad).to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }
}

//! What the agent is told of an approval's verdict, and what the chat's
//! question shows.

use crate::chat::notices::approval as texts;
use serde_json::Value;

use super::{Kind, Verdict};
use crate::agent::Permission;
use crate::chat::turn::TurnActor;
use crate::chat::turn::approval::shown::visible;
use crate::state::AlwaysRule;

impl TurnActor {
    /// What the agent is told of a verdict and what the chat is shown; an
    /// "always" is remembered for the chat on the way.
    pub(super) fn verdict_answer(
        &self,
        verdict: Verdict,
        kind: Kind,
        input: &Value,
    ) -> (Permission, String) {
        match (verdict, kind) {
            (Verdict::Allowed { by, always }, Kind::Tool { rule, project }) => {
                let how = match (always, rule) {
                    (true, Some(rule)) => {
                        let how = match &rule {
                            AlwaysRule::BashCommand(_) => texts::ALWAYS_THIS_COMMAND.to_string(),
                            AlwaysRule::Request(_) => texts::ALWAYS_THIS_REQUEST.to_string(),
                            AlwaysRule::Tool(name) => texts::always_every(&visible(name)),
                        };
                        self.deps
                            .books
                            .inbox
                            .allow_always(self.spec.to, project, rule, by.id);
                        how
                    }
                    _ => String::new(),
                };
                (
                    Permission::Allow {
                        input: input.clone(),
                    },
                    texts::allowed_by(&by.name, &how),
                )
            }
            (Verdict::Answered { by }, Kind::Questions { answers, .. }) => (
                Permission::Allow {
                    input: with_answers(input, answers),
                },
                texts::answered_by(&by.name),
            ),
            (Verdict::Denied { by }, _) => (
                Permission::Deny {
                    message: format!(
                        "{} denied this in the chat. Do not try it again unless they ask for it.",
                        by.name
                    ),
                },
                texts::denied_by(&by.name),
            ),
            (Verdict::TimedOut, _) => {
                let timeout = humantime::format_duration(self.deps.agent.config.approval_timeout);
                (
                    Permission::Deny {
                        message: format!("Nobody in the chat answered within {timeout}; not run."),
                    },
                    texts::no_answer_in(&timeout.to_string()),
                )
            }
            (Verdict::Ended(why), _) => (
                Permission::Deny {
                    message: format!("Not run: {why}."),
                },
                texts::not_run_because(why),
            ),
            // A verdict of the other kind cannot be built for an ask.
            (Verdict::Allowed { .. } | Verdict::Answered { .. }, _) => (
                Permission::Deny {
                    message: "not run".into(),
                },
                texts::NOT_RUN.to_string(),
            ),
        }
    }
}

/// The question tool's input with the answers the chat pressed filled in.
fn with_answers(input: &Value, answers: impl IntoIterator<Item = (String, String)>) -> Value {
    let mut input = input.clone();
    if let Some(object) = input.as_object_mut() {
        let answers = answers
            .into_iter()
            .map(|(q, a)| (q, Value::String(a)))
            .collect();
        object.insert("answers".into(), Value::Object(answers));
    }
    input
}

//! The agent's schedule tools, served for this turn's conversation only:
//! the agent names no chat, sees and removes only this conversation's
//! schedules, and what it makes keeps the [`ScheduleBook`]'s bounds
//! (`schedules.min_interval`, [`MAX_PER_CONVERSATION`]). A schedule it
//! asks to make is asked of the chat first, as a tool is, unless
//! `schedules.agent` allows (or refuses) it.
//!
//! [`ScheduleBook`]: crate::schedule::ScheduleBook
//! [`MAX_PER_CONVERSATION`]: crate::schedule::MAX_PER_CONVERSATION

use actix::{AsyncContext, Context};
use serde_json::json;

use super::TurnActor;
use super::pending::PendingTool;
use crate::agent::tools::{ChatTool, ToolName};
use crate::agent::{Permission, PermissionAsk, Remember, Responder, ToolReply};
use crate::chat::notices;
use crate::config::PermissionMode;
use crate::schedule::words::read_when;
use crate::state::{Origin, now_ms};
use crate::telegram::outbox::SendText;

impl TurnActor {
    /// `schedule`, `unschedule` or `schedules`, answered when the store has.
    pub(super) fn schedule_tool(
        &mut self,
        tool: ChatTool,
        pending: PendingTool,
        ctx: &mut Context<Self>,
    ) {
        let (book, to) = (self.deps.schedules.clone(), self.spec.to);
        let decided = match &tool {
            ChatTool::Schedule { when, prompt } => Some(self.may_schedule(when, prompt, ctx)),
            _ => None,
        };
        // What the agent sets to run later, the chat sees (and can remove).
        let outbox = self.deps.out.outbox.clone();
        let tell = move |text: String| outbox.do_send(SendText::new(to, text));
        let made_by = self
            .spec
            .from
            .map_or(0, |user| i64::try_from(user.0).unwrap_or(0));
        let chat_id = to.chat.0;
        let turn = ctx.address();
        actix::spawn(async move {
            if let Some(decided) = decided
                && let Err(why) = decided.await
            {
                return pending.done(&turn, ToolReply::Error(why));
            }
            let reply = match tool {
                ChatTool::Schedule { when, prompt } => match read_when(&when, now_ms()) {
                    Err(err) => ToolReply::Error(err.to_string()),
                    Ok(when) => match book.add(to, when, prompt, made_by, Origin::Agent).await {
                        Ok(s) => {
                            tracing::info!(chat_id, schedule = s.id, "the agent made a schedule");
                            tell(notices::agent_scheduled(&s.name, &s.when, &s.prompt));
                            ToolReply::Ok(format!(
                                "scheduled {} (id {}): {}; next run {}",
                                s.name,
                                s.id,
                                s.when,
                                s.next.as_deref().unwrap_or("never")
                            ))
                        }
                        Err(why) => ToolReply::Error(why),
                    },
                },
                ChatTool::Unschedule { id } => match book.remove(id, to).await {
                    Ok(done) => {
                        tell(notices::agent_unscheduled(id));
                        ToolReply::Ok(done)
                    }
                    Err(why) => ToolReply::Error(why),
                },
                _ => match book.list(to).await {
                    Ok(list) => ToolReply::Ok(
                        serde_json::to_string(&listed_json(&list)).unwrap_or_default(),
                    ),
                    Err(_) => ToolReply::Error(notices::STORE_UNREADABLE.to_owned()),
                },
            };
            pending.done(&turn, reply);
        });
    }
}

impl TurnActor {
    /// Whether the agent may make the schedule `when`, `prompt`: by
    /// `schedules.agent`, else asked of the chat (no "always": each is
    /// its own). Resolves `Err` with what the agent is told when not.
    fn may_schedule(
        &mut self,
        when: &str,
        prompt: &str,
        ctx: &mut Context<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>>>> {
        match self.deps.schedules.agent_mode() {
            PermissionMode::Allow => return Box::pin(async { Ok(()) }),
            PermissionMode::Deny => {
                return Box::pin(async {
                    Err("the operator does not let the agent make schedules (schedules.agent = \"deny\")".to_string())
                });
            }
            PermissionMode::Ask => {}
        }
        let (reply, rx) = Responder::new("schedule ask");
        self.ask_permission(
            PermissionAsk {
                id: "schedule".into(),
                tool: ToolName::served_here("schedule"),
                input: json!({ "when": when, "prompt": prompt }),
                remember: Remember::Once,
                reply,
            },
            ctx,
        );
        Box::pin(async move {
            match rx.await {
                Ok(Permission::Allow { .. }) => Ok(()),
                Ok(Permission::Deny { message }) => Err(message),
                Err(_) => Err("the schedule was not asked; not made".to_string()),
            }
        })
    }
}

/// The conversation's schedules as the agent reads them.
fn listed_json(list: &[crate::schedule::Listed]) -> serde_json::Value {
    serde_json::Value::Array(
        list.iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "name": s.name,
                    "when": s.when,
                    "next": s.next,
                    "prompt": s.prompt,
                    "removable": !s.locked,
                })
            })
            .collect(),
    )
}

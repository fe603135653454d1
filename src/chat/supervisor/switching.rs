//! What the chat chose anew (`/model`, a session picked, `/fork`): the
//! supervisor writes it to the store itself, so a turn ending meanwhile
//! cannot write over it, and lets go of the warm process, which no longer
//! fits; the next turn opens what the store then says.

use actix::{Handler, Message, ResponseFuture};

use super::ChatSupervisor;

/// A choice for the conversation.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "Chosen")]
pub enum Choose {
    /// Run with this model (`None`: the configured one); the session goes
    /// on, in a new process.
    Model(Option<String>),
    /// Resume this earlier session of the conversation; the running turn's
    /// session is not kept as the current one.
    Session(String),
    /// Go on from a copy of the current session (`--fork-session`).
    Fork,
    /// Work in this project (empty: none), in its own sessions.
    Project(String),
}

/// How a [`Choose`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// Written.
    Done,
    /// Forked: the copied session's first words.
    Forked(String),
    /// The session is not one of this conversation's.
    Unknown,
    /// No session to fork.
    NothingToFork,
    /// The store did not take it.
    Failed,
}

impl Handler<Choose> for ChatSupervisor {
    type Result = ResponseFuture<Chosen>;

    fn handle(&mut self, choice: Choose, ctx: &mut Self::Context) -> Self::Result {
        self.touched(ctx);
        if self.warm.is_some() {
            tracing::debug!(?choice, "warm session closed: the chat chose anew");
        }
        self.close_warm(ctx);
        let now = self.turn_ids.last();
        let (inbox, to) = (self.inbox.clone(), self.to);
        let done: ResponseFuture<Chosen> = match choice {
            Choose::Model(model) => {
                self.cold_through = now;
                let written = inbox.set_model(to, model);
                Box::pin(async move {
                    if written.await {
                        Chosen::Done
                    } else {
                        Chosen::Failed
                    }
                })
            }
            Choose::Session(id) => {
                self.forget_through = now;
                let known = inbox.resume(to, id);
                Box::pin(async move {
                    if known.await {
                        Chosen::Done
                    } else {
                        Chosen::Unknown
                    }
                })
            }
            Choose::Project(project) => {
                self.forget_through = now;
                let written = inbox.set_project(to, project);
                Box::pin(async move {
                    if written.await {
                        Chosen::Done
                    } else {
                        Chosen::Failed
                    }
                })
            }
            Choose::Fork => {
                self.cold_through = now;
                let forked = inbox.fork(to, to);
                Box::pin(async move {
                    match forked.await {
                        Some(words) => Chosen::Forked(words),
                        None => Chosen::NothingToFork,
                    }
                })
            }
        };
        self.watch_idle(ctx);
        done
    }
}

//! How a turn opens: the users' files fetched into the workdir, then the
//! agent started on the chat's warm session (proved by its first sign of
//! life, else replaced) or on a fresh one.

use std::sync::Arc;

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};

use super::link::Link;
use super::phase::{Leftover, TurnStep};
use super::{TurnActor, TurnServices};
use crate::agent::{AgentError, AgentSession, OpenSession, SessionCommand};
use crate::chat::outcome::TurnEvent;
use crate::ids::Conversation;
use crate::state::ReadFailed;
use crate::telegram::outbox::SendText;

/// The longest wait for a warm session's first sign of life.
const WARM_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The conversation's project as the turn started (empty: none) and the
/// root of its working directories, `{chat}` unfilled: `agent.workdir`, or
/// its project's. "Always" rules are the project's.
pub(super) struct Root {
    /// The root.
    pub(super) dir: std::path::PathBuf,
    /// The project.
    pub(super) project: String,
}

impl TurnServices {
    /// What opening `to`'s session asks of the backend, read after every
    /// store write asked before (so a `/new`, `/model` or a picked session
    /// is seen): the session to resume, the conversation's model (else its
    /// project's, else the configured one), its project. `None`: the store
    /// could not be read.
    pub(crate) fn session_request(
        &self,
        to: Conversation,
    ) -> impl Future<Output = Option<OpenSession>> + Send + 'static {
        let opening = (self.books.inbox).read("reading the session to open", move |store| {
            store.opening(to)
        });
        let choices = Arc::clone(&self.agent.choices);
        let shutdown = self.books.shutdown.clone();
        async move {
            let opening = opening.await.ok()?;
            let project = choices.projects.get(&opening.project);
            let project_model = project.map(|p| p.model.clone()).filter(|m| !m.is_empty());
            Some(OpenSession {
                conversation: to,
                resume: opening.resume,
                model: choices.models.allowed(opening.model).or(project_model),
                fork: opening.fork,
                project: project.map(|p| p.place.clone()),
                shutdown,
                warm_up: false,
            })
        }
    }
}

impl TurnActor {
    /// Reads the conversation's working directories' root (its project's,
    /// when it is in one), then runs `then`.
    pub(super) fn find_root(
        &mut self,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Self, &mut Context<Self>) + 'static,
    ) {
        let to = self.to();
        let opening = (self.deps.books.inbox).read("reading the session to open", move |store| {
            store.opening(to)
        });
        let choices = Arc::clone(&self.deps.agent.choices);
        let find = async move {
            let opening = opening.await?;
            let root = choices
                .projects
                .get(&opening.project)
                .map(|p| p.place.workdir.clone());
            Ok::<_, ReadFailed>((root, opening.project))
        };
        ctx.spawn(find.into_actor(self).map(|found, act, ctx| {
            // Without the conversation's project its directory is unknown:
            // the turn ends rather than work in the wrong one.
            let Ok((root, project)) = found else {
                return act.store_unreadable(ctx);
            };
            let known = root.is_some();
            let dir = root.unwrap_or_else(|| act.deps.agent.workdir.clone());
            act.root = Some(Root { dir, project });
            if known {
                let workdir = act.workdir();
                act.view.set_workdir(workdir.to_string_lossy().into_owned());
            }
            then(act, ctx);
        }));
    }

    /// The working directories' root the conversation's files are under,
    /// `{chat}` unfilled: its project's once read, else `agent.workdir`.
    fn root_dir(&self) -> &std::path::Path {
        self.root
            .as_ref()
            .map_or(&self.deps.agent.workdir, |root| &root.dir)
    }

    /// The conversation's working directory.
    pub(super) fn workdir(&self) -> std::path::PathBuf {
        crate::agent::host::seal::chat_path(self.root_dir(), &self.to().key())
    }

    /// Fetches the turn's files into the workdir, tells the chat about any
    /// that could not be taken, puts what arrived in front of the text, then
    /// starts the agent.
    pub(super) fn receive_files(&mut self, ctx: &mut Context<Self>) {
        let files = self.deps.files.clone();
        let chat = self.to().key();
        let root = self.root_dir().to_path_buf();
        let attachments = std::mem::take(&mut self.spec.files);
        let fetch = async move { files.receive_in(&root, &chat, &attachments).await };
        ctx.spawn(fetch.into_actor(self).map(|received, act, ctx| {
            for notice in received.notices {
                act.deps
                    .out
                    .outbox
                    .do_send(SendText::new(act.to(), notice).replying_to(act.spec.answer_to));
            }
            let mut text = received.notes.join("\n");
            if !act.spec.text.trim().is_empty() {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&act.spec.text);
            }
            act.spec.text = text;
            if act.phase.holds_chat() {
                act.begin(ctx);
            }
        }));
    }

    /// Starts the agent on the turn: the warm session, else a fresh one.
    pub(super) fn begin(&mut self, ctx: &mut Context<Self>) {
        match self.phase.take_warm() {
            Some(session) => {
                self.attach(session, true, ctx);
                // A warm process answers a user line within milliseconds; one
                // that stays silent is replaced rather than waited out.
                let patience =
                    (self.deps.agent.config.no_progress_timeout / 2).min(WARM_ANSWER_TIMEOUT);
                ctx.run_later(patience, |act, ctx| {
                    if act.phase.is_proving() {
                        tracing::warn!(session = %act.label(), "warm session did not answer; replacing it");
                        act.replace_warm(ctx);
                    }
                });
            }
            None => self.open(ctx),
        }
    }

    /// Drops a warm session that is dead or silent and opens a fresh one.
    pub(super) fn replace_warm(&mut self, ctx: &mut Context<Self>) {
        let Some(Leftover::Link(warm)) = self.step(TurnStep::ReplacingWarm) else {
            return;
        };
        self.send_to(Some(&warm), SessionCommand::Kill);
        if let Some(read) = warm.pending_read() {
            ctx.cancel_future(read);
        }
        drop(warm);
        self.open(ctx);
    }

    /// Opens a fresh session, resuming the chat's agent session id with
    /// its model (read after every store write asked before, so a `/new`,
    /// `/model` or a picked session is seen).
    pub(super) fn open(&mut self, ctx: &mut Context<Self>) {
        let backend = Arc::clone(&self.deps.agent.backend);
        let request = self.deps.session_request(self.to());
        let open = async move {
            let Some(request) = request.await else {
                return Ok(None);
            };
            backend.open(request).await.map(Some)
        };
        ctx.spawn(open.into_actor(self).map(|result, act, ctx| match result {
            Ok(None) => act.store_unreadable(ctx),
            Ok(Some(session)) if act.phase.holds_chat() => act.attach(session, false, ctx),
            Ok(Some(session)) => drop(session),
            Err(err) => {
                act.start_failed(&err);
                act.record(
                    TurnEvent::Exited {
                        code: None,
                        detail: err.to_string(),
                    },
                    ctx,
                );
            }
        }));
    }

    /// The conversation's choices could not be read from the store (what
    /// was asked before them is in the log): the turn ends as an agent that
    /// could not start does, and the chat is told it failed, rather than
    /// open a session in no project, afresh or with the wrong model.
    fn store_unreadable(&mut self, ctx: &mut Context<Self>) {
        tracing::error!("the conversation's session could not be read; the turn ends");
        self.record(
            TurnEvent::Exited {
                code: None,
                detail: ReadFailed.to_string(),
            },
            ctx,
        );
    }

    /// The backend could not start the agent: the operator's log says what
    /// and why (the chat is told only that it failed, at the turn's end).
    pub(super) fn start_failed(&self, err: &AgentError) {
        match err {
            AgentError::Spawn { command, source } => tracing::error!(
                command = %command,
                error = %source,
                "the agent could not start; check agent.command (a path, or a name on the agent's PATH) and that it is executable"
            ),
            AgentError::Directory { dir, source } => tracing::error!(
                dir = %dir.display(),
                error = %source,
                "the agent could not start: its directory could not be made"
            ),
            other => tracing::error!(cause = %other, "the agent could not start"),
        }
    }

    pub(super) fn attach(&mut self, session: AgentSession, warm: bool, ctx: &mut Context<Self>) {
        let AgentSession {
            commands, label, ..
        } = &session;
        self.generation += 1;
        // A warm session already running this turn's messages (steered into
        // the last turn) is not told them again; a fresh one is.
        let adopted = warm && self.generation == 1 && self.spec.adopted.is_some();
        if !adopted
            && commands
                .send(SessionCommand::UserTurn(self.spec.text.clone()))
                .is_err()
        {
            tracing::warn!(session = %label, "session closed before the turn started");
        }
        let link = Link::new(session, self.generation);
        // A session that comes once the turn no longer takes one is dropped.
        self.step(TurnStep::Attached { link, warm });
        // What was steered in while opening, after the prompt; everything
        // again to a session that replaced the one it was written to.
        self.steers_unwritten();
        self.write_steers();
        self.pump(ctx);
    }
}

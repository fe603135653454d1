//! The [`StoreHandle`]'s side of the conversations' choices: each a job
//! on the store's thread, in the order asked.

use std::future::Future;

use super::{SessionRow, UsagePeriods, UsageTotals, first_words, period_starts};
use crate::ids::Conversation;
use crate::state::{ReadFailed, StoreHandle, now_ms};

impl StoreHandle {
    /// Sets the conversation's model; resolves whether it was written.
    pub fn set_model(
        &self,
        to: Conversation,
        model: Option<String>,
    ) -> impl Future<Output = bool> + Send + 'static {
        let ask = self.ask("saving the model", move |store| {
            store.set_model(to, model.as_deref())
        });
        async move { ask.await.is_some() }
    }

    /// Notes the first words of the conversation's latest turn.
    pub fn note_opening(&self, to: Conversation, text: &str) {
        let text = first_words(text);
        self.tell("noting a turn's first words", move |store| {
            store.note_opening(to, &text)
        });
    }

    /// Moves the conversation to `project`; resolves whether it was written.
    pub fn set_project(
        &self,
        to: Conversation,
        project: String,
    ) -> impl Future<Output = bool> + Send + 'static {
        let ask = self.ask("saving the project", move |store| {
            store.set_project(to, &project)
        });
        async move { ask.await.is_some() }
    }

    /// The conversation's latest sessions, newest first.
    pub fn sessions(
        &self,
        to: Conversation,
    ) -> impl Future<Output = Result<Vec<SessionRow>, ReadFailed>> + Send + 'static {
        self.read("listing sessions", move |store| store.sessions(to))
    }

    /// Makes one of the conversation's sessions its current one; resolves
    /// whether it was the conversation's.
    pub fn resume(
        &self,
        to: Conversation,
        id: String,
    ) -> impl Future<Output = bool> + Send + 'static {
        let ask = self.ask("choosing a session", move |store| store.resume(to, &id));
        async move { ask.await.unwrap_or(false) }
    }

    /// [`Store::fork`].
    pub fn fork(
        &self,
        from: Conversation,
        into: Conversation,
    ) -> impl Future<Output = Option<String>> + Send + 'static {
        let ask = self.ask("forking a session", move |store| store.fork(from, into));
        async move { ask.await.flatten() }
    }

    /// What `to` (with `None`: the bot) used today, in 7 and in 30 days.
    pub fn usage(
        &self,
        to: Option<Conversation>,
    ) -> impl Future<Output = Result<UsagePeriods, ReadFailed>> + Send + 'static {
        self.read("reading usage", move |store| store.usage(to, now_ms()))
    }

    /// The conversations that cost most in the last 30 days.
    pub fn usage_top(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Conversation, UsageTotals)>, ReadFailed>> + Send + 'static
    {
        let since = period_starts(now_ms())[2];
        self.read("reading usage", move |store| store.usage_top(since, limit))
    }
}

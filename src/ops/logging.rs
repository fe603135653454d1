//! The binary's log set-up: `[log] format` text or JSON on stderr, filtered
//! by `TURNSTILE_LOG` (default `info`); and the spans that give a line its
//! context.
//!
//! Context comes from spans, not from fields repeated on each line: a
//! chat's supervisor runs in `chat{chat_id, topic}`, each turn in
//! `turn{turn_id}` inside it, the chat's typing actor in `typing`, an
//! outbox lane's worker in `lane{chat_id}` (a job of a turn in
//! `job{turn_id}` inside it), a callback answer in `callback{chat_id}`, the
//! intake's reading of a message in `update{update_id, chat_id}`. The text
//! format shows them before the line (`chat{chat_id=1}:turn{turn_id=2}:
//! …`); the JSON format ([`FlatJson`]) puts their fields at the top level
//! of the line's object.

mod json;

use actix::{Actor, Addr, Context};
use tracing::{Instrument, Span};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;
pub use json::FlatJson;

/// A span carrying the context of a unit of work (`chat_id`, `turn_id`, …)
/// for every line logged inside it. At ERROR level, so that a filter
/// letting any line through (`TURNSTILE_LOG=warn`) keeps its context.
macro_rules! context_span {
    ($($arg:tt)+) => {
        ::tracing::error_span!($($arg)+)
    };
}
pub(crate) use context_span;

/// Starting an actor inside a span.
pub trait StartInSpan: Actor<Context = Context<Self>> {
    /// Starts the actor (as [`Actor::start`]) with its whole life inside
    /// `span`: `started`, each handler, its timers, the futures it spawns
    /// on its context and `stopped` all log in it. A task it hands to tokio
    /// or actix is a task of its own: `.in_current_span()` takes the span
    /// along.
    fn start_in(self, span: Span) -> Addr<Self> {
        let life = Context::new().into_future(self);
        let addr = life.address();
        actix::spawn(life.instrument(span));
        addr
    }
}

impl<A: Actor<Context = Context<A>>> StartInSpan for A {}

/// Installs the global subscriber. JSON writes one object per line, the
/// event's fields and those of its spans (`chat_id`, `turn_id`) flattened.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("TURNSTILE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => json(filter, std::io::stderr).init(),
    }
}

/// The JSON subscriber: [`FlatJson`] lines to `writer`, spans' fields kept
/// as JSON for it.
fn json<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson)
        .finish()
}

/// A log writer that appends to a shared buffer, for tests that read what
/// was logged.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Captured {
    /// What was written so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;

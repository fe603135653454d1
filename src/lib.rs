//! turnstile: a Telegram bot that gives every chat its own LLM agent and
//! makes every agent turn end cleanly.
//!
//! # Layout
//!
//! - [`config`]: the TOML file, `TURNSTILE_*` overrides and the token.
//! - [`app`]: wiring; [`Turnstile::start`] and [`Turnstile::stop`].
//! - [`telegram`]: the [`telegram::Intake`] (long-polls `getUpdates`), the
//!   [`telegram::Outbox`] (every request to Telegram; rate limits, retries,
//!   splitting) and [`telegram::split`].
//! - [`chat`]: the actors. The [`chat::Dispatcher`] routes updates to one
//!   [`chat::ChatSupervisor`] per chat, which runs one [`chat::TurnActor`]
//!   per turn and owns the chat's [`chat::TypingActor`]. [`chat::outcome`]
//!   maps a turn's events to its outcome; [`chat::tools`] holds the chat
//!   tools and terminator detection.
//! - [`agent`]: the [`agent::AgentBackend`] trait, the session handle and its
//!   events; [`agent::scripted`] is the in-process backend.
//! - [`events`]: the broadcast of what the bot does, for tests and benches.
//! - [`shutdown`]: the stop signal.
//!
//! # Theory of operation
//!
//! A turn ends exactly once, at the earliest of its triggers (a terminator
//! batch, a settled result, the post-result grace, the no-progress and budget
//! watchdogs, `/stop`, an agent failure, the host stopping). The turn actor
//! sends `TurnEnded` straight to the typing actor and the supervisor, so
//! typing stops and the chat is released at once; the session is closed
//! after that, and handed back only once it has settled.

pub mod agent;
mod app;
pub mod chat;
pub mod config;
pub mod events;
pub mod ids;
pub mod shutdown;
pub mod state;
pub mod telegram;

pub use app::{StartError, Turnstile, backend_from_config, telegram_client};
pub use config::Config;

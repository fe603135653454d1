//! turnstile: a Telegram bot that gives every chat its own LLM agent and
//! makes every agent turn end cleanly.
//!
//! # Layout
//!
//! `ARCHITECTURE.md` at the repository root draws the actors and their
//! messages, the state machines, the timers and the stop order.
//!
//! - `app`: wiring; [`Turnstile::start`] builds and starts everything,
//!   [`Turnstile::stop`] stops it in order; `backend_from_config`;
//!   `app/telegram.rs`: what the start asks Telegram (the client, `getMe`, the
//!   webhook); `app/housekeeping.rs`: the previous run's process groups, pruning.
//! - `attach`: `turnstile attach`, a frontend on the host: the `AttachServer` on a
//!   0600 UNIX socket beside the state file (`attach/server.rs`), the conversations'
//!   feed off the bus with a bounded buffer per client (`attach/feed.rs`), the JSON
//!   lines (`attach/protocol.rs`) and the client (`attach/client.rs`).
//! - `config`: the schema and its defaults:
//!   - `config/load.rs`: [`Config::load`]; `config/error.rs`: `ConfigError`;
//!   - `config/env.rs`: the `TURNSTILE_<SECTION>_<KEY>` overlay;
//!   - `config/validate.rs`: bounds and cross-key checks;
//!   - `config/redact.rs`: what `check-config` prints; the token scrubbed from errors.
//! - `telegram`: the way in and out:
//!   - `telegram::intake`: the `Intake` actor, long-polling `getUpdates`; `intake::read`
//!     reads each message once into an `incoming::Incoming`, written to the inbox;
//!   - `telegram::outbox`: the `Outbox` actor, every request to Telegram, routed to
//!     a lane per chat (`outbox/lane.rs`), paced (`outbox/pacing.rs`), run
//!     (`outbox/send.rs`) through one delivery and retry path (`outbox/deliver.rs`);
//!     its requests (texts, live slots, purges, questions with buttons, edits, callback
//!     answers) in `outbox/requests.rs`, the jobs they become in `outbox/jobs.rs`, the
//!     requests of live slots (drafts, edits, deletes) in `outbox/live.rs`;
//!   - `telegram::call`: a Bot API call (JSON, or multipart with a file) without
//!     teloxide's 10 s pause after a 5xx;
//!   - `telegram::typing`: the `TypingLease`, a turn's claim on the typing indicator (owned by the turn; others hold `TypingView`s);
//!   - `telegram::format`: where text is cut: the agent's Markdown (or plain text) rendered
//!     to text plus message entities (`format/render.rs`, what each tag opens and
//!     closes in `render/tags.rs`), split into pieces of `TELEGRAM_TEXT_LIMIT`
//!     (`format/split.rs`: 4096 UTF-16 units; entities sliced), and Telegram's
//!     entity rules (`format/validate.rs`);
//!   - `telegram::addressing`: which messages are for the bot (groups, `/cmd@Bot`);
//!   - `telegram::files`: attachments fetched into `inbox/`, voice transcription
//!     (sealed as the agent), the file `send_file` opens once, inbox pruning;
//!     `files/beneath.rs`: everything in a workdir reached through its
//!     descriptor, no symlink followed.
//! - `chat`: the actors of a chat and the turn contract:
//!   - `chat::dispatcher`: the `Dispatcher` actor: access, commands (`dispatcher/commands.rs`),
//!     routing, recovery (`dispatcher/recovery.rs`);
//!   - `chat::notices::help`: the command table's menu, `/start` and `/help` texts;
//!   - `chat::supervisor`: the `ChatSupervisor` actor, one per chat (`ChatState`, commands,
//!     `turns.rs`: a turn's start and end);
//!   - `chat::turn`: the `TurnActor`, one per turn (`contract`: `TurnSpec`, `TurnServices`
//!     and the turn's messages; `opening`; `TurnPhase`, holding the warm session and
//!     the session's `link` where they exist; closing; serving the typed chat tool
//!     calls; watchdogs; `approval`: tool approvals in the chat, with buttons,
//!     `approval/question.rs` the question as shown; `live`: the status message and the
//!     answer's preview);
//!   - `chat::typing`: the `TypingActor`, one per chat, which renews the indicator while a turn's lease is live;
//!   - `chat::slots`: `TurnSlots`, the cap on concurrent turns and the drain signal;
//!   - `chat::outcome`: `decide` (a turn's events to its `TurnOutcome`), pinned by a
//!     golden fixture;
//!   - `chat::notices`: the texts the bot writes to a chat or its agent, a file per
//!     topic (`approval`, `help`, `menus`, `progress`, `schedules`, `settings`,
//!     `stopping`, `recovery`, `answers`).
//! - `agent`: the `AgentBackend` trait, `AgentSession`, `AgentEvent` (agent-neutral:
//!   no protocol and no tool name as the agent wrote it crosses into the chat),
//!   `Responder`; `agent/result.rs`: `AgentResult`, with `ResultStatus` and
//!   `TerminalReason` (a backend reads its protocol's result into them):
//!   - `agent::tools`: the chat tools every backend offers (`ChatTool`, `ToolRegistry`
//!     with `turn.terminator_tools`, `TOOL_SERVER`) and the typed values a backend
//!     parses each call into, once: `ChatCall` (the tool, and whether it ends the
//!     turn), `BatchCall`, `ToolName` (`ToolName::parse`, the one place a name is
//!     taken apart);
//!   - `agent::partial_json`: the `text` of a tool's input decoded as it streams;
//!   - `agent::scripted`: the in-process backend playing a `Scenario` (the player
//!     in `scripted/agent.rs`);
//!   - `agent::acp`: the Agent Client Protocol backend (`gemini --acp`, …), on the
//!     claude backend's `process` and `seal`: `wire` (JSON-RPC lines, requests from
//!     the schema crate), `updates` (`session/update`, `stopReason`), `permission`,
//!     `mcp` (the chat tools over HTTP or a socket), `bridge` (`turnstile mcp-bridge`,
//!     their stdio end) and `driver` (the per-session task);
//!   - `agent::network`: the agent's own network: `Isolation` (per backend), `proxy`
//!     (the allowlisting HTTP proxy on a UNIX socket, with `tunnel` and `local`),
//!     `relay` (`turnstile net-relay`, in the sandbox before the agent);
//!   - `agent::claude`: the Claude Code CLI backend, where its tool calls are parsed:
//!     `process` (spawn, process group, reaping; `process/probe.rs`: the sandbox
//!     probe), `seal` (clean environment, per-chat workdir and home, bubblewrap and
//!     launcher argv; `seal/network.rs` the agent's own network), `driver` (the
//!     per-session task) with `driver/requests.rs` (the CLI's requests),
//!     `driver/answers.rs` (each answered once) and `driver/live.rs` (the stream
//!     as `Activity`), `permissions` (what answers `can_use_tool`),
//!     `protocol` (typed stream-json) with `protocol/control.rs` (control requests
//!     and responses) and `protocol/mcp_server.rs` (the `telegram-tools` MCP server).
//! - `when`: the pure next-slot function of a schedule (`every` aligned to the
//!   epoch, `cron` and `at` in a zone across DST via `croner` and `chrono-tz`, `in`
//!   once), below the config, which checks a timing with it.
//! - `schedule`: schedules: `schedule/words.rs` how the chat and the agent write
//!   one, `schedule/book.rs` the `ScheduleBook` (a conversation's schedules within
//!   their bounds), `schedule/scheduler.rs` the `Scheduler` actor (one timer to the
//!   earliest slot; a slot claimed with its run queued, then `RunDue` to the dispatcher).
//! - `state`: the SQLite `Store` and the `StoreHandle` (`state/handle.rs`) that runs it on
//!   its own thread and holds the states of a message; the inbox rows, each an
//!   `Incoming` (`state/rows.rs`); the schema and its migrations (`state/schema.rs`);
//!   schedules and the claim of a slot with its run (`state/schedules.rs`);
//!   `TurnIds`, turn ids numbered on across restarts (`state/turn_ids.rs`);
//!   `turnstile backup`'s online copy (`state/backup.rs`).
//! - `attachment`: `Attachment`, `FileKind`: a file a message carried, as Telegram
//!   describes it (stored with its inbox row, fetched by `telegram::files`).
//! - `incoming`: `Incoming`, a message read once at the intake (conversation, sender,
//!   place, what it asks, text, files, album), what the inbox stores and recovery
//!   reads back; `incoming/command.rs`: the command table (`Command`, `Who`) and its parser.
//! - `events`: the broadcast of `BotEvent`s (it also hands out the `Metrics`), and live
//!   actor `Gauges`.
//! - `outcome`: `TurnOutcome`, how a turn ended: a value the bus carries and the
//!   metrics count, below the chat that decides it.
//! - `ops`: `follow` (what only the bus tells the metrics), `ops::metrics` (the
//!   `Metrics` and their exposition), the `[ops] listen` endpoint (its health check
//!   pings the dispatcher through a `Ping` handed in by `app`), the log set-up, and
//!   `ops::panics`: a panic drops the input it was handling (`contain`) or
//!   ends the process (the binary's hook), never leaving a silent bot.
//! - `shutdown`: `Shutdown`, the two-phase stop signal (stopping, then closing).
//! - `in_flight`: `InFlight`, a count of things in flight that one can wait to see
//!   reach zero (the outbox's requests, a turn's texts on their way to it, the
//!   turns holding a slot).
//! - `ids`: `TurnId`, and `Conversation` (a chat, or one forum topic of it): the
//!   key of supervisors, sessions and workdirs.
//! - `fuzzing`: the fuzz harnesses, one per boundary of outside data (the agent's in
//!   `fuzzing/agent.rs`), run by the cargo-fuzz targets in `fuzz/` and replayed by
//!   `tests/fuzz_corpus.rs`.
//! - `src/main.rs`: the `turnstile` binary (run, `check-config`, `/restart` re-exec).
//! - `src/bin/fake_claude.rs`: `fake-claude`, a stand-in CLI for the tests (its player
//!   in `fake_claude/turn.rs`).
//!
//! A module's unit tests are in a sibling file (`protocol/tests.rs` beside
//! `protocol.rs`, declared `#[cfg(test)] mod tests;`).
//!
//! # Theory of operation
//!
//! The `Intake` reads each message for the bot once, into an `Incoming`
//! (its command, if any, parsed there), writes it to the inbox (*queued*)
//! before the update offset moves past it, then hands it to the `Dispatcher`,
//! which checks access, answers commands and routes the message to its
//! conversation's `ChatSupervisor`. The supervisor queues it, merges a burst inside
//! `dispatcher.merge_window`, waits for a turn slot and starts a `TurnActor`,
//! giving it the chat's warm session when one settled after the last turn.
//!
//! A turn ends exactly once, at the earliest of its triggers (a terminator
//! batch, a settled result, the post-result grace, the no-progress and budget
//! watchdogs, `/stop`, an agent failure, the host stopping), as
//! `chat::outcome::decide` says. The turn actor ends the typing lease, then
//! sends `TurnEnded` straight to the typing actor and the supervisor, so
//! typing stops and the chat is released at once. It then closes the session
//! (settled, or killed at the grace) and sends `SessionReleased`; the chat's
//! next turn waits for that, so no turn gets a session that has not settled.
//! Each supervisor also runs its own hard-deadline timer per turn, which
//! releases the chat whatever its actors do.
//!
//! Every reply of a turn leaves through one reply relay that first records the
//! turn's messages as *replied*; after a crash, queued messages run again
//! and the rest are reported, so none is answered twice. A stop stops the
//! intake, drains running turns up to `dispatcher.drain_timeout`, ends the
//! rest, flushes the outbox and waits for the agent processes, each wait on a
//! completion signal rather than a poll.

// No function over 80 lines (`clippy.toml` sets the bar).
#![warn(clippy::too_many_lines)]

pub mod agent;
mod app;
pub mod attach;
pub mod attachment;
pub mod chat;
pub mod config;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
pub mod ids;
pub mod in_flight;
pub mod incoming;
pub mod ops;
pub mod outcome;
pub mod schedule;
pub mod shutdown;
pub mod state;
pub mod telegram;
pub mod when;

pub use app::{
    BLOCKING_THREADS, StartError, Turnstile, backend_from_config, check_agent, system,
    telegram_client, trim_memory,
};
pub use config::Config;

/// The version `--version` prints: the crate's, and the commit it was built
/// from (", dirty" when tracked files differed; "commit unknown" for a build
/// without git, from a source tarball).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TURNSTILE_BUILD_COMMIT"),
    ")"
);

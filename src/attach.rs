//! `turnstile attach`: a second frontend, on the host. The bot serves a
//! UNIX socket beside its state file (`server`), mode 0600: whoever can
//! open it is an admin of every conversation. A client lists the
//! conversations, or follows one (its recent history, then live) and types
//! lines into it (`client`). JSON lines both ways (`protocol`), the first
//! one the server's version. What a conversation shows comes off the event
//! bus (`feed`), into a bounded buffer per client: a slow client misses
//! lines (and is told how many), it never holds up a chat. A typed line is
//! written to the inbox before the client hears it was taken, then goes to
//! the dispatcher as any message: policy stays in the core.

mod client;
mod feed;
mod protocol;
mod render;
mod server;
mod terminal;

pub use client::run_client;
pub use protocol::{ClientLine, PROTOCOL_VERSION, ServerLine};
pub use server::{AttachServer, socket_path};

/// The subcommand's word.
pub const ATTACH_COMMAND: &str = "attach";

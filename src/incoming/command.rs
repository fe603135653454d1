//! The chat commands in one table: each command's word, who may use it and
//! what it does. The intake parses a message with it ([`parse`], once, into
//! an [`Ask`](super::Ask)); Telegram's command menu and the greeting and
//! help texts (`chat::notices::help`) list it; the dispatcher checks [`Who`].

use super::Head;

/// A command the bot knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `/start`: the greeting.
    Start,
    /// `/help`: the short greeting.
    Help,
    /// `/stop`: end the running turn, drop the queued messages.
    Stop,
    /// `/new`: the next message starts a fresh conversation.
    New,
    /// `/permissions`: the tools that run without asking here.
    Permissions,
    /// `/schedule every|at|cron|in …`: a prompt that runs on its own.
    Schedule,
    /// `/schedules`: this conversation's schedules, each with ❌.
    Schedules,
    /// `/model [NAME]`: the model this conversation runs with; switch it.
    Model,
    /// `/sessions`: this conversation's latest sessions, one to resume.
    Sessions,
    /// `/fork`: go on from a copy of this conversation's session.
    Fork,
    /// `/usage`: turns, tokens and cost (an admin also sees the bot's).
    Usage,
    /// `/project [NAME]`: where this conversation's agent works; move it.
    Project,
    /// `/status` (admins): chats and turns.
    Status,
    /// `/restart` (admins): drain and re-execute.
    Restart,
    /// `/handoff` (admins): go on at the host; the next message takes the
    /// conversation back.
    Handoff,
}

/// Who may use a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Everyone who may talk to the bot.
    Everyone,
    /// Only `access.admins`.
    Admins,
}

/// One row of the table.
pub(crate) struct Entry {
    /// The command.
    pub(crate) command: Command,
    /// Its word, after the `/`.
    pub(crate) word: &'static str,
    /// What it does, for the menu and the help.
    pub(crate) about: &'static str,
    /// Who may use it.
    pub(crate) who: Who,
    /// Whether Telegram's menu lists it (`/start` is what Telegram's own
    /// Start button sends; it needs no entry).
    pub(crate) listed: bool,
}

/// Every command, in the menu's order.
pub(crate) const TABLE: &[Entry] = &[
    Entry {
        command: Command::Stop,
        word: "stop",
        about: "End the current turn",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::New,
        word: "new",
        about: "Start a fresh conversation",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Permissions,
        word: "permissions",
        about: "Tools allowed without asking here",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Schedule,
        word: "schedule",
        about: "Run a prompt on a schedule: every 2h, at 09:00, cron, in 30m",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Schedules,
        word: "schedules",
        about: "This conversation's schedules",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Model,
        word: "model",
        about: "The model here; /model NAME switches it",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Sessions,
        word: "sessions",
        about: "Earlier sessions here, to pick one up",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Fork,
        word: "fork",
        about: "Go on from a copy of this session",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Project,
        word: "project",
        about: "The project here; /project NAME moves there",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Usage,
        word: "usage",
        about: "Turns, tokens and cost",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Help,
        word: "help",
        about: "What this bot does",
        who: Who::Everyone,
        listed: true,
    },
    Entry {
        command: Command::Start,
        word: "start",
        about: "The greeting",
        who: Who::Everyone,
        listed: false,
    },
    Entry {
        command: Command::Status,
        word: "status",
        about: "Chats and turns",
        who: Who::Admins,
        listed: true,
    },
    Entry {
        command: Command::Restart,
        word: "restart",
        about: "Drain and restart the bot",
        who: Who::Admins,
        listed: true,
    },
    Entry {
        command: Command::Handoff,
        word: "handoff",
        about: "Go on at the host; the next message takes it back",
        who: Who::Admins,
        listed: true,
    },
];

impl Command {
    fn entry(self) -> &'static Entry {
        TABLE
            .iter()
            .find(|e| e.command == self)
            .unwrap_or(&TABLE[0])
    }

    /// Its word, after the `/`.
    pub fn word(self) -> &'static str {
        self.entry().word
    }

    /// Who may use it.
    pub fn who(self) -> Who {
        self.entry().who
    }

    /// The command whose word this is (any case).
    pub fn from_word(word: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|e| e.word.eq_ignore_ascii_case(word))
            .map(|e| e.command)
    }
}

/// What a message's text is, read as a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not a command: text for the agent.
    Text,
    /// A command the bot knows, with its arguments (trimmed).
    Known(Command, &'a str),
    /// A command the bot does not know (`/frobnicate`), its word in lowercase.
    Unknown(String),
    /// A command addressed to another bot (`/x@OtherBot`): not for this one.
    ForAnotherBot,
}

/// The longest command word Telegram allows.
const MAX_WORD: usize = 32;

/// Reads `text` as Telegram reads a command: `/` and 1 to 32 letters,
/// digits or underscores at its very start, then optionally `@` and a bot's
/// username, then a space or the end. Anything else (`/usr/bin/env`, `/`,
/// `/😀`) is text. The word is matched without regard to case; `me` is this
/// bot's username.
pub fn parse<'a>(text: &'a str, me: &str) -> Parsed<'a> {
    let Some(head) = Head::of(text) else {
        return Parsed::Text;
    };
    let word = head.word;
    let well_formed = !word.is_empty()
        && word.len() <= MAX_WORD
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !well_formed {
        return Parsed::Text;
    }
    if head.for_another_bot(me) {
        return Parsed::ForAnotherBot;
    }
    match Command::from_word(word) {
        Some(command) => Parsed::Known(command, head.rest.trim()),
        None => Parsed::Unknown(word.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_as_telegram_reads_them() {
        let me = "TurnBot";
        assert_eq!(parse("/stop", me), Parsed::Known(Command::Stop, ""));
        assert_eq!(
            parse("/Stop@turnbot  now ", me),
            Parsed::Known(Command::Stop, "now")
        );
        assert_eq!(
            parse("/start\thello", me),
            Parsed::Known(Command::Start, "hello")
        );
        assert_eq!(
            parse("/frobnicate", me),
            Parsed::Unknown("frobnicate".into())
        );
        assert_eq!(
            parse("/Frob_2@TurnBot x", me),
            Parsed::Unknown("frob_2".into())
        );
        assert_eq!(parse("/frobnicate@OtherBot", me), Parsed::ForAnotherBot);
        assert_eq!(parse("/stop@OtherBot", me), Parsed::ForAnotherBot);
        for text in [
            "hello",
            "/",
            "/ stop",
            "/usr/bin/env python",
            "/😀",
            "/stop!",
            "/@TurnBot",
            " /stop",
            &format!("/{}", "a".repeat(33)),
        ] {
            assert_eq!(parse(text, me), Parsed::Text, "{text:?}");
        }
        assert_eq!(
            parse(&format!("/{}", "a".repeat(32)), me),
            Parsed::Unknown("a".repeat(32))
        );
    }

    #[test]
    fn every_command_is_in_the_table_once() {
        for command in [
            Command::Start,
            Command::Help,
            Command::Stop,
            Command::New,
            Command::Permissions,
            Command::Schedule,
            Command::Schedules,
            Command::Model,
            Command::Sessions,
            Command::Fork,
            Command::Usage,
            Command::Project,
            Command::Status,
            Command::Restart,
            Command::Handoff,
        ] {
            assert_eq!(TABLE.iter().filter(|e| e.command == command).count(), 1);
            assert_eq!(
                parse(&format!("/{}", command.word()), "b"),
                Parsed::Known(command, "")
            );
        }
    }
}

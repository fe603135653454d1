//! The chat commands in one table: each command's word, who may use it and
//! what it does, read by the parser ([`parse`]), Telegram's command menu
//! ([`menu`]) and the greeting and help texts ([`greeting`], [`help`]).

use crate::chat::notices::counted;

/// A command the bot knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
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
    /// `/status` (admins): chats and turns.
    Status,
    /// `/restart` (admins): drain and re-execute.
    Restart,
}

/// Who may use a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    /// Everyone who may talk to the bot.
    Everyone,
    /// Only `access.admins`.
    Admins,
}

/// One row of the table.
struct Entry {
    /// The command.
    command: Command,
    /// Its word, after the `/`.
    word: &'static str,
    /// What it does, for the menu and the help.
    about: &'static str,
    /// Who may use it.
    who: Who,
    /// Whether Telegram's menu lists it (`/start` is what Telegram's own
    /// Start button sends; it needs no entry).
    listed: bool,
}

/// Every command, in the menu's order.
const TABLE: &[Entry] = &[
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
];

impl Command {
    fn entry(self) -> &'static Entry {
        TABLE
            .iter()
            .find(|e| e.command == self)
            .unwrap_or(&TABLE[0])
    }

    /// Its word, after the `/`.
    pub(crate) fn word(self) -> &'static str {
        self.entry().word
    }

    /// Who may use it.
    pub(crate) fn who(self) -> Who {
        self.entry().who
    }
}

/// What a message's text is, read as a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed<'a> {
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
pub(crate) fn parse<'a>(text: &'a str, me: &str) -> Parsed<'a> {
    let Some(rest) = text.strip_prefix('/') else {
        return Parsed::Text;
    };
    let (head, args) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(head, args)| (head, args.trim()));
    let (word, to) = match head.split_once('@') {
        Some((word, to)) => (word, Some(to)),
        None => (head, None),
    };
    let well_formed = !word.is_empty()
        && word.len() <= MAX_WORD
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !well_formed {
        return Parsed::Text;
    }
    if to.is_some_and(|to| !to.eq_ignore_ascii_case(me)) {
        return Parsed::ForAnotherBot;
    }
    match TABLE.iter().find(|e| e.word.eq_ignore_ascii_case(word)) {
        Some(entry) => Parsed::Known(entry.command, args),
        None => Parsed::Unknown(word.to_ascii_lowercase()),
    }
}

/// Telegram's command menu: `(word, description)` for everyone, or with
/// `admin` also the admins' commands (marked so).
pub(crate) fn menu(admin: bool) -> Vec<(&'static str, String)> {
    TABLE
        .iter()
        .filter(|e| e.listed && (admin || e.who == Who::Everyone))
        .map(|e| match e.who {
            Who::Everyone => (e.word, e.about.to_string()),
            Who::Admins => (e.word, format!("{} (admins)", e.about)),
        })
        .collect()
}

/// What the bot can take in here, for the greeting and the help.
#[derive(Debug, Clone, Default)]
pub(crate) struct Abilities {
    /// `files.max_download`, in bytes.
    pub(crate) max_download: u64,
    /// Whether voice notes are transcribed (`files.transcribe` is set).
    pub(crate) transcribes: bool,
    /// In a group that takes only messages addressed to the bot
    /// (`access.group_mode = "mention"`): the bot's username.
    pub(crate) mention_in_group: Option<String>,
}

/// The commands everyone may use, and with `admin` the admins' own, one
/// line each (`/stop: end the current turn`); `/start` is not listed.
fn command_lines(admin: bool) -> (Vec<String>, Vec<String>) {
    let line = |e: &Entry| {
        let mut about = e.about.to_string();
        if let Some(first) = about.get(..1) {
            about = format!("{}{}", first.to_ascii_lowercase(), &about[1..]);
        }
        format!("/{}: {about}", e.word)
    };
    let everyone = TABLE
        .iter()
        .filter(|e| e.listed && e.who == Who::Everyone)
        .map(line)
        .collect();
    let admins = if admin {
        TABLE
            .iter()
            .filter(|e| e.listed && e.who == Who::Admins)
            .map(line)
            .collect()
    } else {
        Vec::new()
    };
    (everyone, admins)
}

/// What the bot takes: text, photos and files up to the limit, voice notes
/// transcribed or as audio.
fn takes(abilities: &Abilities) -> String {
    let voice = if abilities.transcribes {
        "voice notes are transcribed for the agent"
    } else {
        "voice notes reach the agent as audio files"
    };
    format!(
        "You can send text, photos and files (up to {}); {voice}.",
        crate::telegram::files::megabytes(abilities.max_download)
    )
}

/// How to talk to the bot in a group that takes only what is addressed to it.
fn in_group(abilities: &Abilities) -> Option<String> {
    abilities.mention_in_group.as_ref().map(|me| {
        format!("In this group, mention @{me} or reply to its messages so the agent sees them.")
    })
}

/// `/start`: what the bot is, what it takes here, and every command the
/// asker may use (an admin's own under their heading).
pub(crate) fn greeting(admin: bool, abilities: &Abilities) -> String {
    let mut text = vec![
        "👋 Hello! This bot gives this chat its own AI agent: write what you need and the agent answers here, one message at a time.".to_string(),
        takes(abilities),
    ];
    text.extend(in_group(abilities));
    let (everyone, admins) = command_lines(admin);
    text.push(format!("Commands:\n{}", everyone.join("\n")));
    if !admins.is_empty() {
        text.push(format!("Admin commands:\n{}", admins.join("\n")));
    }
    text.join("\n\n")
}

/// `/help`: the greeting, shorter: one line on what to send, how to
/// address the bot in a group, and the commands (admins' marked so).
pub(crate) fn help(admin: bool, abilities: &Abilities) -> String {
    let mut text = vec![
        "Send a message (text, photos, files, voice notes) and the agent answers here.".to_string(),
    ];
    text.extend(in_group(abilities));
    let (everyone, admins) = command_lines(admin);
    let mut commands = everyone;
    commands.extend(admins.into_iter().map(|l| format!("{l} (admins)")));
    text.push(commands.join("\n"));
    text.join("\n\n")
}

/// The answer to a command the bot does not know.
pub(crate) fn unknown(word: &str) -> String {
    format!("There is no /{word} command here; /help lists the commands.")
}

/// What `/status` opens with, in an admin's private chat: the live chats,
/// the running turns, and how many more may start now
/// (`dispatcher.max_concurrent_turns`).
pub(crate) fn status_header(chats: usize, running: usize, free: usize) -> String {
    format!(
        "{}, {} running; {free} more can start now.",
        counted(chats, "chat", "chats"),
        counted(running, "turn", "turns"),
    )
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
            Command::Status,
            Command::Restart,
        ] {
            assert_eq!(TABLE.iter().filter(|e| e.command == command).count(), 1);
            assert_eq!(
                parse(&format!("/{}", command.word()), "b"),
                Parsed::Known(command, "")
            );
        }
    }

    #[test]
    fn the_menu_shows_admins_their_commands_and_nobody_else() {
        let words = |admin| menu(admin).into_iter().map(|(w, _)| w).collect::<Vec<_>>();
        assert_eq!(words(false), ["stop", "new", "permissions", "help"]);
        assert_eq!(
            words(true),
            ["stop", "new", "permissions", "help", "status", "restart"]
        );
        assert!(
            menu(true)
                .iter()
                .any(|(w, d)| *w == "restart" && d.ends_with("(admins)"))
        );
    }

    #[test]
    fn the_greeting_says_what_the_config_enables() {
        let mut abilities = Abilities {
            max_download: 20_000_000,
            transcribes: true,
            mention_in_group: None,
        };
        let text = greeting(false, &abilities);
        assert!(text.contains("up to 20 MB"), "{text}");
        assert!(text.contains("voice notes are transcribed"), "{text}");
        assert!(
            !text.contains("/restart") && !text.contains("/status"),
            "{text}"
        );
        abilities.transcribes = false;
        abilities.mention_in_group = Some("TurnBot".into());
        assert!(greeting(true, &abilities).contains("as audio files"));
        let text = help(true, &abilities);
        assert!(text.contains("mention @TurnBot"), "{text}");
        assert!(
            text.contains("/restart: drain and restart the bot (admins)"),
            "{text}"
        );
    }

    #[test]
    fn the_status_header_counts_in_words() {
        assert_eq!(
            status_header(1, 1, 3),
            "1 chat, 1 turn running; 3 more can start now."
        );
        assert_eq!(
            status_header(2, 0, 1),
            "2 chats, 0 turns running; 1 more can start now."
        );
    }
}

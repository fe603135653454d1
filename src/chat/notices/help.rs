//! What the command table (`incoming::command`) says to people: Telegram's
//! command menu ([`menu`]), the greeting and help texts ([`greeting`],
//! [`help`]), and the answers to an unknown command and `/status`.

use crate::chat::notices::counted;
use crate::incoming::{Entry, TABLE, Who};

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
    // Telegram's limit (the default) is 20 MiB: said so, not "21 MB".
    const MIB: u64 = 1024 * 1024;
    let limit = match abilities.max_download {
        bytes if bytes >= MIB && bytes.is_multiple_of(MIB) => format!("{} MiB", bytes / MIB),
        bytes => crate::telegram::files::megabytes(bytes),
    };
    format!("You can send text, photos and files (up to {limit}); {voice}.")
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

/// What `/status` opens with in a group, or for anyone but an admin.
pub(crate) const STATUS_THIS_CHAT: &str =
    "This chat only (ask in a private chat with the bot for all chats).";

/// What a `/status` line ends with: the chat's project, if it is in one, or
/// why it could not be read.
pub(crate) fn status_project<E: std::fmt::Display>(project: Result<&str, E>) -> String {
    match project {
        Ok("") => String::new(),
        Ok(project) => format!(", project {project}"),
        Err(err) => format!(", project unknown ({err})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_menu_shows_admins_their_commands_and_nobody_else() {
        let words = |admin| menu(admin).into_iter().map(|(w, _)| w).collect::<Vec<_>>();
        let everyone = [
            "stop",
            "new",
            "permissions",
            "schedule",
            "schedules",
            "model",
            "sessions",
            "fork",
            "project",
            "usage",
            "help",
        ];
        assert_eq!(words(false), everyone);
        assert_eq!(words(true)[..everyone.len()], everyone);
        assert_eq!(
            words(true)[everyone.len()..],
            ["status", "restart", "handoff"]
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

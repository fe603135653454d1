//! Config strings that are really choices: each is an enum written in the
//! config as its name, with one clear error for any other value.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a choice: the enum, its names, `Deserialize` (an unknown name is
/// "expected "a", "b" or "c""), `Serialize`, `Display` and comparison with a
/// name.
macro_rules! choice {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every name, in order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The name in the config (and in logs).
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D>(deserializer: D) -> Result<Self, D::Error>
            where
                D: Deserializer<'de>,
            {
                match String::deserialize(deserializer)?.as_str() {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(D::Error::custom(expected(Self::NAMES))),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S>(&self, serializer: S) -> Result<S::Ok, S::Error>
            where
                S: Serializer,
            {
                serializer.serialize_str(self.as_str())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, name: &&str) -> bool {
                self.as_str() == *name
            }
        }
    };
}

/// `expected "a" or "b"`, `expected "a", "b" or "c"`.
fn expected(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    match quoted.split_last() {
        Some((last, [])) => format!("expected {last}"),
        Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
        None => "expected nothing".to_string(),
    }
}

choice! {
    /// `access.group_mode`: which group messages the bot takes.
    #[derive(Default)]
    GroupMode {
        /// Only a message that mentions the bot, replies to it, or is a
        /// command addressed to it.
        #[default]
        Mention = "mention",
        /// Every message.
        All = "all",
    }
}

choice! {
    /// `progress.keep`: what becomes of a turn's status message at its end.
    #[derive(Default)]
    Keep {
        /// `"delete"`: it goes.
        #[default]
        Delete = "delete",
        /// `"fold"`: it stays as one line (tool calls and time).
        Fold = "fold",
    }
}

choice! {
    /// `progress.stream`: how an answer shows while the agent writes it.
    #[derive(Default)]
    Stream {
        /// `"edit"`: one preview message, edited as the text grows, that
        /// becomes the answer.
        #[default]
        Edit = "edit",
        /// `"draft"`: `sendMessageDraft` in private chats (elsewhere as
        /// `edit`), then the answer as a new message.
        Draft = "draft",
        /// `"off"`: the answer appears when it is complete.
        Off = "off",
    }
}

choice! {
    /// `agent.backend`: which agent answers.
    Backend {
        /// `"scripted"`: the in-process agent playing `agent.script`.
        Scripted = "scripted",
        /// `"claude"`: the Claude Code CLI, `agent.command`.
        Claude = "claude",
        /// `"acp"`: an agent speaking the Agent Client Protocol over its
        /// stdio (`gemini --acp`, …), `agent.command` with `agent.args`.
        Acp = "acp",
    }
}

choice! {
    /// `dispatcher.on_interrupted`: what happens after a restart or crash to
    /// a message whose turn was cut off before it replied.
    OnInterrupted {
        /// `"report"`: tell the chat.
        Report = "report",
        /// `"retry"`: run the turn again.
        Retry = "retry",
    }
}

choice! {
    /// `dispatcher.busy`: what a message for a conversation whose turn is
    /// running does.
    Busy {
        /// `"steer"`: it goes to the running agent at once, which reads it
        /// at its next tool boundary (or runs it next, by itself).
        Steer = "steer",
        /// `"queue"`: it waits, and starts the next turn.
        Queue = "queue",
    }
}

choice! {
    /// `agent.permission_mode`: what answers a tool the agent asks to run
    /// that neither `agent.allowed_tools` nor `agent.denied_tools` decides.
    PermissionMode {
        /// `"ask"`: the chat is asked, with buttons.
        Ask = "ask",
        /// `"deny"`: refused, with a message the model reads.
        Deny = "deny",
        /// `"allow"`: everything runs (check-config warns).
        Allow = "allow",
    }
}

choice! {
    /// `agent.sandbox`: the OS sandbox around the agent process.
    Sandbox {
        /// `"none"`: the process runs as turnstile's user, unconfined (an
        /// explicit opt-out, warned about).
        None = "none",
        /// `"bubblewrap"` (the default): under `bwrap`, no capability, the
        /// system read-only, the state hidden, only the chat's workdir and
        /// home writable, its own PID namespace.
        Bubblewrap = "bubblewrap",
    }
}

choice! {
    /// `agent.network.mode`: what network the sandboxed agent has.
    #[derive(Default)]
    NetworkMode {
        /// `"isolated"` (the default): a network namespace of its own; its
        /// only way out is turnstile's proxy, to the hosts allowed.
        #[default]
        Isolated = "isolated",
        /// `"host"`: the host's network, loopback and UNIX sockets included
        /// (an explicit opt-out, warned about).
        Host = "host",
    }
}

choice! {
    /// One of Claude's own settings sources (`agent.setting_sources`).
    SettingSource {
        /// The operator's `~/.claude` settings.
        User = "user",
        /// The project's `.claude/settings.json` in the workdir.
        Project = "project",
        /// The project's `.claude/settings.local.json`.
        Local = "local",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_lists_every_name() {
        assert_eq!(expected(&["a", "b"]), r#"expected "a" or "b""#);
        assert_eq!(expected(&["a", "b", "c"]), r#"expected "a", "b" or "c""#);
        let err = toml::from_str::<std::collections::BTreeMap<String, PermissionMode>>(
            "mode = \"maybe\"",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"expected "ask", "deny" or "allow""#),
            "{err}"
        );
    }

    #[test]
    fn names_round_trip() {
        for name in Sandbox::NAMES {
            let parsed: Sandbox = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(parsed.as_str(), *name);
        }
    }
}

choice! {
    /// `log.format`: how the binary writes its log lines on stderr.
    LogFormat {
        /// `"text"`: one human-readable line per event.
        Text = "text",
        /// `"json"`: one JSON object per line, fields flattened.
        Json = "json",
    }
}

choice! {
    /// `schedules.catch_up`: what happens to the slots a schedule missed
    /// while the bot was down.
    #[derive(Default)]
    CatchUp {
        /// `"once"`: one run right after start for all of them, saying how
        /// many were missed.
        #[default]
        Once = "once",
        /// `"skip"`: none; the next run is the next slot.
        Skip = "skip",
    }
}

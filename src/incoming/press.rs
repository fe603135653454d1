//! A press of one of the bot's buttons, read once at the intake into a
//! [`Press`]: who pressed, in which conversation, under which message, and
//! what the button's callback data says ([`Callback`]). Every kind of button
//! is a row of one table ([`KINDS`]) with the prefix its data starts with;
//! the same table writes every button's data ([`Callback::data`]) and reads
//! it back ([`Callback::parse`]), and no prefix starts another, so no button
//! can be read as another kind. Data no row reads is [`Callback::Unknown`].
//! Who may decide, and which turn a press is for, is the chat's business,
//! applied after this.

use teloxide::types::{CallbackQuery, ChatId, MessageId, UserId};

use crate::ids::Conversation;

/// A kind of button the bot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackKind {
    /// ❌ under a schedule of `/schedules`: `unsched:<id>`.
    Unschedule,
    /// An entry of a `/model`, `/sessions` or `/project` list:
    /// `pick:<m|s|p><list>:<entry>`.
    Pick,
    /// **Allow**, **Always in this chat** or **Deny** under a tool's
    /// approval question: `ap:<token>:<y|a|n>`.
    Tool,
    /// An option of the agent's own question (`AskUserQuestion`):
    /// `aq:<token>:<question>:<option>`.
    Question,
}

/// Every kind of button and the prefix of its callback data: the one table
/// that writes and reads them. No prefix is a prefix of another.
pub const KINDS: [(CallbackKind, &str); 4] = [
    (CallbackKind::Unschedule, "unsched:"),
    (CallbackKind::Pick, "pick:"),
    (CallbackKind::Tool, "ap:"),
    (CallbackKind::Question, "aq:"),
];

impl CallbackKind {
    /// The prefix of its data, from [`KINDS`].
    pub fn prefix(self) -> &'static str {
        KINDS
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("", |(_, prefix)| prefix)
    }
}

/// What a button's callback data says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callback {
    /// Remove schedule `id` ([`CallbackKind::Unschedule`]).
    Unschedule(i64),
    /// An entry of a list ([`CallbackKind::Pick`]).
    Pick(Pick),
    /// An answer to an approval question ([`CallbackKind::Tool`], or
    /// [`CallbackKind::Question`] for an option).
    Approval(Approval),
    /// Data no kind reads: not one of this bot's buttons, or one of an
    /// older shape. Written as nothing.
    Unknown,
}

/// Which list a [`Pick`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// `/model`'s.
    Models,
    /// `/sessions`'.
    Sessions,
    /// `/project`'s.
    Projects,
}

/// The letter of each list kind in a pick's data.
const LIST_LETTERS: [(ListKind, char); 3] = [
    (ListKind::Models, 'm'),
    (ListKind::Sessions, 's'),
    (ListKind::Projects, 'p'),
];

/// A press on a list's button: which list (its kind and number) and which
/// entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The list's kind.
    pub kind: ListKind,
    /// The list's number (only the latest of its kind in a conversation
    /// is live).
    pub list: u64,
    /// The entry's index.
    pub entry: usize,
}

impl Pick {
    /// The callback data of this button.
    pub fn data(self) -> String {
        Callback::Pick(self).data()
    }
}

/// An answer to an approval question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// Names the ask: 32 lowercase hex digits (unguessable).
    pub token: String,
    /// What was chosen.
    pub choice: Choice,
}

/// What an approval press chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Allow this once.
    Allow,
    /// Allow, and do not ask again in this chat.
    Always,
    /// Deny.
    Deny,
    /// Option `option` of question `question` (`AskUserQuestion`).
    Option {
        /// The question's index.
        question: usize,
        /// The option's index.
        option: usize,
    },
}

/// The letter of each tool choice in a [`CallbackKind::Tool`] button's data.
const TOOL_LETTERS: [(Choice, &str); 3] = [
    (Choice::Allow, "y"),
    (Choice::Always, "a"),
    (Choice::Deny, "n"),
];

/// How long an approval token is.
pub const TOKEN_LEN: usize = 32;

impl Callback {
    /// Its kind; none for [`Callback::Unknown`].
    pub fn kind(&self) -> Option<CallbackKind> {
        match self {
            Self::Unschedule(_) => Some(CallbackKind::Unschedule),
            Self::Pick(_) => Some(CallbackKind::Pick),
            Self::Approval(Approval {
                choice: Choice::Option { .. },
                ..
            }) => Some(CallbackKind::Question),
            Self::Approval(_) => Some(CallbackKind::Tool),
            Self::Unknown => None,
        }
    }

    /// The callback data of a button that says this: its kind's prefix,
    /// then its fields; empty for [`Callback::Unknown`].
    pub fn data(&self) -> String {
        let Some(kind) = self.kind() else {
            return String::new();
        };
        let rest = match self {
            Self::Unschedule(id) => id.to_string(),
            Self::Pick(pick) => {
                let letter = LIST_LETTERS
                    .iter()
                    .find(|(kind, _)| *kind == pick.kind)
                    .map_or('?', |(_, letter)| *letter);
                format!("{letter}{}:{}", pick.list, pick.entry)
            }
            Self::Approval(Approval { token, choice }) => match choice {
                Choice::Option { question, option } => format!("{token}:{question}:{option}"),
                choice => {
                    let letter = TOOL_LETTERS
                        .iter()
                        .find(|(c, _)| c == choice)
                        .map_or("", |(_, letter)| letter);
                    format!("{token}:{letter}")
                }
            },
            Self::Unknown => String::new(),
        };
        format!("{}{rest}", kind.prefix())
    }

    /// Reads callback data: the one kind whose prefix it starts with reads
    /// the rest; anything it does not read whole, in the exact shape
    /// [`Callback::data`] writes, is [`Callback::Unknown`].
    pub fn parse(data: &str) -> Self {
        KINDS
            .iter()
            .find_map(|(kind, prefix)| Some((*kind, data.strip_prefix(prefix)?)))
            .and_then(|(kind, rest)| read(kind, rest))
            .unwrap_or(Self::Unknown)
    }
}

/// The rest of a `kind` button's data, after its prefix.
fn read(kind: CallbackKind, rest: &str) -> Option<Callback> {
    match kind {
        CallbackKind::Unschedule => Some(Callback::Unschedule(i64::try_from(number(rest)?).ok()?)),
        CallbackKind::Pick => {
            let (list, entry) = rest.split_once(':')?;
            let mut letters = list.chars();
            let letter = letters.next()?;
            let kind = LIST_LETTERS
                .iter()
                .find(|(_, l)| *l == letter)
                .map(|(kind, _)| *kind)?;
            Some(Callback::Pick(Pick {
                kind,
                list: number(letters.as_str())?,
                entry: usize::try_from(number(entry)?).ok()?,
            }))
        }
        CallbackKind::Tool => {
            let (token, letter) = rest.split_once(':')?;
            let choice = TOOL_LETTERS
                .iter()
                .find(|(_, l)| *l == letter)
                .map(|(choice, _)| *choice)?;
            approval(token, choice)
        }
        CallbackKind::Question => {
            let (token, rest) = rest.split_once(':')?;
            let (question, option) = rest.split_once(':')?;
            let choice = Choice::Option {
                question: usize::try_from(number(question)?).ok()?,
                option: usize::try_from(number(option)?).ok()?,
            };
            approval(token, choice)
        }
    }
}

/// An approval of `token`, when it is a token.
fn approval(token: &str, choice: Choice) -> Option<Callback> {
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (token.len() == TOKEN_LEN && token.bytes().all(hex)).then(|| {
        Callback::Approval(Approval {
            token: token.to_owned(),
            choice,
        })
    })
}

/// A number as [`Callback::data`] writes one: decimal digits, no sign, no
/// leading zero, fitting a `u64`.
fn number(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// A press of one of the bot's buttons, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    /// The callback query's id: the press is answered exactly once.
    pub id: String,
    /// The conversation the button's message is in: its chat and forum
    /// topic (a press Telegram sent without its message: the presser's
    /// private chat).
    pub to: Conversation,
    /// Who pressed.
    pub from: UserId,
    /// How they are named on a question they decided: `@username`, else
    /// their first name.
    pub name: String,
    /// The message the button is under, when Telegram sent it.
    pub message: Option<MessageId>,
    /// What the button says.
    pub data: Callback,
}

impl Press {
    /// Reads a press as Telegram sent it.
    pub fn read(query: &CallbackQuery) -> Self {
        let chat = query
            .message
            .as_ref()
            .map(|m| m.chat().id)
            .unwrap_or(ChatId(i64::try_from(query.from.id.0).unwrap_or(0)));
        let topic = query
            .message
            .as_ref()
            .and_then(|m| m.regular_message())
            .filter(|m| m.is_topic_message)
            .and_then(|m| m.thread_id);
        let name = query
            .from
            .username
            .clone()
            .map_or_else(|| query.from.first_name.clone(), |u| format!("@{u}"));
        Self {
            id: query.id.to_string(),
            to: Conversation::new(chat, topic),
            from: query.from.id,
            name,
            message: query.message.as_ref().map(|m| m.id()),
            data: query
                .data
                .as_deref()
                .map_or(Callback::Unknown, Callback::parse),
        }
    }
}

#[cfg(test)]
mod tests;

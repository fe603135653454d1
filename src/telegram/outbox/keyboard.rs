//! A question's buttons as Bot API 9.4 takes them: teloxide 0.17's
//! `InlineKeyboardButton` has no `style`, so the keyboard and the
//! `sendMessage` that carries it are written here.

use serde::Serialize;
use teloxide::requests::Payload;
use teloxide::types::{ChatId, Message, ReplyParameters, ThreadId};

/// One button of a question: pressing it sends `data` back as a callback
/// query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    /// What the user reads on the button.
    pub label: String,
    /// What comes back in the callback query; Telegram takes 1-64 bytes.
    pub data: String,
    /// How it looks; `None`: as the app shows buttons.
    pub style: Option<ButtonStyle>,
}

impl Button {
    /// A button showing `label` that answers `data`, looking as the app
    /// shows buttons.
    pub fn new(label: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            data: data.into(),
            style: None,
        }
    }

    /// The same button, looking as `style` says.
    #[must_use]
    pub fn styled(mut self, style: ButtonStyle) -> Self {
        self.style = Some(style);
        self
    }
}

/// How a button looks (Bot API 9.4's `style`); apps older than it show
/// every button alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ButtonStyle {
    /// Green: what goes ahead (allow).
    Success,
    /// Red: what refuses or destroys (deny).
    Danger,
}

/// An inline keyboard of callback buttons.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Keyboard {
    inline_keyboard: Vec<Vec<KeyButton>>,
}

impl Keyboard {
    /// The keyboard of these rows of buttons.
    pub(super) fn new(rows: &[Vec<Button>]) -> Self {
        let rows = rows.iter().map(|row| {
            row.iter()
                .map(|b| KeyButton {
                    text: b.label.clone(),
                    callback_data: b.data.clone(),
                    style: b.style,
                })
                .collect()
        });
        Self {
            inline_keyboard: rows.collect(),
        }
    }
}

/// A callback button of a [`Keyboard`].
#[derive(Debug, Clone, Serialize)]
struct KeyButton {
    text: String,
    callback_data: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    style: Option<ButtonStyle>,
}

/// `sendMessage` with a [`Keyboard`]: a question's text under its buttons.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SendKeyboard {
    pub(super) chat_id: ChatId,
    pub(super) text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) message_thread_id: Option<ThreadId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reply_parameters: Option<ReplyParameters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reply_markup: Option<Keyboard>,
}

impl Payload for SendKeyboard {
    type Output = Message;
    const NAME: &'static str = "sendMessage";
}

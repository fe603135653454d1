//! Topics of a private chat get their names by themselves: a topic the
//! bot opened (`/new`, `/fork`, `/sessions`), or one the user started
//! without a title, waits for a name in the state store
//! (`Store::await_name`). The first turn there whose first text reaches
//! Telegram takes that wait and names the topic after the message that
//! started the turn (`editForumTopic`). A topic that does not wait (the
//! user named it, or it was named already) is never renamed.

use actix::Addr;
use teloxide::types::ThreadId;

use crate::ids::Conversation;
use crate::state::StoreHandle;
use crate::telegram::outbox::{Outbox, RenameTopic, SendText};

/// How many characters of the first message name a topic.
pub const TITLE_CHARS: usize = 48;

/// A short, single-line name from untrusted `text`: control and invisible
/// formatting characters (bidi overrides, zero-width) dropped, whitespace
/// collapsed, anything before the first letter or digit left out (so no
/// name starts like one of the bot's notices, with a pictograph or a
/// sign), cut to [`TITLE_CHARS`] characters with `…`. `None` when
/// nothing is left.
pub fn topic_title(text: &str) -> Option<String> {
    let visible: String = text
        .chars()
        .map(|c| if invisible(c) { ' ' } else { c })
        .collect();
    let words = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = words.find(char::is_alphanumeric)?;
    let words = &words[start..];
    let title = match words.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", words[..cut].trim_end()),
        None => words.to_owned(),
    };
    Some(title)
}

/// A control character, or one that changes how text around it shows
/// without showing itself.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}')
}

/// A turn in a topic of a private chat that may name it: what the name
/// would be.
#[derive(Debug, Clone)]
pub(crate) struct TopicNaming {
    /// The topic's conversation.
    to: Conversation,
    /// The topic.
    topic: ThreadId,
    /// Its name, from the message that started the turn.
    title: String,
}

impl TopicNaming {
    /// For a turn of `to` started by `text`: only in a topic of a private
    /// chat, and only when the text makes a name.
    pub(crate) fn of(to: Conversation, text: &str) -> Option<Self> {
        let topic = to.topic.filter(|_| to.chat.is_user())?;
        let title = topic_title(text)?;
        Some(Self { to, topic, title })
    }

    /// Watches `send` (the turn's first text): once Telegram took it, the
    /// topic's wait for a name is taken and, if it waited, it is named.
    /// Whoever waited on `send` before is told as before.
    pub(crate) fn watch(self, send: &mut SendText, inbox: &StoreHandle, outbox: Addr<Outbox>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let asked = send.reply.replace(tx);
        let inbox = inbox.clone();
        actix::spawn(async move {
            let result = rx.await;
            let out = matches!(result, Ok(Ok(_)));
            if let (Some(asked), Ok(result)) = (asked, result) {
                let _ = asked.send(result);
            }
            if !out {
                return;
            }
            let to = self.to;
            let waited = inbox.read("taking a topic's wait for a name", move |store| {
                store.take_unnamed(to)
            });
            if let Ok(true) = waited.await {
                outbox.do_send(RenameTopic {
                    chat: self.to.chat,
                    topic: self.topic,
                    name: self.title,
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{TITLE_CHARS, topic_title};

    #[test]
    fn a_title_is_one_short_line_of_what_shows() {
        assert_eq!(
            topic_title("  plan a\ntrip\t to   Rome  ").as_deref(),
            Some("plan a trip to Rome")
        );
        assert_eq!(
            topic_title("ab\u{202E}cd\u{200B}ef\u{7}").as_deref(),
            Some("ab cd ef")
        );
        let long = "word ".repeat(40);
        let title = topic_title(&long).expect("a title");
        assert!(title.ends_with('…'), "{title}");
        assert!(title.chars().count() <= TITLE_CHARS + 1, "{title}");
        let wide = "é".repeat(200);
        assert_eq!(topic_title(&wide).map(|t| t.chars().count()), Some(49));
    }

    #[test]
    fn a_title_never_starts_like_a_notice_and_nothing_visible_names_nothing() {
        assert_eq!(
            topic_title("⚠️ Stopped. The bot restarted").as_deref(),
            Some("Stopped. The bot restarted")
        );
        assert_eq!(
            topic_title("🆕 [ok] 42 things").as_deref(),
            Some("ok] 42 things")
        );
        for nothing in ["", "   ", "\u{200B}\u{202E}", "🙂 !!", "\n\t"] {
            assert_eq!(topic_title(nothing), None, "{nothing:?}");
        }
    }
}

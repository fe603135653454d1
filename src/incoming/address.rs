//! How a message names the bot it is for, read in one place: a command's
//! `/word@Bot` ([`Head`]), which the addressing check, the address taken off
//! the text and the command parser all read through, and a leading
//! `@Bot` mention ([`strip_address`]).

use std::borrow::Cow;

/// A text's first word read as a command's head: `/word@Bot`, then the rest.
/// Nothing is checked: whether `word` is a command is [`parse`]'s to say.
///
/// [`parse`]: super::parse
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    /// What follows the `/`, up to an `@` or a blank.
    pub word: &'a str,
    /// The bot named after an `@` in the first word, when one is.
    pub to: Option<&'a str>,
    /// The text after the first word, from the blank that ends it.
    pub rest: &'a str,
}

impl<'a> Head<'a> {
    /// The head of `text`, when it starts with `/`.
    pub fn of(text: &'a str) -> Option<Self> {
        let after = text.strip_prefix('/')?;
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        let (first, rest) = after.split_at(end);
        let (word, to) = match first.split_once('@') {
            Some((word, to)) => (word, Some(to)),
            None => (first, None),
        };
        Some(Self { word, to, rest })
    }

    /// Whether it names a bot, and that bot is not `me` (any case).
    pub fn for_another_bot(&self, me: &str) -> bool {
        self.to.is_some_and(|to| !to.eq_ignore_ascii_case(me))
    }

    /// Whether it names `me` (any case).
    fn for_me(&self, me: &str) -> bool {
        self.to.is_some_and(|to| to.eq_ignore_ascii_case(me))
    }
}

/// The text with a leading mention of the bot `me` taken off (`@ThisBot hi`
/// → `hi`), or a command's `@ThisBot` dropped (`/stop@ThisBot now` →
/// `/stop now`).
pub fn strip_address<'a>(text: &'a str, me: &str) -> Cow<'a, str> {
    let mention = format!("@{me}");
    let trimmed = text.trim_start();
    if trimmed.len() >= mention.len()
        && trimmed.is_char_boundary(mention.len())
        && trimmed[..mention.len()].eq_ignore_ascii_case(&mention)
    {
        let rest = trimmed[mention.len()..]
            .trim_start_matches([',', ':'])
            .trim_start();
        if !rest.is_empty() {
            return rest.into();
        }
    }
    match Head::of(text) {
        Some(head) if head.for_me(me) => format!("/{}{}", head.word, head.rest).into(),
        _ => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_from_the_first_word() {
        let head = |text| Head::of(text).map(|h| (h.word, h.to, h.rest));
        assert_eq!(
            head("/restart@OtherBot now"),
            Some(("restart", Some("OtherBot"), " now"))
        );
        assert_eq!(head("/restart"), Some(("restart", None, "")));
        assert_eq!(head("/a@b@c\td"), Some(("a", Some("b@c"), "\td")));
        assert_eq!(head("hi /x@y"), None);
        assert_eq!(head(" /x@y"), None);
        assert_eq!(head("/@"), Some(("", Some(""), "")));
        let other = Head::of("/stop@Other").expect("a head");
        assert!(other.for_another_bot("TurnBot") && !other.for_me("TurnBot"));
        let mine = Head::of("/stop@turnBOT").expect("a head");
        assert!(!mine.for_another_bot("TurnBot") && mine.for_me("TurnBot"));
        let none = Head::of("/stop").expect("a head");
        assert!(!none.for_another_bot("TurnBot") && !none.for_me("TurnBot"));
    }

    #[test]
    fn the_address_is_stripped() {
        assert_eq!(strip_address("@TurnBot hello", "turnbot"), "hello");
        assert_eq!(strip_address("@turnbot: hello", "TurnBot"), "hello");
        assert_eq!(strip_address("@turnbot", "TurnBot"), "@turnbot");
        assert_eq!(strip_address("/stop@TurnBot now", "TurnBot"), "/stop now");
        assert_eq!(strip_address("/stop@Other", "TurnBot"), "/stop@Other");
        assert_eq!(strip_address("ask @TurnBot", "TurnBot"), "ask @TurnBot");
        assert_eq!(strip_address("@TurnBo😀", "TurnBot"), "@TurnBo😀");
    }
}

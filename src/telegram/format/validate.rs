//! Telegram's rules for message entities, written from the Bot API docs
//! ("MessageEntity" and "Formatting options") and
//! <https://core.telegram.org/api/entities>:
//!
//! - offsets and lengths count UTF-16 code units; an entity lies within the
//!   text, has a length above zero and starts and ends on a character
//!   boundary (never between the two halves of a surrogate pair);
//! - the text is not empty and at most 4096 units long ("Text of the message
//!   to be sent, 1-4096 characters after entities parsing");
//! - if two entities have common characters, one is fully contained in the
//!   other (no partial overlap);
//! - bold, italic, underline, strikethrough and spoiler can contain and be
//!   part of any *other* entity, except that pre and code contain no entity
//!   at all; an entity inside one of the same kind is refused;
//! - blockquote and expandable_blockquote are not nested in each other;
//! - all other entities (links, mentions, pre, code, …) do not contain each
//!   other;
//! - a `text_link` URL has a scheme Telegram opens (http, https, ftp with a
//!   host; tg, ton, tonsite); a `pre` language is one word of printable
//!   ASCII (Telegram takes it from `` ```python `` or
//!   `class="language-python"`, both single words).
//!
//! Stricter than Telegram on one point: entities must come sorted by
//! offset, as Telegram returns them. The docs give no limit on the number of
//! entities; Telegram ignores those past the 100th (see the report of
//! rubenlagus/TelegramBots#854) rather than refusing the message, so that is
//! not checked.

use super::TELEGRAM_TEXT_LIMIT;
use super::{MessageEntity, MessageEntityKind, link_url_problem};

/// Checks `entities` against Telegram's rules for `text`; `Err` names the
/// first broken rule and the entity that breaks it.
pub fn validate(text: &str, entities: &[MessageEntity]) -> Result<(), String> {
    if text.is_empty() {
        return Err("message text is empty".into());
    }
    let bounds = CharBounds::new(text);
    if bounds.units > TELEGRAM_TEXT_LIMIT {
        return Err(format!(
            "message is too long: {} UTF-16 units, the limit is {TELEGRAM_TEXT_LIMIT}",
            bounds.units
        ));
    }
    for (i, e) in entities.iter().enumerate() {
        let end = e
            .offset
            .checked_add(e.length)
            .ok_or_else(|| format!("entity {i} ({}): offset + length overflows", describe(e)))?;
        if e.length == 0 {
            return Err(format!("entity {i} ({}): length is 0", describe(e)));
        }
        if end > bounds.units {
            return Err(format!(
                "entity {i} ({}): ends at {end}, beyond the text's {} UTF-16 units",
                describe(e),
                bounds.units
            ));
        }
        for at in [e.offset, end] {
            if !bounds.is_boundary(at) {
                return Err(format!(
                    "entity {i} ({}): {at} splits a surrogate pair",
                    describe(e)
                ));
            }
        }
        if i > 0 && entities[i - 1].offset > e.offset {
            return Err(format!(
                "entity {i} ({}): entities are not sorted by offset",
                describe(e)
            ));
        }
        kind_problem(&e.kind).map_or(Ok(()), |p| {
            Err(format!("entity {i} ({}): {p}", describe(e)))
        })?;
    }
    nesting(entities)
}

/// A problem with an entity's own fields.
fn kind_problem(kind: &MessageEntityKind) -> Option<String> {
    match kind {
        MessageEntityKind::TextLink { url } => link_url_problem(url),
        MessageEntityKind::Pre {
            language: Some(language),
        } => {
            let word = !language.is_empty() && language.chars().all(|c| c.is_ascii_graphic());
            (!word).then(|| format!("pre language {language:?} is not one word of printable ASCII"))
        }
        _ => None,
    }
}

/// Entities that format text and nest freely.
fn is_style(kind: &MessageEntityKind) -> bool {
    matches!(
        kind,
        MessageEntityKind::Bold
            | MessageEntityKind::Italic
            | MessageEntityKind::Underline
            | MessageEntityKind::Strikethrough
            | MessageEntityKind::Spoiler
    )
}

fn is_quote(kind: &MessageEntityKind) -> bool {
    matches!(
        kind,
        MessageEntityKind::Blockquote | MessageEntityKind::ExpandableBlockquote
    )
}

/// Why `inner` may not lie inside `outer`, if it may not.
pub(super) fn containment_problem(
    outer: &MessageEntityKind,
    inner: &MessageEntityKind,
) -> Option<&'static str> {
    if std::mem::discriminant(outer) == std::mem::discriminant(inner) {
        return Some("is nested in an entity of the same kind");
    }
    if matches!(
        outer,
        MessageEntityKind::Pre { .. } | MessageEntityKind::Code
    ) {
        return Some("pre and code contain no other entity");
    }
    if is_style(inner) || is_style(outer) {
        return None;
    }
    if is_quote(inner) {
        return Some("a blockquote is not nested");
    }
    if is_quote(outer) {
        return None;
    }
    Some("these entities do not contain each other")
}

/// Whether two entities with the same range may coexist (either may be
/// taken as the outer one).
fn same_range_allowed(a: &MessageEntityKind, b: &MessageEntityKind) -> bool {
    containment_problem(a, b).is_none() || containment_problem(b, a).is_none()
}

/// Checks nesting: no partial overlap, and every containment allowed.
fn nesting(entities: &[MessageEntity]) -> Result<(), String> {
    let mut order: Vec<usize> = (0..entities.len()).collect();
    order.sort_by_key(|&i| (entities[i].offset, std::cmp::Reverse(entities[i].length)));
    // Indices of the entities containing the current position.
    let mut stack: Vec<usize> = Vec::new();
    for &i in &order {
        let e = &entities[i];
        while stack.last().is_some_and(|&o| end(&entities[o]) <= e.offset) {
            stack.pop();
        }
        // Every entity left on the stack starts at or before `e` and ends after its start.
        for &o in &stack {
            let outer = &entities[o];
            if end(e) > end(outer) {
                return Err(format!(
                    "entity {i} ({}) partially overlaps entity {o} ({})",
                    describe(e),
                    describe(outer)
                ));
            }
            let same = outer.offset == e.offset && outer.length == e.length;
            let problem = if same {
                (!same_range_allowed(&outer.kind, &e.kind))
                    .then_some("has the same range as an entity it may not nest with")
            } else {
                containment_problem(&outer.kind, &e.kind)
            };
            if let Some(problem) = problem {
                return Err(format!(
                    "entity {i} ({}) inside entity {o} ({}): {problem}",
                    describe(e),
                    describe(outer)
                ));
            }
        }
        stack.push(i);
    }
    Ok(())
}

fn end(e: &MessageEntity) -> usize {
    e.offset + e.length
}

/// A short description of an entity for error messages: `bold 3..7`.
pub(super) fn describe(e: &MessageEntity) -> String {
    format!(
        "{} {}..{}",
        kind_name(&e.kind),
        e.offset,
        e.offset.saturating_add(e.length)
    )
}

/// The Bot API name of an entity kind.
pub(crate) fn kind_name(kind: &MessageEntityKind) -> &'static str {
    match kind {
        MessageEntityKind::Mention => "mention",
        MessageEntityKind::Hashtag => "hashtag",
        MessageEntityKind::Cashtag => "cashtag",
        MessageEntityKind::BotCommand => "bot_command",
        MessageEntityKind::Url => "url",
        MessageEntityKind::Email => "email",
        MessageEntityKind::PhoneNumber => "phone_number",
        MessageEntityKind::Bold => "bold",
        MessageEntityKind::Blockquote => "blockquote",
        MessageEntityKind::ExpandableBlockquote => "expandable_blockquote",
        MessageEntityKind::Italic => "italic",
        MessageEntityKind::Underline => "underline",
        MessageEntityKind::Strikethrough => "strikethrough",
        MessageEntityKind::Spoiler => "spoiler",
        MessageEntityKind::Code => "code",
        MessageEntityKind::Pre { .. } => "pre",
        MessageEntityKind::TextLink { .. } => "text_link",
        MessageEntityKind::TextMention { .. } => "text_mention",
        MessageEntityKind::CustomEmoji { .. } => "custom_emoji",
    }
}

/// Which UTF-16 offsets of a text fall between two chars.
struct CharBounds {
    /// UTF-16 offsets of the second half of each surrogate pair, ascending.
    low_halves: Vec<usize>,
    units: usize,
}

impl CharBounds {
    fn new(text: &str) -> Self {
        let mut low_halves = Vec::new();
        let mut units = 0;
        for c in text.chars() {
            if c.len_utf16() == 2 {
                low_halves.push(units + 1);
            }
            units += c.len_utf16();
        }
        CharBounds { low_halves, units }
    }

    fn is_boundary(&self, at: usize) -> bool {
        self.low_halves.binary_search(&at).is_err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: MessageEntityKind, offset: usize, length: usize) -> MessageEntity {
        MessageEntity::new(kind, offset, length)
    }

    fn bold(offset: usize, length: usize) -> MessageEntity {
        MessageEntity::bold(offset, length)
    }

    fn link(url: &str, offset: usize, length: usize) -> MessageEntity {
        MessageEntity::text_link(reqwest::Url::parse(url).unwrap(), offset, length)
    }

    fn pre(language: Option<&str>, offset: usize, length: usize) -> MessageEntity {
        MessageEntity::pre(language.map(str::to_owned), offset, length)
    }

    #[track_caller]
    fn refused(text: &str, entities: &[MessageEntity], reason: &str) {
        match validate(text, entities) {
            Ok(()) => panic!("accepted {entities:?} on {text:?}"),
            Err(e) => assert!(e.contains(reason), "{e:?} does not mention {reason:?}"),
        }
    }

    const TEXT: &str = "Hello, world! This is a text.";

    #[test]
    fn a_well_formed_list_passes() {
        let entities = [
            bold(0, 13),
            MessageEntity::italic(0, 5),
            MessageEntity::code(7, 5),
            link("https://example.com/a_(b)", 14, 4),
            e(MessageEntityKind::Blockquote, 14, 15),
            pre(Some("rust"), 19, 2),
            MessageEntity::strikethrough(19, 2),
        ];
        let mut sorted = entities.to_vec();
        sorted.sort_by_key(|e| e.offset);
        assert_eq!(validate(TEXT, &sorted), Ok(()));
        assert_eq!(validate(TEXT, &[]), Ok(()));
    }

    #[test]
    fn empty_and_too_long_texts_are_refused() {
        refused("", &[], "empty");
        let long = "x".repeat(TELEGRAM_TEXT_LIMIT + 1);
        refused(&long, &[], "too long");
        // The limit counts UTF-16 units: 2049 emoji are 4098 units.
        refused(&"😀".repeat(2049), &[], "too long");
        assert_eq!(validate(&"😀".repeat(2048), &[]), Ok(()));
    }

    #[test]
    fn zero_length_is_refused() {
        refused(TEXT, &[bold(3, 0)], "length is 0");
    }

    #[test]
    fn entity_beyond_the_text_is_refused() {
        let units = TEXT.len();
        assert_eq!(validate(TEXT, &[bold(0, units)]), Ok(()));
        refused(TEXT, &[bold(0, units + 1)], "beyond");
        refused(TEXT, &[bold(units, 1)], "beyond");
        refused(TEXT, &[bold(usize::MAX, 2)], "overflows");
        // Counted in UTF-16: "😀ab" is 4 units, not 3 chars or 6 bytes.
        assert_eq!(validate("😀ab", &[bold(0, 4)]), Ok(()));
        refused("😀ab", &[bold(0, 5)], "beyond");
    }

    #[test]
    fn splitting_a_surrogate_pair_is_refused() {
        refused("a😀b", &[bold(0, 2)], "surrogate");
        refused("a😀b", &[bold(2, 2)], "surrogate");
        assert_eq!(validate("a😀b", &[bold(1, 2)]), Ok(()));
    }

    #[test]
    fn unsorted_entities_are_refused() {
        refused(TEXT, &[bold(5, 2), MessageEntity::italic(1, 2)], "sorted");
    }

    #[test]
    fn partial_overlap_is_refused() {
        refused(
            TEXT,
            &[bold(0, 5), MessageEntity::italic(3, 5)],
            "partially overlaps",
        );
        // Touching is not overlapping.
        assert_eq!(
            validate(TEXT, &[bold(0, 5), MessageEntity::italic(5, 5)]),
            Ok(())
        );
    }

    #[test]
    fn nothing_inside_pre_or_code() {
        refused(TEXT, &[pre(None, 0, 10), bold(2, 3)], "pre and code");
        refused(
            TEXT,
            &[MessageEntity::code(0, 10), MessageEntity::italic(2, 3)],
            "pre and code",
        );
        refused(
            TEXT,
            &[MessageEntity::code(0, 10), link("https://a.b", 0, 10)],
            "may not nest",
        );
        // A style around code is fine, also over the same range.
        assert_eq!(
            validate(TEXT, &[bold(0, 10), MessageEntity::code(2, 3)]),
            Ok(())
        );
        assert_eq!(
            validate(TEXT, &[MessageEntity::code(0, 10), bold(0, 10)]),
            Ok(())
        );
    }

    #[test]
    fn same_kind_nesting_is_refused() {
        refused(TEXT, &[bold(0, 10), bold(2, 3)], "same kind");
        refused(TEXT, &[bold(0, 10), bold(0, 10)], "same range");
    }

    #[test]
    fn blockquotes_do_not_nest() {
        let quote = |o, l| e(MessageEntityKind::Blockquote, o, l);
        let expandable = |o, l| e(MessageEntityKind::ExpandableBlockquote, o, l);
        refused(
            TEXT,
            &[quote(0, 20), expandable(2, 3)],
            "blockquote is not nested",
        );
        refused(
            TEXT,
            &[expandable(0, 20), quote(2, 3)],
            "blockquote is not nested",
        );
        // A blockquote holds links, code and styles; a style holds a blockquote.
        let fine = [
            quote(0, 20),
            link("https://a.b", 1, 2),
            pre(Some("sh"), 5, 3),
        ];
        assert_eq!(validate(TEXT, &fine), Ok(()));
        assert_eq!(validate(TEXT, &[bold(0, 20), quote(2, 3)]), Ok(()));
        // ... but a link does not.
        refused(
            TEXT,
            &[link("https://a.b", 0, 20), quote(2, 3)],
            "blockquote is not nested",
        );
    }

    #[test]
    fn other_entities_do_not_contain_each_other() {
        refused(
            TEXT,
            &[link("https://a.b", 0, 10), MessageEntity::code(2, 3)],
            "do not contain",
        );
        refused(
            TEXT,
            &[link("https://a.b", 0, 10), e(MessageEntityKind::Url, 2, 3)],
            "do not contain",
        );
    }

    #[test]
    fn text_link_needs_an_openable_url() {
        refused(TEXT, &[link("javascript:alert(1)", 0, 5)], "scheme");
        refused(TEXT, &[link("file:///etc/passwd", 0, 5)], "scheme");
        refused(TEXT, &[link("mailto:a@b.c", 0, 5)], "scheme");
        assert_eq!(validate(TEXT, &[link("tg://user?id=1", 0, 5)]), Ok(()));
        assert_eq!(
            validate(TEXT, &[link("http://localhost:8080/x", 0, 5)]),
            Ok(())
        );
    }

    #[test]
    fn pre_language_is_one_printable_word() {
        refused(TEXT, &[pre(Some("rust code"), 0, 5)], "language");
        refused(TEXT, &[pre(Some(""), 0, 5)], "language");
        refused(TEXT, &[pre(Some("py\n"), 0, 5)], "language");
        refused(TEXT, &[pre(Some("ру"), 0, 5)], "language");
        assert_eq!(validate(TEXT, &[pre(Some("c++"), 0, 5)]), Ok(()));
        assert_eq!(validate(TEXT, &[pre(None, 0, 5)]), Ok(()));
    }
}

use super::super::validate;
use super::*;

fn kinds(r: &Rendered) -> Vec<(&'static str, usize, usize)> {
    r.entities
        .iter()
        .map(|e| {
            (
                super::super::validate::kind_name(&e.kind),
                e.offset,
                e.length,
            )
        })
        .collect()
}

#[test]
fn styles_become_entities() {
    let r = render("a **b** *c* ~~d~~ `e`");
    assert_eq!(r.text, "a b c d e");
    assert_eq!(
        kinds(&r),
        [
            ("bold", 2, 1),
            ("italic", 4, 1),
            ("strikethrough", 6, 1),
            ("code", 8, 1)
        ]
    );
}

#[test]
fn offsets_count_utf16_units() {
    let r = render("😀 **b**");
    assert_eq!(kinds(&r), [("bold", 3, 1)]);
}

#[test]
fn fenced_code_keeps_its_language_and_text() {
    let r = render("```rust\nlet a = b < c && d;\n```");
    assert_eq!(r.text, "let a = b < c && d;");
    assert_eq!(
        r.entities,
        vec![MessageEntity::pre(Some("rust".into()), 0, 19)]
    );
    let r = render("``` not a language!\nx\n```");
    assert_eq!(
        r.entities,
        vec![MessageEntity::pre(Some("not".into()), 0, 1)]
    );
    let r = render("```py{x}\nx\n```");
    assert_eq!(
        r.entities,
        vec![MessageEntity::pre(Some("py".into()), 0, 1)]
    );
}

#[test]
fn forbidden_nesting_is_repaired() {
    // Bold inside a (bold) heading, code inside a link, a quote in a quote.
    let r = render("# a **b** c\n\n[`x`](https://e.com)\n\n> q\n>\n> > qq");
    validate(&r.text, &r.entities).unwrap();
    assert_eq!(
        kinds(&r),
        [("bold", 0, 5), ("text_link", 7, 1), ("blockquote", 10, 5)]
    );
}

#[test]
fn links_without_an_openable_url_are_text() {
    let r = render("[a](javascript:alert(1)) [b](./x.md) [c](mailto:a@b.c)");
    assert_eq!(r.text, "a b c");
    assert!(r.entities.is_empty(), "{:?}", r.entities);
}

#[test]
fn no_trailing_whitespace_and_one_blank_line_between_paragraphs() {
    let r = render("one   \n\n\n\ntwo  \n\n- \n\n   ");
    assert_eq!(r.text, "one\n\ntwo\n\n•");
}

#[test]
fn empty_input_renders_empty() {
    assert_eq!(render(""), Rendered::default());
    assert_eq!(render("   \n\n"), Rendered::default());
}

#[test]
fn deep_nesting_does_not_overflow() {
    let quotes = render(&format!("{}x", "> ".repeat(5000)));
    validate(&quotes.text, &quotes.entities).unwrap();
    let stars = render(&format!("{}x{}", "*".repeat(3000), "*".repeat(3000)));
    assert_eq!(stars.text, "x");
    validate(&stars.text, &stars.entities).unwrap();
    let nested: String = (0..200)
        .map(|i| format!("{}- a\n", "  ".repeat(i)))
        .collect();
    let lists = render(&nested);
    assert!(
        lists.text.lines().count() == 200,
        "{}",
        lists.text.lines().count()
    );
}

#[test]
fn tables_are_aligned_pre_blocks() {
    let r = render("| a | bb |\n|:-:|--:|\n| ccc | d |");
    assert_eq!(r.text, " a  | bb\n----+---\nccc |  d");
    assert_eq!(r.entities, vec![MessageEntity::pre(None, 0, r.units())]);
}

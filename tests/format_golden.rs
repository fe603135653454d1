//! Golden tests of Telegram formatting: real-looking agent answers in
//! tests/fixtures/format/NN-name.md are rendered and compared with
//! NN-name.out (the rendered text, then a line per entity with the text it
//! covers). `UPDATE_GOLDEN=1 cargo test --test format_golden` rewrites the
//! .out files; review every rewritten file by eye.
//!
//! Every answer is also checked with `validate`, whole and split into
//! pieces (at Telegram's limit and at small limits), and the pieces keep
//! every non-whitespace char.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use turnstile::telegram::format::TELEGRAM_TEXT_LIMIT;
use turnstile::telegram::format::{self, MessageEntityKind, Rendered, validate};

const SEPARATOR: &str = "---- entities ----";

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    inputs.sort();
    inputs
}

/// The entity's kind as written in the .out files: `bold`, `pre(rust)`,
/// `text_link(https://…)`.
fn kind(kind: &MessageEntityKind) -> String {
    match kind {
        MessageEntityKind::Pre { language: Some(l) } => format!("pre({l})"),
        MessageEntityKind::Pre { language: None } => "pre".into(),
        MessageEntityKind::TextLink { url } => format!("text_link({url})"),
        other => {
            let name = format!("{other:?}");
            let mut snake = String::new();
            for (i, c) in name.chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            snake
        }
    }
}

/// The text of a UTF-16 range.
fn covered(text: &str, offset: usize, length: usize) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    let end = (offset + length).min(units.len());
    String::from_utf16_lossy(&units[offset.min(end)..end])
}

fn dump(rendered: &Rendered) -> String {
    let mut out = String::new();
    out.push_str(&rendered.text);
    out.push('\n');
    out.push_str(SEPARATOR);
    out.push('\n');
    for e in &rendered.entities {
        let mut shown: String = covered(&rendered.text, e.offset, e.length)
            .replace('\n', "⏎")
            .chars()
            .take(40)
            .collect();
        if covered(&rendered.text, e.offset, e.length).chars().count() > 40 {
            shown.push('…');
        }
        let _ = writeln!(
            out,
            "{} {}..{} «{shown}»",
            kind(&e.kind),
            e.offset,
            e.offset + e.length
        );
    }
    out
}

fn non_whitespace(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Validates the whole rendering and every piece at several limits.
fn check_pieces(name: &str, rendered: &Rendered) {
    if rendered.units() <= TELEGRAM_TEXT_LIMIT && !rendered.text.is_empty() {
        validate(&rendered.text, &rendered.entities)
            .unwrap_or_else(|e| panic!("{name}: whole rendering refused: {e}"));
    }
    for limit in [TELEGRAM_TEXT_LIMIT, 500, 50] {
        let pieces = format::split(rendered, limit);
        assert!(!pieces.is_empty(), "{name}: no pieces");
        for (i, piece) in pieces.iter().enumerate() {
            assert!(
                piece.units() <= limit,
                "{name}: piece {i} too long at {limit}"
            );
            validate(&piece.text, &piece.entities)
                .unwrap_or_else(|e| panic!("{name}: piece {i} at limit {limit} refused: {e}"));
        }
        let joined: String = pieces.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(
            non_whitespace(&joined),
            non_whitespace(&rendered.text),
            "{name}: content lost at limit {limit}"
        );
    }
}

#[test]
fn golden_answers_render_as_expected_and_validate() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let inputs = fixtures();
    assert!(inputs.len() >= 30, "only {} fixtures", inputs.len());
    let mut mismatches = Vec::new();
    for input in &inputs {
        let name = input.file_name().unwrap().to_string_lossy().into_owned();
        let markdown = std::fs::read_to_string(input).unwrap();
        let rendered = format::render(&markdown);
        check_pieces(&name, &rendered);
        let actual = dump(&rendered);
        let expected_path = input.with_extension("out");
        if update {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (UPDATE_GOLDEN=1 writes it)",
                expected_path.display()
            )
        });
        if expected != actual {
            mismatches.push(format!(
                "{name}:\n--- expected\n{expected}\n--- actual\n{actual}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
}

/// The long answer is cut inside its code block: the block is a `pre` with
/// the same language on both sides of the cut.
#[test]
fn a_code_block_cut_across_pieces_is_pre_in_both() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format");
    let markdown = std::fs::read_to_string(dir.join("30-long-answer-with-code.md")).unwrap();
    let rendered = format::render(&markdown);
    assert!(
        rendered.units() > TELEGRAM_TEXT_LIMIT,
        "{}",
        rendered.units()
    );
    let pieces = format::pieces(&markdown);
    assert!(pieces.len() >= 2, "{}", pieces.len());
    let pre_languages = |p: &Rendered| -> Vec<Option<String>> {
        p.entities
            .iter()
            .filter_map(|e| match &e.kind {
                MessageEntityKind::Pre { language } => Some(language.clone()),
                _ => None,
            })
            .collect()
    };
    // Some piece ends inside a pre block and the next one starts inside it.
    let mut cut_blocks = 0;
    for pair in pieces.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let ends_in_pre = a.entities.iter().any(|e| {
            matches!(e.kind, MessageEntityKind::Pre { .. }) && e.offset + e.length == a.units()
        });
        let starts_in_pre = b
            .entities
            .iter()
            .any(|e| matches!(e.kind, MessageEntityKind::Pre { .. }) && e.offset == 0);
        if ends_in_pre && starts_in_pre {
            cut_blocks += 1;
            let last = pre_languages(a).pop().flatten();
            let first = pre_languages(b).first().cloned().flatten();
            assert_eq!(last.as_deref(), Some("rust"));
            assert_eq!(first.as_deref(), Some("rust"));
            // The cut is at a line break: the first piece ends a code line.
            let next_line = b.text.lines().next().unwrap();
            assert!(
                rendered.text.contains(&format!("\n{next_line}")),
                "{next_line:?}"
            );
        }
    }
    assert!(cut_blocks >= 1, "no code block was cut: {pieces:#?}");
    for piece in &pieces {
        validate(&piece.text, &piece.entities).unwrap();
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Markdown-ish tokens that stress the parser and the renderer.
    const TOKENS: &[&str] = &[
        "*",
        "**",
        "_",
        "__",
        "`",
        "```",
        "```rust\n",
        "~~",
        "[",
        "](",
        ")",
        "](https://e.com/a_(b))",
        "<https://x.y>",
        "|",
        "| a | b |\n|---|---|\n",
        "#",
        "# ",
        ">",
        "> ",
        "-",
        "- ",
        "1. ",
        "- [ ] ",
        "- [x] ",
        "\n",
        "\n\n",
        "  ",
        "    ",
        "\t",
        "word",
        "snake_case",
        "😀",
        "🇺🇦",
        "👩‍💻",
        "𝒳",
        "字",
        "<b>",
        "&amp;",
        "&",
        "\\",
        "!",
        "![alt](https://e.com/i.png)",
        "---\n",
        "\r\n",
        " ",
    ];

    fn markdownish() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(TOKENS), 0..120).prop_map(|t| t.concat())
    }

    fn check(markdown: &str, limit: usize) -> Result<(), TestCaseError> {
        let rendered = format::render(markdown);
        let pieces = format::split(&rendered, limit);
        for (i, piece) in pieces.iter().enumerate() {
            prop_assert!(piece.units() <= limit, "piece {i}: {} units", piece.units());
            prop_assert!(!piece.text.trim().is_empty(), "piece {i} is blank");
            if let Err(e) = validate(&piece.text, &piece.entities) {
                return Err(TestCaseError::fail(format!(
                    "piece {i} refused: {e}: {piece:?}"
                )));
            }
        }
        let joined: String = pieces.iter().map(|p| p.text.as_str()).collect();
        prop_assert_eq!(non_whitespace(&joined), non_whitespace(&rendered.text));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn arbitrary_strings_render_to_valid_pieces(s in any::<String>(), small in 2usize..80) {
            check(&s, TELEGRAM_TEXT_LIMIT)?;
            check(&s, small)?;
        }

        #[test]
        fn markdownish_strings_render_to_valid_pieces(s in markdownish(), small in 2usize..80) {
            check(&s, TELEGRAM_TEXT_LIMIT)?;
            check(&s, 50)?;
            check(&s, small)?;
        }

        #[test]
        fn long_markdownish_strings_split_at_the_limit(
            parts in prop::collection::vec(markdownish(), 1..40)
        ) {
            let s = parts.join("\n\n").repeat(4);
            check(&s, TELEGRAM_TEXT_LIMIT)?;
            check(&s, 300)?;
        }
    }
}

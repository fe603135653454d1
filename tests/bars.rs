//! The bars the layout keeps, read from the tree: no source file over 500
//! lines before its test module, ARCHITECTURE.md at most 400 lines and
//! naming only files and names that exist, README.md at most 30 KB. (No
//! function over 80 lines is clippy's `too_many_lines`, set in
//! `clippy.toml`, enabled in `src/lib.rs` and `src/main.rs`.)

use std::collections::HashSet;
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
const MAX_ARCHITECTURE_LINES: usize = 400;
const MAX_README_BYTES: usize = 30_000;

#[path = "support/sources.rs"]
mod sources;
use sources::{root, sources};

/// The lines of `text` before its test module (`#[cfg(test)]` at the
/// start of a line), or all of them.
fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .count()
}

fn too_long(files: &[PathBuf], max: usize) -> Vec<String> {
    files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("read a source file");
            let lines = code_lines(&text);
            let shown = path.strip_prefix(root()).unwrap_or(path).display();
            (lines > max).then(|| format!("{shown}: {lines} lines"))
        })
        .collect()
}

#[test]
fn no_source_file_is_over_500_lines_before_its_tests() {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    assert!(
        files.len() > 100,
        "the tree was read: {} files",
        files.len()
    );
    let long = too_long(&files, MAX_FILE_LINES);
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines of code (split by what each part owns):\n{}",
        long.join("\n")
    );
}

#[test]
fn a_test_module_is_not_counted_and_a_long_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.rs");
    let long = dir.path().join("long.rs");
    let code = "fn f() {}\n".repeat(MAX_FILE_LINES);
    std::fs::write(
        &short,
        format!("{code}#[cfg(test)]\nmod tests {{\n{code}}}\n"),
    )
    .unwrap();
    std::fs::write(&long, format!("{code}fn g() {{}}\n")).unwrap();
    let found = too_long(&[short, long.clone()], MAX_FILE_LINES);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("long.rs: 501 lines"), "{found:?}");
}

#[test]
fn architecture_md_is_at_most_400_lines() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= MAX_ARCHITECTURE_LINES,
        "ARCHITECTURE.md has {lines} lines: detail that repeats the code goes (at most {MAX_ARCHITECTURE_LINES})"
    );
}

#[test]
fn readme_is_at_most_30_kb() {
    let bytes = std::fs::metadata(root().join("README.md")).unwrap().len() as usize;
    assert!(
        bytes <= MAX_README_BYTES,
        "README.md is {bytes} bytes (at most {MAX_README_BYTES}): move detail to docs/"
    );
}

/// Every file under `dir` (recursively), as paths relative to the root.
fn all_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read a folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            all_files(&path, out);
        } else if let Ok(rel) = path.strip_prefix(root()) {
            out.push(rel.display().to_string());
        }
    }
}

/// The words of `text` that could name something in Rust.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// A name a document may get wrong: a type or variant (`TurnPhase`), or a
/// function, field or key with an underscore (`claim_run`).
fn is_checked_name(word: &str) -> bool {
    let mut chars = word.chars();
    let first = chars.next().unwrap_or('a');
    let camel = first.is_ascii_uppercase() && word.chars().any(|c| c.is_ascii_lowercase());
    let snake = first.is_ascii_lowercase() && word.contains('_');
    (camel || snake) && word.len() > 2
}

/// What `doc` names that `files` (paths from the root) and `source` (the
/// identifiers of the code) do not have: `.rs` paths in backticks that no
/// file ends with, and names (in backticks or in a diagram) no code has.
fn stale_names(doc: &str, files: &[String], source: &HashSet<&str>) -> Vec<String> {
    let mut stale = Vec::new();
    let mut in_block = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let spans: Vec<&str> = if in_block {
            vec![line]
        } else {
            line.split('`').skip(1).step_by(2).collect()
        };
        for span in spans {
            for token in span.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
            {
                let token = token.trim_matches(|c: char| c == ':' || c == '.' || c == ';');
                if !in_block && token.ends_with(".rs") {
                    let found = files
                        .iter()
                        .any(|f| f == token || f.ends_with(&format!("/{token}")));
                    if !found {
                        stale.push(format!("no file {token}"));
                    }
                }
            }
            if span.contains(".rs") && !in_block {
                continue;
            }
            for word in words(span).filter(|w| is_checked_name(w)) {
                if !source.contains(word) {
                    stale.push(format!("no name {word}"));
                }
            }
        }
    }
    stale.sort();
    stale.dedup();
    stale
}

fn tree() -> (Vec<String>, String) {
    let mut files = Vec::new();
    for dir in [
        "src", "tests", "benches", "fuzz", "scripts", "docs", "contrib",
    ] {
        if root().join(dir).is_dir() {
            all_files(&root().join(dir), &mut files);
        }
    }
    let mut text = String::new();
    for file in files.iter().filter(|f| f.ends_with(".rs")) {
        text.push_str(&std::fs::read_to_string(root().join(file)).unwrap_or_default());
        text.push('\n');
    }
    (files, text)
}

#[test]
fn architecture_md_names_only_files_and_names_the_code_has() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let (files, text) = tree();
    let source: HashSet<&str> = words(&text).collect();
    let stale = stale_names(&doc, &files, &source);
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names what the code does not have (renamed or gone?):\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_renamed_type_and_a_moved_file_are_found() {
    let files = vec!["src/chat/turn/serve.rs".to_string()];
    let source: HashSet<&str> = words("pub struct Services; fn serve_tool() {}").collect();
    let doc = "The `Services` in `turn/serve.rs`, served by `serve_tool`.\n\
               Once `TurnDeps` in `turn/deps.rs`, by `serve_call`.\n\
               ```\nIdle --> Merging\n```\n";
    let stale = stale_names(doc, &files, &source);
    assert_eq!(
        stale,
        vec![
            "no file turn/deps.rs",
            "no name Idle",
            "no name Merging",
            "no name TurnDeps",
            "no name serve_call",
        ],
    );
}

/// Whether `path` (relative to the root) is a `notices` module: the one
/// place of its room where texts to a chat are written.
fn is_notices(path: &Path) -> bool {
    path.components()
        .any(|part| part.as_os_str() == "notices" || part.as_os_str() == "notices.rs")
}

/// Texts outside a `notices` module that are not for a chat user, each as
/// its file and the start of the literal, with why.
const NOT_TO_A_CHAT: &[(&str, &str)] = &[
    // What the agent reads (tool descriptions, prompts, verdicts on its
    // requests), not the chat.
    ("src/agent/tools.rs", ""),
    (
        "src/agent/host/permissions.rs",
        "The tool `{tool}` is not allowed",
    ),
    ("src/config.rs", "You are a helpful assistant"),
    (
        "src/chat/turn/approval/verdict.rs",
        "Nobody in the chat answered",
    ),
    ("src/chat/turn/approval/verdict.rs", "Not run: {why}."),
    // Markdown task-list boxes the renderer draws, not a text of its own.
    ("src/telegram/format/render.rs", "☐ "),
    ("src/telegram/format/render.rs", "☑ "),
    // The fuzzer's own check of what it escaped.
    ("src/fuzzing/agent.rs", "⟦U+"),
];

/// Calls and macros whose texts are for the operator or a programmer
/// (logs, errors, panics), not for a chat.
const FOR_THE_OPERATOR: &[&str] = &[
    "trace!",
    "debug!",
    "info!",
    "warn!",
    "error!",
    "event!",
    "panic!",
    "unreachable!",
    "assert!",
    "eprintln!",
    "println!",
    "bail!",
    "anyhow!",
    "error",
    "expect",
    "context",
    "with_context",
];

/// Whether `c` is a pictograph (arrows, symbols, dingbats, emoji).
fn is_pictograph(c: char) -> bool {
    matches!(c, '\u{2139}' | '\u{2190}'..='\u{2BFF}' | '\u{1F000}'..='\u{1FAFF}')
}

/// Whether `literal` reads as a text to a person: it holds a pictograph,
/// or it is a sentence: two words or more, opening with a capital letter
/// and ending with `.`, `!`, `?` or `…`.
fn is_chat_text(literal: &str) -> bool {
    let sentence = literal.split_whitespace().count() >= 2
        && literal.chars().next().is_some_and(char::is_uppercase)
        && literal.trim_end().ends_with(['.', '!', '?', '…']);
    sentence || literal.chars().any(is_pictograph)
}

/// The source `text` before its test module, comments dropped (a `'"'`
/// is a char, not a string).
fn code_of(text: &str) -> String {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .map(|line| {
            line.split_once("//").map_or(line, |(code, _)| {
                // A `//` inside a string literal is kept.
                if code.matches('"').count() % 2 == 1 {
                    line
                } else {
                    code
                }
            })
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The string literals of the Rust source `text`, before its test module,
/// that read as a text to a chat, each with its line; those inside a log,
/// error or panic (`FOR_THE_OPERATOR`) are left out.
fn chat_literals(text: &str) -> Vec<(usize, String)> {
    let code = code_of(text);
    let (mut found, mut line) = (Vec::new(), 1);
    let (mut calls, mut word): (Vec<String>, String) = (Vec::new(), String::new());
    let mut chars = code.chars().peekable();
    let mut last = ' ';
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            '\'' if last != '\\' => {
                // A char literal (`'('`, `'\''`) opens no call.
                let mut ahead = chars.clone();
                let first = ahead.next();
                let close = if first == Some('\\') {
                    ahead.nth(1)
                } else {
                    ahead.next()
                };
                if close == Some('\'') && first != Some('\'') {
                    chars.nth(if first == Some('\\') { 2 } else { 1 });
                }
            }
            '(' | '[' | '{' => calls.push(std::mem::take(&mut word)),
            ')' | ']' | '}' => {
                calls.pop();
            }
            '!' if !word.is_empty() => word.push('!'),
            c if c.is_alphanumeric() || c == '_' => {
                if !(last.is_alphanumeric() || last == '_') {
                    word.clear();
                }
                word.push(c);
            }
            '"' => {
                let (start, mut literal) = (line, String::new());
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        '\n' => {
                            line += 1;
                            literal.push(s);
                        }
                        _ => literal.push(s),
                    }
                }
                let operator = calls
                    .iter()
                    .any(|call| FOR_THE_OPERATOR.contains(&call.as_str()));
                if !operator && is_chat_text(&literal) {
                    found.push((start, literal));
                }
                word.clear();
            }
            c if !c.is_whitespace() => word.clear(),
            _ => {}
        }
        last = c;
    }
    found
}

#[test]
fn texts_to_a_chat_are_written_only_in_notices() {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    assert!(files.len() > 100, "the tree is read: {} files", files.len());
    let outside: Vec<String> = files
        .iter()
        .filter_map(|path| path.strip_prefix(root()).ok())
        .filter(|path| !is_notices(path))
        .flat_map(|path| {
            let text = std::fs::read_to_string(root().join(path)).expect("read a source file");
            let shown = path.display().to_string();
            chat_literals(&text)
                .into_iter()
                .filter(|(_, literal)| {
                    !NOT_TO_A_CHAT
                        .iter()
                        .any(|(file, start)| shown == *file && literal.starts_with(start))
                })
                .map(|(line, literal)| format!("{shown}:{line}: \"{literal}\""))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        outside.is_empty(),
        "texts to a chat outside a notices module: {outside:#?}"
    );
}

#[test]
fn a_text_with_a_pictograph_is_found_but_not_in_comments_chars_or_tests() {
    let source = "// \"⏹ in a comment\"\nlet quote = '\"';\nsay(\"plain\");\nsay(format!(\"⏹ {} dropped.\", n));\nsay(\"ℹ️ a note\");\n#[cfg(test)]\nmod tests { const T: &str = \"⏹ test\"; }\n";
    assert_eq!(
        chat_literals(source),
        vec![
            (4, "⏹ {} dropped.".to_string()),
            (5, "ℹ️ a note".to_string())
        ]
    );
}

#[test]
fn a_sentence_is_found_but_not_in_logs_errors_or_panics() {
    let source = "let t = if x { \"Every tool asks.\" } else { \"in this chat\" };\nlet c = ')';\ntracing::warn!(n, \"The turn ended.\");\n#[error(\"Could not read it.\")]\nlet v = x.expect(\"A value is there.\");\nsay(\"Not one word\");\nsay(format!(\"Only admins can use /{w}.\"));\n";
    assert_eq!(
        chat_literals(source),
        vec![
            (1, "Every tool asks.".to_string()),
            (7, "Only admins can use /{w}.".to_string()),
        ]
    );
}

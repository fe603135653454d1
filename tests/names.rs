//! One name, one meaning: every `struct`, `enum`, `trait` and `type` the
//! non-test code of `src/` defines is defined once. A name defined in two
//! places must be one of [`SAME_THING`], each with its reason.

use std::collections::BTreeMap;

/// Names defined in more than one place on purpose, each the same thing
/// under the same name.
const SAME_THING: &[&str] = &[
    // Each backend's `Protocol` (`agent::host::session`) and what it is
    // started with: the same role in `claude/` and `acp/`, private to each,
    // which may not import each other.
    "Driver", "Start",
    // Each fake agent binary's state (`src/bin/`): one per binary, each its
    // own crate.
    "Fake",
];

#[path = "support/sources.rs"]
mod sources;
use sources::{root, sources};

/// `line` without its visibility (`pub`, `pub(crate)`, `pub(super)`,
/// `pub(in …)`), and whether it had one.
fn without_visibility(line: &str) -> (&str, bool) {
    let Some(rest) = line.strip_prefix("pub") else {
        return (line, false);
    };
    let rest = match rest.strip_prefix('(') {
        Some(inner) => inner.split_once(')').map_or(inner, |(_, after)| after),
        None => rest,
    };
    (rest.trim_start(), true)
}

/// The names `text` defines before its test module (`#[cfg(test)]` at the
/// start of a line), each with its line number. A `type` counts only at
/// the top of the file or with a visibility: an associated type (`type
/// Result = …;` of an actix handler) defines no name of the crate's.
fn defined(text: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let trimmed = line.trim_start();
        let top = trimmed.len() == line.len();
        let (rest, public) = without_visibility(trimmed);
        let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
        let Some((kind, after)) = rest.split_once(' ') else {
            continue;
        };
        let counts = match kind {
            "struct" | "enum" | "trait" => true,
            "type" => top || public,
            _ => false,
        };
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if counts && name.starts_with(|c: char| c.is_ascii_uppercase()) {
            names.push((name, i + 1));
        }
    }
    names
}

/// The names defined in more than one of `files` (path, text), but those
/// in `same_thing`, each with where.
fn doubled(files: &[(String, String)], same_thing: &[&str]) -> Vec<String> {
    let mut places: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, text) in files {
        for (name, line) in defined(text) {
            places
                .entry(name)
                .or_default()
                .push(format!("{path}:{line}"));
        }
    }
    places
        .into_iter()
        .filter(|(name, at)| at.len() > 1 && !same_thing.contains(&name.as_str()))
        .map(|(name, at)| format!("{name}: {}", at.join(", ")))
        .collect()
}

#[test]
fn no_type_name_is_defined_twice_in_src() {
    let mut paths = Vec::new();
    sources(&root().join("src"), &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            let shown = path.strip_prefix(root()).unwrap_or(path).display();
            let text = std::fs::read_to_string(path).expect("read a source file");
            (shown.to_string(), text)
        })
        .collect();
    assert!(
        files.len() > 100,
        "the source tree was not found: {}",
        files.len()
    );
    let doubled = doubled(&files, SAME_THING);
    assert!(
        doubled.is_empty(),
        "names defined in two places (rename one to what it is, or allow it in SAME_THING with why):\n{}",
        doubled.join("\n")
    );
}

#[test]
fn a_name_defined_twice_is_found_but_not_an_associated_type_or_a_test() {
    let files = [
        (
            "a.rs".to_owned(),
            "pub(super) struct Place {\n    x: u8,\n}\nimpl Handler<M> for A {\n    type Result = ();\n}\n"
                .to_owned(),
        ),
        (
            "b.rs".to_owned(),
            "/// Doc.\npub enum Place {\n    Private,\n}\n    pub(crate) type Result = u8;\ntrait Result {}\n#[cfg(test)]\nmod tests {\n    struct Only;\n}\n"
                .to_owned(),
        ),
        ("c.rs".to_owned(), "struct Only;\n".to_owned()),
    ];
    assert_eq!(
        doubled(&files, &[]),
        ["Place: a.rs:1, b.rs:2", "Result: b.rs:5, b.rs:6"]
    );
    assert_eq!(doubled(&files, &["Place", "Result"]), Vec::<String>::new());
}

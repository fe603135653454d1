//! Replays every committed fuzz input through the harness its cargo-fuzz
//! target runs (`turnstile::fuzzing`), on stable: `fuzz/corpus/<target>/`
//! (the minimized corpus) and `fuzz/crashes/<target>/` (every input that
//! ever crashed a target). A crash input fails its target's test here until
//! the bug is fixed; it is never skipped.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use turnstile::fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted; none when it is missing.
fn files(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// What a caught panic said.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned())
}

/// Runs every committed input of `target` through its harness; fails
/// naming each input that panicked, with what it said.
fn replay(target: &str) {
    let harness = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no harness named {target}"))
        .1;
    let corpus = files("corpus", target);
    assert!(!corpus.is_empty(), "fuzz/corpus/{target} is empty");
    let mut failed = Vec::new();
    for file in corpus.iter().chain(&files("crashes", target)) {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| harness(&data))) {
            failed.push(format!("{}: {}", file.display(), message(&*panic)));
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} input(s) panicked:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn telegram_update_inputs_do_not_panic() {
    replay("telegram_update");
}

#[test]
fn callback_data_inputs_do_not_panic() {
    replay("callback_data");
}

#[test]
fn stream_json_inputs_do_not_panic() {
    replay("stream_json");
}

#[test]
fn mcp_server_inputs_do_not_panic() {
    replay("mcp_server");
}

#[test]
fn partial_json_inputs_do_not_panic() {
    replay("partial_json");
}

#[test]
fn format_inputs_do_not_panic() {
    replay("format");
}

#[test]
fn config_inputs_do_not_panic() {
    replay("config");
}

/// Every harness has a cargo-fuzz target calling it, a corpus and a test
/// above; nothing in `fuzz/` names a target that is not a harness.
#[test]
fn every_target_has_a_harness_a_corpus_and_a_replay() {
    let names: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    let this = std::fs::read_to_string(file!()).expect("this file");
    for name in &names {
        let target = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&target)
            .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        assert!(
            source.contains(&format!("turnstile::fuzzing::{name}(data)")),
            "{} does not call its harness",
            target.display()
        );
        assert!(
            this.contains(&format!("replay(\"{name}\")")),
            "no replay test for {name}"
        );
    }
    for kind in ["fuzz_targets", "corpus", "crashes", "dicts"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            assert!(
                names.contains(&stem.as_str()),
                "fuzz/{kind}/{stem} names no harness"
            );
        }
    }
}

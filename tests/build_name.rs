//! The build names itself: `build/describe.rs` (what `build.rs` puts into
//! `--version`) says the commit, ", dirty" when a tracked file differs from
//! it, and "commit unknown" where there is no git (a source tarball).

#[path = "../build/describe.rs"]
mod describe;

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_commit_dirty_when_changed_and_unknown_without_git() {
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("main.rs"), "fn main() {}\n").unwrap();
    assert_eq!(describe::describe(tree.path()), "commit unknown");
    git(tree.path(), &["init", "-q"]);
    git(tree.path(), &["add", "main.rs"]);
    git(tree.path(), &["commit", "-qm", "first"]);
    let commit = git(tree.path(), &["rev-parse", "--short=12", "HEAD"]);
    assert_eq!(commit.len(), 12);
    assert_eq!(describe::describe(tree.path()), commit);
    // An untracked file (a build's output, a scratch note) is not a change.
    std::fs::write(tree.path().join("notes.txt"), "x").unwrap();
    assert_eq!(describe::describe(tree.path()), commit);
    std::fs::write(tree.path().join("main.rs"), "fn main() { }\n").unwrap();
    assert_eq!(describe::describe(tree.path()), format!("{commit}, dirty"));
    let watched = describe::watched(tree.path());
    for name in ["main.rs", ".git/HEAD", ".git/index", ".git/refs/heads/"] {
        assert!(
            watched.iter().any(|file| file.contains(name)),
            "{name} not watched: {watched:?}"
        );
    }
}

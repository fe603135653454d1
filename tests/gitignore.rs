//! Everything turnstile writes beside its state file by default (the state
//! file with its `-wal` and `-shm`, each chat's workdir, each agent's home
//! with its login) is ignored by git: run in a clone, a `git add -A` never
//! commits an agent's home.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use turnstile::Config;

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
}

#[test]
fn what_turnstile_writes_by_default_is_ignored_by_git() {
    let config = Config::load_offline(None, &BTreeMap::new()).expect("the defaults load");
    let state_dir = config.state_dir();
    let state = config.state_file().expect("a state file by default");
    let chat = |path: PathBuf| PathBuf::from(path.to_string_lossy().replace("{chat}", "123"));
    let written = [
        state.clone(),
        PathBuf::from(format!("{}-wal", state.display())),
        PathBuf::from(format!("{}-shm", state.display())),
        chat(config.agent_workdir()).join("notes.md"),
        chat(config.agent_home()).join(".claude/.credentials.json"),
    ];
    let clone = tempfile::tempdir().unwrap();
    assert!(git(clone.path(), &["init", "-q"]).status.success());
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".gitignore"),
        clone.path().join(".gitignore"),
    )
    .unwrap();
    let mut relative = Vec::new();
    for path in &written {
        let rel = path
            .strip_prefix(&state_dir)
            .expect("beside the state file");
        let at = clone.path().join(rel);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, "x").unwrap();
        relative.push(rel.display().to_string());
    }
    let status = git(
        clone.path(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    let shown = String::from_utf8_lossy(&status.stdout);
    let left: Vec<&str> = shown
        .lines()
        .filter(|line| !line.ends_with(".gitignore"))
        .collect();
    assert!(left.is_empty(), "not ignored: {left:?} (of {relative:?})");
}

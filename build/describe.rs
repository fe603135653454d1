//! What `--version` says about the source a build came from: the commit
//! (12 hex digits) and ", dirty" when tracked files differ from it, or
//! "commit unknown" without git (a build from a source tarball). Shared by
//! `build.rs` and its test.

use std::path::Path;
use std::process::Command;

/// `git args` in `dir`, its trimmed stdout when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit of the checkout at `dir`, and whether it is dirty.
pub fn describe(dir: &Path) -> String {
    let Some(commit) = git(dir, &["rev-parse", "--short=12", "HEAD"]) else {
        return "commit unknown".to_string();
    };
    match git(dir, &["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => commit,
        Some(_) => format!("{commit}, dirty"),
        None => format!("{commit}, state unknown"),
    }
}

/// The files whose change can change [`describe`]'s answer: the checkout's
/// (all but what builds and tools write), and git's HEAD, index and
/// current branch.
pub fn watched(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            !matches!(
                entry.file_name().to_str(),
                Some("target" | ".git" | ".cache")
            )
        })
        .map(|entry| entry.path().display().to_string())
        .collect();
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) {
        for name in ["HEAD", "index"] {
            files.push(format!("{git_dir}/{name}"));
        }
    }
    if let (Some(common), Some(branch)) = (
        git(
            dir,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        ),
        git(dir, &["symbolic-ref", "-q", "HEAD"]),
    ) {
        files.push(format!("{common}/{branch}"));
        files.push(format!("{common}/packed-refs"));
    }
    files
}

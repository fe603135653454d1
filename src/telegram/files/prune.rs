//! Inbox pruning: files older than the retention go from every
//! conversation's `inbox/`, each directory reached through its parent's
//! descriptor with no symlink followed.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::INBOX_DIR;
use super::beneath::Dir;
use crate::agent::host::seal;

/// Removes the files in each conversation's `inbox/` last modified more
/// than `retention` ago, under the workdirs `template` (`agent.workdir`,
/// absolute, with its `{chat}` placeholder) names. Every directory is
/// reached through its parent's descriptor and none is a symlink; a
/// symlink in an inbox is removed itself, never followed. Answers how many
/// files went.
pub fn prune_inboxes(template: &Path, retention: Duration) -> usize {
    let now = SystemTime::now();
    let mut removed = 0;
    for (workdir, dir) in workdirs(template) {
        let Ok(inbox) = dir.subdir(INBOX_DIR, false) else {
            continue;
        };
        match inbox.remove_older_than(retention, now) {
            Ok(n) => removed += n,
            Err(err) => {
                tracing::warn!(workdir = %workdir.display(), cause = %err, "inbox not pruned")
            }
        }
    }
    removed
}

/// The conversations' workdirs that exist, opened: the entries of the
/// directory before `template`'s first `{chat}` component that fill it
/// with a conversation key (`1001`, `-100123_7`), then the rest of the
/// template, each component opened from the one before with no symlink
/// followed. A template without the placeholder is the one workdir.
fn workdirs(template: &Path) -> Vec<(PathBuf, Dir)> {
    let text = template.to_string_lossy();
    let Some(at) = text.find(seal::CHAT) else {
        return Dir::open(template)
            .map(|dir| vec![(template.to_owned(), dir)])
            .unwrap_or_default();
    };
    let (parent, component) = match text[..at].rfind('/') {
        Some(slash) => (&text[..=slash], &text[slash + 1..]),
        None => ("./", &text[..]),
    };
    let (first, rest) = component.split_once('/').unwrap_or((component, ""));
    let Some((prefix, suffix)) = first.split_once(seal::CHAT) else {
        return Vec::new();
    };
    let Ok(parent_dir) = Dir::open(Path::new(parent)) else {
        return Vec::new();
    };
    let Ok(entries) = parent_dir.names() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in entries {
        let Some(name) = name.to_str() else { continue };
        let Some(key) = name
            .strip_prefix(prefix)
            .and_then(|k| k.strip_suffix(suffix))
        else {
            continue;
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_digit() || c == '-' || c == '_')
        {
            continue;
        }
        let rest = rest.replace(seal::CHAT, key);
        let mut dir = parent_dir.subdir(name, false);
        for part in rest.split('/').filter(|p| !p.is_empty() && *p != ".") {
            dir = dir.and_then(|d| d.subdir(part, false));
        }
        if let Ok(dir) = dir {
            let mut path = Path::new(parent).join(name);
            if !rest.is_empty() {
                path.push(&rest);
            }
            out.push((path, dir));
        }
    }
    out
}

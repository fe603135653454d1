//! The mounts a sandboxed agent gets over the read-only system, and
//! `bwrap`'s arguments for them.

use std::path::{Path, PathBuf};

use super::{Seal, bwrap_base, chat_root, is_system, resolved, userns_seal};

/// The sandbox's own `/tmp`, an empty tmpfs.
pub(super) const TMP: &str = "/tmp";

/// A writable directory in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bind {
    /// Made by turnstile before the spawn: must be there.
    Made(PathBuf),
    /// Named by `agent.env`: bound when it exists.
    Given(PathBuf),
}

impl Bind {
    fn path(&self) -> &Path {
        match self {
            Self::Made(path) | Self::Given(path) => path,
        }
    }
}

/// One mount over the read-only system, after the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Mount {
    /// An empty tmpfs over a directory the agent must not see.
    Hide(PathBuf),
    /// A directory the agent writes: its workdir, its home.
    Writable(Bind),
    /// What the CLI needs from a hidden directory, bound back read-only.
    Needed(PathBuf),
    /// `/dev/null` over a secret file in a directory that cannot be
    /// hidden whole (a system directory such as `/etc`).
    HideFile(PathBuf),
}

impl Mount {
    fn path(&self) -> &Path {
        match self {
            Self::Hide(path) | Self::Needed(path) | Self::HideFile(path) => path,
            Self::Writable(bind) => bind.path(),
        }
    }

    /// Among mounts at the same depth: hides first, so what is bound on
    /// the same path shows; a file's `/dev/null` last, so nothing shows it
    /// again.
    fn rank(&self) -> u8 {
        match self {
            Self::Hide(_) => 0,
            Self::Writable(_) => 1,
            Self::Needed(_) => 2,
            Self::HideFile(_) => 3,
        }
    }
}

/// The directories holding every chat's directories, hidden under the
/// sandbox: the roots of `agent.workdir` and of the homes, and every
/// place's root (each project's too), so that no chat sees another chat's
/// or another project's directories.
pub(super) fn hidden_places(seal: &Seal) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = [&seal.workdir, &seal.home]
        .into_iter()
        .filter_map(|template| chat_root(template))
        .collect();
    for place in &seal.places {
        if !roots.contains(place) {
            roots.push(place.clone());
        }
    }
    roots
}

/// The places' roots not yet in `create`: made before the spawn (a root
/// made while the sandbox runs would show through its read-only `/`).
pub(super) fn place_roots_to_make(seal: &Seal, create: &[PathBuf]) -> Vec<PathBuf> {
    hidden_places(seal)
        .into_iter()
        .filter(|root| !create.contains(root))
        .collect()
}

/// Everything mounted over the read-only system, parents before what lies
/// beneath them: each secret's whole directory under an empty tmpfs (a
/// system directory keeps its place, and only the secret and its SQLite
/// companions that `exists` are covered), the directories holding every
/// chat's workdirs and homes too; then this chat's own `writable`
/// directories, and the `cli` files the agent needs from a hidden
/// directory, read-only.
pub(super) fn mounts(
    seal: &Seal,
    writable: Vec<Bind>,
    cli: &[PathBuf],
    exists: &impl Fn(&Path) -> bool,
) -> Vec<Mount> {
    let mut hidden: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    // A directory already hidden, or beneath `/tmp` (the base hides it),
    // needs nothing more; one holding hidden ones replaces them.
    let mut hide = |dir: &Path| {
        if is_system(dir) || dir.starts_with(TMP) || hidden.iter().any(|h| dir.starts_with(h)) {
            return;
        }
        hidden.retain(|h| !h.starts_with(dir));
        hidden.push(dir.to_owned());
    };
    for file in &seal.secrets {
        let Some(dir) = file.parent() else { continue };
        if !is_system(dir) {
            hide(dir);
            continue;
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = file.clone().into_os_string();
            name.push(suffix);
            let path = PathBuf::from(name);
            if exists(&path) {
                files.push(path);
            }
        }
    }
    // Through symlinks resolved: bwrap cannot mount on a path through an
    // absolute symlink, and the kernel resolves them anyway.
    let roots: Vec<PathBuf> = hidden_places(seal).iter().map(|r| resolved(r)).collect();
    for root in &roots {
        hide(root);
    }
    let mut out: Vec<Mount> = hidden.iter().cloned().map(Mount::Hide).collect();
    out.extend(writable.into_iter().map(|bind| {
        Mount::Writable(match bind {
            Bind::Made(dir) => Bind::Made(resolved(&dir)),
            Bind::Given(dir) => Bind::Given(resolved(&dir)),
        })
    }));
    for file in cli {
        let under_hidden = file.starts_with(TMP) || hidden.iter().any(|h| file.starts_with(h));
        if !under_hidden {
            continue;
        }
        // The file's whole directory, unless that would show a hidden
        // directory, a secret, or any chat's directory.
        let whole_dir = file.parent().filter(|dir| {
            *dir != Path::new(TMP)
                && !seal
                    .secrets
                    .iter()
                    .chain(&roots)
                    .chain(&hidden)
                    .any(|p| p.starts_with(dir))
                && !roots.iter().any(|root| dir.starts_with(root))
        });
        let needed = Mount::Needed(whole_dir.unwrap_or(file).to_owned());
        if !out.contains(&needed) {
            out.push(needed);
        }
    }
    out.extend(files.into_iter().map(Mount::HideFile));
    out.sort_by_key(|m| (m.path().components().count(), m.rank()));
    out
}

/// `bwrap` and its arguments up to the command.
pub(super) fn bwrap_argv(seal: &Seal, mounts: &[Mount], workdir: &Path) -> Vec<String> {
    let mut argv = bwrap_base(seal.user_ns);
    argv.extend(userns_seal(seal.user_ns, seal.no_nested_userns));
    let text = |p: &Path| p.to_string_lossy().into_owned();
    for mount in mounts {
        let (flag, source) = match mount {
            Mount::Hide(dir) => {
                argv.extend(["--tmpfs".into(), text(dir)]);
                continue;
            }
            Mount::Writable(Bind::Made(dir)) => ("--bind", text(dir)),
            Mount::Writable(Bind::Given(dir)) => ("--bind-try", text(dir)),
            Mount::Needed(path) => ("--ro-bind", text(path)),
            Mount::HideFile(_) => ("--ro-bind", "/dev/null".to_owned()),
        };
        argv.extend([flag.into(), source, text(mount.path())]);
    }
    argv.extend(["--chdir".into(), text(workdir), "--".into()]);
    argv
}

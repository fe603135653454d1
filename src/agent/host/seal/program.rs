//! The files an agent's command is run from: found on `PATH` as the
//! kernel or `env` would, with the interpreter of a script.

use std::path::{Path, PathBuf};

/// The files the CLI is run from: `command` (found on `path` when it is a
/// bare name), the file it links to, and the interpreter of its `#!` line
/// (found on `path` for `/usr/bin/env NAME`) and the file that links to.
/// Only files that are there.
pub(super) fn cli_files(command: &str, path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    let add = |file: PathBuf, files: &mut Vec<PathBuf>| {
        let real = std::fs::canonicalize(&file).ok();
        for file in [Some(file), real].into_iter().flatten() {
            if !files.contains(&file) {
                files.push(file);
            }
        }
    };
    let Some(found) = find_program(command, path) else {
        return files;
    };
    add(found, &mut files);
    let script = files.last().cloned();
    if let Some(interpreter) = script.and_then(|s| interpreter(&s, path)) {
        add(interpreter, &mut files);
    }
    files
}

/// `name` as the kernel or `env` would find it: an absolute path as it
/// is, a bare name in the first directory of `path` holding it.
pub(crate) fn find_program(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let given = Path::new(name);
    if given.is_absolute() {
        return given.exists().then(|| given.to_owned());
    }
    if name.contains('/') || name.is_empty() {
        return None;
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|file| file.is_absolute() && file.is_file())
}

/// The interpreter a script's `#!` line names (`/usr/bin/env NAME` looks
/// `NAME` up on `path`); `None` for a binary.
pub(super) fn interpreter(script: &Path, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let program = words.next()?;
    if Path::new(program).file_name() == Some(std::ffi::OsStr::new("env")) {
        let name = words.find(|w| !w.starts_with('-'))?;
        return find_program(name, path);
    }
    find_program(program, path)
}

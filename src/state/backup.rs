//! `turnstile backup PATH`: a consistent copy of the state file, taken
//! while the bot runs, with SQLite's online backup.
//!
//! The copy is made in one step, inside one read transaction of the state
//! file: it is the database as of one moment, every committed write (the
//! WAL included) and none half-done; the running bot, in WAL mode, goes on
//! writing meanwhile. It is written beside `PATH` under a temporary name,
//! checked (`PRAGMA quick_check`), synced, and only then given its name,
//! so `PATH` is never a half-written file. An existing `PATH` is never
//! overwritten, unless it is an empty file (`mktemp`'s); and never is the
//! state file or its `-wal`, `-shm` or `-journal`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup as SqliteBackup, StepResult};
use rusqlite::{Connection, OpenFlags};

/// How long the copy waits for the state file to be free to read (it
/// almost never has to: a reader does not wait for a WAL writer).
const BUSY_BOUND: Duration = Duration::from_secs(30);

/// Why a backup could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The state is kept in memory: there is no file to copy.
    #[error("state.path is \":memory:\": there is no state file to back up")]
    InMemory,
    /// The state file is not there.
    #[error(
        "state file {} does not exist (is state.path, or TURNSTILE_STATE_PATH, the bot's?)",
        .0.display()
    )]
    NoState(PathBuf),
    /// The destination is taken.
    #[error(
        "{} already exists; turnstile backup never overwrites a file: remove it or name a new one",
        .0.display()
    )]
    Exists(PathBuf),
    /// The destination is a directory.
    #[error("{} is a directory: name the backup file itself", .0.display())]
    IsDirectory(PathBuf),
    /// The destination is the state file or one of its companions.
    #[error("{} is the state file itself (or its -wal, -shm or -journal): name another file", .0.display())]
    IsState(PathBuf),
    /// Reading the state or writing the copy failed.
    #[error("{}: {detail}", .path.display())]
    Io {
        /// The file at fault.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// What a finished backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The copy's schema version.
    pub schema_version: i64,
    /// Its inbox rows.
    pub inbox_rows: i64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Copies the state file `state` to `dest` (see the module docs).
///
/// # Errors
///
/// A [`BackupError`] naming the file at fault; `dest` is then left as it was.
pub fn backup(state: &Path, dest: &Path) -> Result<BackupReport, BackupError> {
    if state == Path::new(":memory:") {
        return Err(BackupError::InMemory);
    }
    if !state.is_file() {
        return Err(BackupError::NoState(state.to_owned()));
    }
    check_dest(state, dest)?;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |err: &dyn std::fmt::Display| BackupError::Io {
            path: path.clone(),
            detail: err.to_string(),
        }
    };
    let source = Connection::open_with_flags(
        state,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| io(state)(&e))?;
    let temp = temp_name(dest);
    let made = copy_into(&source, &temp).and_then(|report| {
        publish(&temp, dest)?;
        Ok(report)
    });
    if made.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    made
}

/// Refuses a destination that must not be written (see the module docs).
fn check_dest(state: &Path, dest: &Path) -> Result<(), BackupError> {
    if dest.is_dir() {
        return Err(BackupError::IsDirectory(dest.to_owned()));
    }
    let (Some(state_abs), Some(dest_abs)) = (resolved(state), resolved(dest)) else {
        return Err(BackupError::Io {
            path: dest.to_owned(),
            detail: "its directory does not exist or cannot be read".into(),
        });
    };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut companion = state_abs.clone().into_os_string();
        companion.push(suffix);
        if dest_abs.as_os_str() == companion {
            return Err(BackupError::IsState(dest.to_owned()));
        }
    }
    match std::fs::symlink_metadata(dest) {
        Ok(meta) if meta.is_file() && meta.len() == 0 => Ok(()),
        Ok(_) => Err(BackupError::Exists(dest.to_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(BackupError::Io {
            path: dest.to_owned(),
            detail: err.to_string(),
        }),
    }
}

/// `path` with its directory resolved (symlinks, `..`); the file itself
/// need not exist.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).ok()?;
    let joined = dir.join(name);
    Some(std::fs::canonicalize(&joined).unwrap_or(joined))
}

/// Where the copy is written before it gets its name: beside `dest`.
fn temp_name(dest: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(dest.file_name().unwrap_or_default());
    name.push(format!(".partial-{}", std::process::id()));
    dest.with_file_name(name)
}

/// Copies `source` into a new file at `temp` (mode 0600: it holds the
/// chats' messages), as one self-contained file (no WAL), and checks it.
fn copy_into(source: &Connection, temp: &Path) -> Result<BackupReport, BackupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |detail: String| BackupError::Io {
        path: temp.to_owned(),
        detail,
    };
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(temp)
        .map_err(|e| fail(format!("cannot create: {e}")))?;
    let mut copy = Connection::open(temp).map_err(|e| fail(e.to_string()))?;
    {
        let backup = SqliteBackup::new(source, &mut copy).map_err(|e| fail(e.to_string()))?;
        let began = Instant::now();
        loop {
            // All pages in one step: one read transaction, one moment.
            match backup.step(-1).map_err(|e| fail(e.to_string()))? {
                StepResult::Done => break,
                StepResult::More | StepResult::Busy | StepResult::Locked
                    if began.elapsed() < BUSY_BOUND =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => {
                    return Err(fail(format!(
                        "the state file stayed busy for {BUSY_BOUND:?}"
                    )));
                }
            }
        }
    }
    copy.pragma_update(None, "journal_mode", "DELETE")
        .map_err(|e| fail(e.to_string()))?;
    let check: String = copy
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| fail(e.to_string()))?;
    if check != "ok" {
        return Err(fail(format!("the copy fails its check: {check}")));
    }
    let schema_version: i64 = copy
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| fail(e.to_string()))?;
    let inbox_rows: i64 = copy
        .query_row("SELECT COUNT(*) FROM inbox", [], |r| r.get(0))
        .unwrap_or(0);
    copy.close().map_err(|(_, e)| fail(e.to_string()))?;
    let file = std::fs::File::open(temp).map_err(|e| fail(e.to_string()))?;
    file.sync_all().map_err(|e| fail(e.to_string()))?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(BackupReport {
        schema_version,
        inbox_rows,
        bytes,
    })
}

/// Gives the finished copy its name: a hard link, which fails if `dest`
/// appeared meanwhile, or a rename over the empty file [`check_dest`]
/// allowed; then the directory is synced.
fn publish(temp: &Path, dest: &Path) -> Result<(), BackupError> {
    let fail = |err: std::io::Error| BackupError::Io {
        path: dest.to_owned(),
        detail: err.to_string(),
    };
    let empty = std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file() && m.len() == 0);
    if empty {
        std::fs::rename(temp, dest).map_err(fail)?;
    } else {
        match std::fs::hard_link(temp, dest) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(BackupError::Exists(dest.to_owned()));
            }
            Err(err) => return Err(fail(err)),
        }
        let _ = std::fs::remove_file(temp);
    }
    let dir = match dest.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::Incoming;
    use crate::state::Store;

    fn store_with(dir: &Path, messages: i64) -> PathBuf {
        let path = dir.join("state.db");
        let store = Store::open(&path).unwrap();
        for update_id in 1..=messages {
            store
                .accept(&Incoming {
                    update_id,
                    to: teloxide::types::ChatId(1).into(),
                    from: teloxide::types::UserId(1),
                    message_id: teloxide::types::MessageId(i32::try_from(update_id).unwrap()),
                    text: format!("m{update_id}"),
                    ..Incoming::default()
                })
                .unwrap();
        }
        path
    }

    #[test]
    fn a_copy_holds_every_row_and_is_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let state = store_with(dir.path(), 5);
        let dest = dir.path().join("copy.db");
        let report = backup(&state, &dest).unwrap();
        assert_eq!(report.inbox_rows, 5);
        assert_eq!(report.schema_version, crate::state::SCHEMA_VERSION);
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!dir.path().join("copy.db-wal").exists(), "one file");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("partial"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn an_existing_file_is_never_overwritten_but_an_empty_one_is_filled() {
        let dir = tempfile::tempdir().unwrap();
        let state = store_with(dir.path(), 2);
        let dest = dir.path().join("taken.db");
        std::fs::write(&dest, b"precious").unwrap();
        let err = backup(&state, &dest).unwrap_err();
        assert!(matches!(err, BackupError::Exists(_)), "{err}");
        assert!(err.to_string().contains("taken.db"), "{err}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"precious");

        let empty = dir.path().join("mktemp.db");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(backup(&state, &empty).unwrap().inbox_rows, 2);
    }

    #[test]
    fn the_state_file_and_its_companions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = store_with(dir.path(), 1);
        for name in [
            "state.db",
            "state.db-wal",
            "state.db-shm",
            "state.db-journal",
        ] {
            let via_dots = dir.path().join(".").join(name);
            let err = backup(&state, &via_dots).unwrap_err();
            assert!(matches!(err, BackupError::IsState(_)), "{name}: {err}");
        }
        let err = backup(&state, dir.path()).unwrap_err();
        assert!(matches!(err, BackupError::IsDirectory(_)), "{err}");
    }

    #[test]
    fn a_missing_state_file_or_directory_is_said_plainly() {
        let dir = tempfile::tempdir().unwrap();
        let err = backup(&dir.path().join("none.db"), &dir.path().join("b.db")).unwrap_err();
        assert!(matches!(err, BackupError::NoState(_)), "{err}");
        assert!(!dir.path().join("b.db").exists());
        let state = store_with(dir.path(), 1);
        let err = backup(&state, &dir.path().join("no/such/dir/b.db")).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(matches!(
            backup(Path::new(":memory:"), &dir.path().join("c.db")).unwrap_err(),
            BackupError::InMemory
        ));
    }
}

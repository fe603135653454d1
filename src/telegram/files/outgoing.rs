//! Files out: [`outgoing`] opens the file `send_file` names, once,
//! beneath the workdir's descriptor; what is sent is read from that
//! descriptor ([`OutgoingFile::read`]).

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use super::beneath::Dir;
use super::names::megabytes;

/// The largest document a bot may send (Telegram's limit).
pub const MAX_UPLOAD: u64 = 50 * 1024 * 1024;

/// The largest photo a bot may send (Telegram's limit).
pub const MAX_PHOTO_UPLOAD: u64 = 10 * 1024 * 1024;

/// A file the agent asked to send, opened once and checked: what is sent
/// is read from this descriptor, never from its path again.
#[derive(Debug)]
pub struct OutgoingFile {
    /// The open file.
    file: File,
    /// The name it is sent under (the last component of the agent's path).
    pub name: String,
    /// Telegram's limit for it, in bytes.
    limit: u64,
}

impl OutgoingFile {
    /// The same open file (a duplicate descriptor), for a reader on
    /// another thread.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            file: self.file.try_clone()?,
            name: self.name.clone(),
            limit: self.limit,
        })
    }

    /// A file kept in the outbox's spool (its bytes copied there when it
    /// was queued), opened to be sent as `name`.
    pub fn spooled(path: &Path, name: String, as_photo: bool) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let limit = if as_photo {
            MAX_PHOTO_UPLOAD
        } else {
            MAX_UPLOAD
        };
        Ok(Self { file, name, limit })
    }

    /// Copies its bytes, read from the descriptor from the start, into
    /// `out` (blocking; at most its limit, as [`OutgoingFile::read`]).
    pub fn copy_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut chunk = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        loop {
            let n = self.file.read_at(&mut chunk, offset)?;
            if n == 0 {
                return Ok(());
            }
            offset += n as u64;
            if offset > self.limit {
                return Err(std::io::Error::other(format!(
                    "it grew past Telegram's limit of {}",
                    megabytes(self.limit)
                )));
            }
            out.write_all(&chunk[..n])?;
        }
    }

    /// Its bytes, read from the descriptor from the start (blocking; at
    /// most its limit): refused when it grew past the limit or is empty
    /// now.
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let offset = bytes.len() as u64;
            let n = self.file.read_at(&mut chunk, offset)?;
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..n]);
            if bytes.len() as u64 > self.limit {
                return Err(std::io::Error::other(format!(
                    "it grew past Telegram's limit of {}",
                    megabytes(self.limit)
                )));
            }
        }
        if bytes.is_empty() {
            return Err(std::io::Error::other(
                "it is empty now; Telegram refuses empty files",
            ));
        }
        Ok(bytes)
    }
}

/// Opens a file the agent wants to send: `path` (relative to `workdir`, or
/// absolute within it) is opened once, beneath the workdir's descriptor,
/// with no symlink on any component; that descriptor must be a regular
/// file within Telegram's size limit. Answers the open file, or why not
/// (the agent reads it as the tool's error).
pub fn outgoing(workdir: &Path, path: &str, as_photo: bool) -> Result<OutgoingFile, String> {
    let outside =
        || format!("`{path}` is outside your working directory; only files inside it can be sent");
    let dir = Dir::open(workdir).map_err(|e| format!("the working directory is not there: {e}"))?;
    let asked = Path::new(path);
    let relative = if asked.is_absolute() {
        // The workdir as configured, or as the agent sees it (its real path).
        let real = std::fs::canonicalize(workdir).ok();
        let Some(rest) = [Some(workdir.to_owned()), real]
            .into_iter()
            .flatten()
            .find_map(|root| asked.strip_prefix(root).ok().map(Path::to_owned))
        else {
            return Err(outside());
        };
        rest
    } else {
        asked.to_owned()
    };
    let relative = if relative.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        relative
    };
    let file = dir
        .open_beneath(&relative)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EXDEV) => outside(),
            Some(libc::ELOOP) => format!(
                "`{path}` is or goes through a symlink, which could lead outside your working \
             directory; only files inside it, reached without symlinks, can be sent"
            ),
            _ => format!("`{path}`: {e}"),
        })?;
    let meta = file.metadata().map_err(|e| format!("`{path}`: {e}"))?;
    if !meta.is_file() {
        return Err(format!("`{path}` is not a regular file"));
    }
    let limit = if as_photo {
        MAX_PHOTO_UPLOAD
    } else {
        MAX_UPLOAD
    };
    if meta.len() > limit {
        return Err(format!(
            "`{path}` is {}; Telegram takes at most {} {}",
            megabytes(meta.len()),
            megabytes(limit),
            if as_photo { "as a photo" } else { "from a bot" }
        ));
    }
    if meta.len() == 0 {
        return Err(format!("`{path}` is empty; Telegram refuses empty files"));
    }
    let name = asked
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    Ok(OutgoingFile { file, name, limit })
}

//! Files in: what a message carries ([`attachments`]), fetched with
//! `getFile` into the conversation's working directory under `inbox/`
//! ([`Files::receive`]), voice notes transcribed by `files.transcribe`. The
//! turn's text then says what arrived and where, so the agent can read it.
//!
//! Names are made here, never taken whole from Telegram: the sender's file
//! name is reduced to a safe last component, prefixed with the time, and a
//! file is created only where nothing exists (`create_new`), so nothing is
//! overwritten and nothing lands outside `inbox/`.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::{FileId, Message};

/// The folder, inside a conversation's working directory, files land in.
pub const INBOX_DIR: &str = "inbox";

/// The most a transcription may print; more is cut.
const MAX_TRANSCRIPT: usize = 64 * 1024;

/// What kind of file a message carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A photo (its largest size).
    Photo,
    /// A document (any file sent as a file).
    Document,
    /// A music file.
    Audio,
    /// A video.
    Video,
    /// An animation (GIF or soundless video).
    Animation,
    /// A voice note.
    Voice,
    /// A round video note.
    VideoNote,
}

impl FileKind {
    /// How the agent and the chat read it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Photo => "photo",
            Self::Document => "document",
            Self::Audio => "audio",
            Self::Video => "video",
            Self::Animation => "animation",
            Self::Voice => "voice note",
            Self::VideoNote => "video note",
        }
    }

    /// The name stem and extension when the sender gave no name.
    fn default_name(self) -> (&'static str, &'static str) {
        match self {
            Self::Photo => ("photo", "jpg"),
            Self::Document => ("document", "bin"),
            Self::Audio => ("audio", "mp3"),
            Self::Video => ("video", "mp4"),
            Self::Animation => ("animation", "mp4"),
            Self::Voice => ("voice", "oga"),
            Self::VideoNote => ("video-note", "mp4"),
        }
    }
}

/// A file a message carried, as Telegram describes it (kept in the inbox
/// row, so a recovered message fetches it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// What it is.
    pub kind: FileKind,
    /// Telegram's id, for `getFile`.
    pub file_id: String,
    /// The sender's file name, when there was one (untrusted).
    pub name: Option<String>,
    /// Its size in bytes as Telegram announced it (0: unknown).
    pub size: u64,
}

/// The files a message carries (a photo as its largest size).
pub fn attachments(message: &Message) -> Vec<Attachment> {
    let mut out = Vec::new();
    let mut push = |kind, meta: &teloxide::types::FileMeta, name: Option<&String>| {
        out.push(Attachment {
            kind,
            file_id: meta.id.0.clone(),
            name: name.cloned(),
            size: u64::from(meta.size),
        });
    };
    if let Some(sizes) = message.photo()
        && let Some(largest) = sizes
            .iter()
            .max_by_key(|p| (u64::from(p.width) * u64::from(p.height), p.file.size))
    {
        push(FileKind::Photo, &largest.file, None);
    }
    if let Some(animation) = message.animation() {
        push(
            FileKind::Animation,
            &animation.file,
            animation.file_name.as_ref(),
        );
    } else if let Some(d) = message.document() {
        push(FileKind::Document, &d.file, d.file_name.as_ref());
    }
    if let Some(a) = message.audio() {
        push(FileKind::Audio, &a.file, a.file_name.as_ref());
    }
    if let Some(v) = message.video() {
        push(FileKind::Video, &v.file, v.file_name.as_ref());
    }
    if let Some(v) = message.voice() {
        push(FileKind::Voice, &v.file, None);
    }
    if let Some(v) = message.video_note() {
        push(FileKind::VideoNote, &v.file, None);
    }
    out
}

/// `[files]`: how files are taken in.
#[derive(Debug, Clone)]
pub struct FilesPolicy {
    /// The largest file fetched, in bytes.
    pub max_download: u64,
    /// The transcription command (`{file}` is the voice note's path); empty:
    /// none.
    pub transcribe: Vec<String>,
    /// How long a transcription may take.
    pub transcribe_timeout: Duration,
}

/// What came of a message's files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Received {
    /// Lines for the agent, one per file (`[photo saved as inbox/…]`).
    pub notes: Vec<String>,
    /// Notices for the chat (a file over the limit, a failed download).
    pub notices: Vec<String>,
}

/// Fetches attachments into working directories.
#[derive(Clone)]
pub struct Files {
    bot: Bot,
    policy: FilesPolicy,
}

/// Why one file could not be taken in.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("it is {size} and the limit is {limit}")]
    TooLarge { size: String, limit: String },
    #[error("telegram would not hand it over: {0}")]
    Telegram(String),
    #[error("it could not be saved: {0}")]
    Io(#[from] std::io::Error),
}

impl Files {
    /// Files fetched through `bot` under `policy`.
    pub fn new(bot: Bot, policy: FilesPolicy) -> Self {
        Self { bot, policy }
    }

    /// Fetches each attachment into `workdir/inbox/` and says what happened.
    /// Never fails: a file that cannot be taken becomes a note and a notice.
    pub async fn receive(&self, workdir: &Path, attachments: &[Attachment]) -> Received {
        let mut received = Received::default();
        for attachment in attachments {
            let shown = attachment
                .name
                .as_deref()
                .map(|n| format!(" “{}”", safe_component(n).unwrap_or_default()))
                .unwrap_or_default();
            let kind = attachment.kind.label();
            match self.fetch(workdir, attachment).await {
                Ok(relative) => {
                    let mut note = format!("[{kind}{shown} saved as {relative}]");
                    if attachment.kind == FileKind::Voice && !self.policy.transcribe.is_empty() {
                        note = match self.transcribe(workdir, &workdir.join(&relative)).await {
                            Ok(text) => {
                                format!("[voice note saved as {relative}; transcript:]\n{text}")
                            }
                            Err(why) => {
                                tracing::warn!(file = %relative, cause = %why, "voice note not transcribed");
                                format!(
                                    "[voice note saved as {relative}; it could not be transcribed: {why}]"
                                )
                            }
                        };
                    }
                    tracing::info!(kind, file = %relative, "file received");
                    received.notes.push(note);
                }
                Err(err) => {
                    tracing::warn!(kind, file_id = %attachment.file_id, cause = %err, "file not received");
                    received
                        .notes
                        .push(format!("[{kind}{shown} not received: {err}]"));
                    received
                        .notices
                        .push(format!("⚠️ The {kind}{shown} was not received: {err}."));
                }
            }
        }
        received
    }

    /// One file: size checks (announced and real), a safe unique name, the
    /// download bounded by the limit. Answers the path relative to `workdir`.
    async fn fetch(&self, workdir: &Path, attachment: &Attachment) -> Result<String, FetchError> {
        let limit = self.policy.max_download;
        let too_large = |size: u64| FetchError::TooLarge {
            size: megabytes(size),
            limit: megabytes(limit),
        };
        if attachment.size > limit {
            return Err(too_large(attachment.size));
        }
        let file = self
            .bot
            .get_file(FileId(attachment.file_id.clone()))
            .await
            .map_err(|e| FetchError::Telegram(e.to_string()))?;
        if u64::from(file.meta.size) > limit {
            return Err(too_large(u64::from(file.meta.size)));
        }
        let dir = inbox_dir(workdir)?;
        let (stem, ext) = name_parts(attachment, &file.path);
        let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
        let (path, mut out) = create_unique(&dir, &format!("{stamp}-{stem}"), &ext)?;
        let mut stream = self.bot.download_file_stream(&file.path);
        let mut written: u64 = 0;
        let result = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| FetchError::Telegram(e.to_string()))?;
                written += chunk.len() as u64;
                if written > limit {
                    return Err(too_large(written));
                }
                out.write_all(&chunk)?;
            }
            out.sync_all()?;
            Ok(())
        }
        .await;
        if let Err(err) = result {
            drop(out);
            let _ = std::fs::remove_file(&path);
            return Err(err);
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(format!("{INBOX_DIR}/{name}"))
    }

    /// Runs `files.transcribe` on `file`, its standard output the text.
    async fn transcribe(&self, workdir: &Path, file: &Path) -> Result<String, String> {
        let file_arg = file.to_string_lossy();
        let argv: Vec<String> = self
            .policy
            .transcribe
            .iter()
            .map(|a| a.replace("{file}", &file_arg))
            .collect();
        let (program, args) = argv.split_first().ok_or("no command")?;
        let child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(workdir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("`{program}` could not start: {e}"))?;
        let timeout = self.policy.transcribe_timeout;
        let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(format!("`{program}` failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "`{program}` took longer than {}",
                    humantime::format_duration(timeout)
                ));
            }
        };
        if !output.status.success() {
            return Err(format!("`{program}` exited with {}", output.status));
        }
        let mut text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if text.len() > MAX_TRANSCRIPT {
            let mut end = MAX_TRANSCRIPT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        if text.is_empty() {
            return Err(format!("`{program}` printed nothing"));
        }
        Ok(text)
    }
}

/// `workdir/inbox`, created 0700; refused when it is a symlink or not a
/// directory (the agent could have put one there).
fn inbox_dir(workdir: &Path) -> std::io::Result<PathBuf> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(workdir)?;
    let dir = workdir.join(INBOX_DIR);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.file_type().is_dir() => Ok(dir),
        Ok(_) => Err(std::io::Error::other(format!(
            "{INBOX_DIR}/ in the working directory is not a directory"
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new().mode(0o700).create(&dir)?;
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

/// Creates `dir/<base>.<ext>`, or `<base>-2.<ext>` and so on when taken;
/// never follows a symlink, never replaces anything.
fn create_unique(dir: &Path, base: &str, ext: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    for n in 1..=1000u32 {
        let name = match (n, ext.is_empty()) {
            (1, true) => base.to_string(),
            (1, false) => format!("{base}.{ext}"),
            (_, true) => format!("{base}-{n}"),
            (_, false) => format!("{base}-{n}.{ext}"),
        };
        let path = dir.join(name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free name in the inbox"))
}

/// The name's stem and extension: from the sender's name when it has a
/// safe one, else from the kind (the extension from Telegram's path).
fn name_parts(attachment: &Attachment, telegram_path: &str) -> (String, String) {
    let (kind_stem, kind_ext) = attachment.kind.default_name();
    let from_path = safe_component(telegram_path)
        .and_then(|n| n.rsplit_once('.').map(|(_, e)| e.to_string()))
        .filter(|e| !e.is_empty() && e.len() <= 10);
    let given = attachment.name.as_deref().and_then(safe_component);
    match given {
        Some(name) => match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() && ext.len() <= 10 => {
                (format!("{kind_stem}-{stem}"), ext.to_string())
            }
            _ => (format!("{kind_stem}-{name}"), String::new()),
        },
        None => (
            kind_stem.to_string(),
            from_path.unwrap_or_else(|| kind_ext.to_string()),
        ),
    }
}

/// The last path component of an untrusted name, reduced to letters,
/// digits, `.`, `-` and `_` (others become `_`), without leading dots, at
/// most 64 characters; `None` when nothing is left.
pub fn safe_component(name: &str) -> Option<String> {
    let last = name
        .rsplit(['/', '\\'])
        .find(|part| !part.is_empty() && *part != "." && *part != "..")?;
    let cleaned: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    let cleaned: String = cleaned.chars().take(64).collect();
    (!cleaned.is_empty() && cleaned.chars().any(|c| c != '_')).then_some(cleaned)
}

/// `12.3 MB`, `5 KB`, `12 bytes`.
fn megabytes(bytes: u64) -> String {
    if bytes < 1_000 {
        return format!("{bytes} bytes");
    }
    if bytes < 1_000_000 {
        return format!("{} KB", bytes / 1_000);
    }
    let mb = bytes as f64 / 1_000_000.0;
    if mb >= 10.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{mb:.1} MB")
    }
}

/// The largest document a bot may send (Telegram's limit).
pub const MAX_UPLOAD: u64 = 50 * 1024 * 1024;

/// The largest photo a bot may send (Telegram's limit).
pub const MAX_PHOTO_UPLOAD: u64 = 10 * 1024 * 1024;

/// Checks a file the agent wants to send: `path` (relative to `workdir`, or
/// absolute) must resolve, symlinks followed, to a regular file inside the
/// workdir, within Telegram's size limit. Answers the resolved path, or why
/// not (the agent reads it as the tool's error).
pub fn outgoing(workdir: &Path, path: &str, as_photo: bool) -> Result<PathBuf, String> {
    let root = std::fs::canonicalize(workdir)
        .map_err(|e| format!("the working directory is not there: {e}"))?;
    let asked = Path::new(path);
    let joined = if asked.is_absolute() {
        asked.to_path_buf()
    } else {
        workdir.join(asked)
    };
    let real = std::fs::canonicalize(&joined).map_err(|e| format!("`{path}`: {e}"))?;
    if !real.starts_with(&root) || real == root {
        return Err(format!(
            "`{path}` is outside your working directory; only files inside it can be sent"
        ));
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("`{path}`: {e}"))?;
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
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_names_are_reduced_to_a_safe_last_component() {
        assert_eq!(
            safe_component("../../etc/passwd").as_deref(),
            Some("passwd")
        );
        assert_eq!(
            safe_component("..\\..\\boot.ini").as_deref(),
            Some("boot.ini")
        );
        assert_eq!(safe_component("/abs/.bashrc").as_deref(), Some("bashrc"));
        assert_eq!(
            safe_component("ok name (1).pdf").as_deref(),
            Some("ok_name__1_.pdf")
        );
        assert_eq!(safe_component(".."), None);
        assert_eq!(safe_component("///"), None);
        assert_eq!(safe_component("日本"), None);
        assert_eq!(safe_component(&"a".repeat(300)).map(|s| s.len()), Some(64));
    }

    #[test]
    fn names_come_from_the_sender_or_the_kind() {
        let doc = Attachment {
            kind: FileKind::Document,
            file_id: "x".into(),
            name: Some("../../etc/passwd".into()),
            size: 0,
        };
        assert_eq!(
            name_parts(&doc, "documents/file_1"),
            ("document-passwd".into(), String::new())
        );
        let photo = Attachment {
            kind: FileKind::Photo,
            file_id: "x".into(),
            name: None,
            size: 0,
        };
        assert_eq!(
            name_parts(&photo, "photos/file_7.png"),
            ("photo".into(), "png".into())
        );
        assert_eq!(
            name_parts(&photo, "photos/file_7"),
            ("photo".into(), "jpg".into())
        );
    }

    #[test]
    fn a_taken_name_gets_a_number_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let (a, mut fa) = create_unique(dir.path(), "x", "txt").unwrap();
        fa.write_all(b"first").unwrap();
        let (b, _) = create_unique(dir.path(), "x", "txt").unwrap();
        assert_ne!(a, b);
        assert!(b.ends_with("x-2.txt"));
        assert_eq!(std::fs::read(&a).unwrap(), b"first");
    }

    #[test]
    fn only_regular_files_inside_the_workdir_go_out() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("ok.txt"), "hi").unwrap();
        std::fs::write(base.path().join("secret.txt"), "no").unwrap();
        std::os::unix::fs::symlink(base.path().join("secret.txt"), ws.join("link.txt")).unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("empty"), "").unwrap();
        assert!(outgoing(&ws, "ok.txt", false).is_ok());
        assert!(outgoing(&ws, &ws.join("ok.txt").to_string_lossy(), false).is_ok());
        for bad in [
            "link.txt",
            "../secret.txt",
            "sub",
            "missing",
            "empty",
            "/etc/passwd",
            ".",
        ] {
            assert!(outgoing(&ws, bad, false).is_err(), "{bad} was let out");
        }
    }

    #[test]
    fn an_inbox_that_is_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(INBOX_DIR)).unwrap();
        assert!(inbox_dir(dir.path()).is_err());
        let fresh = tempfile::tempdir().unwrap();
        let made = inbox_dir(&fresh.path().join("ws")).unwrap();
        assert!(made.is_dir());
    }
}

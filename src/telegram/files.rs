//! Files in: what a message carries ([`attachments`]), fetched with
//! `getFile` into the conversation's working directory under `inbox/`
//! ([`Files::receive`]), voice notes transcribed by `files.transcribe`. The
//! turn's text then says what arrived and where, so the agent can read it.
//! Files out: [`outgoing`] opens the file `send_file` names, once.
//!
//! Names are made here, never taken whole from Telegram: the sender's file
//! name is reduced to a safe last component, prefixed with the time, and a
//! file is created only where nothing exists (`O_EXCL`), so nothing is
//! overwritten. Everything in a working directory is reached through its
//! descriptor with no symlink followed (`beneath`): the agent may swap any
//! name there at any moment, and nothing lands outside `inbox/` or is read
//! from outside the working directory.

mod beneath;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::{FileId, Message};

use crate::agent::claude::Seal;
use crate::agent::claude::seal;
use crate::attachment::{Attachment, FileKind};
use beneath::Dir;

/// The folder, inside a conversation's working directory, files land in.
pub const INBOX_DIR: &str = "inbox";

/// The most a transcription may print; more is cut.
const MAX_TRANSCRIPT: usize = 64 * 1024;

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
    /// How the agent is sealed (`agent.workdir`, `agent.pass_env`,
    /// `agent.sandbox`): the transcriber runs on untrusted audio, so it
    /// gets the agent's clean environment and, with the sandbox on, runs
    /// inside it. The launcher is not used (the file is here).
    pub seal: Seal,
    /// `agent.env`, set on top of the clean environment.
    pub env: BTreeMap<String, String>,
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
    /// Test hook: how long the next file write stalls, in ms (0: none).
    stall: Stall,
    /// Turns for [`Files::disk`].
    disk_jobs: std::sync::Arc<tokio::sync::Semaphore>,
}

/// File system jobs of received files at once, all chats together.
const DISK_JOBS: usize = 4;

/// How much of a download is written at once.
const WRITE_BATCH: usize = 256 * 1024;

/// A one-shot stall of the next file write ([`Files::stall_next_write`]).
#[derive(Clone, Default)]
struct Stall(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Stall {
    fn take(&self) -> Option<Duration> {
        let ms = self.0.swap(0, std::sync::atomic::Ordering::SeqCst);
        (ms > 0).then(|| Duration::from_millis(ms))
    }
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
        Self {
            bot,
            policy,
            stall: Stall::default(),
            disk_jobs: std::sync::Arc::new(tokio::sync::Semaphore::new(DISK_JOBS)),
        }
    }

    /// Test hook: makes saving the next file take `stall` longer, as a slow
    /// disk would.
    #[doc(hidden)]
    pub fn stall_next_write(&self, stall: Duration) {
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.stall.0.store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// How files are taken in (`[files]`).
    pub fn policy(&self) -> &FilesPolicy {
        &self.policy
    }

    /// Fetches each attachment into the `inbox/` of conversation `chat`'s
    /// working directory (`chat` fills `{chat}`) and says what happened.
    /// Never fails: a file that cannot be taken becomes a note and a notice.
    pub async fn receive(&self, chat: &str, attachments: &[Attachment]) -> Received {
        let workdir = &seal::chat_path(&self.policy.seal.workdir, chat);
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
                        note = match self.transcribe(chat, &workdir.join(&relative)).await {
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
    ///
    /// The file is made, written (in batches of [`WRITE_BATCH`] as the
    /// download comes) and synced to disk on the blocking pool: this runs
    /// on the actors' thread, which a slow disk (an fsync behind a loaded
    /// machine's writes took up to 150 ms) would stall for every chat.
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
        let (stem, ext) = name_parts(attachment, &file.path);
        let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
        let base = format!("{stamp}-{stem}");
        let workdir = workdir.to_path_buf();
        let stall = self.stall.take();
        let (inbox, name, out) = self
            .disk(move || {
                if let Some(stall) = stall {
                    std::thread::sleep(stall);
                }
                let inbox = open_inbox(&workdir)?;
                let (name, out) = create_unique(&inbox, &base, &ext)?;
                Ok((inbox, name, out))
            })
            .await?;
        let mut out = Some(out);
        let downloaded = async {
            let mut stream = self.bot.download_file_stream(&file.path);
            let mut written: u64 = 0;
            let mut pending: Vec<u8> = Vec::new();
            let mut last = false;
            while !last {
                let chunk = match stream.next().await {
                    Some(chunk) => chunk.map_err(|e| FetchError::Telegram(e.to_string()))?,
                    None => {
                        last = true;
                        bytes::Bytes::new()
                    }
                };
                written += chunk.len() as u64;
                if written > limit {
                    return Err(too_large(written));
                }
                pending.extend_from_slice(&chunk);
                if pending.len() < WRITE_BATCH && !last {
                    continue;
                }
                let mut file = out
                    .take()
                    .ok_or_else(|| FetchError::Io(std::io::Error::other("no file")))?;
                let batch = std::mem::take(&mut pending);
                out = Some(
                    self.disk(move || {
                        file.write_all(&batch)?;
                        if last {
                            file.sync_all()?;
                        }
                        Ok(file)
                    })
                    .await?,
                );
            }
            Ok(())
        }
        .await;
        drop(out);
        match downloaded {
            Ok(()) => Ok(format!("{INBOX_DIR}/{name}")),
            Err(err) => {
                // The same directory it was made in, whatever its name is now.
                let _ = self
                    .disk(move || Ok(inbox.remove_file(std::ffi::OsStr::new(&name))?))
                    .await;
                Err(err)
            }
        }
    }

    /// Runs `work` (file system calls) on the blocking pool, at most
    /// [`DISK_JOBS`] at once for all chats: a slow disk then holds a few
    /// threads, never the actors' thread nor a thread per chat.
    async fn disk<T, F>(&self, work: F) -> Result<T, FetchError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, FetchError> + Send + 'static,
    {
        let _turn = self
            .disk_jobs
            .acquire()
            .await
            .map_err(|e| FetchError::Io(std::io::Error::other(e.to_string())))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| FetchError::Io(std::io::Error::other(e.to_string())))?
    }

    /// Runs `files.transcribe` on `file` for conversation `chat`, its
    /// standard output the text: in the agent's clean environment, in its
    /// own process group (killed whole at the timeout), and under the
    /// agent's sandbox when `agent.sandbox` is on.
    async fn transcribe(&self, chat: &str, file: &Path) -> Result<String, String> {
        let file_arg = file.to_string_lossy();
        let argv: Vec<String> = self
            .policy
            .transcribe
            .iter()
            .map(|a| a.replace("{file}", &file_arg))
            .collect();
        let (program, args) = argv.split_first().ok_or("no command")?;
        let mut sealed = self.policy.seal.clone();
        sealed.launcher.clear();
        let plan = seal::plan(
            &sealed,
            chat,
            program,
            args,
            std::env::vars_os(),
            &self.policy.env,
            |path| path.exists(),
        );
        for dir in &plan.create {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("`{}` could not be made: {e}", dir.display()))?;
        }
        let (run, run_args) = plan.argv.split_first().ok_or("no command")?;
        let child = tokio::process::Command::new(run)
            .args(run_args)
            .env_clear()
            .envs(&plan.env)
            .current_dir(&plan.workdir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("`{program}` could not start: {e}"))?;
        let mut group = Group(child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()));
        let timeout = self.policy.transcribe_timeout;
        let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => {
                group.reaped();
                output
            }
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

/// A transcriber's process group, killed whole when it is dropped before
/// its leader was reaped (a timeout, a failure, a turn that ended
/// meanwhile): whatever it started goes with it.
struct Group(Option<libc::pid_t>);

impl Group {
    /// The leader was reaped: its id may be reused, so nothing is sent.
    fn reaped(&mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(group) = self.0.filter(|g| *g > 1) {
            // SAFETY: killpg only sends a signal; the group is the
            // transcriber's own and its leader not yet reaped, so the id
            // is not reused.
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
    }
}

/// The `inbox/` of `workdir`, opened through the workdir's descriptor
/// (both created 0700 when missing); refused when either is a symlink or
/// not a directory (the agent could have put one there).
fn open_inbox(workdir: &Path) -> std::io::Result<Dir> {
    let dir = Dir::create(workdir)?;
    dir.subdir(INBOX_DIR, true).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
            std::io::Error::other(format!(
                "{INBOX_DIR}/ in the working directory is not a directory"
            ))
        } else {
            e
        }
    })
}

/// Creates `<base>.<ext>` in `dir`, or `<base>-2.<ext>` and so on when
/// taken; never follows a symlink, never replaces anything. Answers the
/// name and the file.
fn create_unique(dir: &Dir, base: &str, ext: &str) -> std::io::Result<(String, File)> {
    for n in 1..=1000u32 {
        let name = match (n, ext.is_empty()) {
            (1, true) => base.to_string(),
            (1, false) => format!("{base}.{ext}"),
            (_, true) => format!("{base}-{n}"),
            (_, false) => format!("{base}-{n}.{ext}"),
        };
        match dir.create_file(&name) {
            Ok(file) => return Ok((name, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free name in the inbox"))
}

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

/// The name stem and extension of a file of `kind` whose sender gave no name.
fn default_name(kind: FileKind) -> (&'static str, &'static str) {
    match kind {
        FileKind::Photo => ("photo", "jpg"),
        FileKind::Document => ("document", "bin"),
        FileKind::Audio => ("audio", "mp3"),
        FileKind::Video => ("video", "mp4"),
        FileKind::Animation => ("animation", "mp4"),
        FileKind::Voice => ("voice", "oga"),
        FileKind::VideoNote => ("video-note", "mp4"),
    }
}

/// The name's stem and extension: from the sender's name when it has a
/// safe one, else from the kind (the extension from Telegram's path).
fn name_parts(attachment: &Attachment, telegram_path: &str) -> (String, String) {
    let (kind_stem, kind_ext) = default_name(attachment.kind);
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
pub(crate) fn megabytes(bytes: u64) -> String {
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
        let inbox = Dir::open(dir.path()).unwrap();
        let (a, mut fa) = create_unique(&inbox, "x", "txt").unwrap();
        fa.write_all(b"first").unwrap();
        let (b, _) = create_unique(&inbox, "x", "txt").unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("x.txt", "x-2.txt"));
        assert_eq!(std::fs::read(dir.path().join(&a)).unwrap(), b"first");
        // A symlink where a name would go is a taken name, never followed.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("y.txt"), dir.path().join("y.txt")).unwrap();
        let (c, _) = create_unique(&inbox, "y", "txt").unwrap();
        assert_eq!(c, "y-2.txt");
        assert!(!outside.path().join("y.txt").exists());
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
        std::fs::write(ws.join("sub/in.txt"), "deep").unwrap();
        std::os::unix::fs::symlink(ws.join("sub"), ws.join("subl")).unwrap();
        std::os::unix::fs::symlink(base.path(), ws.join("up")).unwrap();
        std::fs::write(ws.join("empty"), "").unwrap();
        let sent = |path: &str| {
            let file = outgoing(&ws, path, false).unwrap();
            (file.name.clone(), file.read().unwrap())
        };
        assert_eq!(sent("ok.txt"), ("ok.txt".into(), b"hi".to_vec()));
        assert_eq!(sent(&ws.join("ok.txt").to_string_lossy()).1, b"hi");
        assert_eq!(sent("sub/in.txt"), ("in.txt".into(), b"deep".to_vec()));
        assert_eq!(sent("./sub/../ok.txt").1, b"hi");
        for bad in [
            "link.txt",
            "../secret.txt",
            "up/secret.txt",
            "subl/in.txt",
            "sub",
            "missing",
            "empty",
            "/etc/passwd",
            ".",
            "",
        ] {
            assert!(outgoing(&ws, bad, false).is_err(), "{bad} was let out");
        }
        let why = outgoing(&ws, "up/secret.txt", false).unwrap_err();
        assert!(why.contains("symlink"), "{why}");
        let why = outgoing(&ws, "sub/../../secret.txt", false).unwrap_err();
        assert!(why.contains("outside your working directory"), "{why}");
    }

    #[test]
    fn a_file_that_grows_past_the_limit_after_the_check_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.png"), b"x").unwrap();
        let file = outgoing(dir.path(), "p.png", true).unwrap();
        let grown = vec![7u8; usize::try_from(MAX_PHOTO_UPLOAD).unwrap() + 1];
        std::fs::write(dir.path().join("p.png"), grown).unwrap();
        let why = file.read().unwrap_err().to_string();
        assert!(why.contains("grew past"), "{why}");
    }

    #[test]
    fn an_inbox_that_is_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(INBOX_DIR)).unwrap();
        let why = open_inbox(dir.path()).unwrap_err().to_string();
        assert!(why.contains("not a directory"), "{why}");
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), linked.path().join("ws")).unwrap();
        assert!(open_inbox(&linked.path().join("ws")).is_err());
        let fresh = tempfile::tempdir().unwrap();
        let made = open_inbox(&fresh.path().join("ws")).unwrap();
        made.create_file("a").unwrap();
        assert!(fresh.path().join("ws/inbox/a").is_file());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(fresh.path().join("ws/inbox"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// Sets a file's (or, for a symlink, the link's own) modification time
    /// `ago` in the past.
    fn age(path: &Path, ago: Duration) {
        let when = SystemTime::now() - ago;
        let secs = when
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let times = [libc::timespec {
            tv_sec: i64::try_from(secs).unwrap(),
            tv_nsec: 0,
        }; 2];
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string and two timespecs.
        let done = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
    }

    #[test]
    fn old_inbox_files_are_pruned_and_nothing_is_followed() {
        let base = tempfile::tempdir().unwrap();
        let month = Duration::from_secs(40 * 86_400);
        let retention = Duration::from_secs(30 * 86_400);
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("old.txt"), "keep").unwrap();
        age(&outside.join("old.txt"), month);
        for chat in ["1001", "-100_7"] {
            let inbox = ws.join(format!("c{chat}")).join("work/inbox");
            std::fs::create_dir_all(inbox.join("sub")).unwrap();
            std::fs::write(inbox.join("old.oga"), "old").unwrap();
            std::fs::write(inbox.join("new.oga"), "new").unwrap();
            std::fs::write(inbox.join("sub/old.txt"), "agent's").unwrap();
            age(&inbox.join("old.oga"), month);
            age(&inbox.join("sub/old.txt"), month);
            age(&inbox.join("sub"), month);
            std::os::unix::fs::symlink(outside.join("old.txt"), inbox.join("link")).unwrap();
            age(&inbox.join("link"), month);
        }
        // A chat whose inbox, or whose workdir, is a symlink to outside.
        std::fs::create_dir_all(ws.join("c5/work")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("c5/work/inbox")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("c6")).unwrap();
        std::fs::create_dir_all(outside.join("work/inbox")).unwrap();
        std::fs::write(outside.join("work/inbox/old.txt"), "keep").unwrap();
        age(&outside.join("work/inbox/old.txt"), month);
        let template = ws.join("c{chat}").join("work");
        assert_eq!(prune_inboxes(&template, retention), 4);
        for chat in ["1001", "-100_7"] {
            let inbox = ws.join(format!("c{chat}")).join("work/inbox");
            assert!(!inbox.join("old.oga").exists());
            assert!(std::fs::symlink_metadata(inbox.join("link")).is_err());
            assert!(inbox.join("new.oga").exists());
            assert!(inbox.join("sub/old.txt").exists(), "not recursed into");
        }
        assert_eq!(std::fs::read(outside.join("old.txt")).unwrap(), b"keep");
        assert!(outside.join("work/inbox/old.txt").exists());
        assert_eq!(prune_inboxes(&template, retention), 0);
        assert_eq!(
            prune_inboxes(&base.path().join("none/{chat}"), retention),
            0
        );
    }
}

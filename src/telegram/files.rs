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
mod names;
mod outgoing;
mod prune;

pub(crate) use names::megabytes;
use names::name_parts;
pub use names::safe_component;
pub use outgoing::{MAX_PHOTO_UPLOAD, MAX_UPLOAD, OutgoingFile, outgoing};
pub use prune::prune_inboxes;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::types::{FileId, Message};

use crate::agent::host::Seal;
use crate::agent::host::seal;
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
    #[cfg(any(test, feature = "test-hooks"))]
    stall: Stall,
    /// Turns for [`Files::disk`].
    disk_jobs: std::sync::Arc<tokio::sync::Semaphore>,
}

/// File system jobs of received files at once, all chats together.
const DISK_JOBS: usize = 4;

/// How much of a download is written at once.
const WRITE_BATCH: usize = 256 * 1024;

/// A one-shot stall of the next file write ([`Files::stall_next_write`]).
#[cfg(any(test, feature = "test-hooks"))]
#[derive(Clone, Default)]
struct Stall(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[cfg(any(test, feature = "test-hooks"))]
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
    Telegram(#[from] teloxide::RequestError),
    #[error("telegram would not hand it over: {0}")]
    Download(#[from] reqwest::Error),
    #[error("it could not be saved: {0}")]
    Io(#[from] std::io::Error),
    #[error("it could not be saved: {0}")]
    Disk(#[from] tokio::task::JoinError),
    #[error("it could not be saved: {0}")]
    Closed(#[from] tokio::sync::AcquireError),
}

impl FetchError {
    fn too_large(size: u64, limit: u64) -> Self {
        Self::TooLarge {
            size: megabytes(size),
            limit: megabytes(limit),
        }
    }
}

impl Files {
    /// Files fetched through `bot` under `policy`.
    pub fn new(bot: Bot, policy: FilesPolicy) -> Self {
        Self {
            bot,
            policy,
            #[cfg(any(test, feature = "test-hooks"))]
            stall: Stall::default(),
            disk_jobs: std::sync::Arc::new(tokio::sync::Semaphore::new(DISK_JOBS)),
        }
    }

    /// Test hook: makes saving the next file take `stall` longer, as a slow
    /// disk would.
    #[cfg(any(test, feature = "test-hooks"))]
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
        let root = self.policy.seal.workdir.clone();
        self.receive_in(&root, chat, attachments).await
    }

    /// As [`Files::receive`], into the workdir `root` (a project's).
    pub async fn receive_in(
        &self,
        root: &Path,
        chat: &str,
        attachments: &[Attachment],
    ) -> Received {
        let workdir = &seal::chat_path(root, chat);
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
                        note = match self.transcribe(root, chat, &workdir.join(&relative)).await {
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
                        .push(crate::chat::notices::file_not_received(kind, &shown, &err));
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
        let too_large = |size: u64| FetchError::too_large(size, limit);
        if attachment.size > limit {
            return Err(too_large(attachment.size));
        }
        let payload = teloxide::payloads::GetFile::new(FileId(attachment.file_id.clone()));
        let file = crate::telegram::call::call(&self.bot, &payload).await?;
        if u64::from(file.meta.size) > limit {
            return Err(too_large(u64::from(file.meta.size)));
        }
        let (stem, ext) = name_parts(attachment, &file.path);
        let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
        let base = format!("{stamp}-{stem}");
        let workdir = workdir.to_path_buf();
        #[cfg(any(test, feature = "test-hooks"))]
        let stall = self.stall.take();
        let (inbox, name, out) = self
            .disk(move || {
                #[cfg(any(test, feature = "test-hooks"))]
                if let Some(stall) = stall {
                    std::thread::sleep(stall);
                }
                let inbox = open_inbox(&workdir)?;
                let (name, out) = create_unique(&inbox, &base, &ext)?;
                Ok((inbox, name, out))
            })
            .await?;
        let downloaded = self.download(&file.path, out, limit).await;
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

    /// Downloads Telegram's `path` into `out` (in batches, written on the
    /// blocking pool, synced at the end), refused past `limit` bytes.
    async fn download(&self, path: &str, out: File, limit: u64) -> Result<(), FetchError> {
        let mut stream = self.bot.download_file_stream(path);
        let mut out = Some(out);
        let mut written: u64 = 0;
        let mut pending: Vec<u8> = Vec::new();
        let mut last = false;
        while !last {
            let chunk = match stream.next().await {
                Some(chunk) => chunk?,
                None => {
                    last = true;
                    bytes::Bytes::new()
                }
            };
            written += chunk.len() as u64;
            if written > limit {
                return Err(FetchError::too_large(written, limit));
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

    /// Runs `work` (file system calls) on the blocking pool, at most
    /// [`DISK_JOBS`] at once for all chats: a slow disk then holds a few
    /// threads, never the actors' thread nor a thread per chat.
    async fn disk<T, F>(&self, work: F) -> Result<T, FetchError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, FetchError> + Send + 'static,
    {
        let _turn = self.disk_jobs.acquire().await?;
        tokio::task::spawn_blocking(work).await?
    }

    /// Runs `files.transcribe` on `file` for conversation `chat`, its
    /// standard output the text: in the agent's clean environment, in its
    /// own process group (killed whole at the timeout), and under the
    /// agent's sandbox when `agent.sandbox` is on.
    async fn transcribe(&self, root: &Path, chat: &str, file: &Path) -> Result<String, String> {
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
        // Sealed in the directory the file is in (a project's, or the chat's).
        sealed.workdir = root.to_path_buf();
        sealed.start_network()?;
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

#[cfg(test)]
mod tests;

//! Idle agent processes kept across `/restart`'s re-execution.
//!
//! `/restart` (and an upgrade through it) re-executes this binary: `exec`
//! keeps the pid, so the agent processes stay this process's children,
//! and a pipe whose descriptor is not close-on-exec stays open across it.
//! A conversation's warm, idle session is handed over instead of closed:
//! its process keeps running, its pipes' copies (kept since the spawn,
//! close-on-exec until the exec) and what it was started with go to the
//! next process in a record (a memfd named by [`HANDOVER_FD_ENV`]). The
//! next process takes the record before anything else opens a descriptor,
//! sets every handed descriptor close-on-exec again (no agent it spawns
//! inherits another's pipes), and adopts a process when a conversation
//! opens the same session with the same start (the same argv, environment
//! and working directory, resume aside, and the same `initialize`); a
//! process the next process would start otherwise (the config changed) is
//! closed, and so is each one nobody opened once the start's prewarm is
//! over. The agent network's proxy socket goes along, so the sandboxes'
//! bind of it keeps working.
//!
//! Only a process that re-executes itself hands anything over
//! ([`enable`], from `main`): a library user's stop closes as before.
//! This is process-wide state, as an `exec` is.

use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The variable naming the descriptor of the record (set only on the
/// re-executed process; every `TURNSTILE_*` variable is kept from agents).
pub use crate::config::HANDOVER_FD_ENV;

/// The record's format; another is not read (its processes are closed).
const VERSION: u32 = 1;

/// The record's size bound when read.
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// How long an unclaimed process gets to exit after its stdin closed,
/// then after SIGTERM.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// The record passed across the exec.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    version: u32,
    processes: Vec<ProcessRecord>,
    proxies: Vec<SocketRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ProcessRecord {
    key: String,
    session_id: String,
    started_as: String,
    pid: u32,
    start_time: i64,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
}

#[derive(Debug, Serialize, Deserialize)]
struct SocketRecord {
    path: PathBuf,
    fd: RawFd,
}

/// An idle agent process on its way across the exec.
#[derive(Debug)]
pub(crate) struct HandedProcess {
    /// The conversation's key.
    pub(crate) key: String,
    /// The session the process holds.
    pub(crate) session_id: String,
    /// What it was started with, its resume aside (see [`StartedAs`]).
    pub(crate) started_as: String,
    /// Its pid, also its process group.
    pub(crate) pid: u32,
    /// Its start time: with the pid, it names this process.
    pub(crate) start_time: i64,
    /// Its pipes.
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// The agent network proxy's listening socket, and where it is.
#[derive(Debug)]
pub(crate) struct HandedSocket {
    pub(crate) path: PathBuf,
    pub(crate) listener: OwnedFd,
}

/// What a process was started with, resume aside: it is adopted only by a
/// session that would start it the same way.
pub(crate) type StartedAs = String;

struct Registry {
    /// Set by `main`: this process re-executes itself on `/restart`.
    enabled: bool,
    /// Handed over by sessions, for the exec.
    outgoing: Vec<HandedProcess>,
    /// Proxy sockets, for the exec.
    outgoing_sockets: Vec<HandedSocket>,
    /// Taken from the previous process, until claimed or released.
    inherited: Vec<HandedProcess>,
    /// The previous process's proxy sockets, until one is taken.
    inherited_sockets: Vec<HandedSocket>,
    /// The pid of every process the previous process handed over, for
    /// as long as this process lives: never a leftover to kill.
    came_across: Vec<u32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    enabled: false,
    outgoing: Vec::new(),
    outgoing_sockets: Vec::new(),
    inherited: Vec::new(),
    inherited_sockets: Vec::new(),
    came_across: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This process re-executes itself on `/restart`: from now on idle
/// sessions are handed over at a restart's stop, not closed.
pub fn enable() {
    registry().enabled = true;
}

/// Whether idle sessions are handed over at a restart's stop.
pub(crate) fn enabled() -> bool {
    registry().enabled
}

/// A copy of `fd` (close-on-exec), kept to hand over.
pub(crate) fn keep(fd: &impl AsRawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only makes a new descriptor.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    // SAFETY: `copy` is a fresh descriptor this process owns.
    (copy >= 0).then(|| unsafe { OwnedFd::from_raw_fd(copy) })
}

/// Queues an idle process for the exec.
pub(crate) fn give(process: HandedProcess) {
    registry().outgoing.push(process);
}

/// Queues the proxy's socket for the exec.
pub(crate) fn give_socket(socket: HandedSocket) {
    registry().outgoing_sockets.push(socket);
}

/// The previous process's proxy socket at `path`'s place, if one came:
/// the first one asked for takes it.
pub(crate) fn take_socket() -> Option<HandedSocket> {
    registry().inherited_sockets.pop()
}

/// The inherited process of `key` if it holds `session_id` and was started
/// as `started_as`; one of `key` that differs is closed (the next process
/// would start it otherwise).
pub(crate) fn claim(key: &str, session_id: &str, started_as: &str) -> Option<HandedProcess> {
    let mut registry = registry();
    let at = registry.inherited.iter().position(|p| p.key == key)?;
    let process = registry.inherited.swap_remove(at);
    drop(registry);
    if process.session_id == session_id && process.started_as == started_as {
        return Some(process);
    }
    tracing::info!(
        pid = process.pid,
        key,
        same_session = process.session_id == session_id,
        "the handed-over agent was started otherwise than this session would be \
         (the config or the session changed); closing it"
    );
    release(vec![process]);
    None
}

/// Whether `pid` was handed over by the process this one re-executed
/// from (claimed, released or waiting): its ledger row is not a leftover.
pub(crate) fn came_across_the_exec(pid: u32) -> bool {
    registry().came_across.contains(&pid)
}

/// Closes every inherited process nobody claimed (the start's prewarm is
/// over): stdin closed, then SIGTERM, then SIGKILL, each after a grace,
/// reaped on a thread of its own. Answers how many.
pub fn release_unclaimed() -> usize {
    let rest = std::mem::take(&mut registry().inherited);
    let count = rest.len();
    if count > 0 {
        tracing::info!(count, "closing handed-over agents no conversation took");
    }
    release(rest);
    for socket in std::mem::take(&mut registry().inherited_sockets) {
        let _ = std::fs::remove_file(&socket.path);
        if let Some(dir) = socket.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
    count
}

fn release(processes: Vec<HandedProcess>) {
    if processes.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("handover-release".into())
        .spawn(move || {
            for process in processes {
                let pid = process.pid;
                drop(process.stdin);
                if !reaped_within(pid, RELEASE_GRACE) {
                    signal_group(pid, libc::SIGTERM);
                    if !reaped_within(pid, RELEASE_GRACE) {
                        tracing::warn!(pid, "handed-over agent ignored SIGTERM; SIGKILL");
                        signal_group(pid, libc::SIGKILL);
                        let mut status = 0;
                        // SAFETY: waitpid on our own child.
                        unsafe { libc::waitpid(pid as libc::pid_t, &raw mut status, 0) };
                    }
                }
                // What is left of its group, as for any agent that ended.
                signal_group(pid, libc::SIGKILL);
                tracing::info!(pid, "handed-over agent closed");
            }
        });
    if let Err(err) = spawned {
        tracing::warn!(cause = %err, "could not start closing the handed-over agents");
    }
}

fn reaped_within(pid: u32, grace: Duration) -> bool {
    let deadline = std::time::Instant::now() + grace;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child, without blocking.
        let got = unsafe { libc::waitpid(pid as libc::pid_t, &raw mut status, libc::WNOHANG) };
        if got != 0 {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal_group(pid: u32, signal: libc::c_int) {
    if let Ok(pgid) = libc::pid_t::try_from(pid)
        && pgid > 1
    {
        // SAFETY: killpg only sends a signal to the agent's own group.
        unsafe { libc::killpg(pgid, signal) };
    }
}

/// Before the exec: writes what was handed over to a memfd, clears
/// close-on-exec on it and on every handed descriptor, and names it in
/// `command`'s environment. Answers how many processes go along.
///
/// # Errors
///
/// The record could not be written; then nothing is handed (the
/// processes die with this one, as without a handover).
pub fn prepare_exec(command: &mut std::process::Command) -> std::io::Result<usize> {
    command.env_remove(HANDOVER_FD_ENV);
    let (processes, sockets) = {
        let mut registry = registry();
        (
            std::mem::take(&mut registry.outgoing),
            std::mem::take(&mut registry.outgoing_sockets),
        )
    };
    if processes.is_empty() {
        return Ok(0);
    }
    let record = Record {
        version: VERSION,
        processes: processes
            .iter()
            .map(|p| ProcessRecord {
                key: p.key.clone(),
                session_id: p.session_id.clone(),
                started_as: p.started_as.clone(),
                pid: p.pid,
                start_time: p.start_time,
                stdin: p.stdin.as_raw_fd(),
                stdout: p.stdout.as_raw_fd(),
                stderr: p.stderr.as_raw_fd(),
            })
            .collect(),
        proxies: sockets
            .iter()
            .map(|s| SocketRecord {
                path: s.path.clone(),
                fd: s.listener.as_raw_fd(),
            })
            .collect(),
    };
    let memfd = memfd()?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(&serde_json::to_vec(&record).map_err(std::io::Error::other)?)?;
    let count = processes.len();
    let fds = processes
        .into_iter()
        .flat_map(|p| [p.stdin, p.stdout, p.stderr])
        .chain(sockets.into_iter().map(|s| s.listener))
        .chain(std::iter::once(OwnedFd::from(file)));
    let mut record_fd = -1;
    for fd in fds {
        // From here on the descriptor lives until the exec (or this
        // process's end): its number is in the record.
        let raw = fd.into_raw_fd();
        inherit_on_exec(raw)?;
        record_fd = raw;
    }
    command.env(HANDOVER_FD_ENV, record_fd.to_string());
    Ok(count)
}

fn memfd() -> std::io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; memfd_create makes a new descriptor.
    let fd = unsafe { libc::memfd_create(c"turnstile-handover".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn inherit_on_exec(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: F_SETFD on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn close_on_exec(fd: RawFd) -> bool {
    // SAFETY: F_SETFD on a descriptor named by our own record.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0 }
}

/// At start, before any other descriptor is opened: takes the previous
/// process's record named by [`HANDOVER_FD_ENV`], if any. Every descriptor
/// it names is set close-on-exec at once; a process that is not this
/// process's child with the recorded start time is not adopted (its
/// descriptors are closed). Answers how many processes wait to be claimed.
pub fn inherit() -> usize {
    match std::env::var(HANDOVER_FD_ENV)
        .ok()
        .and_then(|fd| fd.parse::<RawFd>().ok())
    {
        Some(fd) => inherit_from(fd),
        None => 0,
    }
}

/// [`inherit`] from the record at `record_fd`.
fn inherit_from(record_fd: RawFd) -> usize {
    if record_fd <= 2 || !close_on_exec(record_fd) {
        tracing::warn!(
            fd = record_fd,
            "the handover record's descriptor is not open; nothing handed over"
        );
        return 0;
    }
    // SAFETY: the previous process left this descriptor open for us, and
    // nothing else in this process has taken it.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(record_fd) });
    let mut bytes = Vec::new();
    let read = file
        .rewind()
        .and_then(|()| (&mut file).take(MAX_RECORD_BYTES).read_to_end(&mut bytes));
    let record = match read
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice::<Record>(&bytes).map_err(|e| e.to_string()))
    {
        Ok(record) => record,
        Err(why) => {
            tracing::warn!(
                why,
                "the handover record cannot be read; nothing handed over"
            );
            return 0;
        }
    };
    let taken = take(record);
    let count = taken.0.len();
    let mut registry = registry();
    registry.came_across = taken.0.iter().map(|p| p.pid).collect();
    registry.inherited = taken.0;
    registry.inherited_sockets = taken.1;
    count
}

/// The record's descriptors, owned; the processes that are ours.
fn take(record: Record) -> (Vec<HandedProcess>, Vec<HandedSocket>) {
    let own = |fd: RawFd| {
        // SAFETY: named by the previous process's record; taken once.
        (fd > 2 && close_on_exec(fd)).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let same_format = record.version == VERSION;
    if !same_format {
        tracing::warn!(
            version = record.version,
            "the handover record is of another format; its agents are closed"
        );
    }
    let mut processes = Vec::new();
    let mut strays = Vec::new();
    for p in record.processes {
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (own(p.stdin), own(p.stdout), own(p.stderr))
        else {
            tracing::warn!(
                pid = p.pid,
                "a handed-over agent's pipes are not open; not adopted"
            );
            continue;
        };
        let process = HandedProcess {
            key: p.key,
            session_id: p.session_id,
            started_as: p.started_as,
            pid: p.pid,
            start_time: p.start_time,
            stdin,
            stdout,
            stderr,
        };
        if !is_own_child(process.pid, process.start_time) {
            tracing::warn!(
                pid = process.pid,
                "a handed-over agent is not this process's child any more; not adopted"
            );
            continue;
        }
        if same_format {
            tracing::info!(pid = process.pid, key = %process.key, "handed-over agent waits for its conversation");
            processes.push(process);
        } else {
            strays.push(process);
        }
    }
    release(strays);
    let sockets = record
        .proxies
        .into_iter()
        .filter_map(|s| {
            own(s.fd).map(|listener| HandedSocket {
                path: s.path,
                listener,
            })
        })
        .collect();
    (processes, sockets)
}

/// Whether `pid` is this process's child and started at `start_time`.
fn is_own_child(pid: u32, start_time: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state (3), ppid (4), …, starttime (22).
    let parent = fields.get(1).and_then(|p| p.parse::<u32>().ok());
    let started = fields.get(19).and_then(|s| s.parse::<i64>().ok());
    parent == Some(std::process::id()) && started == Some(start_time)
}

#[cfg(test)]
mod tests;

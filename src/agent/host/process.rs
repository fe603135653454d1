//! The CLI's process: spawned in its own process group, signalled as a
//! group, reaped once, and counted while it lives so the backend knows when
//! every process it started is gone.

mod handed;
mod probe;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::handover::{self, StartedAs};
use super::lines::LineReader;
use super::{ProcessSpec, seal};
use crate::agent::AgentError;
use crate::config::Sandbox;
use crate::state::AgentGroup;
pub(crate) use handed::{Adopted, started_as};
use handed::{Child, keep_pipes};
pub(super) use probe::probe_bubblewrap;

/// Whether `command` can be executed, found as `bwrap`'s exec finds it
/// (an absolute path as it is, a bare name on `path`), with the error the
/// exec would meet. The sandbox runs `bwrap`, which would start and then
/// fail with only a line on its stderr; looked up here first, a missing or
/// non-executable CLI is the same [`AgentError::Spawn`] as without it. A
/// relative path with a `/` is left to the exec.
fn executable(command: &str, path: Option<&std::ffi::OsStr>) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    if command.contains('/') && !command.starts_with('/') {
        return Ok(());
    }
    let found = seal::find_program(command, path)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
    let c_path = std::ffi::CString::new(found.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOENT))?;
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if found.is_dir() {
        return Err(std::io::Error::from_raw_os_error(libc::EACCES));
    }
    Ok(())
}

/// Stderr lines logged per session before the rest are only counted.
const STDERR_LINES_LOGGED: usize = 200;
/// Characters of one stderr line kept.
const STDERR_LINE_CHARS: usize = 500;
/// Bytes of one stderr line held while reading it: the rest of a longer
/// line (a 10 MB line without a newline) is read and dropped, never held.
const STDERR_LINE_BYTES: usize = 4 * STDERR_LINE_CHARS;
/// Stderr lines kept for the exit report.
const STDERR_TAIL_LINES: usize = 5;

/// How many processes are started and not yet reaped; a completion signal,
/// so nothing polls for zero.
#[derive(Debug, Clone)]
pub struct RunningProcesses {
    /// The count; every change wakes [`Self::all_reaped`].
    count: Arc<watch::Sender<i64>>,
    /// Where each live process group is recorded (the state file), so a
    /// next start can kill what a `kill -9` of turnstile left behind.
    ledger: Arc<std::sync::OnceLock<crate::state::StoreHandle>>,
}

impl Default for RunningProcesses {
    fn default() -> Self {
        Self::new()
    }
}

impl RunningProcesses {
    /// No process yet.
    pub fn new() -> Self {
        Self {
            count: Arc::new(watch::Sender::new(0)),
            ledger: Arc::default(),
        }
    }

    /// Records process groups in `inbox`'s store from now on.
    pub(crate) fn record_in(&self, inbox: crate::state::StoreHandle) {
        let _ = self.ledger.set(inbox);
    }

    /// A backend's [`AgentBackend::closed`](crate::agent::AgentBackend::closed):
    /// resolves once every process was reaped, or after twice `grace` (a
    /// graceful close, then a kill) and a second.
    pub fn closed(&self, grace: std::time::Duration) -> crate::agent::BoxFuture<()> {
        let running = self.clone();
        let wait = grace
            .saturating_mul(2)
            .saturating_add(std::time::Duration::from_secs(1));
        Box::pin(async move {
            let _ = tokio::time::timeout(wait, running.all_reaped()).await;
        })
    }

    fn recorded(&self, pid: u32, chat: &str) {
        if let (Some(ledger), Some(start)) = (self.ledger.get(), start_time(pid)) {
            let chat = chat
                .split('_')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let group = AgentGroup {
                pgid: i64::from(pid),
                start_time: start,
                boot_id: boot_id().unwrap_or_default(),
            };
            ledger.record_group(group, chat);
        }
    }

    fn forgotten(&self, pid: u32) {
        if let Some(ledger) = self.ledger.get() {
            ledger.forget_group(i64::from(pid));
        }
    }

    /// Processes started and not yet reaped.
    pub fn get(&self) -> i64 {
        *self.count.borrow()
    }

    fn started(&self) {
        self.count.send_modify(|n| *n += 1);
    }

    fn reaped(&self) {
        self.count.send_modify(|n| *n -= 1);
    }

    /// Resolves once no process is left.
    pub(crate) async fn all_reaped(&self) {
        let mut rx = self.count.subscribe();
        // Cannot fail: `self` holds the sender.
        let _ = rx.wait_for(|n| *n <= 0).await;
    }
}

/// One CLI process, the leader of its own process group.
///
/// Dropped before it was reaped (the runtime is going away mid-session), it
/// takes the whole group down with SIGKILL.
pub(crate) struct AgentProcess {
    /// The child: spawned here (tokio reaps it), or adopted across an exec.
    child: Child,
    /// The child's pid, which is also its process group id.
    pid: u32,
    /// Set once the process is reaped and its group killed (or it was
    /// handed over).
    reaped: bool,
    /// Counted down once reaped.
    running: RunningProcesses,
    /// The last stderr lines, for the exit report.
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The conversation it serves.
    key: String,
    /// What it was started with, resume aside; `None`: never handed over.
    started_as: Option<StartedAs>,
    /// Copies of its stdin, stdout and stderr, kept to hand over.
    kept: Option<[OwnedFd; 3]>,
}

/// A spawned process and the pipes the protocol runs over.
pub(crate) struct Spawned {
    /// The process.
    pub(crate) process: AgentProcess,
    /// Lines to the CLI.
    pub(crate) stdin: ChildStdin,
    /// Lines from the CLI.
    pub(crate) stdout: ChildStdout,
}

impl AgentProcess {
    /// Starts `spec.command` for `chat` with `argv` (its arguments), sealed
    /// as `spec.seal` says (see `seal`): in its own process group, killed
    /// if turnstile dies; its stderr is logged (bounded).
    pub(crate) fn spawn(
        settings: &ProcessSpec,
        chat: &str,
        argv: &[String],
        running: &RunningProcesses,
        started_as: Option<StartedAs>,
    ) -> Result<Spawned, AgentError> {
        settings.seal.start_network().map_err(AgentError::Network)?;
        let plan = settings.plan(chat, argv);
        if settings.seal.sandbox == Sandbox::Bubblewrap && settings.seal.launcher.is_empty() {
            let path = plan.env.get(std::ffi::OsStr::new("PATH"));
            executable(&settings.command, path.map(OsString::as_os_str)).map_err(|source| {
                AgentError::Spawn {
                    command: settings.command.clone(),
                    source,
                }
            })?;
        }
        for dir in &plan.create {
            create_private_dir(dir).map_err(|source| AgentError::Directory {
                dir: dir.clone(),
                source,
            })?;
        }
        let Some((program, args)) = plan.argv.split_first() else {
            return Err(AgentError::MissingPipes);
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(&plan.env)
            .current_dir(&plan.workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill
        // the child if turnstile dies, so no agent outlives it.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| AgentError::Spawn {
            command: program.clone(),
            source,
        })?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(AgentError::MissingPipes);
        };
        // Copies to hand over across `/restart`'s exec, kept only when this
        // process re-executes itself and the backend can adopt it.
        let kept = (started_as.is_some() && handover::enabled())
            .then(|| keep_pipes(&stdin, &stdout, &stderr))
            .flatten();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(log_stderr(stderr, pid, Arc::clone(&stderr_tail)));
        running.started();
        running.recorded(pid, chat);
        Ok(Spawned {
            process: Self {
                child: Child::Spawned(child),
                pid,
                reaped: false,
                running: running.clone(),
                stderr_tail,
                key: chat.to_owned(),
                started_as,
                kept,
            },
            stdin,
            stdout,
        })
    }

    /// The child's pid (0 when it had none).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the process to exit.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait(self.pid).await
    }

    /// SIGTERM to the group, SIGKILL after `grace`; the exit status when
    /// there is one.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        kill_group(self.pid, libc::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait(self.pid)).await {
            Ok(status) => status.ok(),
            Err(_) => {
                tracing::warn!(pid = self.pid, "agent ignored SIGTERM; SIGKILL");
                kill_group(self.pid, libc::SIGKILL);
                self.child.wait(self.pid).await.ok()
            }
        }
    }

    /// The process has exited: kills what is left of its group and counts
    /// it as reaped.
    pub(crate) fn reaped(&mut self) {
        kill_group(self.pid, libc::SIGKILL);
        if !self.reaped {
            self.reaped = true;
            self.running.reaped();
            self.running.forgotten(self.pid);
        }
    }

    /// What to report for an exit: the status and the last stderr lines.
    pub(crate) fn exit_detail(&self, status: Option<ExitStatus>) -> String {
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        let base = match status {
            Some(s) => format!("the agent process exited ({s})"),
            None => "the agent process could not be waited for".into(),
        };
        if tail.is_empty() {
            base
        } else {
            format!("{base}: {tail}")
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if !self.reaped {
            // The runtime is going away mid-session (turnstile is exiting):
            // take the whole group down now; the child is reaped by tokio
            // (an adopted one, if it is gone already, here).
            kill_group(self.pid, libc::SIGKILL);
            if let Child::Adopted(_) = self.child {
                let mut status = 0;
                // SAFETY: waitpid on our own child, without blocking.
                unsafe { libc::waitpid(self.pid as libc::pid_t, &raw mut status, libc::WNOHANG) };
            }
            self.running.reaped();
            self.running.forgotten(self.pid);
        }
    }
}

/// A process's start time (clock ticks after boot, `/proc/<pid>/stat`
/// field 22): with the pid, it names one process even after pid reuse.
pub fn start_time(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // fields after its last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The kernel's id of this boot (`/proc/sys/kernel/random/boot_id`),
/// read once; `None` when it cannot be read.
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty())
        })
        .clone()
}

/// Kills the agent process groups a previous turnstile left alive (it was
/// killed with `kill -9`, so it could not): for each group recorded in
/// this boot (`boot_id`; pids and start times begin again at every boot,
/// so a group of an earlier boot, or of an unknown one, is never touched),
/// when its leader still runs with the recorded start time, or is gone
/// (then what is left of the group can only be its survivors: a pid is not
/// handed out while a group of that id exists), the whole group gets
/// SIGKILL; a leader pid now naming another process is left alone. Answers
/// how many groups were killed.
pub fn kill_leftover_groups(groups: &[AgentGroup], boot_id: Option<&str>) -> usize {
    let mut killed = 0;
    for group in groups {
        let (pgid, recorded) = (group.pgid, group.start_time);
        if group.boot_id.is_empty() || Some(group.boot_id.as_str()) != boot_id {
            tracing::info!(
                pgid,
                recorded_boot = %group.boot_id,
                "recorded agent group is of an earlier boot (or an unknown one); left alone"
            );
            continue;
        }
        let Ok(pid) = u32::try_from(pgid) else {
            continue;
        };
        if pid <= 1 {
            continue;
        }
        match start_time(pid) {
            Some(now) if now != recorded => {
                tracing::info!(
                    pgid,
                    "recorded agent group's leader pid is another process now; left alone"
                );
                continue;
            }
            _ => {}
        }
        if handover::came_across_the_exec(pid) {
            tracing::info!(
                pgid,
                "recorded agent group was handed over across /restart; left alone"
            );
            continue;
        }
        // SAFETY: signal 0 only asks whether the group exists.
        let alive = unsafe { libc::killpg(pgid as libc::pid_t, 0) } == 0;
        if alive {
            tracing::warn!(
                pgid,
                "killing an agent process group left by a previous run"
            );
            kill_group(pid, libc::SIGKILL);
            killed += 1;
        }
    }
    killed
}

/// Creates `dir` and its missing parents with mode 0700; an existing one is
/// left as it is.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Signals the agent's process group (the child leads it).
fn kill_group(pid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg only sends a signal; the group is the child's own.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Logs the CLI's stderr, bounded, keeping the last lines for exit reports.
async fn log_stderr(stderr: impl AsyncRead + Unpin, pid: u32, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = LineReader::new(BufReader::new(stderr), STDERR_LINE_BYTES, STDERR_LINE_BYTES);
    let mut seen = 0usize;
    while let Ok(Some(frame)) = reader.next().await {
        seen += 1;
        let line: String = frame.lossy().chars().take(STDERR_LINE_CHARS).collect();
        if seen <= STDERR_LINES_LOGGED {
            tracing::info!(pid, stderr = %line, "agent stderr");
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    if seen > STDERR_LINES_LOGGED {
        tracing::info!(
            pid,
            suppressed = seen - STDERR_LINES_LOGGED,
            "agent stderr lines not logged"
        );
    }
}

#[cfg(test)]
mod tests;

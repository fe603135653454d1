//! The handover side of a process (see [`handover`]): an adopted child,
//! waited for on a pidfd; taking one over; handing one on; and what a
//! process is started with, for the next process to compare.

use std::collections::VecDeque;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

use super::super::ProcessSpec;
use super::super::handover::{self, HandedProcess, StartedAs};
use super::{AgentProcess, RunningProcesses, log_stderr, start_time};

/// The child process behind an [`AgentProcess`].
pub(super) enum Child {
    /// Spawned by this process.
    Spawned(tokio::process::Child),
    /// Spawned by the process this one re-executed from: waited for on a
    /// pidfd.
    Adopted(Adoptee),
    /// Handed over to the next process: never waited for here.
    Released,
}

/// An adopted child: its pidfd, and its status once reaped.
pub(super) struct Adoptee {
    pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
}

impl Child {
    pub(super) async fn wait(&mut self, pid: u32) -> std::io::Result<ExitStatus> {
        match self {
            Self::Spawned(child) => child.wait().await,
            Self::Adopted(adoptee) => adoptee.wait(pid).await,
            Self::Released => std::future::pending().await,
        }
    }
}

impl Adoptee {
    fn new(pid: u32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open makes a new descriptor for our own child.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor this process owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: the `OwnedFd` stays open, and the same, as long as the
        // `AsyncFd` owns it.
        let pidfd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|err| err.into_parts().1)?;
        Ok(Self {
            pidfd,
            status: None,
        })
    }

    async fn wait(&mut self, pid: u32) -> std::io::Result<ExitStatus> {
        use std::os::unix::process::ExitStatusExt as _;
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let mut ready = self.pidfd.readable().await?;
            let mut raw = 0;
            // SAFETY: waitpid on our own child, without blocking.
            let got = unsafe { libc::waitpid(pid as libc::pid_t, &raw mut raw, libc::WNOHANG) };
            if got < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if got > 0 {
                self.status = Some(ExitStatus::from_raw(raw));
            } else {
                ready.clear_ready();
            }
        }
    }
}

/// An adopted process and its pipes.
pub(crate) struct Adopted {
    /// The process.
    pub(crate) process: AgentProcess,
    /// Lines to the CLI.
    pub(crate) stdin: tokio::net::unix::pipe::Sender,
    /// Lines from the CLI.
    pub(crate) stdout: tokio::net::unix::pipe::Receiver,
}

impl AgentProcess {
    /// Takes over a process the previous process handed over (see
    /// [`handover`]): waited for on a pidfd, its stderr logged, counted as
    /// running (its ledger row is the previous process's).
    pub(crate) fn adopt(
        handed: HandedProcess,
        running: &RunningProcesses,
    ) -> std::io::Result<Adopted> {
        let HandedProcess {
            key,
            started_as,
            pid,
            stdin,
            stdout,
            stderr,
            ..
        } = handed;
        let child = Adoptee::new(pid)?;
        let kept = keep_pipes(&stdin, &stdout, &stderr);
        let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout)?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr)?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        tokio::spawn(log_stderr(stderr, pid, Arc::clone(&stderr_tail)));
        running.started();
        Ok(Adopted {
            process: Self {
                child: Child::Adopted(child),
                pid,
                reaped: false,
                running: running.clone(),
                stderr_tail,
                key,
                started_as: Some(started_as),
                kept,
            },
            stdin,
            stdout,
        })
    }

    /// Hands the process over to the next process (it holds `session_id`
    /// and is idle): its pipes' copies go to the exec's record, it is no
    /// longer waited for or killed here, and it no longer counts as
    /// running; its ledger row stays for the next process. `false` when
    /// it cannot be (no copies kept, or it is gone).
    pub(crate) fn hand_over(&mut self, session_id: &str) -> bool {
        let (Some(started_as), Some(start_time)) = (self.started_as.clone(), start_time(self.pid))
        else {
            return false;
        };
        let Some([stdin, stdout, stderr]) = self.kept.take() else {
            return false;
        };
        handover::give(HandedProcess {
            key: self.key.clone(),
            session_id: session_id.to_owned(),
            started_as,
            pid: self.pid,
            start_time,
            stdin,
            stdout,
            stderr,
        });
        if let Child::Spawned(child) = std::mem::replace(&mut self.child, Child::Released) {
            // Dropped, it would be killed (`kill_on_drop`); it must outlive
            // this process's exec, where it stays this pid's child.
            std::mem::forget(child);
        }
        self.reaped = true;
        self.running.reaped();
        true
    }
}

/// Copies of a process's stdin, stdout and stderr, to hand over.
pub(super) fn keep_pipes(
    stdin: &impl std::os::fd::AsRawFd,
    stdout: &impl std::os::fd::AsRawFd,
    stderr: &impl std::os::fd::AsRawFd,
) -> Option<[OwnedFd; 3]> {
    Some([
        handover::keep(stdin)?,
        handover::keep(stdout)?,
        handover::keep(stderr)?,
    ])
}

/// What a process of `spec` for `chat` started with `argv` is started
/// with (its whole argv, environment and working directory) and told
/// first (`first`): a handed-over process is adopted only when the
/// session would start it the same way.
pub(crate) fn started_as(
    spec: &ProcessSpec,
    chat: &str,
    argv: &[String],
    first: &serde_json::Value,
) -> StartedAs {
    let plan = spec.plan(chat, argv);
    let env: Vec<(String, String)> = plan
        .env
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    serde_json::json!({
        "argv": plan.argv,
        "env": env,
        "workdir": plan.workdir,
        "first": first,
    })
    .to_string()
}

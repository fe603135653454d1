//! The one session task every process backend runs: it owns the process,
//! writes the protocol's lines to its stdin, reads its stdout with the one
//! [`LineReader`], and selects over the host's commands, the lines, the
//! protocol's own wake-ups and the process's exit (draining what was
//! written before the exit). A close is the protocol's steps as data, each
//! waiting out its share of the grace, then SIGTERM and SIGKILL to the
//! process group. What differs between backends is a [`Protocol`].

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::ProcessSpec;
use super::handover::StartedAs;
use super::lines::{Frame, KEPT_BYTES, LineReader, MAX_LINE_BYTES};
use super::process::{Adopted, AgentProcess, RunningProcesses};
use crate::agent::{AgentError, AgentEvent, AgentSession, SessionCommand};

/// What a session's protocol is handed: the lines to the agent's stdin
/// (dropping every clone closes it), the events to the host, the pid.
#[derive(Debug)]
pub struct SessionIo {
    /// Lines to the agent, one JSON value a line.
    pub out: mpsc::UnboundedSender<Value>,
    /// Everything the session reports.
    pub events: mpsc::UnboundedSender<AgentEvent>,
    /// For logs.
    pub pid: u32,
}

/// One agent protocol: what a backend adds to the session task.
pub trait Protocol: Send + 'static {
    /// One line from the agent, parsed.
    type Line: Send + 'static;
    /// What the protocol waits for besides lines and commands (answers
    /// from the chat, its own timers).
    type Wake: Send;
    /// One step of a graceful close.
    type CloseStep: Copy + Send + Sync + 'static;

    /// The steps of a graceful close, in order.
    const CLOSE_STEPS: &'static [Self::CloseStep];
    /// Why a process that outlived every close step is killed.
    const NOT_CLOSED: &'static str;

    /// Reads one line (never blank) as the reader task reads it.
    fn parse(frame: Frame) -> Self::Line;

    /// Handles one line. `Err` kills the session, with why.
    ///
    /// # Errors
    ///
    /// The session cannot go on (it could not be opened).
    fn on_line(&mut self, line: Self::Line) -> Result<(), String>;

    /// Handles one of the host's commands other than `Close` and `Kill`.
    fn on_command(&mut self, command: SessionCommand);

    /// Resolves with the protocol's next wake-up; never, by default.
    fn wake(&mut self) -> impl Future<Output = Self::Wake> + Send + '_ {
        std::future::pending()
    }

    /// Handles a wake-up.
    fn on_wake(&mut self, _wake: Self::Wake) {}

    /// Takes one close step; returns how much of `grace` to wait after it.
    fn close_step(&mut self, step: Self::CloseStep, grace: Duration) -> Duration;

    /// The process is ending (killed, or exited): answer what is pending
    /// and close stdin. May be called more than once.
    fn on_exit(&mut self);

    /// The session the process holds, when it is idle (nothing asked or
    /// pending either way) and may be handed to the next process across
    /// `/restart`'s exec; `None` (the default) closes it instead.
    fn hand_over(&self) -> Option<String> {
        None
    }
}

/// Spawns `spec.command` with `argv` for the conversation `key` and starts
/// its session task, with the protocol `make` builds from the [`SessionIo`];
/// the session's label is `<name> pid <pid>`.
///
/// # Errors
///
/// The process could not be started.
pub fn launch<P: Protocol>(
    name: &str,
    spec: &ProcessSpec,
    key: &str,
    argv: &[String],
    running: &RunningProcesses,
    make: impl FnOnce(SessionIo) -> P,
) -> Result<AgentSession, AgentError> {
    launch_handable(name, spec, key, (argv, None), running, make)
}

/// [`launch`], for a process that may be handed over across `/restart`'s
/// exec: `argv` with what it was started with, resume aside.
pub(crate) fn launch_handable<P: Protocol>(
    name: &str,
    spec: &ProcessSpec,
    key: &str,
    (argv, started_as): (&[String], Option<StartedAs>),
    running: &RunningProcesses,
    make: impl FnOnce(SessionIo) -> P,
) -> Result<AgentSession, AgentError> {
    let spawned = AgentProcess::spawn(spec, key, argv, running, started_as)?;
    let label = format!("{name} pid {}", spawned.process.pid());
    Ok(start(
        spawned.process,
        spawned.stdin,
        spawned.stdout,
        spec.kill_grace,
        label,
        make,
    ))
}

/// Starts the session task of a process handed over by the process this
/// one re-executed from ([`AgentProcess::adopt`]): the protocol `make`
/// builds goes on from where the previous one left it (idle); the label
/// is `<name> pid <pid>`.
pub(crate) fn start_adopted<P: Protocol>(
    name: &str,
    adopted: Adopted,
    kill_grace: Duration,
    make: impl FnOnce(SessionIo) -> P,
) -> AgentSession {
    let label = format!("{name} pid {}", adopted.process.pid());
    start(
        adopted.process,
        adopted.stdin,
        adopted.stdout,
        kill_grace,
        label,
        make,
    )
}

/// Starts the session task of a process.
pub(crate) fn start<P: Protocol>(
    process: AgentProcess,
    stdin: impl AsyncWrite + Unpin + Send + 'static,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    kill_grace: Duration,
    label: String,
    make: impl FnOnce(SessionIo) -> P,
) -> AgentSession {
    let pid = process.pid();
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Value>();
    let (line_tx, line_rx) = mpsc::unbounded_channel();
    tokio::spawn(write_lines(stdin, out_rx, pid));
    tokio::spawn(read_lines::<P>(stdout, line_tx, pid));
    let protocol = make(SessionIo {
        out: out_tx,
        events: ev_tx.clone(),
        pid,
    });
    let session = Session {
        protocol,
        process,
        pid,
        kill_grace,
        events: ev_tx,
    };
    tokio::spawn(session.run(cmd_rx, line_rx));
    AgentSession {
        commands: cmd_tx,
        events: ev_rx,
        label,
    }
}

/// Writes lines to the agent's stdin; closing the channel closes stdin.
async fn write_lines(
    mut stdin: impl AsyncWrite + Unpin,
    mut rx: mpsc::UnboundedReceiver<Value>,
    pid: u32,
) {
    while let Some(line) = rx.recv().await {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(err) = stdin.write_all(&bytes).await {
            tracing::debug!(pid, cause = %err, "agent stdin closed");
            return;
        }
        let _ = stdin.flush().await;
    }
}

/// Reads stdout line by line ([`LineReader`]), blank lines skipped, each
/// parsed by the protocol.
async fn read_lines<P: Protocol>(
    stdout: impl AsyncRead + Unpin,
    tx: mpsc::UnboundedSender<P::Line>,
    pid: u32,
) {
    let stdout = BufReader::with_capacity(64 << 10, stdout);
    let mut reader = LineReader::new(stdout, MAX_LINE_BYTES, KEPT_BYTES);
    loop {
        let frame = match reader.next().await {
            Ok(None) => return,
            Ok(Some(frame)) if frame.is_blank() => continue,
            Ok(Some(frame)) => frame,
            Err(err) => {
                tracing::warn!(pid, cause = %err, "agent stdout broke");
                return;
            }
        };
        if tx.send(P::parse(frame)).is_err() {
            return;
        }
    }
}

/// One session: the process and its protocol.
struct Session<P> {
    /// The protocol.
    protocol: P,
    /// The process.
    process: AgentProcess,
    /// For logs.
    pid: u32,
    /// Between SIGTERM and SIGKILL, and shared by the close steps.
    kill_grace: Duration,
    /// Where `Exited` goes.
    events: mpsc::UnboundedSender<AgentEvent>,
}

impl<P: Protocol> Session<P> {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<SessionCommand>,
        mut lines: mpsc::UnboundedReceiver<P::Line>,
    ) {
        let mut stdout_open = true;
        loop {
            tokio::select! {
                // The host's commands first: a `/stop` that also answered
                // a waiting request cancels it rather than rejecting it.
                biased;
                command = commands.recv() => match command {
                    // The host dropped the session: close it gracefully.
                    Some(SessionCommand::Close) | None => return self.close(lines).await,
                    Some(SessionCommand::Kill) => return self.kill("killed").await,
                    Some(SessionCommand::HandOver) => match self.protocol.hand_over() {
                        Some(session) if self.process.hand_over(&session) => {
                            tracing::info!(pid = self.pid, session_id = %session, "idle agent handed over to the next process");
                            return;
                        }
                        _ => return self.close(lines).await,
                    },
                    Some(command) => self.protocol.on_command(command),
                },
                line = lines.recv(), if stdout_open => match line {
                    Some(line) => {
                        if let Err(why) = self.protocol.on_line(line) {
                            tracing::warn!(pid = self.pid, cause = %why, "the agent's session cannot go on; killing it");
                            return self.kill(&why).await;
                        }
                    }
                    None => stdout_open = false,
                },
                wake = self.protocol.wake() => self.protocol.on_wake(wake),
                status = self.process.wait() => {
                    // What the process wrote before it exited still counts.
                    while let Ok(line) = lines.try_recv() {
                        let _ = self.protocol.on_line(line);
                    }
                    let status = status.ok();
                    let detail = self.process.exit_detail(status);
                    return self.finish(status.and_then(|s| s.code()), detail);
                }
            }
        }
    }

    fn finish(mut self, code: Option<i32>, detail: String) {
        self.process.reaped();
        self.protocol.on_exit();
        tracing::info!(pid = self.pid, ?code, "agent process ended");
        let _ = self.events.send(AgentEvent::Exited { code, detail });
    }

    /// Closes step by step ([`Protocol::CLOSE_STEPS`]), each waiting out its
    /// share of the grace; then kills.
    async fn close(mut self, mut lines: mpsc::UnboundedReceiver<P::Line>) {
        let grace = self.kill_grace;
        for step in P::CLOSE_STEPS {
            let wait = self.protocol.close_step(*step, grace);
            let waited = tokio::time::timeout(wait, async {
                loop {
                    tokio::select! {
                        line = lines.recv() => match line {
                            Some(line) => { let _ = self.protocol.on_line(line); }
                            None => return self.process.wait().await,
                        },
                        status = self.process.wait() => return status,
                    }
                }
            })
            .await;
            if let Ok(status) = waited {
                let status = status.ok();
                let detail = self.process.exit_detail(status);
                return self.finish(status.and_then(|s| s.code()), detail);
            }
        }
        tracing::warn!(
            pid = self.pid,
            ?grace,
            why = P::NOT_CLOSED,
            "agent did not close; killing"
        );
        self.kill(P::NOT_CLOSED).await;
    }

    /// SIGTERM to the group, SIGKILL after the grace.
    async fn kill(mut self, why: &str) {
        self.protocol.on_exit();
        let status = self.process.terminate(self.kill_grace).await;
        self.finish(
            status.and_then(|s| s.code()),
            format!("the agent was force-closed ({why})"),
        );
    }
}

//! A third protocol fits as one protocol plus its settings: a tiny line
//! protocol (`{"say": …}` out, the same back), spoken by `cat`, run by the
//! host's one session task ([`launch`]) with no backend code of its own:
//! its lines read with the host's line reader, its commands handled, its
//! close steps taken as data and its exit reported.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use turnstile::agent::host::lines::Frame;
use turnstile::agent::host::session::{Protocol, SessionIo, launch};
use turnstile::agent::host::{ProcessSpec, RunningProcesses};
use turnstile::agent::{AgentEvent, AgentSession, SessionCommand};
use turnstile::config::{Config, Sandbox};

/// How long an event may take.
const SOON: Duration = Duration::from_secs(10);

/// The protocol: one JSON object a line; the agent says back what it was
/// told.
struct Echo {
    /// The lines to the agent; `None` once stdin is closed.
    out: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    /// What the session reports.
    events: tokio::sync::mpsc::UnboundedSender<AgentEvent>,
    /// The close steps taken, shared with the test.
    closed: Arc<std::sync::Mutex<Vec<Step>>>,
}

/// Echo's close steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Say goodbye (the agent echoes it).
    Bye,
    /// Close stdin, which ends `cat`.
    CloseStdin,
}

/// One line from the agent.
enum Said {
    /// A line with its `say`.
    Say(String),
    /// Anything else.
    Other,
}

impl Echo {
    fn write(&self, line: Value) {
        if let Some(out) = &self.out {
            let _ = out.send(line);
        }
    }
}

impl Protocol for Echo {
    type Line = Said;
    type Wake = std::convert::Infallible;
    type CloseStep = Step;

    const CLOSE_STEPS: &'static [Step] = &[Step::Bye, Step::CloseStdin];
    const NOT_CLOSED: &'static str = "did not exit after its stdin closed";

    fn parse(frame: Frame) -> Said {
        let Frame::Line(line) = frame else {
            return Said::Other;
        };
        match serde_json::from_slice::<Value>(&line) {
            Ok(value) => value["say"]
                .as_str()
                .map_or(Said::Other, |s| Said::Say(s.to_owned())),
            Err(_) => Said::Other,
        }
    }

    fn on_line(&mut self, line: Said) -> Result<(), String> {
        match line {
            Said::Say(text) => {
                let _ = self.events.send(AgentEvent::Text(text));
            }
            Said::Other => {
                let _ = self.events.send(AgentEvent::Unknown(String::new()));
            }
        }
        Ok(())
    }

    fn on_command(&mut self, command: SessionCommand) {
        if let SessionCommand::UserTurn(text) = command {
            self.write(json!({ "say": text }));
        }
    }

    fn close_step(&mut self, step: Step, grace: Duration) -> Duration {
        if let Ok(mut closed) = self.closed.lock() {
            closed.push(step);
        }
        match step {
            Step::Bye => self.write(json!({"say": "bye"})),
            Step::CloseStdin => self.out = None,
        }
        grace / 2
    }

    fn on_exit(&mut self) {
        self.out = None;
    }
}

/// `command` with `args`, unsandboxed, working in `dir`.
fn spec(dir: &Path, command: &str, args: &[&str]) -> ProcessSpec {
    let mut spec = ProcessSpec::from_config(&Config::default());
    spec.command = command.to_owned();
    spec.args = args.iter().map(|a| (*a).to_owned()).collect();
    spec.seal.sandbox = Sandbox::None;
    spec.seal.workdir = dir.join("work-{chat}");
    spec.seal.home = dir.join("home-{chat}");
    spec.seal.places = vec![dir.to_owned()];
    spec.seal.network = None;
    spec.kill_grace = Duration::from_secs(2);
    spec
}

async fn next(session: &mut AgentSession) -> AgentEvent {
    match tokio::time::timeout(SOON, session.events.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the session's events ended"),
        Err(_) => panic!("no event within {SOON:?}"),
    }
}

fn open(
    spec: &ProcessSpec,
    running: &RunningProcesses,
) -> (AgentSession, Arc<std::sync::Mutex<Vec<Step>>>) {
    let closed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let steps = Arc::clone(&closed);
    let session = launch("echo", spec, "1", &spec.args, running, |link: SessionIo| {
        Echo {
            out: Some(link.out),
            events: link.events,
            closed: steps,
        }
    })
    .expect("the agent starts");
    (session, closed)
}

#[tokio::test]
async fn a_line_protocol_runs_on_the_hosts_session_task_and_closes_by_its_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = RunningProcesses::new();
    let (mut session, closed) = open(&spec(dir.path(), "cat", &[]), &running);
    assert!(session.label.starts_with("echo pid "), "{}", session.label);
    session
        .commands
        .send(SessionCommand::UserTurn("hello".into()))
        .expect("the session runs");
    assert!(matches!(next(&mut session).await, AgentEvent::Text(t) if t == "hello"));
    assert_eq!(running.get(), 1);
    session.commands.send(SessionCommand::Close).expect("runs");
    assert!(matches!(next(&mut session).await, AgentEvent::Text(t) if t == "bye"));
    match next(&mut session).await {
        AgentEvent::Exited { code, .. } => assert_eq!(code, Some(0)),
        other => panic!("not an exit: {other:?}"),
    }
    assert_eq!(*closed.lock().unwrap(), [Step::Bye, Step::CloseStdin]);
    running.closed(Duration::from_secs(2)).await;
    assert_eq!(running.get(), 0);
}

#[tokio::test]
async fn an_agent_that_outlives_every_close_step_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = RunningProcesses::new();
    // Reads nothing and never exits on its own.
    let (mut session, closed) = open(&spec(dir.path(), "sleep", &["600"]), &running);
    session.commands.send(SessionCommand::Close).expect("runs");
    match next(&mut session).await {
        AgentEvent::Exited { detail, .. } => assert!(
            detail.contains("force-closed (did not exit after its stdin closed)"),
            "{detail}"
        ),
        other => panic!("not an exit: {other:?}"),
    }
    assert_eq!(*closed.lock().unwrap(), [Step::Bye, Step::CloseStdin]);
}

//! `turnstile attach --json` as a child process: what it is given to
//! write, and the lines it prints, read as JSON and kept in order.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a line the test waits for may take (an upper bound only).
const PATIENCE: Duration = Duration::from_secs(20);

/// A running client.
pub struct Terminal {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    /// Every line it printed so far, in order.
    pub seen: Vec<Value>,
}

/// A line's `event`.
pub fn event(line: &Value) -> &str {
    line["event"].as_str().unwrap_or_default()
}

impl Terminal {
    /// `turnstile attach --json ARGS` for the bot whose state file is `db`.
    pub fn start(db: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("attach")
            .arg("--json")
            .args(args)
            .env_clear()
            .env("TURNSTILE_STATE_PATH", db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the client starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("the client's stdout");
        Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
        }
    }

    /// Follows `conversation`: started, and its history read up to the
    /// `following` line.
    pub async fn follow(db: &Path, conversation: &str) -> Self {
        let mut client = Self::start(db, &[conversation]);
        client.until("following", |v| event(v) == "following").await;
        client
    }

    /// Writes `line` (and its newline) as typed.
    pub async fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("the client reads its stdin");
    }

    /// The first line from `self.seen[from..]` on that matches `pred`,
    /// reading more as needed; its index in `seen`. Panics naming `what`
    /// when the client ends first or nothing comes within 20 s.
    pub async fn find(&mut self, from: usize, what: &str, pred: impl Fn(&Value) -> bool) -> usize {
        if let Some(at) = self.seen.iter().skip(from).position(&pred) {
            return from + at;
        }
        let read = async {
            loop {
                let line = self.lines.next_line().await.expect("the client's stdout");
                let Some(line) = line else {
                    panic!("the client ended before {what}: {:#?}", self.seen);
                };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                let found = pred(&value);
                self.seen.push(value);
                if found {
                    return self.seen.len() - 1;
                }
            }
        };
        match tokio::time::timeout(PATIENCE, read).await {
            Ok(at) => at,
            Err(_) => panic!("timed out waiting for {what}; seen: {:#?}", self.seen),
        }
    }

    /// Reads until a new line matches `pred`; that line.
    pub async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let at = self.find(self.seen.len(), what, pred).await;
        self.seen[at].clone()
    }

    /// Waits (bounded) for the client to exit; its status.
    pub async fn exit(mut self) -> ExitStatus {
        drop(self.stdin.take());
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("the client exits")
            .expect("waited")
    }
}

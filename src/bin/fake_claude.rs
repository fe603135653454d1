//! fake-claude: a stand-in for the Claude Code CLI that speaks its
//! stream-json protocol and plays a [`Scenario`] (the scripted backend's
//! format) from the file named by `FAKE_CLAUDE_SCENARIO`. Test-only.
//!
//! - `FAKE_CLAUDE_LOG`: a file to append what happened to (JSON lines:
//!   `{"pid"}` at start, every line from the host, every answer to the
//!   fake's own requests, `{"grandchild"}` pids).
//! - `FAKE_CLAUDE_GRANDCHILD=1`: start a `sleep` child in the same process
//!   group, to prove the whole group is killed.
//! - `FAKE_CLAUDE_FINISH_TURN_FIRST=1`: `end_session` during a turn lets the
//!   turn finish (its requests still come) before exiting.
//! - `FAKE_CLAUDE_REPORT_PERMISSIONS=1`: after the answer to the
//!   `can_use_tool` request of a `tools` step's call of a tool that is not a
//!   chat tool (`Bash`), the fake tells the chat what it got, through the
//!   `send` chat tool: `allowed: <updatedInput as JSON>`, `denied: <message>`
//!   or `refused: <control error>`.
//! - `FAKE_CLAUDE_START_MS`: start up this long before reading the host's
//!   first line (the real CLI takes about half a second).
//! - `FAKE_CLAUDE_DUMP`: a file (relative to the working directory) to
//!   append one JSON line to at start: `{"pid", "env", "args", "cwd",
//!   "probes"}`, where `probes` maps each path of `FAKE_CLAUDE_PROBE`
//!   (`:`-separated) to what reading it gave (`null`: nothing), and
//!   `connects` maps each target of `FAKE_CLAUDE_CONNECT` (`,`-separated:
//!   `tcp:HOST:PORT`, `unix:PATH`, `abstract:NAME`, or `proxy:HOST:PORT`,
//!   a `CONNECT` through `HTTPS_PROXY`) to `ok: <what it read>` or
//!   `error: <why>`; `fds` maps each open descriptor above 2 to what it
//!   is (`pipe:[…]`, a path).
//!
//! Its session id is a UUID made of its pid ([`session_id`]), or the one
//! given as `--resume=<id>` (or `--resume <id>`).
//!
//! The protocol: `initialize` is answered; each user line plays the first
//! scenario rule its text matches; tool calls go out as `mcp_message`
//! `tools/call`; a batch ends with a `hook_callback` when the hook was
//! registered; `interrupt` ends the turn with `aborted_streaming`;
//! `end_session` or the end of stdin exits 0 (unless wedged).

#[path = "fake_net/connect.rs"]
mod connect;
#[path = "fake_claude/turn.rs"]
mod turn;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use self::turn::{END_AFTER_TURN, FINISH_TURN_FIRST, REPORT_PERMISSIONS, WEDGED, play};
use turnstile::agent::Scenario;

/// Shared by the stdin reader and the player.
struct Fake {
    out: Mutex<std::io::Stdout>,
    log: Option<Mutex<std::fs::File>>,
    pending: Mutex<HashMap<String, Sender<Value>>>,
    interrupted: AtomicBool,
    hook: AtomicBool,
    next_id: AtomicU64,
    session_id: String,
}

impl Fake {
    /// A fake with the session id `session_id`, logging to
    /// `FAKE_CLAUDE_LOG` when set.
    fn new(session_id: String) -> Self {
        Self {
            out: Mutex::new(std::io::stdout()),
            log: std::env::var("FAKE_CLAUDE_LOG").ok().and_then(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .ok()
                    .map(Mutex::new)
            }),
            pending: Mutex::new(HashMap::new()),
            interrupted: AtomicBool::new(false),
            hook: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            session_id,
        }
    }

    fn write(&self, line: &Value) {
        self.write_raw(&line.to_string());
    }

    fn write_raw(&self, line: &str) {
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(format!("{line}\n").as_bytes());
            let _ = out.flush();
        }
    }

    fn log(&self, entry: Value) {
        if let Some(log) = &self.log
            && let Ok(mut file) = log.lock()
        {
            // One write per line, so lines of concurrent fakes never interleave.
            let _ = file.write_all(format!("{entry}\n").as_bytes());
        }
    }

    /// Sends a control request and waits for its answer (None: stdin gone).
    fn ask(&self, request: Value) -> Option<Value> {
        let id = format!("fake_{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let (tx, rx) = mpsc::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        self.write(&json!({"type": "control_request", "request_id": id, "request": request}));
        let answer = rx.recv().ok();
        self.log(json!({"asked": request, "answer": answer}));
        answer
    }
}

fn main() {
    let scenario = match std::env::var("FAKE_CLAUDE_SCENARIO") {
        Ok(path) => match Scenario::from_file(std::path::Path::new(&path)) {
            Ok(s) => s,
            Err(err) => {
                eprintln!("fake-claude: {err}");
                std::process::exit(3);
            }
        },
        Err(_) => Scenario::default(),
    };
    let args: Vec<String> = std::env::args().collect();
    let resume = resumed(&args);
    let pid = std::process::id();
    dump(&args);
    let fake = Arc::new(Fake::new(resume.clone().unwrap_or_else(|| session_id(pid))));
    fake.log(json!({"pid": pid, "args": args[1..]}));
    if std::env::var("FAKE_CLAUDE_GRANDCHILD").is_ok_and(|v| v == "1")
        && let Ok(child) = std::process::Command::new("sleep").arg("1000").spawn()
    {
        fake.log(json!({"grandchild": child.id()}));
    }
    FINISH_TURN_FIRST.store(
        std::env::var("FAKE_CLAUDE_FINISH_TURN_FIRST").is_ok_and(|v| v == "1"),
        Ordering::SeqCst,
    );
    REPORT_PERMISSIONS.store(
        std::env::var("FAKE_CLAUDE_REPORT_PERMISSIONS").is_ok_and(|v| v == "1"),
        Ordering::SeqCst,
    );
    eprintln!("fake-claude {pid} started");
    if let Some(ms) = std::env::var("FAKE_CLAUDE_START_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }

    let (turns_tx, turns_rx) = mpsc::channel::<String>();
    let player = {
        let fake = Arc::clone(&fake);
        std::thread::spawn(move || play(&fake, &scenario, turns_rx))
    };
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            fake.log(json!({"unparsed": line}));
            continue;
        };
        fake.log(json!({"from_host": value}));
        match value.get("type").and_then(Value::as_str) {
            Some("user") => {
                let text = value
                    .pointer("/message/content/0/text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let _ = turns_tx.send(text);
            }
            Some("control_request") => answer_control(&fake, &value, pid),
            Some("control_response") => deliver_answer(&fake, &value),
            _ => {}
        }
    }
    // stdin closed.
    fake.log(json!({"stdin": "closed"}));
    drop(turns_tx);
    if WEDGED.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    // Unblock anyone waiting for an answer: the host is gone.
    if let Ok(mut pending) = fake.pending.lock() {
        pending.clear();
    }
    let _ = player.join();
    std::process::exit(0);
}

/// Answers one of the host's control requests, as the CLI does.
fn answer_control(fake: &Fake, value: &Value, pid: u32) {
    let id = value
        .get("request_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let subtype = value
        .pointer("/request/subtype")
        .and_then(Value::as_str)
        .unwrap_or("");
    match subtype {
        "initialize" => {
            fake.hook.store(
                value.pointer("/request/hooks/PostToolBatch").is_some(),
                Ordering::SeqCst,
            );
            fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {"pid": pid}}}));
        }
        "interrupt" => {
            fake.interrupted.store(true, Ordering::SeqCst);
            fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {"still_queued": []}}}));
        }
        "end_session" => {
            fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {}}}));
            if FINISH_TURN_FIRST.load(Ordering::SeqCst) {
                // Like a CLI mid-turn: finish the turn, then exit.
                END_AFTER_TURN.store(true, Ordering::SeqCst);
            } else if !WEDGED.load(Ordering::SeqCst) {
                std::process::exit(0);
            }
        }
        other => {
            fake.write(&json!({"type": "control_response", "response": {"subtype": "error", "request_id": id, "error": format!("unknown {other}")}}));
        }
    }
}

/// Hands the host's answer to one of the fake's own requests to whoever
/// waits for it.
fn deliver_answer(fake: &Fake, value: &Value) {
    let id = value
        .pointer("/response/request_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let waiter = fake.pending.lock().ok().and_then(|mut p| p.remove(&id));
    match waiter {
        Some(tx) => {
            let _ = tx.send(value.get("response").cloned().unwrap_or(Value::Null));
        }
        None => fake.log(json!({"unexpected_answer": value})),
    }
}

/// The session id of a fresh fake: a UUID made of its pid.
fn session_id(pid: u32) -> String {
    format!("00000000-0000-4000-8000-{pid:012x}")
}

/// The session resumed: `--resume=<id>` or `--resume <id>`.
fn resumed(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if let Some(id) = arg.strip_prefix("--resume=") {
            Some(id.to_string())
        } else if arg == "--resume" {
            args.get(i + 1).cloned()
        } else {
            None
        }
    })
}

/// `FAKE_CLAUDE_DUMP`: what this process was started with and can see.
fn dump(args: &[String]) {
    let Ok(path) = std::env::var("FAKE_CLAUDE_DUMP") else {
        return;
    };
    let env: serde_json::Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy())))
        .collect();
    let probes: serde_json::Map<String, Value> = std::env::var("FAKE_CLAUDE_PROBE")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let seen = match std::fs::read(p) {
                Ok(bytes) => json!(String::from_utf8_lossy(&bytes)),
                Err(_) => match std::fs::read_dir(p) {
                    Ok(entries) => json!(
                        entries
                            .filter_map(|e| e
                                .ok()
                                .map(|e| e.file_name().to_string_lossy().into_owned()))
                            .collect::<Vec<_>>()
                    ),
                    Err(_) => Value::Null,
                },
            };
            (p.to_string(), seen)
        })
        .collect();
    let connects = connect::connects("FAKE_CLAUDE_CONNECT");
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    // Every open descriptor and what it is (`pipe:[…]`, a path), 0-2 aside.
    let fds: serde_json::Map<String, Value> = std::fs::read_dir("/proc/self/fd")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let fd = e.file_name().to_string_lossy().into_owned();
                    let target = std::fs::read_link(e.path()).ok()?;
                    (fd.parse::<u32>().ok()? > 2).then(|| (fd, json!(target.to_string_lossy())))
                })
                .collect()
        })
        .unwrap_or_default();
    let line = json!({"pid": std::process::id(), "env": env, "args": args[1..], "cwd": cwd, "probes": probes, "connects": connects, "fds": fds});
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

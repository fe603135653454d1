//! The real Claude Code CLI (installed by `scripts/install-claude.sh`)
//! spoken to directly over stream-json, as the Agent SDK does, against the
//! fake Anthropic Messages API in `tests/support/anthropic.rs`: one turn, and
//! a retried overloaded model call. This is the protocol the `claude`
//! backend relies on, checked without turnstile in between. Part of the
//! real-CLI group: built only with `--features real-cli`.
//!
//! The CLI must never reach the network, so the tests that run it are
//! `#[ignore]`d and run by [`real_cli_protocol_in_a_loopback_namespace`],
//! which re-runs this test binary inside `unshare -n` (loopback only) with
//! the CLI's path in `TURNSTILE_REAL_CLAUDE`. Needs root and npm, like CI.
//! Every line the CLI writes is kept in a transcript under `/tmp`.
#![cfg(feature = "real-cli")]

mod support;

use std::ffi::OsStr;
use std::io::Write as _;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::anthropic::{FakeAnthropic, Reply};
use support::real_cli::{claude_in_namespace, run_in_loopback_namespace};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout_at;

const INNER: &[&str] = &[
    "real_cli_completes_a_turn_against_the_fake",
    "real_cli_retries_an_overloaded_model_call",
    "real_cli_streams_partial_messages_before_the_whole_block",
];

#[test]
fn real_cli_protocol_in_a_loopback_namespace() {
    run_in_loopback_namespace(INNER);
}

const SYSTEM_PROMPT: &str = "You are a test agent in a Telegram chat. \
    Reply with the send tool and finish every turn with end_turn.";

/// What the host saw while answering the CLI's control requests.
#[derive(Default)]
struct Host {
    /// `params` of every MCP `tools/call`.
    tool_calls: Vec<Value>,
    /// `input` of every `hook_callback`.
    hooks: Vec<Value>,
    /// Subtypes of every control request, in order.
    subtypes: Vec<String>,
    /// Every control response to the host's own requests.
    responses: Vec<Value>,
}

impl Host {
    /// The reply to one control request from the CLI.
    fn answer(&mut self, envelope: &Value) -> Value {
        let id = &envelope["request_id"];
        let request = &envelope["request"];
        let subtype = request["subtype"].as_str().unwrap_or_default();
        self.subtypes.push(subtype.to_owned());
        let response = match subtype {
            "mcp_message" => Ok(json!({"mcp_response": self.mcp(&request["message"])})),
            "can_use_tool" => Ok(json!({
                "behavior": "allow",
                "updatedInput": request["input"],
                "toolUseID": request["tool_use_id"],
            })),
            "hook_callback" => {
                let input = &request["input"];
                self.hooks.push(input.clone());
                let calls = input["tool_calls"].as_array().cloned().unwrap_or_default();
                let ends = calls.iter().any(|c| {
                    let name = c["tool_name"].as_str().unwrap_or_default();
                    name == "mcp__telegram-tools__end_turn"
                });
                Ok(if ends {
                    json!({"continue": false, "stopReason": "done"})
                } else {
                    json!({})
                })
            }
            other => Err(format!("the test host does not handle {other}")),
        };
        match response {
            Ok(response) => json!({
                "type": "control_response",
                "response": {"subtype": "success", "request_id": id, "response": response},
            }),
            Err(error) => json!({
                "type": "control_response",
                "response": {"subtype": "error", "request_id": id, "error": error},
            }),
        }
    }

    /// The JSON-RPC reply of the in-process `telegram-tools` MCP server.
    fn mcp(&mut self, message: &Value) -> Value {
        let id = message.get("id").cloned().unwrap_or(json!(0));
        let params = &message["params"];
        let result = match message["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "telegram-tools", "version": "0.0.1"},
            }),
            "notifications/initialized" => json!({}),
            "tools/list" => json!({"tools": [
                {
                    "name": "send",
                    "description": "Send a message to the chat.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                        "required": ["text"],
                    },
                    "_meta": {"anthropic/alwaysLoad": true},
                },
                {
                    "name": "end_turn",
                    "description": "End the turn, optionally with a last message.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                    },
                    "_meta": {"anthropic/alwaysLoad": true},
                },
            ]}),
            "tools/call" => {
                self.tool_calls.push(params.clone());
                json!({"content": [{"type": "text", "text": "ok"}]})
            }
            other => {
                let error = json!({"code": -32601, "message": format!("no method {other}")});
                return json!({"jsonrpc": "2.0", "id": id, "error": error});
            }
        };
        json!({"jsonrpc": "2.0", "id": id, "result": result})
    }
}

/// The real CLI spawned against a fake, with the host side of the control
/// protocol; every line it writes is kept in a transcript under `/tmp`.
struct RealCli {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    host: Host,
    /// Every JSON line the CLI wrote, in order.
    seen: Vec<Value>,
    spawned: Instant,
    base: String,
    transcript: std::fs::File,
    host_log: std::fs::File,
    _home: TempDir,
}

impl RealCli {
    /// Spawns `claude` as the Agent SDK does, pointed at `fake`, and writes
    /// `initialize`; files are named after `test`.
    async fn spawn(claude: &OsStr, fake: &FakeAnthropic, test: &str) -> RealCli {
        Self::spawn_with(claude, fake, test, &[]).await
    }

    /// [`RealCli::spawn`] with `extra` arguments after the protocol's own.
    async fn spawn_with(
        claude: &OsStr,
        fake: &FakeAnthropic,
        test: &str,
        extra: &[&str],
    ) -> RealCli {
        let home = tempfile::tempdir().expect("a temp HOME");
        let config_dir = home.path().join(".claude");
        std::fs::create_dir_all(&config_dir).expect("CLAUDE_CONFIG_DIR");
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let base = format!("/tmp/turnstile-real-cli-{test}-{stamp}");
        let create = |suffix: &str| {
            let path = format!("{base}.{suffix}");
            std::fs::File::create(&path).unwrap_or_else(|e| panic!("create {path}: {e}"))
        };
        let (transcript, host_log, stderr) = (
            create("cli.jsonl"),
            create("host.jsonl"),
            create("stderr.txt"),
        );
        println!("{test}: CLI transcript (every line the CLI wrote): {base}.cli.jsonl");
        println!(
            "{test}: host lines {base}.host.jsonl, CLI stderr {base}.stderr.txt, API requests {base}.api.json"
        );

        let spawned = Instant::now();
        let mut child = Command::new(claude)
            .args([
                "--output-format",
                "stream-json",
                "--verbose",
                "--input-format",
                "stream-json",
                "--permission-prompt-tool=stdio",
            ])
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("ANTHROPIC_BASE_URL", fake.base_url())
            .env("ANTHROPIC_API_KEY", "test")
            .env("HOME", home.path())
            .env("CLAUDE_CONFIG_DIR", &config_dir)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_SDK_READS_SESSION_STATE", "1")
            .env("CLAUDE_CODE_ENTRYPOINT", "sdk-ts")
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the claude CLI");
        let stdin = child.stdin.take().expect("the CLI's stdin");
        let stdout = child.stdout.take().expect("the CLI's stdout");
        let mut cli = RealCli {
            child,
            stdin: Some(stdin),
            lines: BufReader::new(stdout).lines(),
            host: Host::default(),
            seen: Vec::new(),
            spawned,
            base,
            transcript,
            host_log,
            _home: home,
        };
        cli.write(&json!({
            "type": "control_request",
            "request_id": "req_init_1",
            "request": {
                "subtype": "initialize",
                "hooks": {"PostToolBatch": [{"hookCallbackIds": ["hook_0"], "timeout": 60}]},
                "sdkMcpServers": ["telegram-tools"],
                "systemPrompt": SYSTEM_PROMPT,
            },
        }))
        .await;
        cli
    }

    async fn write(&mut self, message: &Value) {
        let line = format!("{message}\n");
        let _ = self.host_log.write_all(line.as_bytes());
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the CLI");
        stdin.flush().await.expect("flush the CLI's stdin");
    }

    /// Writes a user turn.
    async fn say(&mut self, text: &str) {
        self.write(&json!({
            "type": "user",
            "session_id": "",
            "parent_tool_use_id": null,
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }))
        .await;
    }

    /// The next line, kept in the transcript; `None` at end of output.
    async fn next_line(
        &mut self,
        deadline: tokio::time::Instant,
        fake: &FakeAnthropic,
    ) -> Option<String> {
        let line = match timeout_at(deadline, self.lines.next_line()).await {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => panic!("reading the CLI's stdout: {error}"),
            Err(_) => panic!(
                "the CLI said nothing more before the deadline; transcript {}.cli.jsonl; {}",
                self.base,
                fake.describe()
            ),
        };
        if let Some(line) = &line {
            let _ = writeln!(self.transcript, "{line}");
        }
        line
    }

    /// Answers control requests until a `result`; returns it and when it came.
    async fn until_result(&mut self, fake: &FakeAnthropic, timeout: Duration) -> (Value, Instant) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(line) = self.next_line(deadline, fake).await else {
                panic!(
                    "the CLI closed stdout before a result; see {}.stderr.txt; {}",
                    self.base,
                    fake.describe()
                );
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                println!("non-JSON line from the CLI: {line}");
                continue;
            };
            self.seen.push(message.clone());
            match message["type"].as_str() {
                Some("control_request") => {
                    let reply = self.host.answer(&message);
                    self.write(&reply).await;
                }
                Some("control_response") => self.host.responses.push(message),
                Some("result") => return (message, Instant::now()),
                _ => {}
            }
        }
    }

    /// `type/subtype` of every line seen so far.
    fn kinds(&self) -> String {
        let kinds = self.seen.iter().map(|m| {
            let kind = m["type"].as_str().unwrap_or("?");
            let sub = m["subtype"]
                .as_str()
                .or(m["request"]["subtype"].as_str())
                .or(m["state"].as_str());
            match sub {
                Some(sub) => format!("{kind}/{sub}"),
                None => kind.to_owned(),
            }
        });
        kinds.collect::<Vec<_>>().join(", ")
    }

    /// Saves every API request of `fake` next to the transcript.
    fn save_requests(&self, fake: &FakeAnthropic) {
        let requests: Vec<Value> = fake
            .requests()
            .iter()
            .map(|r| {
                json!({
                    "path": r.path,
                    "query": r.query,
                    "model_call": r.model_call,
                    "ms_after_spawn": r.at.saturating_duration_since(self.spawned).as_millis() as u64,
                    "body": r.body,
                })
            })
            .collect();
        let path = format!("{}.api.json", self.base);
        let text = serde_json::to_string_pretty(&requests).unwrap_or_default();
        let _ = std::fs::write(path, text);
    }

    /// Closes stdin, keeps what the CLI still writes and returns how it exited
    /// and how long after the close.
    async fn close(mut self, fake: &FakeAnthropic) -> (ExitStatus, Duration) {
        drop(self.stdin.take());
        let closed = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.next_line(deadline, fake).await.is_some() {}
        let status = timeout_at(deadline, self.child.wait()).await;
        let status = status.expect("the CLI exits after stdin closes");
        let status = status.expect("the CLI's exit status");
        let _ = self.transcript.flush();
        (status, closed.elapsed())
    }
}

#[tokio::test]
#[ignore = "runs inside a network namespace through real_cli_protocol_in_a_loopback_namespace"]
async fn real_cli_completes_a_turn_against_the_fake() {
    let test = "real_cli_completes_a_turn_against_the_fake";
    let claude = claude_in_namespace();
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi"}),
    )]));
    let mut cli = RealCli::spawn(claude.as_ref(), &fake, "one-turn").await;
    cli.say("hello").await;
    let (result, result_at) = cli.until_result(&fake, Duration::from_secs(60)).await;
    cli.save_requests(&fake);

    let first_call = fake.first_model_call_at().expect("a model call");
    println!(
        "{test}: spawn -> first model call {:?}; spawn -> result {:?}; {} side call(s)",
        first_call - cli.spawned,
        result_at - cli.spawned,
        fake.side_calls()
    );
    println!("{test}: CLI lines: {}", cli.kinds());
    println!("{test}: result: {result}");

    assert_eq!(result["type"], "result");
    assert_eq!(result["terminal_reason"], "hook_stopped", "{result}");
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["stop_reason"], "tool_use", "{result}");
    assert_eq!(fake.model_calls(), 1, "{}", fake.describe());
    let calls = &cli.host.tool_calls;
    assert_eq!(calls.len(), 1, "tools/call params: {calls:?}");
    assert_eq!(calls[0]["name"], "end_turn");
    assert_eq!(calls[0]["arguments"], json!({"text": "hi"}));
    assert_eq!(calls[0]["_meta"]["claudecode/toolUseId"], "toolu_fake_1_0");
    let hooks = &cli.host.hooks;
    assert_eq!(hooks.len(), 1, "one PostToolBatch: {hooks:?}");
    assert_eq!(hooks[0]["hook_event_name"], "PostToolBatch");
    let init = cli.host.responses.first().expect("a reply to initialize");
    assert_eq!(init["response"]["subtype"], "success", "{init}");
    assert_eq!(init["response"]["request_id"], "req_init_1");

    let requests = fake.model_requests();
    let tools = requests[0]["tools"].as_array().expect("tools");
    let tools: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        tools.contains(&"mcp__telegram-tools__end_turn"),
        "{tools:?}"
    );
    assert!(tools.contains(&"mcp__telegram-tools__send"), "{tools:?}");

    let (status, took) = cli.close(&fake).await;
    println!("{test}: stdin closed -> exit {took:?} ({status})");
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
#[ignore = "runs inside a network namespace through real_cli_protocol_in_a_loopback_namespace"]
async fn real_cli_retries_an_overloaded_model_call() {
    let test = "real_cli_retries_an_overloaded_model_call";
    let claude = claude_in_namespace();
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Status(529, "overloaded_error".into()));
    fake.push(Reply::text_then_tools(
        "on it",
        &[
            ("mcp__telegram-tools__send", json!({"text": "hello there"})),
            ("mcp__telegram-tools__end_turn", json!({})),
        ],
    ));
    let mut cli = RealCli::spawn(claude.as_ref(), &fake, "overloaded").await;
    cli.say("hello").await;
    let (result, _) = cli.until_result(&fake, Duration::from_secs(60)).await;
    cli.save_requests(&fake);
    let times = fake.model_call_times();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    println!("{test}: CLI lines: {}", cli.kinds());
    println!("{test}: gaps between model calls: {gaps:?}; result: {result}");

    assert_eq!(result["terminal_reason"], "hook_stopped", "{result}");
    assert_eq!(fake.model_calls(), 2, "{}", fake.describe());
    let names: Vec<&Value> = cli.host.tool_calls.iter().map(|c| &c["name"]).collect();
    assert_eq!(names, ["send", "end_turn"]);
    let hooks = &cli.host.hooks;
    assert_eq!(
        hooks.len(),
        1,
        "one PostToolBatch for both tools: {hooks:?}"
    );
    let batch = hooks[0]["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(batch.len(), 2, "{batch:?}");

    let (status, _) = cli.close(&fake).await;
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
#[ignore = "runs inside a network namespace through real_cli_protocol_in_a_loopback_namespace"]
async fn real_cli_streams_partial_messages_before_the_whole_block() {
    let test = "real_cli_streams_partial_messages_before_the_whole_block";
    let claude = claude_in_namespace();
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::tool_text_in_chunks(
        "mcp__telegram-tools__end_turn",
        &["one ", "two ", "three"],
        Duration::from_millis(200),
    ));
    let mut cli = RealCli::spawn_with(
        claude.as_ref(),
        &fake,
        "partial",
        &["--include-partial-messages"],
    )
    .await;
    cli.say("hello").await;
    let (result, _) = cli.until_result(&fake, Duration::from_secs(60)).await;
    cli.save_requests(&fake);
    println!("{test}: CLI lines: {}", cli.kinds());
    for line in cli.seen.iter().filter(|l| l["type"] == "stream_event") {
        println!("{test}: {line}");
    }
    assert_eq!(result["terminal_reason"], "hook_stopped", "{result}");

    let events: Vec<&Value> = cli
        .seen
        .iter()
        .filter(|l| l["type"] == "stream_event")
        .map(|l| &l["event"])
        .collect();
    let types: Vec<&str> = events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|t| *t != "ping")
        .collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ],
        "the API's events, passed through one per line"
    );
    assert_eq!(events[0]["message"]["id"], "msg_fake_1");
    let start = events
        .iter()
        .find(|e| e["type"] == "content_block_start")
        .expect("a block start");
    assert_eq!(start["index"], 0);
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(
        start["content_block"]["name"],
        "mcp__telegram-tools__end_turn"
    );
    let pieces: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .map(|e| {
            assert_eq!(e["delta"]["type"], "input_json_delta", "{e}");
            e["delta"]["partial_json"].as_str().expect("a piece")
        })
        .collect();
    assert_eq!(pieces, [r#"{"text": "one "#, "two ", r#"three"}"#]);
    // The whole block comes after its last delta, before the tool runs.
    // (2.1.332 writes it even before the block's content_block_stop.)
    let at = |pred: &dyn Fn(&Value) -> bool| {
        cli.seen
            .iter()
            .rposition(pred)
            .unwrap_or_else(|| panic!("no such line: {}", cli.kinds()))
    };
    let last_delta = at(&|l| l["event"]["type"] == "content_block_delta");
    let assistant = at(&|l| l["type"] == "assistant");
    let call = at(&|l| l["request"]["message"]["method"] == "tools/call");
    assert!(
        last_delta < assistant && assistant < call,
        "{}",
        cli.kinds()
    );
    assert_eq!(
        cli.seen[assistant]["message"]["content"][0]["input"],
        json!({"text": "one two three"})
    );
    let (status, _) = cli.close(&fake).await;
    assert_eq!(status.code(), Some(0), "{status}");
}

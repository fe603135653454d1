//! Smoke tests of the fake Anthropic Messages API in
//! `tests/support/anthropic.rs`: raw HTTP/1.1 over a `TcpStream`, and (when
//! `TURNSTILE_REAL_CLAUDE` names a `claude` binary) one turn of the real
//! Claude Code CLI driven over stream-json against the fake.
//!
//! Run the real-CLI test only without network access, for example as root:
//! `unshare -n sh -c 'ip link set lo up && exec "$@"' x env
//! TURNSTILE_REAL_CLAUDE=/path/to/claude cargo test --offline --test
//! anthropic_smoke -- --nocapture`.

#[path = "support/anthropic.rs"]
mod anthropic;

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anthropic::{FakeAnthropic, NO_SCRIPTED_REPLY, Reply, SIDE_CALL_TEXT};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout_at;

const WAIT: Duration = Duration::from_secs(5);

/// One HTTP answer read off the wire.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }

    /// The Server-Sent Events of the body as `(event name, data)`.
    fn events(&self) -> Vec<(String, Value)> {
        assert!(
            self.body.ends_with("\n\n"),
            "SSE body ends with a blank line"
        );
        let events = self.body.trim_end().split("\n\n").map(|event| {
            let (name, data) = event.split_once('\n').expect("event and data lines");
            let name = name.strip_prefix("event: ").expect("an event line");
            let data = data.strip_prefix("data: ").expect("a data line");
            let data: Value = serde_json::from_str(data).expect("JSON data");
            assert_eq!(data["type"], name, "data.type matches the event name");
            (name.to_owned(), data)
        });
        events.collect()
    }

    fn event_names(&self) -> Vec<String> {
        self.events().into_iter().map(|(name, _)| name).collect()
    }
}

/// Writes one request on `stream` (kept alive) and reads the answer.
async fn exchange(
    stream: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> Answer {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut status_line = String::new();
    stream.read_line(&mut status_line).await.expect("status");
    let status = status_line.split(' ').nth(1).expect("status code");
    let status = status.parse().expect("numeric status");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header");
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let mut answer = Answer {
        status,
        headers,
        body: String::new(),
    };
    let length = answer.header("content-length").expect("a Content-Length");
    let mut body = vec![0; length.parse().expect("numeric length")];
    stream.read_exact(&mut body).await.expect("body");
    answer.body = String::from_utf8(body).expect("UTF-8 body");
    answer
}

async fn connect(fake: &FakeAnthropic) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(fake.addr()).await.expect("connect"))
}

/// POSTs `body` on a new connection.
async fn post(fake: &FakeAnthropic, path: &str, body: &Value) -> Answer {
    let mut stream = connect(fake).await;
    exchange(&mut stream, "POST", path, &body.to_string()).await
}

/// A streaming agent-loop request, as the CLI sends it.
fn model_request(stream: bool) -> Value {
    json!({
        "model": "claude-test-1",
        "max_tokens": 1024,
        "stream": stream,
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [{"role": "user", "content": "hello"}],
        "tools": [{"name": "mcp__telegram-tools__end_turn", "input_schema": {"type": "object"}}],
    })
}

/// A side call: no tools.
fn side_request() -> Value {
    json!({
        "model": "claude-small",
        "max_tokens": 32,
        "stream": true,
        "messages": [{"role": "user", "content": "title?"}],
    })
}

/// The `(text, [(tool name, input)])` a streamed answer adds up to.
fn assemble(events: &[(String, Value)]) -> (String, Vec<(String, String, Value)>) {
    let mut text = String::new();
    let mut tools: Vec<(String, String, String)> = Vec::new();
    for (name, data) in events {
        match name.as_str() {
            "content_block_start" if data["content_block"]["type"] == "tool_use" => {
                let block = &data["content_block"];
                assert_eq!(block["input"], json!({}));
                let id = block["id"].as_str().expect("an id").to_owned();
                let name = block["name"].as_str().expect("a name").to_owned();
                tools.push((id, name, String::new()));
            }
            "content_block_delta" => match data["delta"]["type"].as_str() {
                Some("text_delta") => text += data["delta"]["text"].as_str().expect("text"),
                Some("input_json_delta") => {
                    let piece = data["delta"]["partial_json"]
                        .as_str()
                        .expect("partial_json");
                    tools.last_mut().expect("an open tool block").2 += piece;
                }
                other => panic!("unexpected delta {other:?}"),
            },
            _ => {}
        }
    }
    let tools = tools.into_iter().map(|(id, name, json)| {
        let input = serde_json::from_str(&json).expect("the pieces concatenate to JSON");
        (id, name, input)
    });
    (text, tools.collect())
}

#[tokio::test]
async fn streams_a_scripted_tool_use_in_messages_api_order() {
    let fake = FakeAnthropic::start().await;
    assert!(fake.base_url().starts_with("http://127.0.0.1:"));
    let input = json!({"text": "hi ünïcode", "n": [1, 2]});
    fake.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        input.clone(),
    )]));

    let answer = post(&fake, "/v1/messages?beta=true", &model_request(true)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("text/event-stream"));
    let names = answer.event_names();
    let expected = [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ];
    assert_eq!(names, expected);

    let events = answer.events();
    let start = &events[0].1["message"];
    assert_eq!(start["id"], "msg_fake_1");
    assert_eq!(start["type"], "message");
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["model"], "claude-test-1");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(start["stop_sequence"], Value::Null);
    assert_eq!(start["usage"]["input_tokens"], 10);
    assert_eq!(start["usage"]["cache_creation_input_tokens"], 0);
    assert_eq!(start["usage"]["cache_read_input_tokens"], 0);
    for (_, data) in &events[2..6] {
        assert_eq!(data["index"], 0);
    }
    let pieces: Vec<&Value> = events[3..5].iter().map(|(_, d)| &d["delta"]).collect();
    assert!(pieces.iter().all(|p| p["partial_json"] != ""), "{pieces:?}");
    let delta = &events[6].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "tool_use", "stop_sequence": null})
    );
    assert!(delta["usage"]["output_tokens"].as_u64() > Some(0));

    let (text, tools) = assemble(&events);
    assert_eq!(text, "");
    let end_turn = "mcp__telegram-tools__end_turn".to_owned();
    assert_eq!(tools, [("toolu_fake_1_0".to_owned(), end_turn, input)]);
    assert_eq!(fake.model_calls(), 1);
    assert_eq!(fake.side_calls(), 0);
    assert_eq!(fake.pending_replies(), 0);
}

#[tokio::test]
async fn streams_text_then_tools_and_plain_text() {
    let fake = FakeAnthropic::start().await;
    let send = ("mcp__telegram-tools__send", json!({"text": "a"}));
    let end = ("mcp__telegram-tools__end_turn", json!({}));
    fake.push(Reply::text_then_tools(
        "thinking aloud",
        &[send.clone(), end],
    ));
    fake.push(Reply::Text("all done".into()));

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    let events = answer.events();
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "content_block_start")
        .map(|(_, data)| data)
        .collect();
    let indexes: Vec<&Value> = starts.iter().map(|d| &d["index"]).collect();
    assert_eq!(indexes, [0, 1, 2]);
    assert_eq!(
        starts[0]["content_block"],
        json!({"type": "text", "text": ""})
    );
    let (text, tools) = assemble(&events);
    assert_eq!(text, "thinking aloud");
    let names: Vec<(&str, &str)> = tools.iter().map(|(i, n, _)| (&i[..], &n[..])).collect();
    assert_eq!(
        names,
        [
            ("toolu_fake_1_1", "mcp__telegram-tools__send"),
            ("toolu_fake_1_2", "mcp__telegram-tools__end_turn"),
        ]
    );
    assert_eq!(tools[0].2, send.1);
    assert_eq!(tools[1].2, json!({}));
    let stop = &events[events.len() - 2].1["delta"]["stop_reason"];
    assert_eq!(stop, "tool_use");

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    let events = answer.events();
    assert_eq!(events[0].1["message"]["id"], "msg_fake_2");
    assert_eq!(assemble(&events), ("all done".to_owned(), Vec::new()));
    let stop = &events[events.len() - 2].1["delta"]["stop_reason"];
    assert_eq!(stop, "end_turn");
    assert_eq!(fake.model_calls(), 2);
}

#[tokio::test]
async fn an_empty_queue_answers_a_counted_placeholder_text() {
    let fake = FakeAnthropic::start().await;
    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    assert_eq!(answer.status, 200);
    let events = answer.events();
    assert_eq!(
        assemble(&events),
        (NO_SCRIPTED_REPLY.to_owned(), Vec::new())
    );
    let stop = &events[events.len() - 2].1["delta"]["stop_reason"];
    assert_eq!(stop, "end_turn");
    assert_eq!(fake.model_calls(), 1);
}

#[tokio::test]
async fn side_calls_are_answered_and_counted_apart() {
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Text("scripted".into()));
    let answer = post(&fake, "/v1/messages?beta=true", &side_request()).await;
    assert_eq!(assemble(&answer.events()).0, SIDE_CALL_TEXT);
    let mut empty_tools = side_request();
    empty_tools["tools"] = json!([]);
    let answer = post(&fake, "/v1/messages", &empty_tools).await;
    assert_eq!(assemble(&answer.events()).0, SIDE_CALL_TEXT);
    assert_eq!((fake.model_calls(), fake.side_calls()), (0, 2));
    assert_eq!(
        fake.pending_replies(),
        1,
        "side calls leave the script alone"
    );

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    assert_eq!(assemble(&answer.events()).0, "scripted");
    assert_eq!((fake.model_calls(), fake.side_calls()), (1, 2));
    let requests = fake.requests();
    let kinds: Vec<(&str, bool)> = requests
        .iter()
        .map(|r| (r.path.as_str(), r.model_call))
        .collect();
    assert_eq!(
        kinds,
        [
            ("/v1/messages", false),
            ("/v1/messages", false),
            ("/v1/messages", true)
        ]
    );
    assert_eq!(requests[0].query.as_deref(), Some("beta=true"));
    assert_eq!(requests[1].query, None);
    assert_eq!(requests[2].body, model_request(true));
    assert_eq!(fake.model_requests(), [model_request(true)]);
    assert_eq!(fake.first_model_call_at(), Some(requests[2].at));
    assert_eq!(fake.model_call_times(), [requests[2].at]);
}

#[tokio::test]
async fn non_streaming_requests_get_one_json_message() {
    let fake = FakeAnthropic::start().await;
    let input = json!({"text": "x"});
    fake.push(Reply::text_then_tools(
        "t",
        &[("mcp__telegram-tools__send", input.clone())],
    ));
    let mut request = model_request(false);
    request.as_object_mut().expect("an object").remove("stream");
    let answer = post(&fake, "/v1/messages", &request).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let message = answer.json();
    assert_eq!(message["id"], "msg_fake_1");
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-test-1");
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["stop_sequence"], Value::Null);
    assert_eq!(message["usage"]["input_tokens"], 10);
    let tool = json!({"type": "tool_use", "id": "toolu_fake_1_1", "name": "mcp__telegram-tools__send", "input": input});
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "t"}, tool])
    );

    let answer = post(&fake, "/v1/messages", &side_request_without_stream()).await;
    let message = answer.json();
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": SIDE_CALL_TEXT}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!((fake.model_calls(), fake.side_calls()), (1, 1));
}

fn side_request_without_stream() -> Value {
    let mut request = side_request();
    request["stream"] = json!(false);
    request
}

#[tokio::test]
async fn status_replies_answer_an_error_and_count_as_model_calls() {
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Status(529, "overloaded_error".into()));
    fake.push(Reply::Status(42, "api_error".into()));
    fake.push(Reply::Text("after the errors".into()));

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    assert_eq!(answer.status, 529);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let body = answer.json();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
    assert!(body["error"]["message"].is_string());

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    assert_eq!(answer.status, 500, "an invalid status becomes 500");
    assert_eq!(answer.json()["error"]["type"], "api_error");

    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(assemble(&answer.events()).0, "after the errors");
    assert_eq!(fake.model_calls(), 3);
}

#[tokio::test]
async fn count_tokens_unknown_routes_and_bad_bodies() {
    let fake = FakeAnthropic::start().await;
    let answer = post(
        &fake,
        "/v1/messages/count_tokens?beta=true",
        &model_request(false),
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json(), json!({"input_tokens": 10}));

    for (method, path) in [
        ("POST", "/v1/complete"),
        ("GET", "/v1/messages"),
        ("GET", "/"),
    ] {
        let mut stream = connect(&fake).await;
        let answer = exchange(&mut stream, method, path, "{}").await;
        assert_eq!(answer.status, 404, "{method} {path}");
        let body = answer.json();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "not_found_error");
    }

    for body in ["not json", "", "[1, 2]"] {
        let mut stream = connect(&fake).await;
        let answer = exchange(&mut stream, "POST", "/v1/messages", body).await;
        assert_eq!(answer.status, 400, "body {body:?}");
        assert_eq!(answer.json()["error"]["type"], "invalid_request_error");
    }

    let requests = fake.requests();
    assert_eq!(requests.len(), 7, "every request is recorded");
    assert!(requests.iter().all(|r| !r.model_call));
    assert_eq!(requests[4].body, Value::Null, "a body that is not JSON");
    assert_eq!((fake.model_calls(), fake.side_calls()), (0, 0));
}

#[tokio::test]
async fn one_connection_serves_several_requests() {
    let fake = FakeAnthropic::start().await;
    let mut stream = connect(&fake).await;
    let side = side_request().to_string();
    let model = model_request(true).to_string();
    let first = exchange(&mut stream, "POST", "/v1/messages", &side).await;
    let second = exchange(&mut stream, "POST", "/v1/messages/count_tokens", &side).await;
    let third = exchange(&mut stream, "POST", "/v1/messages?beta=true", &model).await;
    assert_eq!(assemble(&first.events()).0, SIDE_CALL_TEXT);
    assert_eq!(second.json()["input_tokens"], 10);
    assert_eq!(assemble(&third.events()).0, NO_SCRIPTED_REPLY);
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn delay_holds_model_calls_only() {
    let fake = FakeAnthropic::start().await;
    fake.set_delay(Duration::from_millis(300));

    let started = Instant::now();
    post(&fake, "/v1/messages", &side_request()).await;
    assert!(started.elapsed() < Duration::from_millis(300), "side call");

    let started = Instant::now();
    let answer = post(&fake, "/v1/messages", &model_request(true)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "model call took {took:?}"
    );
    assert_eq!(answer.status, 200);
    let arrived = fake.first_model_call_at().expect("a model call");
    assert!(
        arrived - started < Duration::from_millis(300),
        "recorded on arrival"
    );
}

#[tokio::test]
async fn wait_for_model_calls_wakes_on_arrival() {
    let fake = FakeAnthropic::start().await;
    fake.wait_for_model_calls(0, Duration::ZERO).await;
    let addr = fake.addr();
    let client = tokio::spawn(async move {
        for request in [side_request(), model_request(true), model_request(true)] {
            let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connect"));
            exchange(&mut stream, "POST", "/v1/messages", &request.to_string()).await;
        }
    });
    fake.wait_for_model_calls(2, WAIT).await;
    assert!(fake.model_calls() >= 2);
    client.await.expect("client");
    assert_eq!(fake.model_call_times().len(), 2);
    assert_eq!(fake.side_calls(), 1);
}

#[tokio::test]
#[should_panic(expected = "waiting for 2 model call(s); 1 model call(s), 1 side call(s)")]
async fn wait_for_model_calls_panics_with_what_was_recorded() {
    let fake = FakeAnthropic::start().await;
    post(&fake, "/v1/messages", &side_request()).await;
    post(&fake, "/v1/messages", &model_request(true)).await;
    fake.wait_for_model_calls(2, Duration::from_millis(100))
        .await;
}

#[tokio::test]
async fn dropping_the_fake_stops_it() {
    let fake = FakeAnthropic::start().await;
    let addr = fake.addr();
    let mut open = connect(&fake).await;
    exchange(
        &mut open,
        "POST",
        "/v1/messages",
        &side_request().to_string(),
    )
    .await;
    drop(fake);
    // The aborted server task closes the open connection and the listener.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, open.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    let connected = TcpStream::connect(addr).await;
    assert!(connected.is_err(), "the listener is closed");
}

// ---------------------------------------------------------------------------
// The real Claude Code CLI.

const SYSTEM_PROMPT: &str = "You are a test agent in a Telegram chat. \
    Reply with the send tool and finish every turn with end_turn.";

/// The `claude` binary named by `TURNSTILE_REAL_CLAUDE`, or `None` (after
/// saying so) when `test` is not to run.
fn real_claude(test: &str) -> Option<OsString> {
    let claude = std::env::var_os("TURNSTILE_REAL_CLAUDE").filter(|p| !p.is_empty());
    if claude.is_none() {
        println!(
            "{test}: not run (set TURNSTILE_REAL_CLAUDE to a claude binary, \
             and run it in a loopback-only network namespace)"
        );
    }
    claude
}

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
async fn real_cli_completes_a_turn_against_the_fake() {
    let test = "real_cli_completes_a_turn_against_the_fake";
    let Some(claude) = real_claude(test) else {
        return;
    };
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi"}),
    )]));
    let mut cli = RealCli::spawn(&claude, &fake, "one-turn").await;
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
async fn real_cli_retries_an_overloaded_model_call() {
    let test = "real_cli_retries_an_overloaded_model_call";
    let Some(claude) = real_claude(test) else {
        return;
    };
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Status(529, "overloaded_error".into()));
    fake.push(Reply::text_then_tools(
        "on it",
        &[
            ("mcp__telegram-tools__send", json!({"text": "hello there"})),
            ("mcp__telegram-tools__end_turn", json!({})),
        ],
    ));
    let mut cli = RealCli::spawn(&claude, &fake, "overloaded").await;
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

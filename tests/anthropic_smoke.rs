//! Smoke tests of the fake Anthropic Messages API in
//! `tests/support/anthropic.rs`: raw HTTP/1.1 over a `TcpStream`. The real
//! Claude Code CLI against the same fake is `tests/real_cli_protocol.rs`.

#[path = "support/anthropic.rs"]
mod anthropic;

use std::time::{Duration, Instant};

use anthropic::{FakeAnthropic, NO_SCRIPTED_REPLY, Reply, SIDE_CALL_TEXT};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);

/// One HTTP answer read off the wire.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    /// For a chunked body: each chunk and when it arrived.
    chunks: Vec<(Instant, String)>,
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
        chunks: Vec::new(),
    };
    if answer.header("transfer-encoding") == Some("chunked") {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).await.expect("chunk size");
            let size = usize::from_str_radix(size.trim_end(), 16).expect("hex chunk size");
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await.expect("chunk");
            if size == 0 {
                break;
            }
            chunk.truncate(size);
            let chunk = String::from_utf8(chunk).expect("UTF-8 chunk");
            answer.body.push_str(&chunk);
            answer.chunks.push((Instant::now(), chunk));
        }
        return answer;
    }
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

#[tokio::test]
async fn chunked_replies_stream_each_piece_after_its_pause() {
    let fake = FakeAnthropic::start().await;
    let pause = Duration::from_millis(150);
    fake.push(Reply::text_in_chunks(&["Hel", "lo wor", "ld"], pause));
    fake.push(Reply::tool_text_in_chunks(
        "mcp__telegram-tools__end_turn",
        &["Hi \"you\"", " 🦀\n", "bye"],
        pause,
    ));
    fake.push(Reply::text_in_chunks(&["a", "b"], Duration::ZERO));
    let mut stream = connect(&fake).await;
    let body = model_request(true).to_string();
    for (want_text, want_tool) in [
        ("Hello world", None),
        ("", Some(json!({"text": "Hi \"you\" 🦀\nbye"}))),
    ] {
        let answer = exchange(&mut stream, "POST", "/v1/messages", &body).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some("text/event-stream"));
        let events = answer.events();
        let deltas: Vec<&Value> = events
            .iter()
            .filter(|(name, _)| name == "content_block_delta")
            .map(|(_, data)| &data["delta"])
            .collect();
        assert_eq!(deltas.len(), 3, "one delta per piece: {deltas:?}");
        // Each delta arrives in its own chunk, a pause after the one before.
        let arrivals: Vec<Instant> = deltas
            .iter()
            .map(|delta| {
                let piece = delta.to_string();
                answer
                    .chunks
                    .iter()
                    .find(|(_, chunk)| chunk.contains(&piece))
                    .map(|(at, _)| *at)
                    .unwrap_or_else(|| panic!("no chunk holds {piece}: {:?}", answer.chunks))
            })
            .collect();
        for pair in arrivals.windows(2) {
            assert!(
                pair[1] - pair[0] >= pause - Duration::from_millis(20),
                "{:?}",
                pair[1] - pair[0]
            );
        }
        let (text, tools) = assemble(&events);
        assert_eq!(text, want_text);
        match want_tool {
            None => assert!(tools.is_empty()),
            Some(input) => {
                assert_eq!(tools.len(), 1);
                assert_eq!(tools[0].1, "mcp__telegram-tools__end_turn");
                assert_eq!(tools[0].2, input);
                let pieces: Vec<&str> = deltas
                    .iter()
                    .map(|d| d["partial_json"].as_str().expect("a piece"))
                    .collect();
                assert_eq!(
                    pieces,
                    [r#"{"text": "Hi \"you\""#, r#" 🦀\n"#, r#"bye"}"#],
                    "each piece carries one chunk of the text"
                );
            }
        }
    }
    // Without a pause the answer is one body with a length.
    let answer = exchange(&mut stream, "POST", "/v1/messages", &body).await;
    assert!(answer.chunks.is_empty());
    assert_eq!(assemble(&answer.events()).0, "ab");
}

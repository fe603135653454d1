//! The real Gemini CLI (`@google/gemini-cli`, installed by
//! `scripts/install-gemini.sh`) over ACP, driven by the `acp` backend
//! against a fake Gemini API on 127.0.0.1 and the fake Bot API, offline.
//! Part of the real-CLI group: built only with `--features real-cli`.
//!
//! As in `real_claude.rs`, the tests that run the CLI are `#[ignore]`d and
//! run by [`real_gemini_in_a_loopback_namespace`], which re-runs this test
//! binary inside `unshare -n` (loopback only) with the CLI's path in
//! `TURNSTILE_REAL_GEMINI`. Needs root and npm.
#![cfg(feature = "real-cli")]

mod support;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use support::*;
use turnstile::agent::ToolRegistry;
use turnstile::agent::backends::{AcpBackend, AcpSettings};
use turnstile::chat::TurnOutcome;

/// Carries the CLI's path into the namespace.
const GEMINI_ENV: &str = "TURNSTILE_REAL_GEMINI";

const INNER: &[&str] = &[
    "in_a_trusted_workspace_gemini_sends_through_the_chat_tools",
    "gemini_answers_a_prompt",
    "gemini_asks_a_permission_the_chat_grants",
    "within_the_minute_its_session_began_gemini_cannot_load_it_and_the_chat_is_told",
    "after_a_restart_gemini_resumes_the_conversation",
    "under_bubblewrap_in_a_network_of_its_own_gemini_answers_through_the_proxy",
];

#[test]
fn real_gemini_in_a_loopback_namespace() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "root is needed for `unshare -n`"
    );
    let root = env!("CARGO_MANIFEST_DIR");
    let install = Command::new(format!("{root}/scripts/install-gemini.sh"))
        .output()
        .expect("scripts/install-gemini.sh runs");
    assert!(
        install.status.success(),
        "scripts/install-gemini.sh failed (it needs npm and the npm registry): {}",
        String::from_utf8_lossy(&install.stderr)
    );
    let gemini = String::from_utf8_lossy(&install.stdout).trim().to_string();
    support::real_cli::run_each_in_namespace(INNER, &[(GEMINI_ENV, gemini.as_str())]);
}

/// A fake Gemini API: `streamGenerateContent` answers the next scripted
/// reply (parts of one model message) as one server-sent event; any other
/// call (the routing classifier's `generateContent`, token counts) a small
/// fixed answer. Every request is kept.
#[derive(Clone, Default)]
struct FakeGemini {
    /// Scripted model replies, in order.
    replies: Arc<Mutex<VecDeque<Value>>>,
    /// Every request: its path and body.
    requests: Arc<Mutex<Vec<(String, Value)>>>,
    /// Where it listens.
    port: u16,
}

impl FakeGemini {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let fake = Self {
            port: listener.local_addr().expect("addr").port(),
            ..Self::default()
        };
        let serving = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let serving = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let serving = serving.clone();
                        async move { Ok::<_, Infallible>(serving.answer(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        fake
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn push(&self, parts: Value) {
        self.replies.lock().unwrap().push_back(parts);
    }

    fn model_requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path.contains(":streamGenerateContent"))
            .map(|(_, body)| body.clone())
            .collect()
    }

    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        self.requests.lock().unwrap().push((path.clone(), body));
        let usage =
            json!({"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15});
        if path.contains(":streamGenerateContent") {
            let parts = self
                .replies
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| json!([{"text": "(no reply scripted)"}]));
            let event = json!({"candidates": [{"content": {"role": "model", "parts": parts},
                "finishReason": "STOP", "index": 0}], "usageMetadata": usage});
            let mut response =
                Response::new(Full::new(Bytes::from(format!("data: {event}\r\n\r\n"))));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/event-stream"),
            );
            return response;
        }
        let text = r#"{"reasoning": "simple", "model_choice": "flash"}"#;
        let body = if path.contains(":countTokens") {
            json!({"totalTokens": 10})
        } else {
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP", "index": 0}], "usageMetadata": usage})
        };
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// The bot on the `acp` backend running the real Gemini CLI against `api`,
/// with `dir` holding its home, the workdirs and the state file.
async fn start(api: &FakeGemini, dir: &Path) -> (Harness, Arc<AcpBackend>) {
    start_with(api, dir, &[]).await
}

/// [`start`] with more `TURNSTILE_*` variables.
async fn start_with(
    api: &FakeGemini,
    dir: &Path,
    extra: &[(&str, &str)],
) -> (Harness, Arc<AcpBackend>) {
    let gemini = std::env::var(GEMINI_ENV).unwrap_or_else(|_| {
        panic!("{GEMINI_ENV} is not set: this runs only inside the loopback-only namespace")
    });
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let vars: Vec<(String, String)> = vec![
        ("TURNSTILE_AGENT_BACKEND".into(), "acp".into()),
        ("TURNSTILE_AGENT_COMMAND".into(), gemini),
        ("TURNSTILE_AGENT_ARGS".into(), "--acp".into()),
        (
            "TURNSTILE_AGENT_AUTH_METHOD".into(),
            "gemini-api-key".into(),
        ),
        (
            "TURNSTILE_AGENT_ENV_GEMINI_API_KEY".into(),
            "fake-key".into(),
        ),
        (
            "TURNSTILE_AGENT_ENV_GOOGLE_GEMINI_BASE_URL".into(),
            api.url(),
        ),
        (
            "TURNSTILE_AGENT_ENV_HOME".into(),
            home.display().to_string(),
        ),
        ("TURNSTILE_AGENT_SANDBOX".into(), "none".into()),
        (
            "TURNSTILE_AGENT_WORKDIR".into(),
            dir.join("ws").join("{chat}").display().to_string(),
        ),
        (
            "TURNSTILE_STATE_PATH".into(),
            dir.join("state.db").display().to_string(),
        ),
        ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT".into(), "60s".into()),
    ];
    let mut vars = vars;
    vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut slot = None;
    let harness = Harness::launch(&pairs, Harness::fast_limits(), |config| {
        let mut settings = AcpSettings::from_config(config);
        let turnstile = std::path::PathBuf::from(env!("CARGO_BIN_EXE_turnstile"));
        settings.process.seal.relay_network_with(turnstile.clone());
        settings.bridge = turnstile;
        let backend = Arc::new(AcpBackend::new(
            settings,
            Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
        ));
        slot = Some(Arc::clone(&backend));
        backend
    })
    .await;
    (harness, slot.expect("backend built"))
}

async fn stop(h: Harness, backend: &AcpBackend) {
    h.bot.stop().await;
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.running() == 0
    })
    .await;
}

fn completed() -> TurnOutcome {
    TurnOutcome::Completed {
        reason: "completed".into(),
    }
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn gemini_answers_a_prompt() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir().unwrap();
    api.push(json!([{"text": "Hello from the fake Gemini."}]));
    let (mut h, backend) = start(&api, dir.path()).await;
    h.say(1, USER, "hi there");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, completed());
    assert_eq!(
        h.api.wait_for_texts(1, 1, SOON).await,
        ["Hello from the fake Gemini."]
    );
    let asked = api.model_requests();
    assert!(asked[0].to_string().contains("hi there"), "{asked:?}");
    stop(h, &backend).await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn gemini_asks_a_permission_the_chat_grants() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir().unwrap();
    api.push(json!([{"functionCall": {"name": "run_shell_command",
        "args": {"command": "echo granted > proof.txt", "description": "write a proof"}}}]));
    api.push(json!([{"text": "The file is written."}]));
    let (mut h, backend) = start(&api, dir.path()).await;
    h.say(1, USER, "write the proof");
    let question = h
        .api
        .wait_for(
            Duration::from_secs(30),
            "the permission question",
            |calls| {
                calls
                    .iter()
                    .find(|c| c.method == "sendmessage" && !buttons_of(c).is_empty())
                    .cloned()
            },
        )
        .await;
    let text = question.params["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("echo granted > proof.txt"), "{text}");
    let buttons: Vec<(String, String)> = buttons_of(&question).into_iter().flatten().collect();
    let allow = buttons
        .iter()
        .find(|(label, _)| label == "Allow")
        .unwrap_or_else(|| panic!("no Allow in {buttons:?}"))
        .1
        .clone();
    let id = h.api.push_callback(1, USER, 0, &allow);
    assert_eq!(h.callback_answer(&id).await, "Allowed");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, completed());
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(
        texts.last().map(String::as_str),
        Some("The file is written.")
    );
    let proof = std::fs::read_to_string(dir.path().join("ws/1/proof.txt")).unwrap_or_default();
    assert_eq!(proof.trim(), "granted", "the granted command ran");
    stop(h, &backend).await;
}

/// The minute of the UTC clock Gemini CLI names its session files by
/// (`session-<ISO minute>-<first 8 of the id>.jsonl`).
fn utc_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs()
        / 60
}

/// The seconds gone in the current UTC minute.
fn second_of_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs()
        % 60
}

/// Gemini CLI 0.61.0's `session/load` erases the session it loads when it
/// runs in the wall-clock minute the session began (upstream
/// google-gemini/gemini-cli#28775): before resolving the session, the load
/// opens a chat record for the id as a new session would, in the file
/// `session-<current minute>-<id prefix>.jsonl`, which within that minute
/// is the session's own file; the `$set` of `messages` it appends leaves
/// only the session context, and the load then finds nothing resumable
/// ("No previous sessions found for this project"). turnstile sends the
/// load, gets the error, opens a new session and tells the chat so once.
/// The test starts early in a minute and checks that both processes ran
/// in it, so it pins that case and no other; a Gemini CLI that loads here
/// fails it and moves the pin.
#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn within_the_minute_its_session_began_gemini_cannot_load_it_and_the_chat_is_told() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir().unwrap();
    api.push(json!([{"text": "I will remember the word tangerine."}]));
    api.push(json!([{"text": "Which word?"}]));
    // Both processes must run in one minute: begin at its start.
    wait_until("the start of a minute", Duration::from_secs(61), || {
        second_of_minute() < 5
    })
    .await;
    let began = utc_minute();
    let (mut h, backend) = start(&api, dir.path()).await;
    h.say(1, USER, "remember tangerine");
    h.turn_ended(1, 1).await;
    h.api.wait_for_texts(1, 1, SOON).await;
    stop(h, &backend).await;
    let (mut h, backend) = start(&api, dir.path()).await;
    // A new fake Telegram numbers updates from 1 again: past the offset.
    h.api.push_update(json!({"update_id": 1000}));
    h.say(1, USER, "which word?");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        utc_minute(),
        began,
        "the test outran its minute, so it says nothing about loading within it"
    );
    assert_eq!(outcome, completed());
    assert_eq!(
        h.api.wait_for_texts(1, 1, SOON).await,
        ["ℹ️ The earlier conversation could not be resumed; this is a new one.\n\nWhich word?"]
    );
    let asked = api.model_requests();
    let last = asked.last().expect("a model request").to_string();
    assert!(
        last.contains("which word?") && !last.contains("remember tangerine"),
        "the second process started a new conversation: {last}"
    );
    stop(h, &backend).await;
}

/// After a restart in a later minute than the one its session began in,
/// Gemini CLI loads the session turnstile stored: the chat is told
/// nothing, and the model is asked with the earlier turn in its history.
#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn after_a_restart_gemini_resumes_the_conversation() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir().unwrap();
    api.push(json!([{"text": "I will remember the word tangerine."}]));
    api.push(json!([{"text": "The word was tangerine."}]));
    let (mut h, backend) = start(&api, dir.path()).await;
    h.say(1, USER, "remember tangerine");
    h.turn_ended(1, 1).await;
    h.api.wait_for_texts(1, 1, SOON).await;
    stop(h, &backend).await;
    // The session began before the first process ended; the restart must
    // come in a later minute (see the test above for the same minute).
    let ended = utc_minute();
    wait_until("the next minute", Duration::from_secs(61), || {
        utc_minute() > ended
    })
    .await;
    let (mut h, backend) = start(&api, dir.path()).await;
    // A new fake Telegram numbers updates from 1 again: past the offset.
    h.api.push_update(json!({"update_id": 1000}));
    h.say(1, USER, "which word?");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, completed());
    assert_eq!(
        h.api.wait_for_texts(1, 1, SOON).await,
        ["The word was tangerine."],
        "the conversation resumed, so no notice"
    );
    let asked = api.model_requests();
    assert_eq!(asked.len(), 2, "one model request a turn: {asked:?}");
    let last = asked[1].to_string();
    assert!(
        last.contains("remember tangerine")
            && last.contains("I will remember the word tangerine.")
            && last.contains("which word?"),
        "the model request after the restart carries the earlier turn: {last}"
    );
    stop(h, &backend).await;
}

/// Gemini CLI uses the MCP servers of `session/new` only in a trusted
/// workspace (`GEMINI_CLI_TRUST_WORKSPACE=true`); it then offers the chat
/// tools to the model as `mcp_telegram-tools_<tool>`, and asks before the
/// first call of one.
#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn in_a_trusted_workspace_gemini_sends_through_the_chat_tools() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir().unwrap();
    api.push(json!([{"functionCall": {"name": "mcp_telegram-tools_send",
        "args": {"text": "Sent through the chat tool."}}}]));
    api.push(json!([{"text": "done"}]));
    let (mut h, backend) = start_with(
        &api,
        dir.path(),
        &[("TURNSTILE_AGENT_ENV_GEMINI_CLI_TRUST_WORKSPACE", "true")],
    )
    .await;
    h.say(1, USER, "send it");
    let question = h
        .api
        .wait_for(
            Duration::from_secs(30),
            "the permission question",
            |calls| {
                calls
                    .iter()
                    .find(|c| c.method == "sendmessage" && !buttons_of(c).is_empty())
                    .cloned()
            },
        )
        .await;
    let buttons: Vec<(String, String)> = buttons_of(&question).into_iter().flatten().collect();
    let allow = buttons
        .iter()
        .find(|(label, _)| label == "Allow")
        .unwrap_or_else(|| panic!("no Allow in {buttons:?}"))
        .1
        .clone();
    let id = h.api.push_callback(1, USER, 0, &allow);
    assert_eq!(h.callback_answer(&id).await, "Allowed");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, completed());
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(
        texts.last().map(String::as_str),
        Some("Sent through the chat tool."),
        "delivered by the tool, the result text not again: {texts:?}"
    );
    let first = api.model_requests();
    let offered = first.first().map(Value::to_string).unwrap_or_default();
    assert!(offered.contains("mcp_telegram-tools_send"), "{offered}");
    stop(h, &backend).await;
}

/// Under bubblewrap with the default network (a namespace of its own, out
/// only through turnstile's proxy, UNIX sockets refused), Gemini CLI
/// reaches its API through `HTTPS_PROXY`/`HTTP_PROXY`, and the chat tools
/// through the relayed bridge.
#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_gemini_in_a_loopback_namespace"]
async fn under_bubblewrap_in_a_network_of_its_own_gemini_answers_through_the_proxy() {
    let api = FakeGemini::start().await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    api.push(json!([{"functionCall": {"name": "mcp_telegram-tools_send",
        "args": {"text": "Sent from the sandbox."}}}]));
    api.push(json!([{"text": "done"}]));
    let (mut h, backend) = start_with(
        &api,
        dir.path(),
        &[
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap"),
            ("TURNSTILE_AGENT_ENV_GEMINI_CLI_TRUST_WORKSPACE", "true"),
        ],
    )
    .await;
    h.say(1, USER, "send it");
    let question = h
        .api
        .wait_for(
            Duration::from_secs(60),
            "the permission question",
            |calls| {
                calls
                    .iter()
                    .find(|c| c.method == "sendmessage" && !buttons_of(c).is_empty())
                    .cloned()
            },
        )
        .await;
    let buttons: Vec<(String, String)> = buttons_of(&question).into_iter().flatten().collect();
    let allow = data(&buttons, "Allow");
    h.api.push_callback(1, USER, 0, &allow);
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, completed());
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert!(
        texts.iter().any(|t| t == "Sent from the sandbox."),
        "{texts:?}"
    );
    assert!(!api.model_requests().is_empty());
    stop(h, &backend).await;
}

//! Files and questions waiting for Telegram outlive the process, as texts
//! do: kept in the state file (a file's bytes in the spool beside it) before
//! the turn counts as done, sent by the next process once, in order, after a
//! `kill -9` in the middle of an outage. An approval question the next
//! process finds goes without its buttons (the request it asked about ended
//! with the process that asked), saying so. The real binary, the scripted
//! agent, the fake Bot API.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

/// What marks a copy sent again that may show twice.
const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// What ends an approval question sent by a later process.
const ENDED: &str = "❌ Not run: turnstile restarted before this question reached the chat, and the request ended with it.";

/// The bytes of the file the agent sends.
const REPORT: &[u8] = b"the quarterly report, in full";

fn scenario() -> Scenario {
    Scenario::default()
        .with_rule(
            "file",
            turn(vec![Step::Tools {
                calls: vec![
                    tool(
                        "mcp__telegram-tools__send_file",
                        json!({"path": "report.txt", "caption": "the report"}),
                    ),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            }]),
        )
        .with_rule(
            "ask",
            turn(vec![
                Step::Ask {
                    tool: "Bash".into(),
                    input: json!({"command": "rm -rf build"}),
                },
                Step::Tools {
                    calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
                },
            ]),
        )
}

struct Setup {
    api: FakeBotApi,
    dir: tempfile::TempDir,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
}

async fn setup() -> Setup {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("scenario.json");
    std::fs::write(&script, serde_json::to_string(&scenario()).unwrap()).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("1")).unwrap();
    let env = vec![
        (
            "TURNSTILE_STATE_PATH",
            dir.path().join("state.db").display().to_string(),
        ),
        ("TURNSTILE_AGENT_SCRIPT", script.display().to_string()),
        (
            "TURNSTILE_AGENT_WORKDIR",
            ws.join("{chat}").display().to_string(),
        ),
    ];
    let log = dir.path().join("bot.log");
    Setup { api, dir, env, log }
}

/// The files in the spool beside the state file in `dir`.
fn spooled(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir.join("state.db-outgoing")) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Starts the first process and has it answer a first message, so the
/// chat's message ids are known.
async fn first_process(s: &Setup) -> BotProcess {
    let first = BotProcess::spawn(&s.api, &s.log, &s.env);
    s.api.push_text(1, USER, "hi");
    s.api.wait_for_texts(1, 1, Duration::from_secs(20)).await;
    first
}

/// Kills `first` (`kill -9`), ends the outage and starts the next process.
async fn kill_and_restart(s: &Setup, mut first: BotProcess) -> BotProcess {
    first.signal(libc::SIGKILL);
    first.exit().await;
    s.api.clear_faults();
    BotProcess::spawn(&s.api, &s.log, &s.env)
}

/// Telegram answers 502 to every upload: the file the agent sent waits.
/// The agent then removes the file from its working directory, and the bot
/// is killed (`kill -9`). The next process sends the file, once, with the
/// bytes it had when the agent sent it, then reports the turn the kill cut
/// short; once sent, the spool keeps nothing of it.
#[tokio::test]
async fn a_file_waiting_at_a_kill_is_sent_once_by_the_next_process() {
    let s = setup().await;
    let original = s.dir.path().join("ws").join("1").join("report.txt");
    std::fs::write(&original, REPORT).unwrap();
    let first = first_process(&s).await;
    for _ in 0..100_000 {
        s.api.inject("sendDocument", Fault::ServerError(502));
    }
    s.api.push_text(1, USER, "file please");
    s.api
        .wait_for(Duration::from_secs(20), "the upload tried", |calls| {
            let failed = calls
                .iter()
                .filter(|c| c.method == "senddocument" && c.status == 502)
                .count();
            (failed >= 3).then_some(())
        })
        .await;
    assert_eq!(spooled(s.dir.path()).len(), 1, "its bytes are kept");
    // The agent may remove or change the file once it sent it.
    std::fs::remove_file(&original).unwrap();
    let mut second = kill_and_restart(&s, first).await;
    let uploads = s.api.wait_for_uploads(1, Duration::from_secs(30)).await;
    assert_eq!(uploads[0].bytes, REPORT);
    assert_eq!(uploads[0].file_name, "report.txt");
    assert_eq!(uploads[0].caption.as_deref(), Some("the report"));
    s.api
        .wait_for(Duration::from_secs(30), "the cut turn reported", |_| {
            s.api
                .texts_to(1)
                .iter()
                .any(|t| t.contains("turnstile restarted while answering"))
                .then_some(())
        })
        .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    assert_eq!(s.api.uploads().len(), 1, "sent once");
    let texts = s.api.texts_to(1);
    assert!(!texts.iter().any(|t| t == RESENT), "{texts:?}");
    assert_eq!(spooled(s.dir.path()), Vec::<PathBuf>::new());
    // In order: the file before what the next process said after it.
    let documents = s.api.calls_of("sendDocument");
    let sent = documents.iter().find(|c| c.status == 200).unwrap();
    let report = s
        .api
        .calls_of("sendMessage")
        .into_iter()
        .find(|c| {
            c.params["text"]
                .as_str()
                .is_some_and(|t| t.contains("turnstile restarted"))
        })
        .unwrap();
    assert!(sent.seq < report.seq, "the file went first");
}

/// Telegram answers 502 to every message: the approval question the agent
/// asked waits. The bot is killed (`kill -9`). The next process sends the
/// question, once, without its buttons (nothing in this process could
/// decide the request, which ended with the agent of the killed one), and
/// saying so; then it reports the turn the kill cut short.
#[tokio::test]
async fn an_approval_question_waiting_at_a_kill_goes_out_once_saying_the_request_ended() {
    let s = setup().await;
    let first = first_process(&s).await;
    for _ in 0..100_000 {
        s.api.inject("sendMessage", Fault::ServerError(502));
    }
    s.api.push_text(1, USER, "ask please");
    let asked = s
        .api
        .wait_for(Duration::from_secs(20), "the question tried", |calls| {
            let tried: Vec<_> = calls
                .iter()
                .filter(|c| c.method == "sendmessage" && c.status == 502)
                .filter(|c| !buttons_of(c).is_empty())
                .collect();
            (tried.len() >= 3).then(|| tried[0].params["text"].as_str().unwrap().to_string())
        })
        .await;
    assert!(asked.contains("rm -rf build"), "{asked}");
    let mut second = kill_and_restart(&s, first).await;
    let sent = s
        .api
        .wait_for(Duration::from_secs(30), "the question sent", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "sendmessage"
                        && c.status == 200
                        && c.params["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with(&asked))
                })
                .cloned()
        })
        .await;
    assert_eq!(
        sent.params["text"].as_str().unwrap(),
        format!("{asked}\n\n{ENDED}")
    );
    assert!(
        buttons_of(&sent).is_empty(),
        "no buttons: {:?}",
        sent.params
    );
    s.api
        .wait_for(Duration::from_secs(30), "the cut turn reported", |_| {
            s.api
                .texts_to(1)
                .iter()
                .any(|t| t.contains("turnstile restarted before it could answer"))
                .then_some(())
        })
        .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let texts = s.api.texts_to(1);
    let questions = texts.iter().filter(|t| t.starts_with(&asked)).count();
    assert_eq!(questions, 1, "once: {texts:?}");
    assert!(!texts.iter().any(|t| t == RESENT), "{texts:?}");
    let at = |p: &dyn Fn(&String) -> bool| texts.iter().position(p).unwrap();
    assert!(
        at(&|t| t.starts_with(&asked)) < at(&|t| t.contains("before it could answer")),
        "the question went first: {texts:?}"
    );
}

/// As above, with `/restart` in place of the kill: the stop ends the turn
/// (its ask is denied) and gives up flushing the outbox after its 10 s; the
/// question, still waiting, is sent by the process `/restart` started, once,
/// without its buttons.
#[tokio::test]
async fn an_approval_question_waiting_at_a_restart_goes_out_once_saying_the_request_ended() {
    let mut s = setup().await;
    s.env
        .push(("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "500ms".to_string()));
    let bot = first_process(&s).await;
    for _ in 0..100_000 {
        s.api.inject("sendMessage", Fault::ServerError(502));
    }
    s.api.push_text(1, USER, "ask please");
    let asked = s
        .api
        .wait_for(Duration::from_secs(20), "the question tried", |calls| {
            calls
                .iter()
                .find(|c| c.method == "sendmessage" && !buttons_of(c).is_empty())
                .map(|c| c.params["text"].as_str().unwrap().to_string())
        })
        .await;
    s.api.push_text(ADMIN, ADMIN, "/restart");
    wait_until("the restart", Duration::from_secs(60), || {
        bot.log_text().matches("turnstile started").count() == 2
    })
    .await;
    s.api.clear_faults();
    let sent = s
        .api
        .wait_for(Duration::from_secs(30), "the question sent", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "sendmessage"
                        && c.status == 200
                        && c.params["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with(&asked))
                })
                .cloned()
        })
        .await;
    assert_eq!(
        sent.params["text"].as_str().unwrap(),
        format!("{asked}\n\n{ENDED}")
    );
    assert!(
        buttons_of(&sent).is_empty(),
        "no buttons: {:?}",
        sent.params
    );
    s.api
        .wait_for_texts(ADMIN, 2, Duration::from_secs(30))
        .await;
    let mut bot = bot;
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
    let texts = s.api.texts_to(1);
    let questions = texts.iter().filter(|t| t.starts_with(&asked)).count();
    assert_eq!(questions, 1, "once: {texts:?}");
    // The fake numbers messages across chats, so the admin's `/restart`
    // is an id this chat's lane cannot explain: a copy sent again may be
    // marked, as a reply to it, never shown twice.
    let marks = s.api.calls_of("sendMessage");
    for mark in marks.iter().filter(|c| c.params["text"] == RESENT) {
        let (chat, to) = (&mark.params["chat_id"], &mark.params["reply_parameters"]);
        let sent = s
            .api
            .sent_message(chat.as_i64().unwrap(), to["message_id"].as_i64().unwrap());
        assert!(sent.is_some(), "{mark:?}");
    }
}

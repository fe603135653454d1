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
use support::bot_api::Buttons;
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
    // The next process cannot know whether the first one's attempts
    // reached the chat: a copy sent again may be marked, as a reply to
    // it, never shown twice.
    let marks = s.api.calls_of("sendMessage");
    for mark in marks.iter().filter(|c| c.params["text"] == RESENT) {
        let (chat, to) = (&mark.params["chat_id"], &mark.params["reply_parameters"]);
        let sent = s
            .api
            .sent_message(chat.as_i64().unwrap(), to["message_id"].as_i64().unwrap());
        assert!(sent.is_some(), "{mark:?}");
    }
}

/// What ends an approval question an earlier process had shown.
const ENDED_SHOWN: &str =
    "❌ Not run: turnstile restarted while this question waited, and the request ended with it.";

/// The first process shows an approval question (its buttons waiting for
/// a press); then, as a later write of the store thread shows, the row
/// that keeps its message id is written. Returns the question's message
/// id, text and buttons.
async fn question_shown(s: &Setup) -> (i32, String, Buttons) {
    s.api.push_text(1, USER, "ask please");
    let (id, buttons) = s
        .api
        .wait_for(Duration::from_secs(20), "the question shown", |_| {
            s.api.last_buttons(1)
        })
        .await;
    let text = s.api.sent_message(1, id).expect("shown")["text"]
        .as_str()
        .expect("a text")
        .to_string();
    assert!(text.contains("rm -rf build"), "{text}");
    // Another chat's message, written after the question's row on the
    // store thread: once it is answered, the row is written.
    std::fs::create_dir_all(s.dir.path().join("ws").join("2")).unwrap();
    s.api.push_text(2, USER, "hi");
    s.api.wait_for_texts(2, 1, Duration::from_secs(20)).await;
    (i32::try_from(id).unwrap(), text, buttons)
}

/// Presses the question's first button in chat 1; the text of the answer.
async fn press(s: &Setup, id: i32, buttons: &Buttons) -> String {
    let query = s.api.push_callback(1, USER, id, &buttons[0][0].1);
    s.api
        .wait_for(Duration::from_secs(20), "the press answered", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "answercallbackquery"
                        && c.params["callback_query_id"].as_str() == Some(query.as_str())
                })
                .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        })
        .await
}

/// An approval question that reached the chat before a `kill -9`: the
/// request it asks about ended with the killed process, so the next one
/// takes its buttons away and says why; a press then is answered
/// "expired".
#[tokio::test]
async fn an_approval_question_shown_at_a_kill_loses_its_buttons_saying_the_request_ended() {
    let s = setup().await;
    let first = first_process(&s).await;
    let (id, asked, buttons) = question_shown(&s).await;
    let mut second = kill_and_restart(&s, first).await;
    let want = format!("{asked}\n\n{ENDED_SHOWN}");
    let ended = s
        .api
        .wait_for(Duration::from_secs(30), "the question ended", |_| {
            s.api
                .sent_message(1, i64::from(id))
                .filter(|m| m["text"] == json!(want))
        })
        .await;
    assert!(ended.get("reply_markup").is_none(), "no buttons: {ended}");
    assert_eq!(press(&s, id, &buttons).await, "This question has expired.");
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let texts = s.api.texts_to(1);
    let questions = texts.iter().filter(|t| t.starts_with(&asked)).count();
    assert_eq!(questions, 1, "never sent again: {texts:?}");
}

/// A press on an approval question whose request is gone takes its
/// buttons away as it is answered "expired": here the next process could
/// not edit the question (Telegram refused the edit).
#[tokio::test]
async fn a_press_on_an_expired_question_takes_its_buttons_away() {
    let s = setup().await;
    let mut first = first_process(&s).await;
    let (id, asked, buttons) = question_shown(&s).await;
    first.signal(libc::SIGKILL);
    first.exit().await;
    s.api.inject(
        "editMessageText",
        Fault::BadRequest("Bad Request: message can't be edited".into()),
    );
    let mut second = BotProcess::spawn(&s.api, &s.log, &s.env);
    s.api
        .wait_for(Duration::from_secs(30), "the edit refused", |calls| {
            calls
                .iter()
                .any(|c| c.method == "editmessagetext" && c.status == 400)
                .then_some(())
        })
        .await;
    let shown = s.api.sent_message(1, i64::from(id)).expect("shown");
    assert!(shown.get("reply_markup").is_some(), "{shown}");
    assert_eq!(press(&s, id, &buttons).await, "This question has expired.");
    let unbuttoned = s
        .api
        .wait_for(Duration::from_secs(20), "the buttons removed", |_| {
            s.api
                .sent_message(1, i64::from(id))
                .filter(|m| m.get("reply_markup").is_none())
        })
        .await;
    assert_eq!(unbuttoned["text"], json!(asked), "its text stays");
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
}

//! `turnstile attach` against a running bot (the fake Bot API, the
//! scripted agent), driven in `--json` mode: the socket is private and
//! replaces a stale one, the list shows a conversation, a follower sees a
//! chat message, its answer and the turn's end, a typed line is in the
//! inbox before it is acknowledged and is answered in the chat, and the
//! stop ends the attachment with a clear line and removes the socket; a
//! follower sees the status line and the answer as it is written, and an
//! answer to a question no longer open is refused with a line. Piped
//! without `--json`, a typed line taken shows as `(sent)`, plain.

mod support;

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};
use turnstile::agent::Scenario;

/// The client, run with the bot's state path.
fn attach(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("attach")
        .args(args)
        .env_clear()
        .env("TURNSTILE_STATE_PATH", db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Reads the client's lines until one matches `pred`; all read, that one last.
async fn until(
    lines: &mut Lines<BufReader<ChildStdout>>,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("client's stdout") {
            let value: Value = serde_json::from_str(&line).expect("a JSON line");
            let found = pred(&value);
            seen.push(value);
            if found {
                return;
            }
        }
        panic!("the client ended before {what}: {seen:#?}");
    };
    if tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .is_err()
    {
        panic!("timed out waiting for {what}");
    }
    seen
}

fn event(v: &Value) -> &str {
    v["event"].as_str().unwrap_or_default()
}

#[actix_rt::test]
async fn attach_lists_follows_and_writes_to_a_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let socket = dir.path().join("state.db.attach");
    // A crashed run's socket: nothing listens on it any more.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let meta = std::fs::metadata(&socket).expect("the socket is there");
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "the socket's mode"
    );

    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;

    // The list.
    let listed = attach(&db, &["--json"])
        .output()
        .await
        .expect("client runs");
    assert!(listed.status.success(), "{listed:?}");
    let rows: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(event(&rows[0]), "hello");
    assert_eq!(rows[0]["version"], turnstile::attach::PROTOCOL_VERSION);
    let chat = rows
        .iter()
        .find(|r| event(r) == "conversation")
        .expect("a conversation listed");
    assert_eq!(chat["conversation"], "1");
    assert_eq!(chat["state"], "idle");
    assert!(chat["last_activity"].as_i64().unwrap() > 0, "{chat}");
    assert_eq!(event(rows.last().unwrap()), "listed");

    // Following: the history first, in order.
    let mut client = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut stdin = client.stdin.take().unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let history = until(&mut lines, "following", |v| event(v) == "following").await;
    let shown: Vec<(&str, String)> = history
        .iter()
        .map(|v| (event(v), v["text"].as_str().unwrap_or_default().to_string()))
        .collect();
    let at = |e: &str, text: &str| {
        shown
            .iter()
            .position(|(k, t)| *k == e && t == text)
            .unwrap_or_else(|| panic!("{e} {text:?} in {shown:?}"))
    };
    let (message, answer) = (at("message", "hello"), at("said", "echo: hello"));
    let ended = shown
        .iter()
        .position(|(k, _)| *k == "turn_ended")
        .expect("turn end");
    assert!(message < answer && answer < ended, "{shown:?}");
    assert_eq!(
        history[message]["from"], "u",
        "the sender as Telegram names them"
    );

    // A typed line: in the inbox before the client is told it was taken
    // (the store's write stalled, so an early answer would find no row).
    h.bot.inbox.stall_next_write(Duration::from_millis(800));
    stdin.write_all(b"from the host\n").await.unwrap();
    let live = until(&mut lines, "accepted", |v| event(v) == "accepted").await;
    let id = live.last().unwrap()["update_id"].as_i64().unwrap();
    let state: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT state FROM inbox WHERE update_id = ?1", [id], |r| {
            r.get(0)
        })
        .expect("the typed line's inbox row is written before the ack");
    assert!(!state.is_empty());
    let live = until(&mut lines, "the typed line's turn end", |v| {
        event(v) == "turn_ended"
    })
    .await;
    let texts: Vec<(&str, &str)> = live
        .iter()
        .map(|v| (event(v), v["text"].as_str().unwrap_or_default()))
        .collect();
    let pos = |e: &str, t: &str| {
        texts
            .iter()
            .position(|x| *x == (e, t))
            .unwrap_or_else(|| panic!("{e} {t:?} in {texts:?}"))
    };
    assert!(
        pos("message", "from the host") < pos("said", "echo: from the host"),
        "{texts:?}"
    );
    h.turn_ended(1, 2).await;
    assert_eq!(
        h.texts(1),
        vec![
            "echo: hello",
            "⌨️ From the terminal: from the host",
            "echo: from the host"
        ]
    );

    // A stop ends the attachment with a line, and removes the socket.
    h.bot.stop().await;
    let end = until(&mut lines, "bye", |v| event(v) == "bye").await;
    assert_eq!(
        end.last().unwrap()["reason"],
        "the bot stopped: the attachment ended"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), client.wait())
        .await
        .expect("the client exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the socket is removed at the stop");
}

/// `ask`: the agent asks to run Bash `echo hi`, then ends its turn.
fn asking() -> Scenario {
    use turnstile::agent::Step;
    Scenario::default().with_rule(
        "ask",
        turn(vec![
            Step::Ask {
                tool: "Bash".into(),
                input: serde_json::json!({"command": "echo hi"}),
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", serde_json::json!({}))],
            },
        ]),
    )
}

#[actix_rt::test]
async fn a_question_is_answered_at_the_terminal_as_a_press_and_the_chat_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(asking(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;

    let mut client = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut stdin = client.stdin.take().unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    until(&mut lines, "following", |v| event(v) == "following").await;

    h.say(1, USER, "ask please");
    let asked = until(&mut lines, "the question", |v| event(v) == "asked").await;
    let asked = asked.last().unwrap();
    assert!(
        asked["question"].as_str().unwrap().contains("$ echo hi"),
        "{asked}"
    );
    let labels: Vec<&str> = asked["options"]
        .as_array()
        .expect("the question's options")
        .iter()
        .map(|o| o["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Allow", "Always in this chat", "Deny"]);
    let (_, buttons) = question(&h, 1, 1).await;
    assert_eq!(
        asked["options"][0]["answer"].as_str(),
        Some(data(&buttons, "Allow").as_str()),
        "the terminal answers as the chat's button does"
    );

    // Answered by label, in --json mode.
    stdin.write_all(b"{\"answer\": \"Allow\"}\n").await.unwrap();
    let decided = until(&mut lines, "the decision", |v| event(v) == "decided").await;
    assert_eq!(
        decided.last().unwrap()["decision"],
        "✅ Allowed by the operator, decided at the terminal"
    );
    h.turn_ended(1, 2).await;
    assert!(
        h.texts(1)
            .contains(&r#"allowed: {"command":"echo hi"}"#.to_string()),
        "{:?}",
        h.texts(1)
    );
    let edit = h
        .edited(1, "✅ Allowed by the operator, decided at the terminal")
        .await;
    assert!(edit.contains("$ echo hi"), "{edit}");
    assert!(
        !h.api
            .calls()
            .iter()
            .any(|c| c.method == "answercallbackquery"),
        "no callback query to answer for a terminal press"
    );
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), client.wait())
        .await
        .expect("the client exits at Ctrl-D")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[actix_rt::test]
async fn commands_from_the_terminal_come_from_the_command_table_with_the_operators_rights() {
    use turnstile::agent::Step;
    use turnstile::chat::TurnOutcome;
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(scenario, &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.say(1, USER, "slow");
    h.event("turn start", |e| {
        matches!(e, turnstile::events::BotEvent::TurnStarted { .. })
    })
    .await;

    let mut client = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut stdin = client.stdin.take().unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    until(&mut lines, "following", |v| event(v) == "following").await;

    // An admins' command: the operator at the terminal is one.
    stdin.write_all(b"/status\n").await.unwrap();
    until(&mut lines, "/status accepted", |v| event(v) == "accepted").await;
    let status = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(status[0], "⌨️ From the terminal: /status");
    assert!(status[1].contains("1 turn running"), "{status:?}");

    stdin.write_all(b"/stop\n").await.unwrap();
    let ended = until(&mut lines, "the turn's end", |v| event(v) == "turn_ended").await;
    assert_eq!(ended.last().unwrap()["outcome"], "interrupted");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    wait_until("the chat is told of the stop", SOON, || {
        h.texts(1).contains(&"⏹ Stopped.".to_string())
    })
    .await;
}

#[actix_rt::test]
async fn a_turn_force_released_at_the_hard_deadline_ends_for_its_followers() {
    use turnstile::agent::Step;
    let scenario = Scenario::default().with_rule("hang", turn(vec![Step::HangForever]));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(
        scenario,
        &[
            ("TURNSTILE_STATE_PATH", &db_env),
            ("TURNSTILE_TURN_HARD_DEADLINE", "400ms"),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s"),
            ("TURNSTILE_TURN_MAX_DURATION", "60s"),
        ],
    )
    .await;
    let mut client = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    until(&mut lines, "following", |v| event(v) == "following").await;

    h.say(1, USER, "hang");
    until(&mut lines, "the turn's start", |v| {
        event(v) == "turn_started"
    })
    .await;
    let ended = until(&mut lines, "the turn's end", |v| event(v) == "turn_ended").await;
    assert_eq!(ended.last().unwrap()["outcome"], "force_released");
    h.turn_ended(1, 1).await;

    let listed = attach(&db, &["--json"])
        .output()
        .await
        .expect("client runs");
    let rows: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let chat = rows
        .iter()
        .find(|r| event(r) == "conversation")
        .expect("a conversation listed");
    assert_eq!(chat["state"], "idle", "the list no longer says running");
}

/// `work`: the agent runs a tool, then writes its answer in three pieces,
/// 20 ms apart (gathered into fewer), and ends its turn with it.
fn working() -> (Scenario, String) {
    use turnstile::agent::Step;
    const END: &str = "mcp__telegram-tools__end_turn";
    let whole = "Here is the answer you asked for, written piece by piece.";
    let pieces = vec![
        "{\"text\":\"Here is the answer".to_string(),
        " you asked for, written".to_string(),
        " piece by piece.\"}".to_string(),
    ];
    let scenario = Scenario::default().with_rule(
        "work",
        turn(vec![
            Step::Activity {
                tool: "Bash".into(),
                input: serde_json::json!({"command": "cargo test"}),
            },
            Step::StreamTool {
                tool: END.into(),
                pieces,
                ms: 20,
            },
            Step::Tools {
                calls: vec![tool(END, serde_json::json!({ "text": whole }))],
            },
        ]),
    );
    (scenario, whole.to_string())
}

#[actix_rt::test]
async fn a_follower_sees_the_status_line_and_the_answer_as_it_is_written() {
    let (scenario, whole) = working();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(scenario, &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let mut client = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    until(&mut lines, "following", |v| event(v) == "following").await;

    h.say(1, USER, "work");
    let live = until(&mut lines, "the turn's end", |v| event(v) == "turn_ended").await;
    let kinds: Vec<&str> = live.iter().map(event).collect();
    let first = |e: &str| {
        kinds
            .iter()
            .position(|k| *k == e)
            .unwrap_or_else(|| panic!("{e} in {kinds:?}"))
    };
    let last = |e: &str| kinds.iter().rposition(|k| *k == e).unwrap();
    assert!(
        first("turn_started") < first("status")
            && last("status") < first("writing")
            && last("writing") < first("said")
            && first("said") < first("turn_ended"),
        "started, status, the answer's pieces, said, ended: {kinds:?}"
    );
    let status = &live[first("status")];
    let status = status["text"].as_str().unwrap();
    assert!(
        status.starts_with("🔧 Bash: cargo test\n1 tool call · "),
        "{status}"
    );
    let pieces: Vec<&Value> = live.iter().filter(|v| event(v) == "writing").collect();
    assert!(pieces.len() >= 2, "written in pieces: {pieces:?}");
    assert_eq!(pieces[0]["fresh"], true, "the first piece begins the text");
    assert!(
        pieces[1..].iter().all(|p| p["fresh"] == false),
        "{pieces:?}"
    );
    let written: String = pieces.iter().map(|p| p["text"].as_str().unwrap()).collect();
    assert_eq!(written, whole, "the pieces make the answer");
    assert_eq!(live[first("said")]["text"], whole.as_str());
    h.turn_ended(1, 1).await;

    // The history keeps the answer whole, not its pieces nor the status.
    let mut later = attach(&db, &["--json", "1"])
        .spawn()
        .expect("client starts");
    let mut later_lines = BufReader::new(later.stdout.take().unwrap()).lines();
    let history = until(&mut later_lines, "following", |v| event(v) == "following").await;
    let kept: Vec<&str> = history.iter().map(event).collect();
    assert!(kept.contains(&"said"), "{kept:?}");
    assert!(
        !kept.iter().any(|k| *k == "writing" || *k == "status"),
        "{kept:?}"
    );
}

#[actix_rt::test]
async fn an_answer_to_a_question_no_longer_open_is_refused_with_a_line() {
    use tokio::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(asking(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    // Speaking the protocol itself: the client would not send it.
    let socket = UnixStream::connect(dir.path().join("state.db.attach"))
        .await
        .expect("the socket opens");
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("the server goes on");
        serde_json::from_str(&line).expect("a JSON line")
    };
    assert_eq!(event(&next().await), "hello");
    write
        .write_all(b"{\"ask\":\"follow\",\"conversation\":\"1\"}\n")
        .await
        .unwrap();
    assert_eq!(event(&next().await), "following");

    h.say(1, USER, "ask please");
    let asked = loop {
        let line = next().await;
        if event(&line) == "asked" {
            break line;
        }
    };
    let allow = asked["options"][0]["answer"].as_str().unwrap().to_string();
    // Decided in the chat first.
    question(&h, 1, 1).await;
    h.api.push_callback(1, USER, 0, &allow);
    loop {
        if event(&next().await) == "decided" {
            break;
        }
    }
    let answer = serde_json::json!({"ask": "answer", "answer": allow});
    write
        .write_all(format!("{answer}\n").as_bytes())
        .await
        .unwrap();
    let refused = loop {
        let line = next().await;
        if event(&line) == "error" {
            break line;
        }
        assert_ne!(event(&line), "decided", "decided once: {line}");
    };
    assert_eq!(
        refused["message"],
        "no question of this conversation waits for that answer: it was decided, or its turn ended"
    );
    h.turn_ended(1, 1).await;
}

#[actix_rt::test]
async fn piped_without_json_a_typed_line_shows_as_sent_without_its_inbox_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let mut client = attach(&db, &["1"]).spawn().expect("client starts");
    let mut stdin = client.stdin.take().unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut shown = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("client's stdout") {
            let answered = line.ends_with(" echo: from the host");
            shown.push(line);
            if answered {
                return;
            }
            if shown.last().is_some_and(|l| l.contains("-- following 1")) {
                stdin.write_all(b"from the host\n").await.unwrap();
            }
        }
        panic!("the client ended before the answer");
    };
    if tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .is_err()
    {
        panic!("no answer in time: {shown:#?}");
    }
    assert!(
        shown.iter().all(|l| !l.contains('\x1b')),
        "no colour into a pipe: {shown:#?}"
    );
    let sent = shown
        .iter()
        .position(|l| l.contains("(sent"))
        .unwrap_or_else(|| panic!("the line taken, before its answer: {shown:#?}"));
    assert_eq!(shown[sent], "(sent)", "plain, no inbox id: {shown:#?}");
    h.turn_ended(1, 1).await;
}

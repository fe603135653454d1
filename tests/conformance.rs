//! One core, two frontends, one contract: the same steps played through
//! Telegram (the fake Bot API) and through `turnstile attach` (its `--json`
//! lines), each against the real binary on the scripted agent, with the
//! same outcomes checked: a message answered, a question allowed, a message
//! written while a turn runs steered into it, `/stop` ending a running
//! turn, and `/restart`, after which the conversation goes on. The steps
//! are [`play`]; a frontend is a [`Frontend`] driver, so another frontend
//! is one more driver. Every wait is for something the frontend shows.
//! Beside the contract: a stop typed at the terminal is shown in the chat.

mod support;

use std::path::PathBuf;

use serde_json::{Value, json};
use support::process::BotProcess;
use support::terminal::{Terminal, event};
use support::*;
use turnstile::agent::{Scenario, Step};

/// The conversation: the admin's private chat (`/restart` is theirs).
const CHAT: i64 = ADMIN;

/// `ask`: asks to run Bash `echo hi`, then answers with every text it
/// read. `wait`: says it is working, then thinks for a minute (only a
/// stop ends it in time). Anything else is echoed.
fn agent() -> Scenario {
    Scenario::default()
        .with_rule(
            "ask",
            turn(vec![
                Step::Ask {
                    tool: "Bash".into(),
                    input: json!({"command": "echo hi"}),
                },
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__end_turn",
                        json!({"text": "answer: {text}"}),
                    )],
                },
            ]),
        )
        .with_rule(
            "wait",
            turn(vec![
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__send",
                        json!({"text": "working on it"}),
                    )],
                },
                Step::Wait { ms: 60_000 },
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__end_turn",
                        json!({"text": "done waiting"}),
                    )],
                },
            ]),
        )
}

/// A frontend as a person uses it: what they do there, and what it shows
/// them of the conversation.
trait Frontend {
    /// Writes a line (a message, or a command) to the conversation.
    async fn write(&mut self, text: &str);
    /// Waits until the frontend shows `text`, after what it showed last.
    async fn shows(&mut self, text: &str);
    /// Waits for the next question; its options' labels.
    async fn asked(&mut self) -> Vec<String>;
    /// Answers the question with its option `label`; the decision as the
    /// frontend shows it.
    async fn answer(&mut self, label: &str) -> String;
    /// Waits until the frontend shows that the running turn was stopped.
    async fn stopped(&mut self);
    /// Asks for `/restart`; returns once the frontend is back in the
    /// conversation with the new process.
    async fn restart(&mut self);
    /// Every text the frontend showed of the conversation so far.
    fn said(&self) -> Vec<String>;
}

/// The steps, and the outcomes every frontend must show.
async fn play(f: &mut impl Frontend) {
    // A message answered.
    f.write("hello").await;
    f.shows("echo: hello").await;

    // A question allowed: the tool runs, then the turn answers.
    f.write("ask once").await;
    let labels = f.asked().await;
    assert_eq!(labels, ["Allow", "Always in this chat", "Deny"]);
    let decision = f.answer("Allow").await;
    assert!(decision.starts_with("✅ Allowed by"), "{decision:?}");
    f.shows(r#"allowed: {"command":"echo hi"}"#).await;
    f.shows("answer: ask once").await;

    // A steer: written while the turn waits for its question, the second
    // message goes into that turn, which answers both at once.
    f.write("ask again").await;
    f.asked().await;
    f.write("and a second thought").await;
    f.answer("Allow").await;
    f.shows("answer: ask again\nand a second thought").await;

    // `/stop` ends the running turn; the conversation goes on.
    f.write("wait for it").await;
    f.shows("working on it").await;
    f.write("/stop").await;
    f.stopped().await;
    f.write("hello again").await;
    f.shows("echo: hello again").await;

    // A restart: the conversation goes on with the new process.
    f.restart().await;
    f.write("after the restart").await;
    f.shows("echo: after the restart").await;

    // Each answer once; the steered message was no turn of its own, and
    // the stopped turn said nothing more.
    let said = f.said();
    for answer in [
        "echo: hello",
        "answer: ask once",
        "answer: ask again\nand a second thought",
        "echo: hello again",
        "echo: after the restart",
    ] {
        let n = said.iter().filter(|t| *t == answer).count();
        assert_eq!(n, 1, "{answer:?} shown {n} times: {said:#?}");
    }
    assert!(
        !said
            .iter()
            .any(|t| t.contains("echo: and a second thought") || t == "done waiting"),
        "{said:#?}"
    );
}

/// The real binary on the scripted [`agent`], its state in a file.
struct Bot {
    api: FakeBotApi,
    process: BotProcess,
    db: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bot {
    async fn start() -> Self {
        let api = FakeBotApi::start().await;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("scenario.json");
        std::fs::write(&script, serde_json::to_string(&agent()).unwrap()).unwrap();
        let db = dir.path().join("state.db");
        let env = [
            ("TURNSTILE_STATE_PATH", db.display().to_string()),
            ("TURNSTILE_AGENT_SCRIPT", script.display().to_string()),
            // No status message and no preview: the answers are messages.
            ("TURNSTILE_PROGRESS_AFTER", "1h".to_string()),
            ("TURNSTILE_PROGRESS_STREAM", "off".to_string()),
        ];
        let log = dir.path().join("bot.log");
        let process = BotProcess::spawn(&api, &log, &env);
        Self {
            api,
            process,
            db,
            _dir: dir,
        }
    }

    /// The bot stops at SIGTERM, cleanly.
    async fn stop(mut self) {
        self.process.signal(libc::SIGTERM);
        let status = self.process.exit().await;
        assert!(status.success(), "{status:?}\n{}", self.process.log_text());
    }
}

/// Waits until the chat shows `text` after its first `from` texts; the
/// number of texts up to and including it.
async fn chat_shows(api: &FakeBotApi, from: usize, text: &str) -> usize {
    api.wait_for(SOON, &format!("{text:?} in the chat"), |_| {
        let texts = api.texts_to(CHAT);
        let at = texts.iter().skip(from).position(|t| t == text)?;
        Some(from + at + 1)
    })
    .await
}

/// The admin in their private chat with the bot.
struct Telegram {
    bot: Bot,
    /// The texts of the chat already looked at.
    read: usize,
    /// Questions asked so far.
    questions: usize,
    /// The open question's message and buttons.
    question: Option<(i32, Vec<(String, String)>)>,
}

impl Frontend for Telegram {
    async fn write(&mut self, text: &str) {
        self.bot.api.push_text(CHAT, ADMIN, text);
    }

    async fn shows(&mut self, text: &str) {
        self.read = chat_shows(&self.bot.api, self.read, text).await;
    }

    async fn asked(&mut self) -> Vec<String> {
        self.questions += 1;
        let (_, buttons) = question_in(&self.bot.api, CHAT, self.questions).await;
        let (id, _) = self.bot.api.last_buttons(CHAT).expect("the question");
        let labels = buttons.iter().map(|(label, _)| label.clone()).collect();
        self.question = Some((i32::try_from(id).unwrap(), buttons));
        labels
    }

    async fn answer(&mut self, label: &str) -> String {
        let (id, buttons) = self.question.take().expect("a question open");
        self.bot
            .api
            .push_callback(CHAT, ADMIN, id, &data(&buttons, label));
        let edit = self
            .bot
            .api
            .wait_for(SOON, "the question's edit", |calls| {
                calls
                    .iter()
                    .filter(|c| c.method == "editmessagetext")
                    .filter(|c| c.params["message_id"].as_i64() == Some(i64::from(id)))
                    .find_map(|c| c.params["text"].as_str().map(str::to_string))
            })
            .await;
        edit.lines().last().unwrap_or_default().to_string()
    }

    async fn stopped(&mut self) {
        self.shows("⏹ Stopped.").await;
    }

    async fn restart(&mut self) {
        self.write("/restart").await;
        self.shows("✅ Restarted.").await;
    }

    fn said(&self) -> Vec<String> {
        self.bot.api.texts_to(CHAT)
    }
}

/// The operator at the host, attached to the conversation; the chat,
/// looked at where the contract says what it shows of the terminal.
struct Attach {
    bot: Bot,
    client: Terminal,
    /// The client's lines already looked at.
    read: usize,
    /// The texts shown by the clients before this one.
    earlier: Vec<String>,
}

impl Attach {
    async fn start(bot: Bot) -> Self {
        // The socket is there before the bot first polls Telegram.
        bot.api.wait_for_call("getUpdates", SOON).await;
        let client = Terminal::follow(&bot.db, &CHAT.to_string()).await;
        let read = client.seen.len();
        Self {
            bot,
            client,
            read,
            earlier: Vec::new(),
        }
    }

    /// The next line from the client that matches `pred` (read past).
    async fn next(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let at = self.client.find(self.read, what, pred).await;
        self.read = at + 1;
        self.client.seen[at].clone()
    }
}

impl Frontend for Attach {
    async fn write(&mut self, text: &str) {
        self.client.write(text).await;
        self.next(&format!("{text:?} accepted"), |v| event(v) == "accepted")
            .await;
    }

    async fn shows(&mut self, text: &str) {
        self.next(&format!("{text:?} said"), |v| {
            event(v) == "said" && v["text"] == text
        })
        .await;
    }

    async fn asked(&mut self) -> Vec<String> {
        let asked = self.next("a question", |v| event(v) == "asked").await;
        (asked["options"].as_array().expect("its options").iter())
            .map(|o| o["label"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    async fn answer(&mut self, label: &str) -> String {
        let line = json!({ "answer": label }).to_string();
        self.client.write(&line).await;
        let decided = self.next("the decision", |v| event(v) == "decided").await;
        decided["decision"].as_str().unwrap_or_default().to_string()
    }

    async fn stopped(&mut self) {
        let from = self.read;
        let ended = self
            .next("the turn's end", |v| event(v) == "turn_ended")
            .await;
        assert_eq!(ended["outcome"], "interrupted", "{ended}");
        let told = (self.client)
            .find(from, "the stop's notice", |v| {
                event(v) == "said" && v["text"] == "⏹ Stopped."
            })
            .await;
        self.read = self.read.max(told + 1);
        // The chat sees that the stop came from the terminal, then the stop.
        let api = &self.bot.api;
        let stopped = chat_shows(api, 0, "⏹ Stopped.").await;
        let texts = api.texts_to(CHAT);
        assert_eq!(
            texts[stopped - 2],
            "⌨️ From the terminal: /stop",
            "{texts:#?}"
        );
    }

    async fn restart(&mut self) {
        self.client.write("/restart").await;
        let bye = self.next("the end line", |v| event(v) == "bye").await;
        let reason = bye["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("restarting"), "{reason:?}");
        // Back once the new process said so in the chat; then attached again.
        chat_shows(&self.bot.api, 0, "✅ Restarted.").await;
        self.earlier = self.said();
        let again = Terminal::follow(&self.bot.db, &CHAT.to_string()).await;
        let old = std::mem::replace(&mut self.client, again);
        let status = old.exit().await;
        assert!(status.success(), "the client ends cleanly: {status:?}");
        self.read = self.client.seen.len();
    }

    fn said(&self) -> Vec<String> {
        let now = (self.client.seen.iter())
            .filter(|v| event(v) == "said")
            .filter_map(|v| v["text"].as_str().map(str::to_string));
        self.earlier.iter().cloned().chain(now).collect()
    }
}

#[tokio::test]
async fn telegram_keeps_the_contract() {
    let mut telegram = Telegram {
        bot: Bot::start().await,
        read: 0,
        questions: 0,
        question: None,
    };
    play(&mut telegram).await;
    telegram.bot.stop().await;
}

#[tokio::test]
async fn attach_keeps_the_contract() {
    let mut attach = Attach::start(Bot::start().await).await;
    play(&mut attach).await;
    attach.client.exit().await;
    attach.bot.stop().await;
}

/// A stop typed at the terminal is shown in the chat once, right before
/// what the stop says: with a turn running (whose stop drops what the chat
/// was not sent yet, the terminal's line among it) and with none.
#[actix_rt::test]
async fn a_stop_typed_at_the_terminal_is_shown_in_the_chat_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(agent(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let mut client = Terminal::follow(&db, "1").await;
    let echo = "⌨️ From the terminal: /stop";
    let told = |h: &Harness, stop: &str| {
        let texts = h.texts(1);
        let at = texts.iter().rposition(|t| t == stop);
        let echoes = texts.iter().filter(|t| *t == echo).count();
        (
            at.is_some_and(|at| at > 0 && texts[at - 1] == echo),
            echoes,
            texts,
        )
    };

    client.write("wait for it").await;
    chat_has(&h, "working on it").await;
    client.write("/stop").await;
    h.turn_ended(1, 1).await;
    let stopped = "⏹ Stopped.";
    chat_has(&h, stopped).await;
    let (before, echoes, texts) = told(&h, stopped);
    assert!(before && echoes == 1, "{texts:#?}");

    // Nothing runs: no purge, and still one line for the stop.
    client.write("/stop").await;
    let nothing = "Nothing to stop.";
    chat_has(&h, nothing).await;
    let (before, echoes, texts) = told(&h, nothing);
    assert!(before && echoes == 2, "{texts:#?}");
    assert!(client.exit().await.success());
}

/// Waits until chat 1 was sent `text`.
async fn chat_has(h: &Harness, text: &str) {
    h.api
        .wait_for(SOON, &format!("{text:?} in the chat"), |_| {
            h.texts(1).iter().any(|t| t == text).then_some(())
        })
        .await;
}

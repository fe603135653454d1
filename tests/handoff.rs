//! `/handoff`: the answer names the exact commands that go on at the host
//! (`turnstile attach`, and Claude Code's own `claude --resume` in the
//! conversation's workdir with the HOME its session lives in); the bot
//! then holds no agent process of the conversation, prewarms none after a
//! restart and skips a schedule's run; the next message takes it back and
//! resumes the same session. Refused while a turn runs: a session never
//! has two writers.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use support::fake_cli::{FakeLog, session_id};
use support::*;
use teloxide::types::ChatId;
use turnstile::Config;
use turnstile::agent::backends::ClaudeBackend;
use turnstile::agent::{Scenario, Step, ToolRegistry};
use turnstile::config::OperatorSchedule;
use turnstile::state::Store;

/// The start of the answer to `/handoff`.
const HANDED_OFF: &str = "🖥 Handed off to the host";
/// The start of the refusal while a turn runs.
const BUSY: &str = "⏳ A turn is under way here";
/// The start of the answer when there is no session to hand off.
const NOTHING: &str = "ℹ️ Nothing to hand off yet";
/// The start of the notice of a message that took the conversation back.
const TAKEN_BACK: &str = "↩️ Taken back from the host";

/// Waits for the first text to `chat` holding `part`, after the first
/// `skip` such texts.
async fn text_with(h: &Harness, chat: i64, part: &str, skip: usize) -> String {
    h.api
        .wait_for(SOON, &format!("a text with {part:?}"), |_| {
            h.texts(chat)
                .into_iter()
                .filter(|t| t.contains(part))
                .nth(skip)
        })
        .await
}

/// Sends `/handoff` in `chat` (from its user) until it is answered other
/// than busy (a turn that just ended may still be settling); that answer.
async fn hand_off(h: &Harness, chat: i64) -> String {
    let answers = |h: &Harness| -> Vec<String> {
        (h.texts(chat).into_iter())
            .filter(|t| t.starts_with(BUSY) || t.starts_with(HANDED_OFF) || t.starts_with(NOTHING))
            .collect()
    };
    for _ in 0..200 {
        let before = answers(h).len();
        h.say(chat, chat, "/handoff");
        let answer = (h.api)
            .wait_for(SOON, "the answer to /handoff", |_| {
                answers(h).get(before).cloned()
            })
            .await;
        if !answer.starts_with(BUSY) {
            return answer;
        }
    }
    panic!("/handoff still refused: {:?}", h.texts(chat));
}

/// The fake CLI behind a wrapper script in a directory whose name a shell
/// would split, with its workdir, HOME and CLAUDE_CONFIG_DIR in such
/// directories too: run with `HANDOFF_PROBE` set (which the bot never
/// passes to its agent), the script writes where it runs, its HOME and
/// CLAUDE_CONFIG_DIR and its arguments there instead.
struct OddPaths {
    fake: FakeLog,
    root: PathBuf,
}

impl OddPaths {
    fn new() -> Self {
        let fake = FakeLog::new(&Scenario::default());
        let root = fake.dir.path().join("it's a $dir");
        let bin = root.join("bin dir");
        std::fs::create_dir_all(&bin).unwrap();
        let script = bin.join("claude");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nif [ -n \"$HANDOFF_PROBE\" ]; then\n  printf '%s\\n' \"$(pwd)\" \"$HOME\" \"$CLAUDE_CONFIG_DIR\" \"$*\" > \"$HANDOFF_PROBE\"\n  exit 0\nfi\nexec '{}' \"$@\"\n",
                env!("CARGO_BIN_EXE_fake-claude")
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { fake, root }
    }

    fn path(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }

    fn config_file(&self) -> PathBuf {
        self.root.join("turn stile.toml")
    }

    /// The bot on the `claude` backend behind the script, its sessions kept
    /// warm, its config read from [`OddPaths::config_file`], state in `db`.
    async fn start(&self, db: &str) -> (Harness, Arc<ClaudeBackend>) {
        let mut vars = self.fake.env();
        vars.extend(
            [
                ("TURNSTILE_AGENT_COMMAND", self.path("bin dir/claude")),
                ("TURNSTILE_AGENT_WORKDIR", self.path("work dir/{chat}")),
                ("TURNSTILE_AGENT_ENV_HOME", self.path("home")),
                (
                    "TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR",
                    self.path("claude's"),
                ),
                ("TURNSTILE_AGENT_KEEP_WARM", "1h".into()),
                ("TURNSTILE_STATE_PATH", db.into()),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        );
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let file = self.config_file();
        let mut slot = None;
        let h = Harness::launch_edited(
            &pairs,
            Harness::fast_limits(),
            |config: &mut Config| config.file = Some(file),
            |config| {
                let backend = Arc::new(ClaudeBackend::new(
                    claude_settings(config),
                    Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
                ));
                slot = Some(Arc::clone(&backend));
                backend
            },
        )
        .await;
        (h, slot.expect("backend built"))
    }
}

/// The session id of the first fake CLI started.
async fn first_session(fake: &FakeLog) -> String {
    fake.wait_for_entries(1, |e| e.get("args").is_some()).await;
    session_id(fake.processes()[0].0)
}

/// How many conversations the state file `db` has handed off.
fn handoff_rows(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT COUNT(*) FROM handoffs", [], |r| r.get(0))
        .unwrap()
}

#[actix_rt::test]
async fn the_answer_is_the_exact_command_and_no_process_is_held() {
    let odd = OddPaths::new();
    let db = odd.fake.dir.path().join("state.db");
    let (mut h, backend) = odd.start(&db.display().to_string()).await;
    h.say(ADMIN, ADMIN, "hello");
    h.turn_ended(ADMIN, 1).await;
    let id = first_session(&odd.fake).await;
    assert_eq!(backend.running(), 1, "the session is kept warm");
    let answer = hand_off(&h, ADMIN).await;
    assert!(answer.starts_with(HANDED_OFF), "{answer}");
    wait_until("the warm process let go", SOON, || backend.running() == 0).await;
    assert_eq!(backend.spawned(), 1, "the handoff started nothing");
    // The attach command, its words as a shell reads them.
    let attach = (answer.lines())
        .find_map(|l| l.strip_prefix("turnstile attach "))
        .unwrap_or_else(|| panic!("no attach command in {answer}"));
    let words = std::process::Command::new("sh")
        .args(["-c", &format!("printf '%s\\n' {attach}")])
        .output()
        .unwrap();
    let config = odd.config_file().display().to_string();
    let expected = ["--config", config.as_str(), &ADMIN.to_string()].join("\n");
    assert_eq!(String::from_utf8_lossy(&words.stdout).trim_end(), expected);
    let line = (answer.lines())
        .find(|l| l.starts_with("cd "))
        .unwrap_or_else(|| panic!("no command line in {answer}"));
    assert!(line.ends_with(&format!(" --resume {id}")), "{line}");
    // The line, run by a shell, lands where the bot's CLI ran, with its
    // HOME and CLAUDE_CONFIG_DIR, resuming its session.
    let probe = odd.fake.dir.path().join("probe");
    let ran = std::process::Command::new("sh")
        .args(["-c", line])
        .env("HANDOFF_PROBE", &probe)
        .status()
        .unwrap();
    assert!(ran.success(), "{line}");
    let seen = std::fs::read_to_string(&probe).unwrap();
    let workdir = odd.path(&format!("work dir/{ADMIN}"));
    let expected = [
        workdir.as_str(),
        &odd.path("home"),
        &odd.path("claude's"),
        &format!("--resume {id}"),
    ];
    assert_eq!(seen.lines().collect::<Vec<_>>(), expected, "{line}");
    assert_eq!(handoff_rows(&db), 1);
    h.bot.stop().await;
}

#[actix_rt::test]
async fn the_next_message_takes_it_back_in_the_same_session() {
    let odd = OddPaths::new();
    let db = odd.fake.dir.path().join("state.db");
    let (mut h, backend) = odd.start(&db.display().to_string()).await;
    h.say(ADMIN, ADMIN, "hello");
    h.turn_ended(ADMIN, 1).await;
    let id = first_session(&odd.fake).await;
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    wait_until("the warm process let go", SOON, || backend.running() == 0).await;
    h.say(ADMIN, ADMIN, "back again");
    h.turn_ended(ADMIN, 2).await;
    let texts = h.texts(ADMIN);
    let back = texts.iter().position(|t| t.starts_with(TAKEN_BACK));
    let answer = texts.iter().position(|t| t == "echo: back again");
    assert!(
        matches!((back, answer), (Some(b), Some(a)) if b < a),
        "told first, then answered: {texts:?}"
    );
    odd.fake
        .wait_for_entries(2, |e| e.get("args").is_some())
        .await;
    let processes = odd.fake.processes();
    assert!(
        processes[1].1.contains(&format!("--resume={id}")),
        "the same session resumed: {processes:?}"
    );
    assert_eq!(handoff_rows(&db), 0, "the row is gone");
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_handoff_is_refused_while_a_turn_runs() {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(ADMIN, ADMIN, "hi");
    h.turn_ended(ADMIN, 1).await;
    h.say(ADMIN, ADMIN, "slow");
    h.event(
        "the slow turn started",
        |e| matches!(e, turnstile::events::BotEvent::TurnStarted { turn, .. } if turn.0 == 2),
    )
    .await;
    h.say(ADMIN, ADMIN, "/handoff");
    text_with(&h, ADMIN, BUSY, 0).await;
    h.say(ADMIN, ADMIN, "/stop");
    h.turn_ended(ADMIN, 2).await;
    assert!(
        !h.texts(ADMIN).iter().any(|t| t.contains(HANDED_OFF)),
        "{:?}",
        h.texts(ADMIN)
    );
    // Once the turn is over, the handoff goes through.
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    h.say(USER, USER, "/handoff");
    text_with(&h, USER, "Only admins can use /handoff.", 0).await;
}

#[actix_rt::test]
async fn with_no_session_yet_there_is_nothing_to_hand_off() {
    let h = Harness::start(Scenario::default(), &[]).await;
    h.say(ADMIN, ADMIN, "/handoff");
    let answer = text_with(&h, ADMIN, "Nothing to hand off yet", 0).await;
    assert!(
        answer.ends_with(&format!("\nturnstile attach {ADMIN}")),
        "{answer}"
    );
    h.say(ADMIN, ADMIN, "hi");
    text_with(&h, ADMIN, "echo: hi", 0).await;
    assert!(
        !h.texts(ADMIN).iter().any(|t| t.starts_with(TAKEN_BACK)),
        "nothing was handed off: {:?}",
        h.texts(ADMIN)
    );
}

#[actix_rt::test]
async fn a_handoff_outlives_a_restart_and_is_not_prewarmed() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db").display().to_string();
    let env = [
        ("TURNSTILE_STATE_PATH", db.as_str()),
        ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
    ];
    let mut h = Harness::start(Scenario::default(), &env).await;
    h.say(ADMIN, ADMIN, "hello");
    h.turn_ended(ADMIN, 1).await;
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    let Harness { api, bot, .. } = h;
    bot.stop().await;
    let stored = Store::open(Path::new(&db))
        .unwrap()
        .session(ChatId(ADMIN).into())
        .unwrap()
        .expect("a session stored");

    // The next process, on the same state file and the same Telegram.
    let limits = Harness::fast_limits();
    let mut h = Harness::start_scripted_on(api, Scenario::default(), &env, limits, |_| {}).await;
    wait_until("the prewarm's last log line", SOON, || {
        logs.text().contains("prewarm done")
    })
    .await;
    assert!(
        h.backend.log().opens.is_empty(),
        "nothing prewarmed: {:?}",
        h.backend.log().opens
    );
    assert!(
        logs.text()
            .contains("session not prewarmed why=\"the conversation is handed off to the host\""),
        "{}",
        logs.text()
    );
    h.say(ADMIN, ADMIN, "/status");
    let status = text_with(&h, ADMIN, &format!("chat {ADMIN}:"), 0).await;
    assert!(status.contains("handed off to the host"), "{status}");
    h.say(ADMIN, ADMIN, "again");
    h.turn_ended(ADMIN, 1).await;
    text_with(&h, ADMIN, TAKEN_BACK, 0).await;
    assert_eq!(
        h.backend.log().opens,
        [(ADMIN.to_string(), Some(stored))],
        "one session, the stored one resumed"
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_schedules_run_is_skipped_while_handed_off() {
    let h = Harness::start_edited(Scenario::default(), &[], |config: &mut Config| {
        config.schedules.list.push(OperatorSchedule {
            name: "tick".into(),
            chat: ADMIN,
            every: Some("1s".into()),
            prompt: "ping".into(),
            ..OperatorSchedule::default()
        })
    })
    .await;
    text_with(&h, ADMIN, "echo: ⏰ tick: ping", 0).await;
    // A run may hold the chat when /handoff comes: asked again then.
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    let answered = h
        .texts(ADMIN)
        .iter()
        .filter(|t| t.starts_with("echo:"))
        .count();
    text_with(&h, ADMIN, "⏭ A scheduled run was skipped", 1).await;
    assert_eq!(
        h.texts(ADMIN)
            .iter()
            .filter(|t| t.starts_with("echo:"))
            .count(),
        answered,
        "no run answered while handed off: {:?}",
        h.texts(ADMIN)
    );
    assert!(
        !h.texts(ADMIN).iter().any(|t| t.starts_with(TAKEN_BACK)),
        "a run never takes it back: {:?}",
        h.texts(ADMIN)
    );
    h.say(ADMIN, ADMIN, "mine now");
    text_with(&h, ADMIN, "echo: mine now", 0).await;
    text_with(&h, ADMIN, TAKEN_BACK, 0).await;
}

#[actix_rt::test]
async fn a_handed_off_conversation_is_never_retired_as_idle() {
    let env = [
        ("TURNSTILE_DISPATCHER_IDLE_EVICTION", "100ms"),
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
    ];
    let mut h = Harness::start(Scenario::default(), &env).await;
    h.say(ADMIN, ADMIN, "hello");
    h.turn_ended(ADMIN, 1).await;
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    // A command meanwhile finds the chat idle, and still keeps it.
    h.say(ADMIN, ADMIN, "/stop");
    text_with(&h, ADMIN, "Nothing to stop", 0).await;
    // Another conversation, idle after the handoff: once it is retired,
    // the handed-off one would have been too.
    h.say(USER, USER, "hi");
    h.turn_ended(USER, 1).await;
    let gauges = Arc::clone(&h.bot.gauges);
    wait_until("the other conversation retired", SOON, || {
        gauges.supervisors.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    h.say(ADMIN, ADMIN, "/status");
    let status = text_with(&h, ADMIN, &format!("chat {ADMIN}:"), 0).await;
    assert!(status.contains("handed off to the host"), "{status}");
    assert!(!status.contains(&format!("chat {USER}:")), "{status}");
    h.say(ADMIN, ADMIN, "again");
    h.turn_ended(ADMIN, 2).await;
    text_with(&h, ADMIN, TAKEN_BACK, 0).await;
}

/// `turnstile attach` with the bot's state file, in `--json` mode.
fn attach(db: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .arg("attach")
        .args(args)
        .env_clear()
        .env("TURNSTILE_STATE_PATH", db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

#[actix_rt::test]
async fn attach_lists_it_handed_off_and_a_typed_line_takes_it_back() {
    use tokio::io::AsyncWriteExt as _;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.say(ADMIN, ADMIN, "hello");
    h.turn_ended(ADMIN, 1).await;
    assert!(hand_off(&h, ADMIN).await.starts_with(HANDED_OFF));
    let key = ADMIN.to_string();
    let listed = attach(&db, &["--json"]).output().await.unwrap();
    let row = (String::from_utf8_lossy(&listed.stdout).lines())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "conversation" && v["conversation"] == key.as_str())
        .unwrap_or_else(|| panic!("not listed: {listed:?}"));
    assert_eq!(row["state"], "handed off", "{row}");
    let mut client = attach(&db, &["--json", &ADMIN.to_string()])
        .spawn()
        .unwrap();
    let mut stdin = client.stdin.take().unwrap();
    stdin.write_all(b"from the host\n").await.unwrap();
    h.turn_ended(ADMIN, 2).await;
    let texts = h.texts(ADMIN);
    let back = texts.iter().position(|t| t.starts_with(TAKEN_BACK));
    let answer = texts.iter().position(|t| t == "echo: from the host");
    assert!(
        matches!((back, answer), (Some(b), Some(a)) if b < a),
        "taken back, then answered: {texts:?}"
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn in_a_group_the_answer_goes_to_the_group_and_only_admins_may_ask() {
    use support::bot_api::files::{supergroup, text_message};
    const GROUP: i64 = -100_777;
    let h = Harness::start(Scenario::default(), &[]).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "/handoff@turnstile_bot",
    ));
    text_with(&h, GROUP, "Only admins can use /handoff.", 0).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        ADMIN,
        "/handoff@turnstile_bot",
    ));
    let answer = text_with(&h, GROUP, NOTHING, 0).await;
    assert!(
        answer.ends_with(&format!("\nturnstile attach {GROUP}")),
        "{answer}"
    );
    assert!(
        h.texts(ADMIN).is_empty(),
        "nothing privately: {:?}",
        h.texts(ADMIN)
    );
}

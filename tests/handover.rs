//! `/restart` hands an idle agent over to the re-executed process: the
//! warm process keeps running across the exec and the next message goes
//! to it, with no new process and no `initialize`; one the next process
//! would start otherwise (the config changed) is closed and a fresh one
//! resumes the session; no agent started later inherits a handed pipe.
//! With the real binary (the exec is `main`'s) and `fake-claude`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::fake_cli::FakeLog;
use support::process::BotProcess;
use support::*;
use turnstile::agent::Scenario;

const ADMIN: i64 = 9;
const USER: i64 = 1001;
/// A start, a turn and a restart of the debug binary on a loaded machine.
const LONG: Duration = Duration::from_secs(60);

struct Setup {
    fake: FakeLog,
    api: FakeBotApi,
    log: PathBuf,
    dump: PathBuf,
    env: Vec<(String, String)>,
}

async fn setup() -> Setup {
    let fake = FakeLog::new(&Scenario::default());
    let api = FakeBotApi::start().await;
    let log = fake.dir.path().join("bot.log");
    let dump = fake.dir.path().join("dump.jsonl");
    let mut env = fake.env();
    env.extend(
        [
            ("TURNSTILE_AGENT_KEEP_WARM", "1h".to_owned()),
            (
                "TURNSTILE_STATE_PATH",
                fake.dir.path().join("state.db").display().to_string(),
            ),
            ("TURNSTILE_LOG", "info,turnstile=debug".to_owned()),
            (
                "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP",
                dump.display().to_string(),
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    Setup {
        fake,
        api,
        log,
        dump,
        env,
    }
}

impl Setup {
    fn spawn(&self, config: Option<&Path>) -> BotProcess {
        let env: Vec<(&str, String)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        match config {
            Some(file) => BotProcess::spawn_with_config(&self.api, &self.log, &env, file),
            None => BotProcess::spawn(&self.api, &self.log, &env),
        }
    }

    async fn answered(&self, chat: i64, text: &str) {
        self.api.push_text(chat, chat, text);
        let want = format!("echo: {text}");
        wait_until(&format!("{want:?} in chat {chat}"), LONG, || {
            self.api.texts_to(chat).contains(&want)
        })
        .await;
    }

    /// `/restart` from the admin once a session was kept warm `kept` times
    /// (each turn ends so); waits until the new process is back.
    async fn restart(&self, bot: &mut BotProcess, kept: usize) {
        wait_until("the session kept warm", LONG, || {
            bot.log_text().matches("session kept warm").count() >= kept
        })
        .await;
        let restarted = |api: &FakeBotApi| {
            (api.texts_to(ADMIN).iter())
                .filter(|t| *t == "✅ Restarted.")
                .count()
        };
        let before = restarted(&self.api);
        self.api.push_text(ADMIN, ADMIN, "/restart");
        let back = tokio::time::timeout(
            LONG,
            wait_until("✅ Restarted.", LONG * 2, || restarted(&self.api) > before),
        )
        .await;
        assert!(
            back.is_ok(),
            "not back from /restart ({:?}): {}",
            bot.child.try_wait(),
            bot.log_text()
        );
    }

    /// The pids of the fakes started, in order.
    fn started(&self) -> Vec<u32> {
        self.fake
            .processes()
            .into_iter()
            .map(|(pid, _)| pid)
            .collect()
    }

    /// What each fake dumped at its start.
    fn dumps(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.dump)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

async fn stop(mut bot: BotProcess) {
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

#[tokio::test]
async fn a_restart_hands_the_idle_agent_to_the_next_process() {
    let s = setup().await;
    let mut bot = s.spawn(None);
    s.answered(USER, "hello").await;
    s.restart(&mut bot, 1).await;
    s.answered(USER, "again").await;
    // An adopted process is handed over again at the next restart.
    s.restart(&mut bot, 2).await;
    s.answered(USER, "and again").await;
    let log = bot.log_text();
    assert_eq!(
        s.started().len(),
        1,
        "one process across two restarts: {log}"
    );
    assert!(
        log.contains("agent process taken over from before the restart"),
        "{log}"
    );
    let initializes = (s.fake.entries().iter())
        .filter(|e| e["from_host"]["request"]["subtype"] == "initialize")
        .count();
    assert_eq!(
        initializes, 1,
        "the handed process is not initialized again"
    );
    assert!(
        (s.fake.entries().iter()).any(|e| e["from_host"]["message"]["content"]
            .to_string()
            .contains("again")),
        "the message after the restart went to the handed process: {:#?}",
        s.fake.entries()
    );
    // An agent started after the restart holds no pipe of another agent:
    // past its own 0-2, only what the first one held too (what the bot's
    // own environment passes on).
    s.answered(ADMIN, "a new chat").await;
    let dumps = s.dumps();
    assert_eq!(dumps.len(), 2, "{dumps:#?}");
    let pipes = |dump: &Value| -> Vec<String> {
        (dump["fds"].as_object().expect("fds").values())
            .filter_map(|target| target.as_str().filter(|t| t.starts_with("pipe:")))
            .map(String::from)
            .collect()
    };
    let before = pipes(&dumps[0]);
    let inherited: Vec<String> = (pipes(&dumps[1]).into_iter())
        .filter(|pipe| !before.contains(pipe))
        .collect();
    assert!(
        inherited.is_empty(),
        "inherited pipes: {inherited:?} {dumps:#?}"
    );
    stop(bot).await;
    s.fake.assert_no_process_left().await;
}

#[tokio::test]
async fn an_agent_the_next_process_would_start_otherwise_is_closed_and_started_anew() {
    let s = setup().await;
    let config = s.fake.dir.path().join("turnstile.toml");
    std::fs::write(&config, "[agent]\nsystem_prompt = \"Be brief.\"\n").unwrap();
    let mut bot = s.spawn(Some(&config));
    s.answered(USER, "hello").await;
    let first = s.started()[0];
    std::fs::write(&config, "[agent]\nsystem_prompt = \"Be thorough.\"\n").unwrap();
    s.restart(&mut bot, 1).await;
    s.answered(USER, "again").await;
    let log = bot.log_text();
    let started = s.started();
    assert_eq!(started.len(), 2, "a fresh process after the change: {log}");
    assert!(log.contains("was started otherwise"), "{log}");
    let resumed = &s.fake.processes()[1].1;
    assert!(
        resumed.iter().any(|a| a.starts_with("--resume=")),
        "the fresh process resumes the session: {resumed:?}"
    );
    wait_until("the old process gone", LONG, || {
        !Path::new(&format!("/proc/{first}")).exists()
    })
    .await;
    stop(bot).await;
    s.fake.assert_no_process_left().await;
}

#[tokio::test]
async fn a_handed_agent_no_conversation_takes_is_closed_once_the_prewarm_is_over() {
    let mut s = setup().await;
    s.env.retain(|(k, _)| k != "TURNSTILE_AGENT_KEEP_WARM");
    let config = s.fake.dir.path().join("turnstile.toml");
    std::fs::write(&config, "[agent]\nkeep_warm = \"1h\"\n").unwrap();
    let mut bot = s.spawn(Some(&config));
    s.answered(USER, "hello").await;
    let first = s.started()[0];
    // The next process keeps nothing warm: nobody takes the handed agent.
    std::fs::write(&config, "[agent]\nkeep_warm = \"0s\"\n").unwrap();
    s.restart(&mut bot, 1).await;
    wait_until("the handed agent closed", LONG, || {
        bot.log_text().contains("handed-over agent closed")
    })
    .await;
    wait_until("the handed agent gone", LONG, || {
        !Path::new(&format!("/proc/{first}")).exists()
    })
    .await;
    assert_eq!(s.started(), [first], "nothing else started");
    stop(bot).await;
    s.fake.assert_no_process_left().await;
}

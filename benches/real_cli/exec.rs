//! 5c. Across `/restart`'s re-execution: the real `turnstile` binary, the
//! chat's warm CLI process handed to the re-executed process, against a
//! warm turn before the restart.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::anthropic::FakeAnthropic;
use super::support::bot_api::{FakeBotApi, Options, Record};
use super::support::config::ConfigVars;
use super::support::figures::{Better, figure};
use super::support::stats::{ms_cells, p50_of, ratio, table};
use super::support::{Fakes, USER};
use super::{API_DELAY, GAP, REPLY_TEXT, TURN_TIMEOUT, USER_TEXT, end_turn_reply};

/// The bot as a child process, its log in a file.
struct Child {
    process: tokio::process::Child,
    log: std::path::PathBuf,
}

impl Child {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `done` holds of the log.
    async fn until(&self, what: &str, done: impl Fn(&str) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + TURN_TIMEOUT;
        while !done(&self.log()) {
            if Instant::now() > deadline {
                return Err(format!("exec: timed out waiting for {what}"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

/// Says "hello" and waits for the answer; answers how long the message
/// took to reach the model (the fake Bot API's push to the fake API's
/// first request).
async fn turn(tg: &FakeBotApi, api: &FakeAnthropic, bot: &Child) -> Result<f64, String> {
    let calls = api.model_call_times().len();
    let answers = tg
        .texts_to(USER)
        .iter()
        .filter(|t| *t == REPLY_TEXT)
        .count();
    api.push(end_turn_reply());
    let pushed = Instant::now();
    tg.push_text(USER, USER, USER_TEXT);
    let deadline = pushed + TURN_TIMEOUT;
    while tg
        .texts_to(USER)
        .iter()
        .filter(|t| *t == REPLY_TEXT)
        .count()
        == answers
    {
        if Instant::now() > deadline {
            return Err(format!("exec: no answer:\n{}", bot.log()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = *api
        .model_call_times()
        .get(calls)
        .ok_or("exec: the answer came without a model call")?;
    Ok(first.saturating_duration_since(pushed).as_secs_f64() * 1000.0)
}

fn spawn(vars: &ConfigVars, log: &Path) -> Result<Child, String> {
    let stderr = std::fs::File::create(log).map_err(|e| format!("exec: log: {e}"))?;
    let process = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("exec: the bot did not start: {e}"))?;
    Ok(Child {
        process,
        log: log.to_path_buf(),
    })
}

/// Per iteration: a warm turn, `/restart` (the binary re-executes itself),
/// and the first turn after it.
pub(super) async fn exec_run(claude: String, iterations: usize) -> Result<String, String> {
    let fakes = Fakes::new();
    let options = Options {
        record: Record::Calls,
        idle_close: None,
        strict_idle: false,
    };
    let tg = fakes.bot_api(options).await;
    let api = fakes.run(FakeAnthropic::start()).await;
    api.set_delay(API_DELAY);
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).map_err(|e| format!("home: {e}"))?;
    let home = home.display().to_string();
    let vars = ConfigVars::new(&tg.url()).set_all([
        ("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "5s".to_string()),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string()),
        ("TURNSTILE_ACCESS_ADMINS", USER.to_string()),
        (
            "TURNSTILE_STATE_PATH",
            dir.path().join("bench.db").display().to_string(),
        ),
        (
            "TURNSTILE_LOG",
            "info,turnstile::chat::supervisor=debug".into(),
        ),
        ("TURNSTILE_AGENT_BACKEND", "claude".into()),
        ("TURNSTILE_AGENT_COMMAND", claude),
        ("TURNSTILE_AGENT_WORKDIR", home.clone()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL", api.base_url()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_API_KEY", "bench-key".into()),
        ("TURNSTILE_AGENT_ENV_HOME", home.clone()),
        ("TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR", home),
        (
            "TURNSTILE_AGENT_ENV_CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "1".into(),
        ),
        ("TURNSTILE_AGENT_KEEP_WARM", "10m".into()),
        ("TURNSTILE_AGENT_SANDBOX", "none".into()),
        ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s".into()),
    ]);
    let mut bot = spawn(&vars, &dir.path().join("bot.log"))?;
    eprintln!("real_cli: exec: warm-up (one turn, not counted)");
    turn(&tg, &api, &bot).await?;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        tokio::time::sleep(GAP).await;
        // The turn's session is kept warm once it settled: only then is it
        // handed over.
        let kept = bot.log().matches("session kept warm").count();
        before.push(turn(&tg, &api, &bot).await?);
        bot.until("the session kept warm", |log| {
            log.matches("session kept warm").count() > kept
        })
        .await?;
        let restarted = tg
            .texts_to(USER)
            .iter()
            .filter(|t| *t == "✅ Restarted.")
            .count();
        tg.push_text(USER, USER, "/restart");
        let deadline = Instant::now() + TURN_TIMEOUT;
        while tg
            .texts_to(USER)
            .iter()
            .filter(|t| *t == "✅ Restarted.")
            .count()
            == restarted
        {
            if Instant::now() > deadline {
                return Err(format!("exec: not back from /restart:\n{}", bot.log()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(GAP).await;
        after.push(turn(&tg, &api, &bot).await?);
        eprintln!(
            "real_cli: exec {} of {iterations}: first API request warm {:.0} ms, after /restart {:.0} ms",
            i + 1,
            before[i],
            after[i],
        );
    }
    let log = bot.log();
    let started = log.matches("agent process started").count();
    let taken = log
        .matches("agent process taken over from before the restart")
        .count();
    // SAFETY: a plain kill(2) on our own child.
    if let Some(pid) = bot.process.id() {
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }
    let _ = tokio::time::timeout(TURN_TIMEOUT, bot.process.wait()).await;
    let (p50, cells) = (p50_of, ms_cells);
    figure(
        "real_cli",
        "first message after /restart's re-exec → first API request, p50 (ms)",
        p50(&after),
        "ms",
        Better::Lower,
        (50.0, 20.0),
    );
    let rows = vec![
        vec![
            "warm process, before `/restart`: user message → first API request".into(),
            cells(&before),
            String::new(),
        ],
        vec![
            "**first message after `/restart`** (the warm process handed over): user message → first API request".into(),
            cells(&after),
            format!("after / before (p50): **{}**", ratio(p50(&after), p50(&before))),
        ],
    ];
    let mut f = String::new();
    let _ = writeln!(f, "\n### 5c. Across `/restart`'s re-execution\n");
    let _ = writeln!(
        f,
        "The real `turnstile` binary, one chat, {iterations} iterations after one warm-up turn: a turn \
         on the warm process, then `/restart` in the chat (the binary re-executes itself and hands the \
         idle CLI process over), then, {} ms after \"✅ Restarted.\", the first message after it. Times \
         from the fake Bot API's push of the message to the fake Messages API's first request. CLI \
         processes started: {started}; taken over across a restart: {taken}.\n",
        GAP.as_millis()
    );
    f.push_str(&table(&["measure", "p50 / p99 / max", "ratio"], &rows));
    f.push('\n');
    Ok(f)
}

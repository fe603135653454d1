//! The sealed agent process, proven with `fake-claude`: what reaches the
//! child's environment, argv and working directory, the launcher prefix,
//! stored session ids that are not UUIDs, and (with `--features real-cli`,
//! as root) bubblewrap.
//!
//! The environment tests need secrets in turnstile's own environment, so a
//! plain test re-runs this binary's `#[ignore]`d inner test with them set
//! ([`run_inner`]); nothing here changes the environment of a running
//! process.

mod support;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::fake_cli::{self, FakeLog};
use support::*;
use turnstile::agent::Scenario;
use turnstile::agent::claude::{ClaudeBackend, ClaudeSettings};
use turnstile::chat::ToolRegistry;

/// The bot token in the parent's environment.
const PARENT_TOKEN: &str = "4242:parent-token-never-for-the-agent";
/// A `TURNSTILE_*` variable in the parent's environment.
const PARENT_TURNSTILE: (&str, &str) = ("TURNSTILE_SEAL_SECRET", "turnstile-only");
/// Named in `agent.pass_env`.
const PASSED: (&str, &str) = ("SEAL_PASSED", "passed-value");
/// Not named anywhere.
const NOT_PASSED: (&str, &str) = ("SEAL_NOT_PASSED", "operator-secret");

/// Runs the ignored test `name` of this binary in a child process whose
/// environment holds the bot token, a `TURNSTILE_*` variable and two more.
fn run_inner(name: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            name,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TELEGRAM_BOT_TOKEN", PARENT_TOKEN)
        .env(PARENT_TURNSTILE.0, PARENT_TURNSTILE.1)
        .env(PASSED.0, PASSED.1)
        .env(NOT_PASSED.0, NOT_PASSED.1)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
}

/// Panics unless started by [`run_inner`].
fn assert_run_inner() {
    assert_eq!(
        std::env::var("TELEGRAM_BOT_TOKEN").as_deref(),
        Ok(PARENT_TOKEN),
        "run this through its outer test, which sets the parent's environment"
    );
}

/// The bot on the `claude` backend with `vars`, the operator's MCP server
/// `files` added to its settings.
async fn launch(vars: &[(String, String)]) -> (Harness, Arc<ClaudeBackend>) {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut slot = None;
    let harness = Harness::launch(&pairs, Harness::fast_limits(), |config| {
        let mut settings = ClaudeSettings::from_config(config);
        settings.mcp_servers.insert(
            "files".into(),
            json!({"command": "mcp-files", "args": ["."], "env": {"K": "v"}}),
        );
        let backend = Arc::new(ClaudeBackend::new(
            settings,
            Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
        ));
        slot = Some(Arc::clone(&backend));
        backend
    })
    .await;
    (harness, slot.expect("backend built"))
}

/// The dump lines `fake-claude` wrote to `path`.
fn dumps(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The dump's arguments.
fn args(dump: &Value) -> Vec<String> {
    dump["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

#[test]
fn the_agent_gets_a_clean_environment_its_own_workdir_and_the_configured_flags() {
    run_inner("inner_clean_environment_workdir_and_flags");
}

#[actix_rt::test]
#[ignore = "run by the_agent_gets_a_clean_environment_its_own_workdir_and_the_configured_flags"]
async fn inner_clean_environment_workdir_and_flags() {
    assert_run_inner();
    let files = FakeLog::new(&Scenario::default());
    let dump = files.dir.path().join("dump.jsonl");
    let mut vars = files.env();
    vars.extend(
        [
            (
                "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP",
                dump.display().to_string(),
            ),
            ("TURNSTILE_AGENT_ENV_FROM_CONFIG", "yes".into()),
            ("TURNSTILE_AGENT_PASS_ENV", PASSED.0.into()),
            ("TURNSTILE_AGENT_DENIED_TOOLS", "Bash,WebFetch".into()),
            ("TURNSTILE_AGENT_SETTING_SOURCES", "project,local".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (mut h, _backend) = launch(&vars).await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "two");
    h.turn_ended(1, 2).await;
    h.say(2, USER, "three");
    h.turn_ended(2, 1).await;
    assert_eq!(h.texts(1), vec!["echo: one", "echo: two"]);
    let seen = dumps(&dump);
    assert_eq!(seen.len(), 3, "{seen:#?}");

    // The environment: the base, agent.env and pass_env; nothing else.
    let env = seen[0]["env"].as_object().expect("env");
    for (name, value) in env {
        assert!(
            name != "TELEGRAM_BOT_TOKEN" && !name.starts_with("TURNSTILE_"),
            "{name} reached the agent"
        );
        let text = value.as_str().unwrap_or_default();
        assert!(!text.contains(PARENT_TOKEN), "{name} carries the token");
    }
    assert!(!env.contains_key(NOT_PASSED.0), "{env:?}");
    assert_eq!(env[PASSED.0], PASSED.1);
    assert_eq!(env["FROM_CONFIG"], "yes");
    assert_eq!(env["PATH"].as_str(), std::env::var("PATH").ok().as_deref());
    assert_eq!(env["CLAUDE_CODE_ENTRYPOINT"], "sdk-ts");

    // One workdir per chat, created 0700.
    for (dump, chat) in [(&seen[0], 1), (&seen[2], 2)] {
        let workdir = files.workdir(chat);
        assert_eq!(dump["cwd"], workdir.display().to_string());
        let mode = std::fs::metadata(&workdir)
            .expect("workdir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{}", workdir.display());
    }

    // The flags, as configured; the session resumed as one argument.
    let first = args(&seen[0]);
    for flag in [
        "--setting-sources=project,local",
        "--strict-mcp-config",
        "--disallowedTools=Bash,WebFetch",
    ] {
        assert!(first.contains(&flag.to_string()), "{flag} not in {first:?}");
    }
    let mcp = first
        .iter()
        .find_map(|a| a.strip_prefix("--mcp-config="))
        .expect("--mcp-config");
    let mcp: Value = serde_json::from_str(mcp).expect("JSON");
    assert_eq!(
        mcp["mcpServers"]["telegram-tools"],
        json!({"type": "sdk", "name": "telegram-tools"})
    );
    assert_eq!(mcp["mcpServers"]["files"]["command"], "mcp-files");
    assert!(
        !first.iter().any(|a| a.starts_with("--resume")),
        "{first:?}"
    );
    let resume = format!(
        "--resume={}",
        fake_cli::session_id(seen[0]["pid"].as_u64().expect("pid") as u32)
    );
    assert!(args(&seen[1]).contains(&resume), "{:?}", args(&seen[1]));
}

/// Log lines written by this test binary's subscriber.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = LOGS.lock() {
            logs.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[actix_rt::test]
async fn a_stored_session_id_that_is_not_a_uuid_is_dropped_with_a_warning() {
    let _ = tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .try_init();
    let state = tempfile::tempdir().expect("temp dir");
    let db = state.path().join("turnstile.db");
    {
        let store = turnstile::state::Store::open(&db).expect("store");
        store
            .set_session(
                teloxide::types::ChatId(1).into(),
                Some("--dangerously-skip-permissions"),
            )
            .expect("session stored");
    }
    let files = FakeLog::new(&Scenario::default());
    let mut vars = files.env();
    vars.push(("TURNSTILE_STATE_PATH".into(), db.display().to_string()));
    let (mut h, _backend) = launch(&vars).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"], "a fresh session answered");
    let procs = files.processes();
    assert_eq!(procs.len(), 1);
    assert!(
        !procs[0]
            .1
            .iter()
            .any(|a| a.contains("resume") || a.contains("dangerously")),
        "{:?}",
        procs[0].1
    );
    let logs = String::from_utf8_lossy(&LOGS.lock().expect("logs")).into_owned();
    assert!(
        logs.contains("WARN") && logs.contains("is not a UUID"),
        "no warning logged:\n{logs}"
    );
}

#[actix_rt::test]
async fn a_launcher_prefix_wraps_the_agent_and_the_turn_still_works() {
    let files = FakeLog::new(&Scenario::default());
    let wrap = files.dir.path().join("wrap.sh");
    let record = files.dir.path().join("wrap.args");
    {
        let mut script = std::fs::File::create(&wrap).expect("wrap.sh");
        write!(
            script,
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nshift 2\nexec \"$@\"\n",
            record.display()
        )
        .expect("written");
    }
    std::fs::set_permissions(&wrap, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut vars = files.env();
    vars.push((
        "TURNSTILE_AGENT_LAUNCHER".into(),
        format!("{},{{chat}},{{workdir}}", wrap.display()),
    ));
    let (mut h, _backend) = launch(&vars).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    let recorded = std::fs::read_to_string(&record).expect("the launcher ran");
    let lines: Vec<&str> = recorded.lines().collect();
    assert_eq!(lines[0], "1");
    assert_eq!(lines[1], files.workdir(1).display().to_string());
    assert_eq!(lines[2], env!("CARGO_BIN_EXE_fake-claude"));
    assert!(lines.contains(&"--strict-mcp-config"), "{lines:?}");
}

/// Bubblewrap around `fake-claude`: needs root and `bwrap`, so it is part
/// of the real-CLI group and fails naming what is missing.
#[cfg(feature = "real-cli")]
#[test]
fn under_bubblewrap_the_agent_cannot_see_the_state_or_turnstile() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let bwrap = Command::new("bwrap").arg("--version").output();
    assert!(
        uid == 0 && bwrap.as_ref().is_ok_and(|o| o.status.success()),
        "the bubblewrap test (--features real-cli) cannot run here: it needs root \
         (uid {uid}) and `bwrap` on PATH (Debian package bubblewrap): {bwrap:?}"
    );
    run_inner("inner_bubblewrap_hides_the_state_and_turnstile");
}

#[cfg(feature = "real-cli")]
#[actix_rt::test]
#[ignore = "run by under_bubblewrap_the_agent_cannot_see_the_state_or_turnstile"]
async fn inner_bubblewrap_hides_the_state_and_turnstile() {
    assert_run_inner();
    // The state outside /tmp (which the sandbox replaces anyway), so the
    // state directory's own hiding is what is tested.
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let db = state.path().join("turnstile.db");
    let files = FakeLog::new(&Scenario::default());
    let turnstile = format!("/proc/{}", std::process::id());
    let probes = [
        db.display().to_string(),
        state.path().display().to_string(),
        format!("{turnstile}/environ"),
        "/proc/1/environ".to_string(),
    ];
    let mut vars = files.env();
    vars.retain(|(k, _)| k != "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_SCENARIO");
    vars.extend(
        [
            ("TURNSTILE_STATE_PATH", db.display().to_string()),
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap".into()),
            // Relative: written in the workdir, the one place it can write.
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl".into()),
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_PROBE", probes.join(":")),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (mut h, _backend) = launch(&vars).await;
    assert!(db.exists(), "the state file is there, outside");
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    let seen = dumps(&files.workdir(1).join("dump.jsonl"));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let probes = &seen[0]["probes"];
    assert_eq!(probes[&db.display().to_string()], Value::Null, "{probes:#}");
    assert_eq!(
        probes[&state.path().display().to_string()],
        json!(["homes"]),
        "the state directory is an empty tmpfs; only the agent's home shows through: {probes:#}"
    );
    for (path, seen) in probes.as_object().expect("probes") {
        let text = seen.to_string();
        assert!(!text.contains(PARENT_TOKEN), "{path}: {text}");
        assert!(!text.contains(PARENT_TURNSTILE.1), "{path}: {text}");
    }
    assert_eq!(
        probes[&format!("{turnstile}/environ")],
        Value::Null,
        "{probes:#}"
    );
    assert!(probes["/proc/1/environ"].is_string(), "{probes:#}");
    assert_eq!(seen[0]["cwd"], files.workdir(1).display().to_string());
    let env = seen[0]["env"].as_object().expect("env");
    assert_eq!(
        env["HOME"],
        state.path().join("homes/1").display().to_string()
    );
}

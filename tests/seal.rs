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

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::fake_cli::{self, FakeLog};
#[cfg(feature = "real-cli")]
use support::process::require_bubblewrap_as_root;
use support::process::{RunAs, SealedBot};
use support::*;
use turnstile::agent::Scenario;
use turnstile::agent::ToolRegistry;
use turnstile::agent::backends::ClaudeBackend;

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
    support::process::run_ignored_test(
        name,
        &[
            ("TELEGRAM_BOT_TOKEN", PARENT_TOKEN),
            PARENT_TURNSTILE,
            PASSED,
            NOT_PASSED,
        ],
    );
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
/// `files` added to its settings, the sandbox probed as at start.
async fn launch(vars: &[(String, String)]) -> (Harness, Arc<ClaudeBackend>) {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut slot = None;
    let harness = Harness::launch(&pairs, Harness::fast_limits(), |config| {
        let mut settings = support::claude_settings(config);
        // As at start: bwrap probed once when the sandbox is on.
        if let Err(err) = settings.probe_sandbox() {
            panic!("{err}");
        }
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
        "--disallowedTools=Bash,WebFetch,CronCreate,CronList,CronDelete,ScheduleWakeup",
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

/// The echo agent's session id, left in the store when the Quick Start
/// switches to Claude, starts a fresh session without a warning.
#[actix_rt::test]
async fn the_scripted_agents_session_id_is_dropped_without_a_warning() {
    let _ = tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .try_init();
    let state = tempfile::tempdir().expect("temp dir");
    let db = state.path().join("turnstile.db");
    let left = "scripted-1-0";
    {
        let store = turnstile::state::Store::open(&db).expect("store");
        store
            .set_session(teloxide::types::ChatId(1).into(), Some(left))
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
    assert!(
        !procs[0].1.iter().any(|a| a.contains(left)),
        "{:?}",
        procs[0].1
    );
    let logs = String::from_utf8_lossy(&LOGS.lock().expect("logs")).into_owned();
    let line = logs
        .lines()
        .find(|l| l.contains(left))
        .unwrap_or_else(|| panic!("the id is not logged:\n{logs}"));
    assert!(
        line.contains("INFO") && line.contains("scripted agent's"),
        "{line}"
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
    require_bubblewrap_as_root();
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
    // `turnstile attach`'s socket, beside the state file.
    let socket = state.path().join("turnstile.db.attach");
    let probes = [
        db.display().to_string(),
        socket.display().to_string(),
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
    assert!(socket.exists(), "the attach socket is there, outside");
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    let seen = dumps(&files.workdir(1).join("dump.jsonl"));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let probes = &seen[0]["probes"];
    assert_eq!(probes[&db.display().to_string()], Value::Null, "{probes:#}");
    assert_eq!(
        probes[&socket.display().to_string()],
        Value::Null,
        "the agent cannot see the attach socket: {probes:#}"
    );
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

/// An agent command: a shell script in `dir` that runs `prelude`, then
/// becomes `fake-claude`.
fn agent_script(dir: &Path, prelude: &str) -> std::path::PathBuf {
    let script = dir.join("claude");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{prelude}\nexec '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_fake-claude")
        ),
    )
    .expect("script written");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

/// The fake's variables without its scenario file, which lies under
/// `/tmp` and so is not there in the sandbox: it plays the built-in echo.
fn sandboxable_env(files: &FakeLog) -> Vec<(String, String)> {
    let mut vars = files.env();
    vars.retain(|(k, _)| k != "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_SCENARIO");
    vars
}

/// How a test ends the agent's session.
#[derive(Debug, Clone, Copy)]
enum Close {
    /// `/new` in the chat.
    New,
    /// `agent.keep_warm` runs out.
    KeepWarm,
    /// The bot stops.
    Stop,
}

/// The agent starts background jobs (`nohup sleep &` and, when `setsid`,
/// `setsid sleep &`, each from a shell that exits at once) and answers a
/// turn; its session is then closed as `close` says: no job may outlive
/// it, and none dies before.
async fn background_jobs_end_with_the_session(sandbox: &str, setsid: bool, close: Close) {
    let files = FakeLog::new(&Scenario::default());
    let bin = tempfile::tempdir().expect("temp dir");
    let mut jobs = vec![("nohup", marker())];
    if setsid {
        jobs.push(("setsid", marker()));
    }
    let prelude: Vec<String> = jobs
        .iter()
        .map(|(how, m)| format!("sh -c '{how} sleep {m} >/dev/null 2>&1 &'"))
        .collect();
    let script = agent_script(bin.path(), &prelude.join("\n"));
    let keep_warm = match close {
        Close::KeepWarm => "1s",
        Close::New | Close::Stop => "10m",
    };
    let mut vars = sandboxable_env(&files);
    vars.extend(
        [
            ("TURNSTILE_AGENT_COMMAND", script.display().to_string()),
            ("TURNSTILE_AGENT_SANDBOX", sandbox.to_owned()),
            ("TURNSTILE_AGENT_KEEP_WARM", keep_warm.to_owned()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (mut h, backend) = launch(&vars).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    let started = eventually("the agent's background jobs running", SOON, || {
        let found: Vec<(&str, Vec<u32>)> =
            jobs.iter().map(|(how, m)| (*how, sleeping(m))).collect();
        let ready = found.iter().all(|(_, pids)| pids.len() == 1);
        async move {
            if ready {
                Ok(found)
            } else {
                Err(format!("{found:?}"))
            }
        }
    })
    .await;
    match close {
        Close::New => {
            assert_eq!(backend.running(), 1, "the session is warm");
            h.say(1, USER, "/new");
        }
        Close::KeepWarm => {}
        Close::Stop => {
            assert_eq!(backend.running(), 1, "the session is warm");
            h.bot.stop().await;
        }
    }
    eventually(
        &format!("no background job left after {close:?} ({sandbox}): {started:?}"),
        Duration::from_secs(30),
        || {
            let left: Vec<(&str, Vec<u32>)> = jobs
                .iter()
                .map(|(how, m)| (*how, sleeping(m)))
                .filter(|(_, pids)| !pids.is_empty())
                .collect();
            let live = backend.running();
            async move {
                if left.is_empty() && live == 0 {
                    Ok(())
                } else {
                    Err(format!("live agent processes {live}, jobs left {left:?}"))
                }
            }
        },
    )
    .await;
}

#[actix_rt::test]
async fn without_a_sandbox_a_background_job_ends_with_the_session_at_new() {
    background_jobs_end_with_the_session("none", false, Close::New).await;
}

#[actix_rt::test]
async fn without_a_sandbox_a_background_job_ends_with_the_session_when_keep_warm_runs_out() {
    background_jobs_end_with_the_session("none", false, Close::KeepWarm).await;
}

#[actix_rt::test]
async fn without_a_sandbox_a_background_job_ends_with_the_session_at_stop() {
    background_jobs_end_with_the_session("none", false, Close::Stop).await;
}

#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn under_bubblewrap_no_background_job_even_setsid_outlives_the_session_at_new() {
    require_bubblewrap_as_root();
    background_jobs_end_with_the_session("bubblewrap", true, Close::New).await;
}

#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn under_bubblewrap_no_background_job_even_setsid_outlives_keep_warm() {
    require_bubblewrap_as_root();
    background_jobs_end_with_the_session("bubblewrap", true, Close::KeepWarm).await;
}

#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn under_bubblewrap_no_background_job_even_setsid_outlives_the_stop() {
    require_bubblewrap_as_root();
    background_jobs_end_with_the_session("bubblewrap", true, Close::Stop).await;
}

/// Run as root (so the sandbox is all that stands in the way), the agent
/// has no capability: it cannot unmount the tmpfs over the state directory
/// (lazily, as the home bound beneath it keeps it busy) nor make `/`
/// writable.
#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn under_bubblewrap_root_has_no_capability_and_cannot_undo_a_mount() {
    require_bubblewrap_as_root();
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let db = state.path().join("turnstile.db");
    let bin = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let script = agent_script(
        bin.path(),
        &format!(
            "{{ grep '^CapEff:' /proc/self/status
               if umount -l '{}'; then echo umount=done; else echo umount=refused; fi
               if mount -o remount,rw /; then echo remount=done; else echo remount=refused; fi
             }} > caps.txt 2>&1",
            state.path().display()
        ),
    );
    let files = FakeLog::new(&Scenario::default());
    let mut vars = sandboxable_env(&files);
    vars.extend(
        [
            ("TURNSTILE_AGENT_COMMAND", script.display().to_string()),
            ("TURNSTILE_STATE_PATH", db.display().to_string()),
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (mut h, _backend) = launch(&vars).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    let seen = std::fs::read_to_string(files.workdir(1).join("caps.txt")).expect("caps.txt");
    assert!(seen.contains("CapEff:\t0000000000000000\n"), "{seen}");
    assert!(seen.contains("umount=refused"), "{seen}");
    assert!(seen.contains("remount=refused"), "{seen}");
}

/// The CLI installed under the state directory (the service user's home
/// is the state directory): still the whole directory is hidden, and chat
/// B's agent sees nothing of chat A's workspace or home.
#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn under_bubblewrap_a_chat_sees_nothing_of_another_even_with_the_cli_in_the_state_dir() {
    require_bubblewrap_as_root();
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let root = state.path();
    let db = root.join("turnstile.db");
    let cli_dir = root.join(".local/bin");
    std::fs::create_dir_all(&cli_dir).expect("cli dir");
    let script = agent_script(&cli_dir, "");
    let text = |p: &Path| p.display().to_string();
    let probes = [
        text(root),
        text(&root.join("workspaces")),
        text(&root.join("homes")),
        text(&root.join("workspaces/1")),
        text(&root.join("homes/1")),
        text(&db),
        text(&root.join(".local")),
    ];
    let files = FakeLog::new(&Scenario::default());
    let mut vars = sandboxable_env(&files);
    vars.extend(
        [
            ("TURNSTILE_AGENT_COMMAND", text(&script)),
            ("TURNSTILE_STATE_PATH", text(&db)),
            ("TURNSTILE_AGENT_WORKDIR", "workspaces/{chat}".into()),
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap".into()),
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl".into()),
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_PROBE", probes.join(":")),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let (mut h, _backend) = launch(&vars).await;
    h.say(1, USER, "from a");
    h.turn_ended(1, 1).await;
    h.say(2, USER, "from b");
    h.turn_ended(2, 1).await;
    assert_eq!(h.texts(2), vec!["echo: from b"]);
    assert!(
        root.join("workspaces/1/dump.jsonl").exists(),
        "chat A wrote"
    );
    assert!(root.join("homes/1").is_dir(), "chat A has a home");
    let seen = dumps(&root.join("workspaces/2/dump.jsonl"));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let probes = &seen[0]["probes"];
    let listed = |path: &Path| {
        let mut names: Vec<String> = probes[text(path)]
            .as_array()
            .unwrap_or_else(|| panic!("{} not listed: {probes:#}", path.display()))
            .iter()
            .filter_map(|n| n.as_str().map(String::from))
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        listed(root),
        [".local", "homes", "workspaces"],
        "{probes:#}"
    );
    assert_eq!(listed(&root.join("workspaces")), ["2"], "{probes:#}");
    assert_eq!(listed(&root.join("homes")), ["2"], "{probes:#}");
    assert_eq!(listed(&root.join(".local")), ["bin"], "{probes:#}");
    for hidden in [root.join("workspaces/1"), root.join("homes/1"), db] {
        assert_eq!(probes[text(&hidden)], Value::Null, "{probes:#}");
    }
}

#[actix_rt::test]
async fn without_bwrap_the_default_sandbox_is_exit_2_naming_the_key_the_package_and_the_opt_out() {
    let api = FakeBotApi::start().await;
    let files = FakeLog::new(&Scenario::default());
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("dir");
    // A bwrap that cannot make its namespaces, as in a container that
    // forbids them.
    let failing = dir.path().join("failing");
    std::fs::create_dir(&failing).expect("dir");
    std::fs::write(
        failing.join("bwrap"),
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .expect("bwrap");
    std::fs::set_permissions(
        failing.join("bwrap"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    for (path, why) in [
        (&empty, "`bwrap` is not on PATH"),
        (&failing, "No permissions to create new namespace"),
    ] {
        let mut env: Vec<(&str, String)> = files
            .env()
            .into_iter()
            .filter(|(k, _)| k != "TURNSTILE_AGENT_SANDBOX")
            .map(|(k, v)| (&*Box::leak(k.into_boxed_str()), v))
            .collect();
        env.push(("PATH", path.display().to_string()));
        env.push(("TURNSTILE_STATE_PATH", ":memory:".into()));
        let log = dir.path().join("bot.log");
        let _ = std::fs::remove_file(&log);
        let mut bot = support::process::BotProcess::spawn(&api, &log, &env);
        let status = bot.exit().await;
        let text = bot.log_text();
        assert_eq!(status.code(), Some(2), "{text}");
        for part in [
            "agent.sandbox = \"bubblewrap\"",
            why,
            "package `bubblewrap`",
            "agent.sandbox = \"none\"",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        assert!(api.calls().is_empty(), "nothing started: {text}");
    }
}

/// The voice transcriber runs under `agent.sandbox` whatever the backend:
/// with the scripted agent and a transcriber, a sandbox that cannot run is
/// exit 2 too, never a transcriber run unsandboxed.
#[actix_rt::test]
async fn a_transcriber_without_bwrap_under_the_default_sandbox_is_exit_2() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("dir");
    let env: Vec<(&str, String)> = vec![
        ("PATH", empty.display().to_string()),
        ("TURNSTILE_STATE_PATH", ":memory:".into()),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1".into()),
        ("TURNSTILE_FILES_TRANSCRIBE", "/bin/cat,{file}".into()),
    ];
    let log = dir.path().join("bot.log");
    let mut bot = support::process::BotProcess::spawn(&api, &log, &env);
    let status = bot.exit().await;
    let text = bot.log_text();
    assert_eq!(status.code(), Some(2), "{text}");
    for part in [
        "voice transcriber",
        "`bwrap` is not on PATH",
        "agent.sandbox = \"none\"",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

/// What `cat /proc/<pid>/environ` gives a process of the same user:
/// the environment, or what cat said.
fn environ_as_the_same_user(pid: u32) -> Result<String, String> {
    let mut cat = Command::new("cat");
    cat.arg(format!("/proc/{pid}/environ"));
    support::process::as_nobody(&mut cat);
    let out = cat.output().expect("cat runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[actix_rt::test]
async fn a_process_of_the_same_user_cannot_read_turnstiles_environ_even_after_restart() {
    const SECRET: (&str, &str) = ("SEAL_ENVIRON_SECRET", "only-turnstile-may-know");
    let api = FakeBotApi::start().await;
    // A copy `nobody` can run.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary = dir.path().join("turnstile");
    support::process::copy_executable(Path::new(env!("CARGO_BIN_EXE_turnstile")), &binary);
    let log = dir.path().join("bot.log");
    let vars = ConfigVars::new(&api.url())
        .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
        .set("TURNSTILE_ACCESS_ALLOWED_USERS", "1001")
        .set("TURNSTILE_ACCESS_ADMINS", ADMIN.to_string())
        .set("TURNSTILE_STATE_PATH", ":memory:");
    let mut bot = SealedBot::start(
        &binary,
        &[],
        dir.path(),
        RunAs::Nobody,
        &vars,
        &[(SECRET.0, OsStr::new(SECRET.1))],
        &log,
    );
    let pid = bot.child.id();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // A process of that user that did not forbid it: its environ reads.
    let mut sleeper = Command::new("sleep");
    sleeper.arg("60").env(SECRET.0, SECRET.1);
    support::process::as_nobody(&mut sleeper);
    let sleeper = support::process::Reaped(sleeper.spawn().expect("sleep runs"));
    let read = environ_as_the_same_user(sleeper.0.id());
    drop(sleeper);
    assert!(
        read.as_ref().is_ok_and(|env| env.contains(SECRET.1)),
        "the reader can read a same-user process's environ: {read:?}"
    );

    api.wait_for_call("getUpdates", SOON).await;
    let read = environ_as_the_same_user(pid);
    assert!(
        read.as_ref()
            .is_err_and(|e| e.contains("Permission denied")),
        "turnstile's environ was readable: {read:?}\n{}",
        log_text()
    );

    // `/restart` re-executes in the same process: still not readable.
    api.push_text(ADMIN, ADMIN, "/restart");
    let told = api.wait_for_texts(ADMIN, 2, Duration::from_secs(30)).await;
    assert!(told[1].contains("Restarted."), "{told:?}\n{}", log_text());
    assert_eq!(
        bot.child.try_wait().expect("waitable"),
        None,
        "{}",
        log_text()
    );
    assert!(
        log_text().contains("re-executing for /restart"),
        "{}",
        log_text()
    );
    let read = environ_as_the_same_user(pid);
    assert!(
        read.as_ref()
            .is_err_and(|e| e.contains("Permission denied")),
        "turnstile's environ was readable after /restart: {read:?}\n{}",
        log_text()
    );
    bot.stop();
}

/// turnstile run as `nobody` with the default sandbox, `bin` first on its
/// PATH: answers a message; the log and what its agent saw of
/// `/proc/self/uid_map` and the state directory.
#[cfg(feature = "real-cli")]
async fn one_turn_as_nobody(bin: Option<&Path>) -> (String, Value) {
    use std::os::unix::fs::chown;
    let api = FakeBotApi::start().await;
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    chown(state.path(), Some(65534), Some(65534)).expect("chown");
    let db = state.path().join("turnstile.db");
    let log = state.path().join("bot.log");
    let probes = [
        "/proc/self/uid_map".to_owned(),
        "/proc/self/status".to_owned(),
        state.path().display().to_string(),
    ];
    let vars = ConfigVars::new(&api.url())
        .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
        .set("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string())
        .set("TURNSTILE_STATE_PATH", db.display().to_string())
        .set("TURNSTILE_AGENT_BACKEND", "claude")
        .set("TURNSTILE_AGENT_COMMAND", env!("CARGO_BIN_EXE_fake-claude"))
        .set("TURNSTILE_AGENT_KEEP_WARM", "0s")
        .set("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl")
        .set("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_PROBE", probes.join(":"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        bin.map(Path::to_owned)
            .into_iter()
            .chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    let mut bot = SealedBot::start(
        Path::new(env!("CARGO_BIN_EXE_turnstile")),
        &[],
        state.path(),
        RunAs::Nobody,
        &vars,
        &[("PATH", path.as_os_str())],
        &log,
    );
    bot.wait_polling(&api).await;
    api.push_text(USER, USER, "hi");
    let told = api.wait_for_texts(USER, 1, Duration::from_secs(30)).await;
    assert_eq!(told, vec!["echo: hi"], "{}", bot.log_text());
    let log = bot.stop();
    let seen = dumps(&state.path().join(format!("workspaces/{USER}/dump.jsonl")));
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let mut probes = seen[0]["probes"].clone();
    // Named by what it is, not where this run put it.
    if let Some(listing) = probes
        .as_object_mut()
        .and_then(|p| p.remove(&state.path().display().to_string()))
    {
        probes["state dir"] = listing;
    }
    (log, probes)
}

/// The `/proc/self/uid_map` the agent saw, as words.
#[cfg(feature = "real-cli")]
fn uid_map(probes: &Value) -> Vec<String> {
    probes["/proc/self/uid_map"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Not root (`nobody`), turnstile probes bwrap with its own user
/// namespace, and the agent runs in one; a setuid bwrap runs on its own
/// privileges instead (without trying: here it cannot make one, and
/// bubblewrap 0.8 then leaves its child behind). Either way no capability,
/// and the state hidden.
#[cfg(feature = "real-cli")]
#[actix_rt::test]
async fn not_root_the_sandbox_takes_a_user_namespace_where_it_can() {
    require_bubblewrap_as_root();
    let (log, probes) = one_turn_as_nobody(None).await;
    assert!(log.contains("user_ns=true"), "{log}");
    // Not the initial namespace's `0 0 4294967295`: one id, its own.
    let map = uid_map(&probes);
    assert_eq!(
        (
            map.first().map(String::as_str),
            map.get(2).map(String::as_str),
            map.len()
        ),
        (Some("65534"), Some("1"), 3),
        "its own user namespace: {probes:#}"
    );
    assert_eq!(
        probes["state dir"],
        json!(["homes", "workspaces"]),
        "{probes:#}"
    );
    let status = probes["/proc/self/status"].as_str().unwrap_or_default();
    assert!(status.contains("CapEff:\t0000000000000000\n"), "{status}");

    // A setuid bwrap, first on PATH.
    let bin = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bwrap = bin.path().join("bwrap");
    let system = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v bwrap"])
            .output()
            .expect("sh")
            .stdout,
    )
    .expect("utf-8");
    support::process::copy_executable(Path::new(system.trim()), &bwrap);
    std::fs::set_permissions(&bwrap, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    let (log, probes) = one_turn_as_nobody(Some(bin.path())).await;
    assert!(log.contains("user_ns=false"), "{log}");
    assert!(
        !log.contains("cannot make its own user namespace"),
        "not tried: {log}"
    );
    assert_eq!(
        probes["state dir"],
        json!(["homes", "workspaces"]),
        "{probes:#}"
    );
    let status = probes["/proc/self/status"].as_str().unwrap_or_default();
    assert!(status.contains("CapEff:\t0000000000000000\n"), "{status}");
}

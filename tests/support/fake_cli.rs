//! The `claude` backend driving the `fake-claude` binary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use turnstile::agent::Scenario;
use turnstile::agent::backends::ClaudeBackend;

use super::Harness;

/// The session id a fresh fake with `pid` reports (as `fake-claude` makes it).
pub fn session_id(pid: u32) -> String {
    format!("00000000-0000-4000-8000-{pid:012x}")
}

/// The fake CLI's scenario and log.
pub struct FakeLog {
    /// Holds the scenario and the log.
    pub dir: TempDir,
    /// Where the fake appends what happened.
    pub log: PathBuf,
    /// The scenario file.
    pub script: PathBuf,
}

/// The `claude` backend under test, on `fake-claude`.
pub struct FakeCli {
    /// The fake's files.
    pub files: FakeLog,
    /// The backend under test.
    pub backend: Arc<ClaudeBackend>,
}

impl std::ops::Deref for FakeCli {
    type Target = FakeLog;

    fn deref(&self) -> &FakeLog {
        &self.files
    }
}

impl FakeLog {
    /// Writes `scenario` to a fresh temp dir.
    pub fn new(scenario: &Scenario) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = dir.path().join("scenario.json");
        std::fs::write(
            &script,
            serde_json::to_string(scenario).expect("scenario serializes"),
        )
        .expect("scenario written");
        let log = dir.path().join("fake.log");
        Self { dir, log, script }
    }

    /// The `TURNSTILE_*` variables that run the `claude` backend on this fake.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("TURNSTILE_AGENT_BACKEND".into(), "claude".into()),
            (
                "TURNSTILE_AGENT_COMMAND".into(),
                env!("CARGO_BIN_EXE_fake-claude").into(),
            ),
            (
                "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_SCENARIO".into(),
                self.script.display().to_string(),
            ),
            (
                "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_LOG".into(),
                self.log.display().to_string(),
            ),
            (
                "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_GRANDCHILD".into(),
                "1".into(),
            ),
            ("TURNSTILE_AGENT_KEEP_WARM".into(), "0s".into()),
            // Unsandboxed unless a test asks: these run without root or bwrap.
            ("TURNSTILE_AGENT_SANDBOX".into(), "none".into()),
            (
                "TURNSTILE_AGENT_WORKDIR".into(),
                self.workdir_template().display().to_string(),
            ),
        ]
    }

    /// `agent.workdir` for the fakes: one directory per chat in the temp dir.
    pub fn workdir_template(&self) -> PathBuf {
        self.dir.path().join("ws").join("{chat}")
    }

    /// The workdir of `chat`.
    pub fn workdir(&self, chat: i64) -> PathBuf {
        self.dir.path().join("ws").join(chat.to_string())
    }
}

impl FakeCli {
    /// Starts the bot with the `claude` backend on `fake-claude` playing `scenario`.
    pub async fn start(scenario: &Scenario, env: &[(&str, &str)]) -> (Harness, FakeCli) {
        let files = FakeLog::new(scenario);
        let mut vars = files.env();
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let (harness, backend) = Harness::launch_claude(&vars).await;
        (harness, FakeCli { files, backend })
    }
}

impl FakeLog {
    /// Everything the fakes logged, in order.
    pub fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Pids of every fake process started, with their arguments.
    pub fn processes(&self) -> Vec<(u32, Vec<String>)> {
        self.entries()
            .iter()
            .filter_map(|e| {
                let pid = e.get("pid")?.as_u64()? as u32;
                let args = e
                    .get("args")?
                    .as_array()?
                    .iter()
                    .filter_map(|a| a.as_str().map(String::from))
                    .collect();
                Some((pid, args))
            })
            .collect()
    }

    /// Answers the fakes got to their own control requests.
    pub fn answers(&self) -> Vec<(Value, Value)> {
        self.entries()
            .into_iter()
            .filter_map(|e| Some((e.get("asked")?.clone(), e.get("answer")?.clone())))
            .collect()
    }

    /// Waits (bounded) until the fakes logged `n` entries matching `pred`.
    pub async fn wait_for_entries(&self, n: usize, pred: impl Fn(&Value) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while self.entries().iter().filter(|e| pred(e)).count() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out; log: {:#?}",
                self.entries()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until every fake process and its grandchildren are gone (not
    /// even a zombie), polling /proc with an upper bound.
    pub async fn assert_no_process_left(&self) {
        let mut pids: Vec<u32> = self.processes().into_iter().map(|(p, _)| p).collect();
        pids.extend(self.entries().iter().filter_map(|e| {
            e.get("grandchild")
                .and_then(Value::as_u64)
                .map(|p| p as u32)
        }));
        assert!(!pids.is_empty(), "no fake process was started");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let alive: Vec<u32> = pids
                .iter()
                .copied()
                .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect();
            if alive.is_empty() {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let states: Vec<String> = alive
                    .iter()
                    .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
                    .collect();
                panic!("processes left behind: {states:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

//! The real `turnstile` binary as a child process, against the fake Bot API.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::bot_api::FakeBotApi;
use super::config::ConfigVars;

/// A running `turnstile` process.
pub struct BotProcess {
    /// The child.
    pub child: Child,
    /// Its stderr (the log), appended across restarts.
    pub log: PathBuf,
}

impl BotProcess {
    /// Starts the binary with test defaults, `env` on top; the log goes to `log`.
    pub fn spawn(api: &FakeBotApi, log: &Path, env: &[(&str, String)]) -> Self {
        Self::spawn_binary(Path::new(env!("CARGO_BIN_EXE_turnstile")), api, log, env)
    }

    /// As [`BotProcess::spawn`], with `--config config`.
    pub fn spawn_with_config(
        api: &FakeBotApi,
        log: &Path,
        env: &[(&str, String)],
        config: &Path,
    ) -> Self {
        let binary = Path::new(env!("CARGO_BIN_EXE_turnstile"));
        Self::spawn_args(
            binary,
            &[OsStr::new("--config"), config.as_os_str()],
            api,
            log,
            env,
        )
    }

    /// As [`BotProcess::spawn`], running the binary at `binary` (a copy).
    pub fn spawn_binary(
        binary: &Path,
        api: &FakeBotApi,
        log: &Path,
        env: &[(&str, String)],
    ) -> Self {
        Self::spawn_args(binary, &[], api, log, env)
    }

    /// Starts `binary` with `args`, test defaults and `env` on top.
    fn spawn_args(
        binary: &Path,
        args: &[&OsStr],
        api: &FakeBotApi,
        log: &Path,
        env: &[(&str, String)],
    ) -> Self {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let vars = ConfigVars::new(&api.url())
            .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
            .set("TURNSTILE_ACCESS_ALLOWED_USERS", "1001")
            .set("TURNSTILE_ACCESS_ADMINS", "9");
        let mut command = Command::new(binary);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TURNSTILE_LOG", "info")
            .envs(vars.iter())
            .envs(env.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command.spawn().expect("turnstile starts");
        Self {
            child,
            log: log.to_path_buf(),
        }
    }

    /// Sends a signal.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: a plain kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits (bounded) for the exit; returns the status.
    pub async fn exit(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("turnstile exits")
            .expect("waited")
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Runs the ignored test `name` of the current test binary in a child
/// process with `env` added to its environment (a parent's secrets, which
/// no test may set in its own running process), and asserts it ran and
/// passed.
pub fn run_ignored_test(name: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            name,
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
}

/// Copies the executable `from` to `to` (mode kept) by running `cp`, so
/// that no descriptor open for writing on `to` ever exists in this
/// process. Tests run in threads that fork and exec children; a child
/// forked while this process held `to` open for writing (as
/// `std::fs::copy` does, `O_CLOEXEC` or not) keeps that descriptor until
/// its own exec, and an exec of `to` meanwhile fails with `ETXTBSY`
/// ("Text file busy"). In `cp` the descriptor lives and dies in a process
/// nothing else forks from.
pub fn copy_executable(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null())
        .status()
        .expect("cp runs");
    assert!(
        status.success(),
        "cp {} {}: {status}",
        from.display(),
        to.display()
    );
}

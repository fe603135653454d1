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

/// Panics unless this runs as root with `bwrap` on PATH and its build
/// outside `/tmp` (the sandbox gives the agent a fresh `/tmp`, which would
/// hide a fake agent built below it): the sandboxed tests of the real-CLI
/// group (`--features real-cli`) fail naming what is missing.
pub fn require_bubblewrap_as_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let bwrap = std::process::Command::new("bwrap")
        .arg("--version")
        .output();
    assert!(
        uid == 0 && bwrap.as_ref().is_ok_and(|o| o.status.success()),
        "this test (--features real-cli) cannot run here: it needs root (uid {uid}) and \
         `bwrap` on PATH (Debian package bubblewrap): {bwrap:?}"
    );
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    assert!(
        !target.starts_with("/tmp"),
        "this test cannot run with its build below /tmp ({}): the sandbox gives the agent \
         a fresh /tmp, which hides the fake agent; set CARGO_TARGET_DIR to a directory \
         outside /tmp",
        target.display()
    );
}

/// Who the `turnstile` child of a [`SealedBot`] runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAs {
    /// This test's own user.
    Me,
    /// `nobody` (65534, no other group), when this test runs as root; this
    /// test's own user otherwise.
    Nobody,
}

/// Makes `command` run as `nobody` (with no group but nobody's) when this
/// test runs as root; leaves it alone otherwise.
pub fn as_nobody(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    // SAFETY: setgroups, setgid and setuid are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let nobody: libc::uid_t = 65534;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(nobody) != 0
                || libc::setuid(nobody) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The real `turnstile` binary (or a copy) as a plain child process, as
/// root or as `nobody`, for the tests that start it under bubblewrap:
/// from an empty environment but `PATH`, `TURNSTILE_LOG=info` and the
/// given variables, in `dir`, its stderr in a log. Killed when dropped.
pub struct SealedBot {
    /// The child.
    pub child: std::process::Child,
    /// Its log.
    log: PathBuf,
}

impl SealedBot {
    /// Starts `binary` with `args` in `dir` as `who`, `vars` and `env` its
    /// environment (with `PATH` = `path`, or this process's); the log is
    /// `log`.
    pub fn start(
        binary: &Path,
        args: &[&OsStr],
        dir: &Path,
        who: RunAs,
        vars: &ConfigVars,
        env: &[(&str, &OsStr)],
        log: &Path,
    ) -> Self {
        let stderr = std::fs::File::create(log).expect("log file");
        let mut command = std::process::Command::new(binary);
        command
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TURNSTILE_LOG", "info")
            .envs(vars.iter())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if who == RunAs::Nobody {
            as_nobody(&mut command);
        }
        Self {
            child: command.spawn().expect("turnstile starts"),
            log: log.to_owned(),
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (up to [`super::SOON`]) until it polls the fake Bot API; fails
    /// with its exit and log if it exits instead.
    pub async fn wait_polling(&mut self, api: &FakeBotApi) {
        super::eventually("turnstile polling", super::SOON, || {
            let polled = !api.calls_of("getUpdates").is_empty();
            let exited = self.child.try_wait().ok().flatten();
            let log = self.log_text();
            async move {
                if polled {
                    Ok(())
                } else {
                    Err(format!("exited: {exited:?}; log:\n{log}"))
                }
            }
        })
        .await;
    }

    /// SIGTERM, then waits for a clean exit (asserted); answers the log.
    pub fn stop(mut self) -> String {
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().expect("turnstile exits");
        let log = self.log_text();
        assert!(status.success(), "{status:?}\n{log}");
        log
    }
}

impl Drop for SealedBot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed when the test ends, however it ends.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

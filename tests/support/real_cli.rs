//! The real Claude Code CLI in the tests (`--features real-cli`): what it
//! needs, installing it, and running a test binary's `#[ignore]`d tests in a
//! loopback-only network namespace so the CLI can never reach the network.
//!
//! A test file of the group has one plain `#[test]` that calls
//! [`run_in_loopback_namespace`] with the names of its ignored tests, and
//! those tests take the CLI's path from [`claude_in_namespace`]. Anything
//! missing (root, `unshare`, `ip`, npm) fails the plain test naming it: the
//! group never passes without having run.

use std::path::Path;
use std::process::Command;

/// Carries the CLI's path into the namespace.
pub const CLAUDE_ENV: &str = "TURNSTILE_REAL_CLAUDE";

/// Set as `TELEGRAM_BOT_TOKEN` in the tests' own environment, so a test can
/// prove the agent never sees turnstile's token.
pub const PARENT_TOKEN: &str = "777:parent-token-the-agent-must-not-see";

/// Where `scripts/install-claude.sh` puts the CLI.
const INSTALLED: &str = ".cache/claude-code/node_modules/.bin/claude";

/// Installs the CLI (once), then runs each of `tests`, ignored tests of the
/// current test binary, alone inside `unshare -n` with loopback up; panics
/// when something it needs is missing, or when one failed or did not run.
pub fn run_in_loopback_namespace(tests: &[&str]) {
    require_prerequisites();
    let claude = install_claude();
    run_each_in_namespace(
        tests,
        &[
            (CLAUDE_ENV, claude.as_str()),
            ("TELEGRAM_BOT_TOKEN", PARENT_TOKEN),
        ],
    );
}

/// Re-runs this test binary once for each of `tests` (its `#[ignore]`d
/// inner tests) inside `unshare -n` with loopback up, with `env` set; each
/// must pass.
pub fn run_each_in_namespace(tests: &[&str], env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("test binary path");
    for name in tests {
        let out = Command::new("unshare")
            .args([
                "-n",
                "sh",
                "-c",
                "ip link set lo up && exec \"$@\"",
                "netns",
            ])
            .arg(&exe)
            .args([
                "--ignored",
                "--exact",
                name,
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(env.iter().copied())
            .output()
            .expect("unshare runs (root is needed for a network namespace)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("--- {name}\n{stdout}");
        assert!(
            out.status.success(),
            "{name} failed in the namespace:\n{stdout}\n{stderr}"
        );
        assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
    }
}

/// The CLI's path inside the namespace; panics when the test was not
/// started by [`run_in_loopback_namespace`].
pub fn claude_in_namespace() -> String {
    match std::env::var(CLAUDE_ENV) {
        Ok(path) if !path.is_empty() => path,
        _ => panic!(
            "{CLAUDE_ENV} is not set: this test runs the real CLI only inside the \
             loopback-only namespace; run `cargo test --features real-cli` (as root)"
        ),
    }
}

/// Panics listing everything missing for the group to run.
fn require_prerequisites() {
    let mut missing = Vec::new();
    for (tool, package) in [("unshare", "util-linux"), ("ip", "iproute2")] {
        if !on_path(tool) {
            missing.push(format!(
                "`{tool}` is not on PATH (Debian package {package})"
            ));
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        missing.push(format!(
            "root: `unshare -n` (a network namespace) needs it, and this runs as uid {uid}"
        ));
    } else if on_path("unshare") {
        let probe = Command::new("unshare").args(["-n", "true"]).output();
        match probe {
            Ok(out) if out.status.success() => {}
            Ok(out) => missing.push(format!(
                "a network namespace: `unshare -n true` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => missing.push(format!("a network namespace: `unshare -n true`: {e}")),
        }
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join(INSTALLED);
    if !installed.exists() && !on_path("npm") {
        missing.push(
            "npm is not on PATH (scripts/install-claude.sh installs the CLI with it)".to_string(),
        );
    }
    assert!(
        missing.is_empty(),
        "the real-CLI tests (--features real-cli) cannot run here; missing:\n- {}\n\
         See \"Testing\" in docs/development.md.",
        missing.join("\n- ")
    );
}

/// Runs `scripts/install-claude.sh` and returns the CLI's path.
fn install_claude() -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let install = Command::new(format!("{root}/scripts/install-claude.sh"))
        .output()
        .expect("scripts/install-claude.sh runs");
    assert!(
        install.status.success(),
        "scripts/install-claude.sh failed (it needs npm and the npm registry): {}",
        String::from_utf8_lossy(&install.stderr)
    );
    String::from_utf8_lossy(&install.stdout).trim().to_string()
}

/// Whether an executable `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(name))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The test switch that runs every real-CLI turn under bubblewrap
/// (`.ci/run` sets it for a second pass).
pub const SANDBOX_SWITCH: &str = "TURNSTILE_TEST_SANDBOX";

/// The environment every real-CLI test starts the bot with: the `claude`
/// backend on the CLI inside the namespace, talking to the fake Messages API
/// at `base_url`, with `home` as its home and config dir and `workdir` as
/// `agent.workdir`, no warm process, a 60 s no-progress clock, and no
/// sandbox unless [`SANDBOX_SWITCH`] asks for one.
pub fn agent_env(base_url: &str, home: &str, workdir: &str) -> Vec<(String, String)> {
    let claude = claude_in_namespace();
    let mut vars: Vec<(String, String)> = [
        ("TURNSTILE_AGENT_BACKEND", "claude"),
        ("TURNSTILE_AGENT_COMMAND", claude.as_str()),
        ("TURNSTILE_AGENT_WORKDIR", workdir),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL", base_url),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_API_KEY", "test-key"),
        ("TURNSTILE_AGENT_ENV_HOME", home),
        ("TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR", home),
        (
            "TURNSTILE_AGENT_ENV_CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "1",
        ),
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
        ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sandbox = std::env::var(SANDBOX_SWITCH).unwrap_or_else(|_| "none".into());
    println!("{SANDBOX_SWITCH}={sandbox}");
    vars.push(("TURNSTILE_AGENT_SANDBOX".into(), sandbox));
    vars
}

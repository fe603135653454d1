//! Under bubblewrap, each agent sees its own conversation's workdir and
//! home and nothing of any other chat's or project's, whatever the layout
//! (a project limited by `users`, one shared by its conversations, one in
//! the state directory, one reached through a symlink), and cannot make a
//! user namespace of its own (`--disable-userns`). turnstile runs as root and as `nobody`, so
//! these need root and `bwrap`: the real-CLI group (`--features real-cli`).
#![cfg(feature = "real-cli")]

mod support;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::process::{RunAs, SealedBot, require_bubblewrap_as_root};
use support::*;

/// The chats: a private chat each, and the project each works in.
const CHATS: [(i64, &str); 5] = [
    (1001, "alpha"),
    (1002, "beta"),
    (1003, "delta"),
    (1004, "gamma"),
    (1005, ""),
];

/// The layout: the state and default workdirs in `state/`; project alpha
/// (only user 1001) in `projects/alpha/{chat}`, beta shared by its
/// conversations in `projects/beta`, gamma beside the state file in
/// `state/gamma/{chat}`, delta through the symlink `link` to `real`.
struct Layout {
    base: tempfile::TempDir,
}

impl Layout {
    fn new() -> Self {
        let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        for dir in ["etc", "state", "projects", "real", "bin"] {
            std::fs::create_dir(base.path().join(dir)).expect("dir");
        }
        std::os::unix::fs::symlink(base.path().join("real"), base.path().join("link"))
            .expect("symlink");
        Self { base }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    /// The chat's workdir in its project.
    fn workdir(&self, chat: i64, project: &str) -> PathBuf {
        match project {
            "alpha" => self.path(&format!("projects/alpha/{chat}")),
            "beta" => self.path("projects/beta"),
            "gamma" => self.path(&format!("state/gamma/{chat}")),
            "delta" => self.path(&format!("link/{chat}")),
            _ => self.path(&format!("state/workspaces/{chat}")),
        }
    }

    /// The file the chat's agent writes in its workdir.
    fn secret(&self, chat: i64, project: &str) -> PathBuf {
        self.workdir(chat, project).join("secret")
    }

    fn config(&self) -> String {
        let p = |rel: &str| self.path(rel).display().to_string();
        format!(
            "[state]\npath = \"{}\"\n\
             [projects.alpha]\nworkdir = \"{}/{{chat}}\"\nusers = [1001]\n\
             [projects.beta]\nworkdir = \"{}\"\n\
             [projects.gamma]\nworkdir = \"gamma/{{chat}}\"\n\
             [projects.delta]\nworkdir = \"{}/{{chat}}\"\n",
            p("state/turnstile.db"),
            p("projects/alpha"),
            p("projects/beta"),
            p("link"),
        )
    }

    /// What every agent probes: every chat's secret, through the link and
    /// the real path, and the directories holding them.
    fn probes(&self) -> Vec<String> {
        let mut probes: Vec<String> = [
            "state",
            "state/workspaces",
            "state/homes",
            "state/gamma",
            "projects",
            "projects/alpha",
            "projects/beta",
            "real",
            "link",
        ]
        .iter()
        .map(|rel| self.path(rel).display().to_string())
        .collect();
        for (chat, project) in CHATS {
            probes.push(self.secret(chat, project).display().to_string());
            probes.push(
                self.path(&format!("state/homes/{chat}"))
                    .display()
                    .to_string(),
            );
        }
        probes.push(self.path("real/1003/secret").display().to_string());
        probes
    }

    /// The agent: a script that writes the chat's secret, notes whether it
    /// can make a user namespace, then becomes `fake-claude`.
    fn agent(&self) -> PathBuf {
        let script = self.path("bin/claude");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 echo \"only for $PWD\" > secret\n\
                 if unshare -U true 2>/dev/null; then echo made; else echo refused; fi > userns-U\n\
                 if unshare -Urm true 2>/dev/null; then echo made; else echo refused; fi > userns-Urm\n\
                 exec '{}' \"$@\"\n",
                env!("CARGO_BIN_EXE_fake-claude")
            ),
        )
        .expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        script
    }
}

/// `chown -R nobody: dir`.
fn give_to_nobody(dir: &Path) {
    let status = Command::new("chown")
        .args(["-R", "-h", "65534:65534"])
        .arg(dir)
        .status()
        .expect("chown runs");
    assert!(status.success(), "chown {}", dir.display());
}

/// The last dump line `fake-claude` wrote in `workdir`.
fn last_dump(workdir: &Path) -> Value {
    std::fs::read_to_string(workdir.join("dump.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .next_back()
        .unwrap_or_else(|| panic!("no dump in {}", workdir.display()))
}

/// turnstile (as `nobody` when `nobody`) with the layout's projects: each
/// chat moves to its project and sends two messages (the agent starts
/// afresh for each); returns the layout and the bot's log.
async fn two_rounds(nobody: bool) -> (Layout, String) {
    let layout = Layout::new();
    // In a directory of its own: the sandbox hides the config file's.
    let config_file = layout.path("etc/turnstile.toml");
    std::fs::write(&config_file, layout.config()).expect("config");
    let agent = layout.agent();
    std::fs::set_permissions(layout.base.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    if nobody {
        give_to_nobody(layout.base.path());
    }
    let api = FakeBotApi::start().await;
    let log = layout.path("bot.log");
    let vars = ConfigVars::new(&api.url())
        .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
        .set("TURNSTILE_ACCESS_ALLOWED_USERS", "1001,1002,1003,1004,1005")
        .set("TURNSTILE_AGENT_BACKEND", "claude")
        .set("TURNSTILE_AGENT_COMMAND", agent.display().to_string())
        .set("TURNSTILE_AGENT_KEEP_WARM", "0s")
        .set("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl")
        .set(
            "TURNSTILE_AGENT_ENV_FAKE_CLAUDE_PROBE",
            layout.probes().join(":"),
        );
    let who = if nobody { RunAs::Nobody } else { RunAs::Me };
    let bot = SealedBot::start(
        Path::new(env!("CARGO_BIN_EXE_turnstile")),
        &[OsStr::new("--config"), config_file.as_os_str()],
        layout.base.path(),
        who,
        &vars,
        &[],
        &log,
    );
    let log_text = || bot.log_text();
    let wait = Duration::from_secs(30);
    for (chat, project) in CHATS {
        let mut told = 0;
        if !project.is_empty() {
            api.push_text(chat, chat, &format!("/project {project}"));
            told += 1;
            let texts = api.wait_for_texts(chat, told, wait).await;
            assert!(
                texts[0].contains("now works in project"),
                "{texts:?}\n{}",
                log_text()
            );
        }
        api.push_text(chat, chat, "one");
        told += 1;
        let texts = api.wait_for_texts(chat, told, wait).await;
        assert_eq!(
            texts.last().map(String::as_str),
            Some("echo: one"),
            "{}",
            log_text()
        );
    }
    for (chat, _) in CHATS {
        let told = api.wait_for_texts(chat, 1, wait).await.len();
        api.push_text(chat, chat, "two");
        let texts = api.wait_for_texts(chat, told + 1, wait).await;
        assert_eq!(
            texts.last().map(String::as_str),
            Some("echo: two"),
            "{}",
            log_text()
        );
    }
    let log = bot.stop();
    (layout, log)
}

/// What an agent saw at `path`: its file's text, its directory's names
/// (sorted), or nothing.
fn seen(probes: &Value, path: &Path) -> Value {
    let mut seen = probes[path.display().to_string()].clone();
    if let Some(names) = seen.as_array_mut() {
        names.sort_by_key(|n| n.as_str().map(String::from));
    }
    seen
}

/// Each chat's agent, started afresh after every chat's agent wrote its
/// secret, saw its own and no other's, nor any other chat's home.
fn assert_apart(layout: &Layout, log: &str) {
    for (chat, project) in CHATS {
        let workdir = layout.workdir(chat, project);
        let dump = last_dump(&workdir);
        let probes = &dump["probes"];
        let real = std::fs::canonicalize(&workdir).expect("workdir");
        assert_eq!(dump["cwd"], real.display().to_string(), "{chat}");
        for (other, theirs) in CHATS {
            let secret = layout.secret(other, theirs);
            let home = layout.path(&format!("state/homes/{other}"));
            if other == chat {
                assert!(
                    seen(probes, &secret).is_string(),
                    "{chat}: own secret {probes:#}"
                );
                assert!(
                    seen(probes, &home).is_array(),
                    "{chat}: own home {probes:#}"
                );
            } else {
                assert_eq!(
                    seen(probes, &secret),
                    Value::Null,
                    "{chat} saw {other}'s: {probes:#}"
                );
                assert_eq!(
                    seen(probes, &home),
                    Value::Null,
                    "{chat} saw {other}'s home: {probes:#}"
                );
            }
        }
        let real = layout.path("real/1003/secret");
        if chat != 1003 {
            assert_eq!(seen(probes, &real), Value::Null, "{chat}: {probes:#}");
        }
        // Where other chats' directories lie, nothing but its own shows.
        for (dir, own) in [
            (
                "state/workspaces",
                project.is_empty().then(|| chat.to_string()),
            ),
            ("state/homes", Some(chat.to_string())),
            (
                "state/gamma",
                (project == "gamma").then(|| chat.to_string()),
            ),
            (
                "projects/alpha",
                (project == "alpha").then(|| chat.to_string()),
            ),
            ("real", (project == "delta").then(|| chat.to_string())),
        ] {
            let names: Vec<String> = seen(probes, &layout.path(dir))
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(String::from))
                .collect();
            assert!(
                names.iter().all(|n| Some(n) == own.as_ref()),
                "{chat} sees {names:?} in {dir}: {probes:#}"
            );
        }
    }
    assert!(!log.contains("ERROR"), "{log}");
}

/// No chat's agent could make a user namespace of its own (`unshare -U`,
/// and `unshare -Urm` as the review did), where it would hold every
/// capability over mounts of its own.
fn assert_no_user_namespace(layout: &Layout, log: &str) {
    for (chat, project) in CHATS {
        let workdir = layout.workdir(chat, project);
        for probe in ["userns-U", "userns-Urm"] {
            let made = std::fs::read_to_string(workdir.join(probe)).expect(probe);
            assert_eq!(made.trim(), "refused", "{chat}: {probe}\n{log}");
        }
    }
    assert!(log.contains("no_nested_userns=true"), "{log}");
}

#[actix_rt::test]
async fn as_root_no_agent_sees_another_chats_or_projects_directories() {
    require_bubblewrap_as_root();
    let (layout, log) = two_rounds(false).await;
    assert_apart(&layout, &log);
}

#[actix_rt::test]
async fn as_nobody_no_agent_sees_another_chats_or_projects_directories() {
    require_bubblewrap_as_root();
    let (layout, log) = two_rounds(true).await;
    assert!(log.contains("user_ns=true"), "{log}");
    assert_apart(&layout, &log);
}

#[actix_rt::test]
async fn as_root_an_agent_cannot_make_a_user_namespace() {
    require_bubblewrap_as_root();
    let (layout, log) = two_rounds(false).await;
    assert_no_user_namespace(&layout, &log);
}

#[actix_rt::test]
async fn as_nobody_an_agent_cannot_make_a_user_namespace() {
    require_bubblewrap_as_root();
    let (layout, log) = two_rounds(true).await;
    assert_no_user_namespace(&layout, &log);
}

//! The real Claude Code CLI under bubblewrap, against the fake Anthropic
//! Messages API: a chat outside a project (one limited by `users`) runs
//! Bash on the project's folder and gets nothing of it back. Part of the
//! real-CLI group (`--features real-cli`; root, npm, bwrap), run in a
//! loopback-only namespace like `real_claude.rs`.
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::agent::ToolRegistry;
use turnstile::agent::backends::ClaudeBackend;

/// What only project alpha's conversation wrote.
const SECRET: &str = "alpha-only-plugh-4711";

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(&[
        "a_chat_outside_a_project_reads_nothing_of_its_folder",
    ]);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_chat_outside_a_project_reads_nothing_of_its_folder() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    // Outside /tmp, which the sandbox replaces anyway.
    let places = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let alpha = places.path().join("alpha");
    std::fs::create_dir_all(alpha.join("1")).unwrap();
    std::fs::write(alpha.join("1").join("secret"), SECRET).unwrap();
    // Its output, unlike its text, holds `entry:secret` when the folder
    // shows, and `listed-42` when the command ran.
    let command = format!(
        "cat {0}/1/secret; ls -a {0} {0}/1 | sed 's/^/entry:/'; echo listed-$((40+2))",
        alpha.display()
    );
    api.push(Reply::tools(&[("Bash", json!({ "command": command }))]));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({ "text": "read" }),
    )]));
    let workdir = places.path().join("ws").join("{chat}");
    let mut vars = support::real_cli::agent_env(
        &api.base_url(),
        &home.path().display().to_string(),
        &workdir.display().to_string(),
    );
    vars.retain(|(k, _)| k != "TURNSTILE_AGENT_SANDBOX");
    vars.extend(
        [
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap"),
            ("TURNSTILE_AGENT_ALLOWED_TOOLS", "Bash"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let edit = {
        let alpha = alpha.clone();
        move |config: &mut turnstile::Config| {
            config.projects.insert(
                "alpha".into(),
                turnstile::config::ProjectConfig {
                    workdir: alpha.join("{chat}"),
                    users: vec![USER as u64],
                    ..Default::default()
                },
            );
        }
    };
    let mut h = Harness::launch_edited(&pairs, Harness::fast_limits(), edit, |config| {
        let mut settings = support::claude_settings(config);
        if let Err(err) = settings.probe_sandbox() {
            panic!("{err}");
        }
        Arc::new(ClaudeBackend::new(
            settings,
            Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
        ))
    })
    .await;
    h.say(2, USER, "what is in alpha?");
    h.turn_ended(2, 1).await;
    let requests = api.model_requests();
    let sent = requests.last().expect("a model request")["messages"].to_string();
    assert!(
        sent.contains("listed-42"),
        "the Bash command ran: {}",
        api.describe()
    );
    assert!(
        !sent.contains(SECRET),
        "the project's file reached another chat: {sent}"
    );
    assert!(
        !sent.contains("entry:secret") && !sent.contains("entry:1"),
        "the project's folder listed in another chat: {sent}"
    );
}

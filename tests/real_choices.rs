//! What a conversation chooses, with the real Claude Code CLI against the
//! fake Anthropic Messages API and the fake Bot API, offline: `/model`
//! reaches the API as the request's `model`; a session picked in
//! `/sessions` brings its history back (and not the latest one's); a fork
//! has a new session id and the original's history. Part of the real-CLI
//! group (`--features real-cli`; root, npm), run in a loopback-only
//! namespace like `real_claude.rs`.
#![cfg(feature = "real-cli")]

mod support;

use serde_json::{Value, json};
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::events::BotEvent;

const INNER: &[&str] = &[
    "a_model_chosen_is_the_requests_model",
    "a_session_picked_brings_its_history_back",
    "a_fork_has_a_new_id_and_the_originals_history",
    "a_project_runs_the_agents_command_in_its_directory",
];

/// The model the tests choose: a name the CLI sends on as it is (2.1.332
/// maps some older names, such as `claude-opus-4-1-20250805`, to its
/// current model).
const MODEL: &str = "claude-haiku-4-5";

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The bot on the real CLI against `api`, cold processes (each turn
/// resumes from the agent's home), `env` on top.
async fn start(api: &FakeAnthropic, home: &tempfile::TempDir, env: &[(&str, &str)]) -> Harness {
    let home = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &home, &home);
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Harness::launch_claude(&vars).await.0
}

/// A reply ending the turn with `text`.
fn answer(api: &FakeAnthropic, text: &str) {
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({ "text": text }),
    )]));
}

/// The text of every message of a model request, joined.
fn history(request: &Value) -> String {
    request["messages"].to_string()
}

/// The session ids the turns reported, in order.
fn session_ids(h: &Harness) -> Vec<String> {
    h.seen
        .iter()
        .filter_map(|e| match e {
            BotEvent::TurnEnded { session_id, .. } => session_id.clone(),
            _ => None,
        })
        .collect()
}

/// Waits for a text to chat 1 containing `needle`.
async fn told(h: &Harness, needle: &str) {
    h.api
        .wait_for(SOON, &format!("a text with {needle:?}"), |_| {
            h.texts(1).into_iter().find(|t| t.contains(needle))
        })
        .await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_model_chosen_is_the_requests_model() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    answer(&api, "one");
    answer(&api, "two");
    let models = format!("claude-sonnet-4-5,{MODEL}");
    let mut h = start(&api, &home, &[("TURNSTILE_AGENT_MODELS", models.as_str())]).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    h.say(1, USER, &format!("/model {MODEL}"));
    told(&h, "runs with").await;
    h.say(1, USER, "again");
    h.turn_ended(1, 2).await;
    let requests = api.model_requests();
    let last = requests.last().expect("a model request");
    assert_eq!(last["model"], json!(MODEL), "{}", api.describe());
    assert_ne!(
        requests[0]["model"],
        json!(MODEL),
        "the first turn ran the default"
    );
    let ids = session_ids(&h);
    assert_eq!(ids.len(), 2);
    assert_eq!(
        ids[0], ids[1],
        "the same session, resumed with the new model"
    );
    assert!(history(last).contains("hello"), "the history came along");
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_session_picked_brings_its_history_back() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    for text in ["one", "two", "three"] {
        answer(&api, text);
    }
    let mut h = start(&api, &home, &[]).await;
    h.say(1, USER, "the garden needs roses");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "/new");
    told(&h, "fresh conversation").await;
    h.say(1, USER, "my taxes are due");
    h.turn_ended(1, 2).await;
    h.say(1, USER, "/sessions");
    told(&h, "Sessions here").await;
    let (message, rows) = h.api.last_buttons(1).expect("the list");
    let garden = rows
        .into_iter()
        .flatten()
        .find(|(label, _)| label.contains("the garden"))
        .expect("the garden's button")
        .1;
    let press = h.api.push_callback(1, USER, message as i32, &garden);
    h.callback_answer(&press).await;
    h.say(1, USER, "which flowers again?");
    h.turn_ended(1, 3).await;
    let requests = api.model_requests();
    let last = history(requests.last().expect("a model request"));
    assert!(last.contains("the garden needs roses"), "{last}");
    assert!(
        !last.contains("my taxes"),
        "not the latest session's: {last}"
    );
    let ids = session_ids(&h);
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[2], ids[0], "the garden's session resumed");
    assert_ne!(ids[1], ids[0]);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_fork_has_a_new_id_and_the_originals_history() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    answer(&api, "one");
    answer(&api, "two");
    let mut h = start(&api, &home, &[]).await;
    h.say(1, USER, "plan a trip to Lisbon");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "/fork");
    told(&h, "Forked").await;
    h.say(1, USER, "what about Porto");
    h.turn_ended(1, 2).await;
    let ids = session_ids(&h);
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[1], ids[0], "the fork has its own id");
    let last = history(api.model_requests().last().expect("a model request"));
    assert!(last.contains("plan a trip to Lisbon"), "{last}");
    h.say(1, USER, "/sessions");
    told(&h, "Sessions here").await;
    let (_, rows) = h.api.last_buttons(1).expect("the list");
    assert_eq!(rows.len(), 2, "the original stays listed: {rows:?}");
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_project_runs_the_agents_command_in_its_directory() {
    use std::sync::Arc;
    use turnstile::agent::ToolRegistry;
    use turnstile::agent::backends::ClaudeBackend;
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    let projects = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "Bash",
        json!({"command": "pwd > made-here"}),
    )]));
    answer(&api, "done");
    let home_path = home.path().display().to_string();
    let vars = support::real_cli::agent_env(&api.base_url(), &home_path, &home_path);
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let beta = projects.path().join("beta");
    let edit = {
        let beta = beta.clone();
        move |config: &mut turnstile::Config| {
            config.projects.insert(
                "beta".into(),
                turnstile::config::ProjectConfig {
                    workdir: beta.join("{chat}"),
                    // The project lets Bash run without asking.
                    allowed_tools: vec!["Bash".into()],
                    ..Default::default()
                },
            );
        }
    };
    let mut h = Harness::launch_edited(&pairs, Harness::fast_limits(), edit, |config| {
        Arc::new(ClaudeBackend::new(
            support::claude_settings(config),
            Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
        ))
    })
    .await;
    h.say(1, USER, "/project beta");
    told(&h, "works in project beta").await;
    h.say(1, USER, "where are you?");
    h.turn_ended(1, 1).await;
    let made = beta.join("1").join("made-here");
    let written = std::fs::read_to_string(&made)
        .unwrap_or_else(|e| panic!("{}: {e}; {}", made.display(), api.describe()));
    assert_eq!(written.trim(), beta.join("1").display().to_string());
    assert!(
        !home.path().join("made-here").exists(),
        "not in agent.workdir"
    );
}

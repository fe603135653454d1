//! What a conversation chooses, through the real teloxide client and the
//! fake Bot API: `/model` (a listed model, per conversation; the warm
//! process closed, the session resumed with the new model), `/sessions`
//! (an earlier one picked up), `/fork`, `/usage`, and the lists' buttons
//! (an old list's press is expired; a stranger's refused).

mod support;

use support::bot_api::files::{supergroup, text_message};
use support::*;
use turnstile::agent::{Scenario, Step};

/// Another allowed user.
const OTHER: i64 = 1002;

/// `agent.models` for these tests.
const MODELS: (&str, &str) = ("TURNSTILE_AGENT_MODELS", "opus,haiku");

/// Waits for the `n`-th (0-based) text to `chat` containing `needle`.
async fn told_nth(h: &Harness, chat: i64, needle: &str, n: usize) -> String {
    h.api
        .wait_for(SOON, &format!("text #{n} with {needle:?}"), |_| {
            h.texts(chat)
                .into_iter()
                .filter(|t| t.contains(needle))
                .nth(n)
        })
        .await
}

/// Waits for the first text to `chat` containing `needle`.
async fn told(h: &Harness, chat: i64, needle: &str) -> String {
    told_nth(h, chat, needle, 0).await
}

/// A message and its turn's end (the `n`-th of `chat`).
async fn turn(h: &mut Harness, chat: i64, text: &str, n: usize) {
    h.say(chat, USER, text);
    h.turn_ended(chat, n).await;
}

/// The latest question's message id and its buttons' (label, data).
fn last_list(h: &Harness, chat: i64) -> (i32, Vec<(String, String)>) {
    let (id, rows) = h.api.last_buttons(chat).expect("a list with buttons");
    let id = i32::try_from(id).expect("a message id");
    (id, rows.into_iter().flatten().collect())
}

/// The button labelled with `label` (ignoring a mark in front).
fn button(buttons: &[(String, String)], label: &str) -> String {
    buttons
        .iter()
        .find(|(l, _)| l.trim_start_matches("✓ ").trim_start_matches("▶ ") == label)
        .unwrap_or_else(|| panic!("no {label:?} in {buttons:?}"))
        .1
        .clone()
}

#[actix_rt::test]
async fn a_model_picked_runs_the_next_turn_in_a_new_process_on_the_same_session() {
    let mut h = Harness::start(Scenario::default(), &[MODELS]).await;
    turn(&mut h, USER, "hello", 1).await;
    h.say(USER, USER, "/model");
    let menu = told(&h, USER, "This conversation runs with").await;
    assert!(
        menu.contains("runs with the agent's default model"),
        "{menu}"
    );
    let (message, buttons) = last_list(&h, USER);
    assert_eq!(
        buttons.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        ["opus", "haiku"]
    );
    let first_list = buttons.clone();
    let press = h
        .api
        .push_callback(USER, USER, message, &button(&buttons, "haiku"));
    assert!(h.callback_answer(&press).await.contains("runs with haiku"));
    h.edited(USER, "runs with haiku").await;
    turn(&mut h, USER, "again", 2).await;
    let log = h.backend.log();
    assert_eq!(
        log.opens.len(),
        2,
        "the warm process was not reused: {log:?}"
    );
    let first = log.opens[0].1.clone();
    assert_eq!(first, None);
    assert_eq!(
        log.opens[1].1.as_deref(),
        Some(format!("scripted-{USER}-1").as_str()),
        "the same session, resumed"
    );
    assert_eq!(log.choices[0], (None, false));
    assert_eq!(log.choices[1], (Some("haiku".into()), false));
    // The list shows the choice; the old list is expired.
    h.say(USER, USER, "/model");
    told(&h, USER, "runs with haiku. Choose").await;
    let (_, buttons) = last_list(&h, USER);
    assert!(buttons.iter().any(|(l, _)| l == "✓ haiku"), "{buttons:?}");
    let press = h.api.push_callback(USER, USER, message, &first_list[0].1);
    assert!(
        h.callback_answer(&press).await.contains("expired"),
        "a press on the first list"
    );
    assert_eq!(h.backend.log().choices.len(), 2, "nothing chosen by it");
}

#[actix_rt::test]
async fn a_model_named_is_set_a_name_off_the_list_is_refused_with_the_list() {
    let mut h = Harness::start(Scenario::default(), &[MODELS]).await;
    h.say(USER, USER, "/model gpt-9");
    let refused = told(&h, USER, "not a model").await;
    assert_eq!(
        refused,
        "⚠️ gpt-9 is not a model this bot offers. Choose one of: opus, haiku."
    );
    h.say(USER, USER, "/model OPUS");
    told(&h, USER, "runs with opus.").await;
    turn(&mut h, USER, "hi", 1).await;
    assert_eq!(h.backend.log().choices[0].0.as_deref(), Some("opus"));
    // Another conversation keeps the configured model.
    h.say(OTHER, OTHER, "hi");
    h.turn_ended(OTHER, 1).await;
    assert_eq!(h.backend.log().choices[1].0, None);
}

#[actix_rt::test]
async fn with_no_models_listed_model_says_what_runs_and_that_switching_is_off() {
    let h = Harness::start(Scenario::default(), &[("TURNSTILE_AGENT_MODEL", "sonnet")]).await;
    h.say(USER, USER, "/model opus");
    let text = told(&h, USER, "Switching is off").await;
    assert!(text.contains("runs with sonnet"), "{text}");
    assert!(h.api.last_buttons(USER).is_none(), "no buttons");
}

#[actix_rt::test]
async fn an_earlier_session_picked_is_resumed_and_the_replaced_one_stays_listed() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    turn(&mut h, USER, "first topic: the garden", 1).await;
    h.say(USER, USER, "/new");
    told(&h, USER, "fresh conversation").await;
    turn(&mut h, USER, "second topic: taxes", 2).await;
    h.say(USER, USER, "/sessions");
    let list = told(&h, USER, "Sessions here").await;
    let lines: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(
        lines[0].starts_with("▶ ") && lines[0].ends_with("1 turn · second topic: taxes"),
        "{list}"
    );
    assert!(lines[1].ends_with("first topic: the garden"), "{list}");
    let (message, buttons) = last_list(&h, USER);
    assert!(
        buttons[0].0.starts_with("▶ "),
        "the current one marked: {buttons:?}"
    );
    let garden = buttons[1].1.clone();
    // Someone not on the allowlist cannot pick.
    let press = h.api.push_callback(USER, STRANGER, message, &garden);
    assert!(h.callback_answer(&press).await.contains("only answers"));
    let press = h.api.push_callback(USER, USER, message, &garden);
    assert!(h.callback_answer(&press).await.contains("session picked"));
    turn(&mut h, USER, "back to the garden", 3).await;
    let opens = h.backend.log().opens;
    let garden_id = format!("scripted-{USER}-1");
    assert_eq!(opens[2].1.as_deref(), Some(garden_id.as_str()), "{opens:?}");
    h.say(USER, USER, "/sessions");
    let list = told_nth(&h, USER, "Sessions here", 1).await;
    let lines: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(
        lines[0].starts_with("▶ ") && lines[0].ends_with("2 turns · first topic: the garden"),
        "{list}"
    );
    // The first list was used: its buttons expired.
    let press = h.api.push_callback(USER, USER, message, &garden);
    assert!(h.callback_answer(&press).await.contains("expired"));
}

#[actix_rt::test]
async fn a_fork_goes_on_from_a_copy_and_the_original_stays_listed() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(USER, USER, "/fork");
    told(&h, USER, "Nothing to fork yet").await;
    turn(&mut h, USER, "plan a trip to Lisbon", 1).await;
    h.say(USER, USER, "/fork");
    let forked = told(&h, USER, "Forked").await;
    assert!(forked.contains("“plan a trip to Lisbon”"), "{forked}");
    turn(&mut h, USER, "what about Porto instead", 2).await;
    let log = h.backend.log();
    let original = format!("scripted-{USER}-1");
    assert_eq!(log.opens[1].1.as_deref(), Some(original.as_str()));
    assert_eq!(log.choices[1], (None, true), "resumed as a fork");
    turn(&mut h, USER, "and Faro", 3).await;
    assert_eq!(
        h.backend.log().opens.len(),
        2,
        "the fork's process stays warm"
    );
    h.say(USER, USER, "/new");
    told(&h, USER, "fresh conversation").await;
    h.say(USER, USER, "/sessions");
    let list = told(&h, USER, "Sessions here").await;
    let lines: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(
        lines[0].starts_with("• ") && lines[0].contains("2 turns · plan a trip"),
        "{list}"
    );
    assert!(
        lines[1].starts_with("• ") && lines[1].contains("1 turn · plan a trip"),
        "{list}"
    );
    // The fork goes on under its own id: picked, it is resumed as itself.
    let (message, buttons) = last_list(&h, USER);
    let press = h.api.push_callback(USER, USER, message, &buttons[0].1);
    h.callback_answer(&press).await;
    turn(&mut h, USER, "and Faro", 4).await;
    let log = h.backend.log();
    assert_eq!(
        (log.opens[2].1.as_deref(), log.choices[2].1),
        (Some(format!("scripted-{USER}-2").as_str()), false),
        "{log:?}"
    );
}

#[actix_rt::test]
async fn usage_counts_this_conversations_turns_and_an_admin_sees_the_bots() {
    // Each model call reports 100 tokens read and 10 written.
    let mut h = Harness::start(Scenario::default().with_usage(100, 10), &[]).await;
    turn(&mut h, USER, "one", 1).await;
    turn(&mut h, USER, "two", 2).await;
    h.say(ADMIN, ADMIN, "three");
    h.turn_ended(ADMIN, 1).await;
    // A result comes after its turn ended (after `end_turn`): counted once
    // the turn is done with its session, in the store and then the metrics.
    let metrics = std::sync::Arc::clone(h.bot.events.metrics());
    eventually("the three results counted", SOON, || {
        let text = metrics.render(0, 0, 0);
        async move {
            if text.contains("turnstile_tokens_total{direction=\"input\"} 300\n") {
                Ok(())
            } else {
                Err(text)
            }
        }
    })
    .await;
    h.say(USER, USER, "/usage");
    let mine = told(&h, USER, "This conversation").await;
    let today = mine.lines().nth(1).unwrap_or_default();
    assert!(today.starts_with("Today (UTC): 2 turns, "), "{mine}");
    assert!(today.contains("200 in / 20 out tokens"), "{mine}");
    assert!(!mine.contains("whole bot"), "not for a user: {mine}");
    assert!(!mine.contains(NO_USAGE), "use was reported: {mine}");
    h.say(ADMIN, ADMIN, "/usage");
    let admin = told(&h, ADMIN, "This conversation").await;
    assert!(
        admin.contains("The whole bot:\nToday (UTC): 3 turns"),
        "{admin}"
    );
    assert!(
        admin.contains(&format!("Top conversations, 30 days:\n{USER}: 2 turns")),
        "{admin}"
    );
    let text = metrics.render(0, 0, 0);
    assert!(
        text.contains("turnstile_tokens_total{direction=\"output\"} 30\n"),
        "{text}"
    );
}

/// What `/usage` says under the figures when the agent reported none.
const NO_USAGE: &str = "The agent reported no token use or cost for these turns.";

#[actix_rt::test]
async fn the_echo_agent_reports_no_usage_and_usage_says_so() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    turn(&mut h, USER, "one", 1).await;
    // The turn's record is counted after its `usage` row is written.
    let metrics = std::sync::Arc::clone(h.bot.events.metrics());
    eventually("the turn's use recorded", SOON, || {
        let text = metrics.render(0, 0, 0);
        async move {
            if text.contains("turnstile_turn_api_calls_count 1\n") {
                Ok(())
            } else {
                Err(text)
            }
        }
    })
    .await;
    h.say(USER, USER, "/usage");
    let mine = told(&h, USER, "This conversation").await;
    let today = mine.lines().nth(1).unwrap_or_default();
    assert!(today.starts_with("Today (UTC): 1 turn, "), "{mine}");
    assert!(today.contains(" 0 in / 0 out tokens, $0.0000"), "{mine}");
    assert_eq!(mine.lines().last(), Some(NO_USAGE), "{mine}");
    let text = metrics.render(0, 0, 0);
    for direction in ["input", "output"] {
        let line = format!("turnstile_tokens_total{{direction=\"{direction}\"}} ");
        let counted = text
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .map_or(0.0, |v| v.parse::<f64>().expect("a number"));
        assert_eq!(counted, 0.0, "{direction} tokens: {text}");
    }
}

#[actix_rt::test]
async fn in_a_group_a_member_lists_and_picks_and_help_lists_the_commands() {
    let h = Harness::start(Scenario::default(), &[MODELS]).await;
    const GROUP: i64 = -100_777;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "/model@turnstile_bot",
    ));
    told(&h, GROUP, "Choose another").await;
    let (message, buttons) = last_list(&h, GROUP);
    let press = h
        .api
        .push_callback(GROUP, OTHER, message, &button(&buttons, "opus"));
    assert!(h.callback_answer(&press).await.contains("runs with opus"));
    h.say(USER, USER, "/help");
    let help = told(&h, USER, "/model").await;
    for line in ["/model: ", "/sessions: ", "/fork: ", "/usage: "] {
        assert!(help.contains(line), "{line} in {help}");
    }
}

#[actix_rt::test]
async fn a_model_chosen_while_a_turn_runs_is_not_run_by_that_turns_warm_process() {
    use turnstile::agent::Step;
    use turnstile::events::BotEvent;
    let scenario = Scenario::default().with_rule(
        "slow",
        support::turn(vec![
            Step::Wait { ms: 2_000 },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    serde_json::json!({"text": "done"}),
                )],
            },
        ]),
    );
    let mut h = Harness::start(scenario, &[MODELS]).await;
    h.say(USER, USER, "slow");
    h.event("the slow turn started", |e| {
        matches!(e, BotEvent::TurnStarted { .. })
    })
    .await;
    h.say(USER, USER, "/model opus");
    told(&h, USER, "runs with opus").await;
    h.turn_ended(USER, 1).await;
    told(&h, USER, "done").await;
    let texts = h.texts(USER);
    let at = |needle: &str| texts.iter().position(|t| t.contains(needle));
    assert!(
        at("runs with opus") < at("done"),
        "chosen while the turn ran: {texts:?}"
    );
    turn(&mut h, USER, "next", 2).await;
    let log = h.backend.log();
    assert_eq!(
        log.opens.len(),
        2,
        "the slow turn's process was not kept: {log:?}"
    );
    assert_eq!(log.choices[1].0.as_deref(), Some("opus"));
    assert_eq!(
        log.opens[1].1.as_deref(),
        Some(format!("scripted-{USER}-1").as_str())
    );
}

#[actix_rt::test]
async fn a_fork_in_a_forum_topic_opens_a_topic_that_starts_from_a_copy() {
    use support::bot_api::files::in_topic;
    const FORUM: i64 = -100_888;
    let mut h = Harness::start(Scenario::default(), &[MODELS]).await;
    let say = |h: &Harness, text: &str, thread: i64| {
        h.api.push_message(in_topic(
            text_message(supergroup(FORUM, true), USER, text),
            thread,
        ))
    };
    say(&h, "/model@turnstile_bot haiku", 7);
    told(&h, FORUM, "runs with haiku").await;
    say(&h, "@turnstile_bot design the logo", 7);
    h.turn_ended(FORUM, 1).await;
    say(&h, "/fork@turnstile_bot", 7);
    let forked = told(&h, FORUM, "Forked into the new topic").await;
    assert!(forked.contains("“design the logo”"), "{forked}");
    let created = h.api.calls_of("createForumTopic");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].params["name"], "🍴 design the logo");
    let thread = h
        .api
        .wait_for(SOON, "the new topic's first message", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "sendmessage"
                        && c.params["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("🍴 This topic goes on"))
                })
                .and_then(|c| c.params["message_thread_id"].as_i64())
        })
        .await;
    assert_ne!(thread, 7);
    say(&h, "@turnstile_bot make it blue", thread);
    h.turn_ended(FORUM, 2).await;
    let log = h.backend.log();
    let original = format!("scripted-{FORUM}_7-1");
    assert_eq!(
        log.opens[1],
        (format!("{FORUM}_{thread}"), Some(original.clone())),
        "{log:?}"
    );
    assert_eq!(
        log.choices[1],
        (Some("haiku".into()), true),
        "a copy, with the model"
    );
    // The original topic goes on in its own session.
    say(&h, "@turnstile_bot and the font?", 7);
    h.turn_ended(FORUM, 3).await;
    assert_eq!(
        h.backend.log().opens.len(),
        2,
        "the original topic goes on in its warm process"
    );
}

/// Two projects: `alpha` (its own model, only [`USER`] may move there)
/// and `beta`, under `dir`.
fn with_projects(dir: &std::path::Path) -> impl FnOnce(&mut turnstile::Config) {
    let dir = dir.to_path_buf();
    move |config| {
        let project = |name: &str, model: &str, users: Vec<u64>| turnstile::config::ProjectConfig {
            workdir: dir.join(name).join("{chat}"),
            model: model.into(),
            allowed_tools: vec!["Bash(make:*)".into()],
            users,
        };
        config
            .projects
            .insert("alpha".into(), project("alpha", "haiku", vec![USER as u64]));
        config
            .projects
            .insert("beta".into(), project("beta", "", vec![]));
    }
}

#[actix_rt::test]
async fn a_project_moves_the_agent_and_keeps_its_own_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_edited(Scenario::default(), &[], with_projects(dir.path())).await;
    turn(&mut h, USER, "at home", 1).await;
    h.say(USER, USER, "/project");
    let text = told(&h, USER, "works in no project").await;
    assert!(text.contains("• alpha\n• beta"), "{text}");
    let (message, buttons) = last_list(&h, USER);
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["alpha", "beta", "▶ (none)"]);
    // Another member may not move a conversation to alpha.
    h.say(OTHER, OTHER, "/project alpha");
    told(&h, OTHER, "may not move this conversation to alpha").await;
    h.say(OTHER, OTHER, "/project");
    told(&h, OTHER, "works in no project").await;
    let (_, theirs) = last_list(&h, OTHER);
    assert!(theirs.iter().all(|(l, _)| l != "alpha"), "{theirs:?}");
    h.say(USER, USER, "/project gamma");
    let none = told(&h, USER, "no project gamma").await;
    assert!(none.ends_with("The projects: alpha, beta."), "{none}");
    let press = h
        .api
        .push_callback(USER, USER, message, &button(&buttons, "beta"));
    assert!(h.callback_answer(&press).await.contains("project beta"));
    turn(&mut h, USER, "in beta", 2).await;
    let log = h.backend.log();
    let beta = dir.path().join("beta").join("{chat}");
    assert_eq!(log.projects[1], Some(("beta".to_string(), beta.clone())));
    assert_eq!(log.opens[1].1, None, "beta starts its own session");
    h.say(USER, USER, "/project none");
    told(&h, USER, "works in no project (the default").await;
    turn(&mut h, USER, "home again", 3).await;
    h.say(USER, USER, "/project BETA");
    told(&h, USER, "works in project beta").await;
    turn(&mut h, USER, "beta again", 4).await;
    let log = h.backend.log();
    assert_eq!(log.opens.len(), 4, "{log:?}");
    assert_eq!(
        (log.opens[2].1.as_deref(), log.projects[2].clone()),
        (Some(format!("scripted-{USER}-1").as_str()), None),
        "home's session resumed"
    );
    assert_eq!(
        (log.opens[3].1.as_deref(), log.projects[3].clone()),
        (
            Some(format!("scripted-{USER}-2").as_str()),
            Some(("beta".to_string(), beta))
        ),
        "beta's session resumed"
    );
    h.say(USER, USER, "/project alpha");
    told(&h, USER, "works in project alpha").await;
    turn(&mut h, USER, "in alpha", 5).await;
    assert_eq!(
        h.backend.log().choices[4].0.as_deref(),
        Some("haiku"),
        "alpha's model"
    );
    h.say(ADMIN, ADMIN, "/status");
    let status = told(&h, ADMIN, "queued").await;
    assert!(
        status.contains(&format!("chat {USER}: idle, 0 queued, project alpha")),
        "{status}"
    );
}

#[actix_rt::test]
async fn in_a_group_only_a_projects_users_may_press_it() {
    const GROUP: i64 = -100_999;
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::start_edited(Scenario::default(), &[], with_projects(dir.path())).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "/project@turnstile_bot",
    ));
    told(&h, GROUP, "works in no project").await;
    let (message, buttons) = last_list(&h, GROUP);
    let alpha = button(&buttons, "alpha");
    let press = h.api.push_callback(GROUP, OTHER, message, &alpha);
    assert!(h.callback_answer(&press).await.contains("may not move"));
    let press = h.api.push_callback(GROUP, USER, message, &alpha);
    assert!(h.callback_answer(&press).await.contains("project alpha"));
}

/// In a project the files users send land in the project's directory, and
/// `send_file` reads from it: where the agent works.
#[actix_rt::test]
async fn in_a_project_files_come_and_go_through_its_directory() {
    use support::bot_api::files::{captioned, document, private};
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::default().with_rule(
        "send the report",
        support::turn(vec![Step::Tools {
            calls: vec![
                tool(
                    "mcp__telegram-tools__send_file",
                    serde_json::json!({"path": "report.txt"}),
                ),
                tool("mcp__telegram-tools__end_turn", serde_json::json!({})),
            ],
        }]),
    );
    let mut h = Harness::start_edited(scenario, &[], with_projects(dir.path())).await;
    h.say(USER, USER, "/project beta");
    told(&h, USER, "works in project beta").await;
    let beta = dir.path().join("beta").join(USER.to_string());
    let home = h.config.agent.workdir.join(USER.to_string());
    h.api
        .add_file("doc-1", "documents/notes.txt", b"notes for beta");
    h.api.push_message(captioned(
        document(private(USER), USER, "doc-1", "notes.txt", 14),
        "read this",
    ));
    h.turn_ended(USER, 1).await;
    let saved: Vec<String> = std::fs::read_dir(beta.join("inbox"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(saved, ["notes for beta"], "the file is in beta's directory");
    assert!(
        !home.join("inbox").exists(),
        "nothing in the default workdir"
    );
    std::fs::write(beta.join("report.txt"), b"beta's report").unwrap();
    h.say(USER, USER, "send the report");
    let sent = h.api.wait_for_call("sendDocument", SOON).await;
    assert_eq!(sent.status, 200, "{sent:?}");
}

//! Tool approvals in the chat: a tool the config does not decide is asked
//! with inline buttons; only the person who asked (or an admin) decides;
//! "always" is remembered per chat across restarts; timeouts, `/stop` and a
//! host stop deny; the clocks stand still while a person decides.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;

/// `ask`: Bash `echo hi`; `ask git`: Bash `git status`; `colour`: the
/// question tool. Each then ends its turn.
fn scenario() -> Scenario {
    let ask = |name: &str, input: Value| {
        turn(vec![
            Step::Ask {
                tool: name.into(),
                input,
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
            },
        ])
    };
    Scenario::default()
        .with_rule("ask git", ask("Bash", json!({"command": "git status"})))
        .with_rule("ask", ask("Bash", json!({"command": "echo hi"})))
        .with_rule(
            "colour",
            ask(
                "AskUserQuestion",
                json!({"questions": [{"question": "Which colour?", "header": "Colour",
                    "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cold"}],
                    "multiSelect": false}]}),
            ),
        )
}

/// The `n`-th (1-based) question with buttons sent to `chat`: its buttons'
/// callback data by label.
async fn question(h: &Harness, chat: i64, n: usize) -> (String, Vec<(String, String)>) {
    let call = h
        .api
        .wait_for(SOON, &format!("question #{n} in chat {chat}"), |calls| {
            calls
                .iter()
                .filter(|c| {
                    c.method == "sendmessage"
                        && c.params["chat_id"].as_i64() == Some(chat)
                        && !buttons_of(c).is_empty()
                })
                .nth(n - 1)
                .cloned()
        })
        .await;
    let text = call.params["text"].as_str().unwrap_or_default().to_string();
    (text, buttons_of(&call).into_iter().flatten().collect())
}

fn data(buttons: &[(String, String)], label: &str) -> String {
    buttons
        .iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no {label} button in {buttons:?}"))
        .1
        .clone()
}

/// Waits for an edit of a question in `chat` whose text contains `needle`.
async fn edited(h: &Harness, chat: i64, needle: &str) -> String {
    h.api
        .wait_for(SOON, &format!("an edit with {needle:?}"), |calls| {
            calls
                .iter()
                .filter(|c| {
                    c.method == "editmessagetext" && c.params["chat_id"].as_i64() == Some(chat)
                })
                .filter_map(|c| c.params["text"].as_str())
                .find(|t| t.contains(needle))
                .map(str::to_string)
        })
        .await
}

/// Waits for the `n`-th answerCallbackQuery and returns its text.
async fn callback_answer(h: &Harness, id: &str) -> String {
    h.api
        .wait_for(SOON, &format!("the answer to callback {id}"), |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "answercallbackquery"
                        && c.params["callback_query_id"].as_str() == Some(id)
                })
                .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        })
        .await
}

/// A new fake Telegram numbers updates from 1 again, below the offset the
/// previous process stored: move its counter past it.
fn skip_past_previous_updates(h: &Harness) {
    h.api.push_update(json!({"update_id": 1000}));
}

fn told(h: &Harness, chat: i64) -> Vec<String> {
    h.texts(chat)
        .into_iter()
        .filter(|t| t.starts_with("allowed:") || t.starts_with("denied:"))
        .collect()
}

#[actix_rt::test]
async fn allow_once_runs_the_tool_and_shows_who_allowed_it() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(USER, USER, "ask please");
    let (text, buttons) = question(&h, USER, 1).await;
    assert!(
        text.contains("Bash") && text.contains("$ echo hi"),
        "{text}"
    );
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Allow", "Always in this chat", "Deny"]);
    let id = h.api.push_callback(USER, USER, 0, &data(&buttons, "Allow"));
    assert_eq!(callback_answer(&h, &id).await, "Allowed");
    let (_, outcome, _) = h.turn_ended(USER, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(told(&h, USER), vec![r#"allowed: {"command":"echo hi"}"#]);
    assert!(
        edited(&h, USER, "✅ Allowed by")
            .await
            .contains("$ echo hi")
    );
    // Asked again next time: "allow" is once.
    h.say(USER, USER, "ask again");
    question(&h, USER, 2).await;
}

#[actix_rt::test]
async fn always_is_remembered_per_chat_across_a_restart_and_cleared_with_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db").display().to_string();
    let env = [("TURNSTILE_STATE_PATH", db.as_str())];
    {
        let mut h = Harness::start(scenario(), &env).await;
        h.say(USER, USER, "ask git");
        let (_, buttons) = question(&h, USER, 1).await;
        let id = h
            .api
            .push_callback(USER, USER, 0, &data(&buttons, "Always in this chat"));
        assert_eq!(callback_answer(&h, &id).await, "Allowed in this chat");
        h.turn_ended(USER, 1).await;
        assert!(
            edited(&h, USER, "always in this chat: Bash(git)")
                .await
                .contains("✅")
        );
        h.bot.stop().await;
    }
    let mut h = Harness::start(scenario(), &env).await;
    skip_past_previous_updates(&h);
    h.say(USER, USER, "ask git");
    h.turn_ended(USER, 1).await;
    h.api.wait_for_texts(USER, 1, SOON).await;
    assert_eq!(told(&h, USER), vec![r#"allowed: {"command":"git status"}"#]);
    assert!(
        h.api.calls().iter().all(|c| buttons_of(c).is_empty()),
        "no question the second time"
    );
    // Another chat has its own approvals.
    h.say(1002, 1002, "ask git");
    question(&h, 1002, 1).await;
    h.say(USER, USER, "/permissions");
    let listed = h.api.wait_for_texts(USER, 2, SOON).await;
    assert!(listed[1].contains("Bash(git)"), "{listed:?}");
    h.say(USER, USER, "/permissions clear");
    let cleared = h.api.wait_for_texts(USER, 3, SOON).await;
    assert!(cleared[2].contains("Forgot 1"), "{cleared:?}");
    h.say(USER, USER, "ask git");
    question(&h, USER, 1).await;
}

#[actix_rt::test]
async fn deny_keeps_the_tool_from_running_and_the_model_reads_why() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(USER, USER, "ask");
    let (_, buttons) = question(&h, USER, 1).await;
    let id = h.api.push_callback(USER, USER, 0, &data(&buttons, "Deny"));
    assert_eq!(callback_answer(&h, &id).await, "Denied");
    h.turn_ended(USER, 1).await;
    let told = told(&h, USER);
    assert_eq!(told.len(), 1);
    assert!(
        told[0].starts_with("denied: ") && told[0].contains("denied this in the chat"),
        "{told:?}"
    );
    edited(&h, USER, "❌ Denied by").await;
}

#[actix_rt::test]
async fn a_question_nobody_answers_is_denied_at_the_timeout_while_the_clocks_stand_still() {
    // The watchdogs are far shorter than the approval timeout: only a pause
    // of both lets the turn reach it.
    let mut h = Harness::start(
        scenario(),
        &[
            ("TURNSTILE_TURN_APPROVAL_TIMEOUT", "900ms"),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "300ms"),
            ("TURNSTILE_TURN_MAX_DURATION", "600ms"),
        ],
    )
    .await;
    h.say(USER, USER, "ask");
    question(&h, USER, 1).await;
    let asked = h.api.calls_of("sendmessage").last().map(|c| c.at).unwrap();
    let (_, outcome, ended) = h.turn_ended(USER, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert!(
        ended.duration_since(asked) >= Duration::from_millis(800),
        "the timeout decided, not a watchdog"
    );
    let told = told(&h, USER);
    assert!(
        told[0].starts_with("denied: Nobody in the chat answered"),
        "{told:?}"
    );
    edited(&h, USER, "⌛ No answer in 900ms").await;
    // Typing paused while a person decided (40 ms renewals otherwise).
    let typing_while_asked = h
        .chat_actions_received(USER)
        .iter()
        .filter(|c| {
            c.at > asked + Duration::from_millis(100) && c.at < asked + Duration::from_millis(800)
        })
        .count();
    assert_eq!(typing_while_asked, 0, "typing while a person decided");
}

#[actix_rt::test]
async fn only_the_asker_or_an_admin_may_press_and_others_change_nothing() {
    let mut h = Harness::start(scenario(), &[]).await;
    // A group-like chat: the question is in chat 77, asked by USER.
    h.say(77, USER, "ask");
    let (_, buttons) = question(&h, 77, 1).await;
    let stranger = h
        .api
        .push_callback(77, STRANGER, 0, &data(&buttons, "Allow"));
    assert!(
        callback_answer(&h, &stranger)
            .await
            .contains("only answers the people")
    );
    let other = h.api.push_callback(77, 1002, 0, &data(&buttons, "Allow"));
    assert!(
        callback_answer(&h, &other)
            .await
            .contains("Only the person who asked")
    );
    assert!(
        told(&h, 77).is_empty(),
        "nothing changed: {:?}",
        h.texts(77)
    );
    let admin = h.api.push_callback(77, ADMIN, 0, &data(&buttons, "Deny"));
    assert_eq!(callback_answer(&h, &admin).await, "Denied");
    h.turn_ended(77, 1).await;
    // A second press on the decided question is "expired".
    let late = h.api.push_callback(77, USER, 0, &data(&buttons, "Allow"));
    assert!(callback_answer(&h, &late).await.contains("expired"));
    assert_eq!(told(&h, 77).len(), 1);
    // Data that is not ours is expired too.
    let junk = h.api.push_callback(77, USER, 0, "ap:nothex:y");
    assert!(callback_answer(&h, &junk).await.contains("expired"));
}

#[actix_rt::test]
async fn a_press_after_a_restart_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db").display().to_string();
    let env = [
        ("TURNSTILE_STATE_PATH", db.as_str()),
        ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "100ms"),
    ];
    let buttons;
    {
        let h = Harness::start(scenario(), &env).await;
        h.say(USER, USER, "ask");
        buttons = question(&h, USER, 1).await.1;
        h.bot.stop().await;
        // The host stop answered the ask: denied, and the question says so.
        edited(&h, USER, "❌ Not run: the bot is stopping").await;
    }
    let h = Harness::start(scenario(), &env).await;
    skip_past_previous_updates(&h);
    let id = h.api.push_callback(USER, USER, 0, &data(&buttons, "Allow"));
    assert!(callback_answer(&h, &id).await.contains("expired"));
}

#[actix_rt::test]
async fn stop_while_a_question_waits_denies_it_and_interrupts() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(USER, USER, "ask");
    let (_, buttons) = question(&h, USER, 1).await;
    h.say(USER, USER, "/stop");
    let (_, outcome, _) = h.turn_ended(USER, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    edited(&h, USER, "❌ Not run: the turn was stopped").await;
    let id = h.api.push_callback(USER, USER, 0, &data(&buttons, "Allow"));
    assert!(callback_answer(&h, &id).await.contains("expired"));
    assert!(told(&h, USER).iter().all(|t| !t.starts_with("allowed")));
}

#[actix_rt::test]
async fn the_question_tool_offers_its_options_and_the_pressed_one_is_the_answer() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(USER, USER, "colour?");
    let (text, buttons) = question(&h, USER, 1).await;
    assert!(text.contains("Which colour?"), "{text}");
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Red", "Blue"]);
    let id = h.api.push_callback(USER, USER, 0, &data(&buttons, "Blue"));
    assert_eq!(callback_answer(&h, &id).await, "Blue");
    h.turn_ended(USER, 1).await;
    let told = told(&h, USER);
    let input: Value = serde_json::from_str(told[0].trim_start_matches("allowed: ")).unwrap();
    assert_eq!(input["answers"], json!({"Which colour?": "Blue"}));
    assert_eq!(input["questions"][0]["question"], "Which colour?");
}

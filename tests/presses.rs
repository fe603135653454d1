//! Presses of the bot's buttons in a group, with Telegram's group pacing (20
//! messages a minute): callback answers take no message slot, so presses by
//! others never hold up the asker's answer nor the turn, and a stranger's
//! presses are answered at most once per `access.refusal_cooldown`.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::bot_api::files::{supergroup, text_message};
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::events::BotEvent;
use turnstile::telegram::RateLimits;

const GROUP: i64 = -100_321;
/// An allowed user of the group who did not ask.
const OTHER: i64 = 1002;
/// Presses by others before the asker's.
const PRESSES: usize = 25;
/// How soon the asker's press must be answered.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// `ask`: Bash `echo hi`, then the turn ends.
fn scenario() -> Scenario {
    Scenario::default().with_rule(
        "ask",
        turn(vec![
            Step::Ask {
                tool: "Bash".into(),
                input: json!({"command": "echo hi"}),
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
            },
        ]),
    )
}

/// Telegram's pacing: a group gets 20 messages a minute after a burst of 5.
fn telegram_limits() -> RateLimits {
    RateLimits {
        backoff: Duration::from_millis(20),
        ..RateLimits::default()
    }
}

/// Starts the bot, asks in the group; the question's message id and its
/// Allow button's callback data.
async fn asked() -> (Harness, i32, String) {
    let h = Harness::start_with_limits(scenario(), &[], telegram_limits()).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "@turnstile_bot ask",
    ));
    let question = h
        .api
        .wait_for(SOON, "the approval question", |calls| {
            calls.iter().find(|c| !buttons_of(c).is_empty()).cloned()
        })
        .await;
    let allow = buttons_of(&question)
        .into_iter()
        .flatten()
        .find(|(label, _)| label == "Allow")
        .expect("an Allow button")
        .1;
    let message_id = h.api.last_question(GROUP).expect("the question was kept");
    (h, message_id, allow)
}

/// The asker presses Allow: answered within [`ANSWER_WITHIN`] of the press
/// (by the fake's arrival times), and the turn goes on to its end.
async fn the_asker_allows(h: &mut Harness, message_id: i32, allow: &str) {
    let pressed = Instant::now();
    let id = h.api.push_callback(GROUP, USER, message_id, allow);
    let answer = h
        .api
        .wait_for(SOON, "the answer to the asker's press", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "answercallbackquery" && c.params["callback_query_id"] == json!(id)
                })
                .cloned()
        })
        .await;
    let took = answer.at.duration_since(pressed);
    println!("the asker's press answered after {took:?}");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.params["text"], json!("Allowed"));
    assert!(
        took < ANSWER_WITHIN,
        "the asker's press was answered after {took:?}"
    );
    h.turn_ended(GROUP, 1).await;
    let told: Vec<String> = h
        .texts(GROUP)
        .into_iter()
        .filter(|t| t.starts_with("allowed:"))
        .collect();
    assert_eq!(told, vec![r#"allowed: {"command":"echo hi"}"#]);
}

/// How many of `ids` got an answer.
fn answered(h: &Harness, ids: &[String]) -> usize {
    h.api
        .calls_of("answerCallbackQuery")
        .iter()
        .filter(|c| {
            c.params["callback_query_id"]
                .as_str()
                .is_some_and(|id| ids.iter().any(|i| i == id))
        })
        .count()
}

#[actix_rt::test]
async fn a_strangers_presses_are_answered_once_and_do_not_delay_the_askers_answer() {
    let (mut h, message_id, allow) = asked().await;
    let strangers: Vec<String> = (0..PRESSES)
        .map(|_| h.api.push_callback(GROUP, STRANGER, message_id, &allow))
        .collect();
    h.event("every stranger's press refused", {
        let mut n = 0;
        move |e| {
            n += usize::from(matches!(e, BotEvent::AccessDenied { .. }));
            n == PRESSES
        }
    })
    .await;
    the_asker_allows(&mut h, message_id, &allow).await;
    assert_eq!(
        answered(&h, &strangers),
        1,
        "a stranger's presses are answered once per refusal cooldown"
    );
}

#[actix_rt::test]
async fn presses_by_another_member_do_not_delay_the_askers_answer() {
    let (mut h, message_id, allow) = asked().await;
    let others: Vec<String> = (0..PRESSES)
        .map(|_| h.api.push_callback(GROUP, OTHER, message_id, &allow))
        .collect();
    the_asker_allows(&mut h, message_id, &allow).await;
    // Each was told it is not theirs to answer; none decided anything.
    let others_answered = h
        .api
        .wait_for(SOON, "an answer to every other press", |_| {
            Some(answered(&h, &others)).filter(|n| *n == PRESSES)
        })
        .await;
    assert_eq!(others_answered, PRESSES);
}

//! Steering (`dispatcher.busy = "steer"`, the default): a message for a
//! conversation whose turn runs goes to the running agent at once; read at
//! a tool boundary it joins the turn (one answer, 👀 on it), and with no
//! boundary left the agent runs it as the next turn by itself, which the
//! bot adopts. Messages that arrive together are one turn; a lone message
//! starts its turn at once. Scripted agent, real teloxide client, fake Bot
//! API.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use teloxide::types::ChatId;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

const CHAT: i64 = 1001;

/// The default `dispatcher.busy` (the test harness queues otherwise).
const STEER: &[(&str, &str)] = &[("TURNSTILE_DISPATCHER_BUSY", "steer")];

/// "slow": a 1.5 s wait (a tool running), then the answer, which carries
/// every text the agent read (`{text}`). "last": the answer's own tool
/// call takes 1.5 s, so no model call is left after it.
fn scenario() -> Scenario {
    let ask = turn(vec![
        Step::Ask {
            tool: "Bash".into(),
            input: json!({"command": "echo hi"}),
        },
        Step::Tools {
            calls: vec![tool(
                "mcp__telegram-tools__end_turn",
                json!({"text": "answer: {text}"}),
            )],
        },
    ]);
    let answer = |ms| Step::Tools {
        calls: vec![
            slow_tool(
                "mcp__telegram-tools__send",
                json!({"text": "answer: {text}"}),
                ms,
            ),
            tool("mcp__telegram-tools__end_turn", json!({})),
        ],
    };
    Scenario::default()
        .with_rule("slow", turn(vec![Step::Wait { ms: 1500 }, answer(0)]))
        .with_rule("last", turn(vec![answer(1500)]))
        .with_rule("approve", ask)
        .with_rule("", turn(vec![answer(0)]))
}

async fn steered(h: &mut Harness, update_id: i64) {
    h.event(
        &format!("message {update_id} steered"),
        |e| matches!(e, BotEvent::Steered { update_id: id, .. } if *id == update_id),
    )
    .await;
}

async fn started(h: &mut Harness, n: usize) -> u64 {
    let mut count = 0;
    match h
        .event(&format!("TurnStarted #{n}"), |e| {
            if matches!(e, BotEvent::TurnStarted { chat, .. } if *chat == ChatId(CHAT)) {
                count += 1;
            }
            count == n
        })
        .await
    {
        BotEvent::TurnStarted { turn, .. } => turn.get(),
        _ => unreachable!(),
    }
}

fn reactions(h: &Harness, emoji: &str) -> usize {
    h.api
        .calls_of("setMessageReaction")
        .iter()
        .filter(|c| c.params["reaction"].to_string().contains(emoji))
        .count()
}

#[actix_rt::test]
async fn a_message_during_a_tool_call_joins_the_running_turn() {
    let mut h = Harness::start(scenario(), STEER).await;
    h.say(CHAT, CHAT, "slow first");
    started(&mut h, 1).await;
    let second = h.say(CHAT, CHAT, "and a second thought");
    steered(&mut h, second).await;
    let (turn, outcome, _) = h.turn_ended(CHAT, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    let texts = h.api.wait_for_texts(CHAT, 1, SOON).await;
    assert_eq!(texts, ["answer: slow first\nand a second thought"]);
    assert_eq!(h.backend.log().steered, ["and a second thought"]);
    h.api
        .wait_for(SOON, "the 👀 reaction", |_| {
            (reactions(&h, "👀") == 1).then_some(())
        })
        .await;
    // The next message is the next turn: nothing ran in between.
    h.say(CHAT, CHAT, "third");
    assert_eq!(started(&mut h, 2).await, turn + 1);
    let texts = h.api.wait_for_texts(CHAT, 2, SOON).await;
    assert_eq!(texts[1], "answer: third");
    assert_eq!(h.backend.opened(), 1, "one session, kept warm");
}

#[actix_rt::test]
async fn a_message_during_the_last_model_call_is_the_next_turn_the_agent_runs() {
    last_model_call(STEER).await;
}

/// The session running the steered message is the next turn's even when no
/// session is kept warm: closing it would cost the agent's work again.
#[actix_rt::test]
async fn the_next_turn_adopts_the_running_session_even_with_keep_warm_off() {
    last_model_call(&[
        ("TURNSTILE_DISPATCHER_BUSY", "steer"),
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
    ])
    .await;
}

async fn last_model_call(env: &[(&str, &str)]) {
    let mut h = Harness::start(scenario(), env).await;
    h.say(CHAT, CHAT, "last one");
    started(&mut h, 1).await;
    let second = h.say(CHAT, CHAT, "then this");
    steered(&mut h, second).await;
    let (first, outcome, _) = h.turn_ended(CHAT, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    let (next, outcome, ended) = h.turn_ended(CHAT, 2).await;
    assert_eq!(next, first + 1);
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    let texts = h.api.wait_for_texts(CHAT, 2, SOON).await;
    assert_eq!(texts, ["answer: last one", "answer: then this"]);
    // Nothing was read into the first turn; the agent ran it by itself, on
    // the same session (no second prompt written, no second process).
    assert!(h.backend.log().steered.is_empty());
    assert_eq!(h.backend.opened(), 1);
    h.api
        .wait_for(SOON, "the 👀 reaction", |_| {
            (reactions(&h, "👀") == 1).then_some(())
        })
        .await;
    // Typing stopped with the last turn.
    h.event(
        "typing stopped for the second turn",
        |e| matches!(e, BotEvent::TypingStopped { turn, .. } if turn.get() == next),
    )
    .await;
    assert!(
        h.chat_actions_sent(CHAT).iter().all(|at| *at <= ended),
        "a chat action after the last TurnEnded"
    );
    // Exactly two turns: a third message is the third.
    h.say(CHAT, CHAT, "more");
    assert_eq!(started(&mut h, 3).await, next + 1);
}

#[actix_rt::test]
async fn three_messages_steer_into_one_turn_in_order() {
    let mut h = Harness::start(scenario(), STEER).await;
    h.say(CHAT, CHAT, "slow start");
    started(&mut h, 1).await;
    for text in ["one", "two", "three"] {
        let id = h.say(CHAT, CHAT, text);
        steered(&mut h, id).await;
    }
    h.turn_ended(CHAT, 1).await;
    let texts = h.api.wait_for_texts(CHAT, 1, SOON).await;
    assert_eq!(texts, ["answer: slow start\none\ntwo\nthree"]);
    assert_eq!(h.backend.log().steered, ["one", "two", "three"]);
}

#[actix_rt::test]
async fn stop_after_a_steer_stops_the_whole_turn() {
    let mut h = Harness::start(scenario(), STEER).await;
    h.say(CHAT, CHAT, "last thing");
    started(&mut h, 1).await;
    let second = h.say(CHAT, CHAT, "steered then stopped");
    steered(&mut h, second).await;
    h.say(CHAT, CHAT, "/stop");
    let (first, outcome, _) = h.turn_ended(CHAT, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    h.api
        .wait_for(SOON, "the stop notice", |calls| {
            calls
                .iter()
                .any(|c| c.params["text"].as_str() == Some("⏹ Stopped."))
                .then_some(())
        })
        .await;
    // The next message starts a turn of its own; the stopped one never runs.
    h.say(CHAT, CHAT, "after the stop");
    assert_eq!(started(&mut h, 2).await, first + 1);
    h.turn_ended(CHAT, 2).await;
    let texts = h.api.texts_to(CHAT);
    assert!(
        texts.iter().any(|t| t == "answer: after the stop"),
        "{texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("steered then stopped")),
        "{texts:?}"
    );
}

#[actix_rt::test]
async fn with_busy_queue_a_message_waits_for_the_next_turn() {
    let mut h = Harness::start(scenario(), &[("TURNSTILE_DISPATCHER_BUSY", "queue")]).await;
    h.say(CHAT, CHAT, "slow first");
    started(&mut h, 1).await;
    h.say(CHAT, CHAT, "queued");
    h.turn_ended(CHAT, 2).await;
    let texts = h.api.wait_for_texts(CHAT, 2, SOON).await;
    assert_eq!(texts, ["answer: slow first", "answer: queued"]);
    assert!(h.backend.log().steered.is_empty());
    assert!(!h.seen.iter().any(|e| matches!(e, BotEvent::Steered { .. })));
}

#[actix_rt::test]
async fn messages_of_one_delivery_are_one_turn() {
    let mut h = Harness::start(scenario(), STEER).await;
    h.api.push_many(
        ["first of two", "second of two"]
            .into_iter()
            .map(|t| (CHAT, CHAT, t.to_string())),
    );
    h.turn_ended(CHAT, 1).await;
    let texts = h.api.wait_for_texts(CHAT, 1, SOON).await;
    assert_eq!(texts, ["answer: first of two\n\nsecond of two"]);
    assert!(!h.seen.iter().any(|e| matches!(e, BotEvent::Steered { .. })));
}

/// The default config waits for no merge window: a lone message's turn
/// starts as soon as the message is read (the figure is in the
/// `turns` benchmark; the bound here holds on a loaded machine).
#[actix_rt::test]
async fn a_lone_message_starts_its_turn_at_once() {
    let mut h = Harness::start(scenario(), STEER).await;
    let said = Instant::now();
    h.say(CHAT, CHAT, "hello");
    started(&mut h, 1).await;
    let took = said.elapsed();
    assert!(
        took < Duration::from_millis(750),
        "the turn started {took:?} after the message (half the old 1.5 s window)"
    );
}

/// A message while a tool approval waits is steered too: the agent reads
/// it once the decision is made.
#[actix_rt::test]
async fn a_message_while_an_approval_waits_is_read_after_the_decision() {
    let mut h = Harness::start(scenario(), STEER).await;
    h.say(CHAT, CHAT, "approve this");
    let call = h
        .api
        .wait_for(SOON, "the question", |calls| {
            calls
                .iter()
                .find(|c| c.method == "sendmessage" && !buttons_of(c).is_empty())
                .cloned()
        })
        .await;
    let second = h.say(CHAT, CHAT, "while you wait");
    steered(&mut h, second).await;
    assert!(
        h.backend.log().steered.is_empty(),
        "read before the decision"
    );
    let allow = buttons_of(&call)
        .into_iter()
        .flatten()
        .find(|(label, _)| label == "Allow")
        .map(|(_, data)| data)
        .expect("an Allow button");
    h.api.push_callback(CHAT, CHAT, 0, &allow);
    let (_, outcome, _) = h.turn_ended(CHAT, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.backend.log().steered, ["while you wait"]);
    let texts = h.texts(CHAT);
    assert_eq!(
        texts.last().map(String::as_str),
        Some("answer: approve this\nwhile you wait")
    );
}

/// With a slow first turn running, `command` (answered with a text that
/// `told` accepts) and then `text`: `text` is not steered into the running
/// turn's session but starts the next turn.
async fn a_command_then_the_next_turn(
    h: &mut Harness,
    command: &str,
    told: impl Fn(&str) -> bool,
    text: &str,
) {
    h.say(CHAT, CHAT, "slow one");
    let first = started(h, 1).await;
    h.say(CHAT, CHAT, command);
    h.api
        .wait_for(SOON, &format!("the {command} answer"), |_| {
            h.texts(CHAT).iter().any(|t| told(t)).then_some(())
        })
        .await;
    h.say(CHAT, CHAT, text);
    assert_eq!(started(h, 2).await, first + 1);
    h.turn_ended(CHAT, 2).await;
    assert!(!h.seen.iter().any(|e| matches!(e, BotEvent::Steered { .. })));
}

/// After `/new` nothing more goes into the session being left: the next
/// message is the next turn, in a fresh session.
#[actix_rt::test]
async fn after_new_a_message_is_not_steered_into_the_old_session() {
    let mut h = Harness::start(scenario(), STEER).await;
    a_command_then_the_next_turn(
        &mut h,
        "/new",
        |t| t.starts_with("🆕"),
        "for the new session",
    )
    .await;
    assert!(h.backend.log().steered.is_empty());
    assert_eq!(
        h.texts(CHAT).last().map(String::as_str),
        Some("answer: for the new session")
    );
    // The second turn opened a session of its own, resuming nothing.
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!(opens[1].1, None, "{opens:?}");
}

/// A steering bot whose workdirs are in `dir`, a file the fake Telegram
/// serves as `doc-1`, and a slow first turn running: the harness and that
/// turn's number.
async fn steering_with_a_file_at_hand(dir: &tempfile::TempDir) -> (Harness, u64) {
    let workdir = dir.path().join("{chat}").display().to_string();
    let env = [
        ("TURNSTILE_DISPATCHER_BUSY", "steer"),
        ("TURNSTILE_AGENT_WORKDIR", workdir.as_str()),
    ];
    let mut h = Harness::start(scenario(), &env).await;
    h.api.add_file("doc-1", "documents/notes.txt", b"notes");
    h.say(CHAT, CHAT, "slow one");
    let first = started(&mut h, 1).await;
    (h, first)
}

/// A message with a file waits for the next turn (its file is fetched as
/// a turn starts), steering or not.
#[actix_rt::test]
async fn a_message_with_a_file_waits_for_the_next_turn() {
    use support::bot_api::files::{captioned, document, private};
    let dir = tempfile::tempdir().unwrap();
    let (mut h, first) = steering_with_a_file_at_hand(&dir).await;
    h.api.push_message(captioned(
        document(private(CHAT), CHAT, "doc-1", "notes.txt", 5),
        "read this",
    ));
    assert_eq!(started(&mut h, 2).await, first + 1);
    h.turn_ended(CHAT, 2).await;
    assert!(!h.seen.iter().any(|e| matches!(e, BotEvent::Steered { .. })));
    let last = h.texts(CHAT).last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("answer: ") && last.ends_with("read this"),
        "{last}"
    );
}

/// After a switch of model nothing more goes into the session being left
/// either: the next message is the next turn, on the new model.
#[actix_rt::test]
async fn after_a_model_switch_a_message_is_not_steered_into_the_old_session() {
    let mut h = Harness::start(
        scenario(),
        &[
            ("TURNSTILE_DISPATCHER_BUSY", "steer"),
            ("TURNSTILE_AGENT_MODELS", "opus,haiku"),
        ],
    )
    .await;
    a_command_then_the_next_turn(
        &mut h,
        "/model haiku",
        |t| t.contains("runs with haiku"),
        "on the new model",
    )
    .await;
    assert_eq!(
        h.texts(CHAT).last().map(String::as_str),
        Some("answer: on the new model")
    );
    let choices = h.backend.log().choices;
    assert_eq!(
        choices.last().and_then(|c| c.0.as_deref()),
        Some("haiku"),
        "{choices:?}"
    );
}

/// A message the running turn no longer takes (here: it came right after
/// `/stop`) is queued when the turn answers; a message after it that goes
/// straight to the queue (one with a file) must not get ahead of it
/// meanwhile. The stop and both messages come in one delivery, so the
/// second is routed before the stopped turn answers for the first.
#[actix_rt::test]
async fn a_message_the_turn_does_not_take_keeps_its_place_before_a_later_one() {
    use support::bot_api::files::{captioned, document, private, text_message};
    let dir = tempfile::tempdir().unwrap();
    let (mut h, first) = steering_with_a_file_at_hand(&dir).await;
    h.api.push_messages([
        text_message(private(CHAT), CHAT, "/stop"),
        text_message(private(CHAT), CHAT, "alpha, sent first"),
        captioned(
            document(private(CHAT), CHAT, "doc-1", "notes.txt", 5),
            "beta, sent second",
        ),
    ]);
    let (_, outcome, _) = h.turn_ended(CHAT, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    assert_eq!(started(&mut h, 2).await, first + 1);
    h.turn_ended(CHAT, 2).await;
    assert!(!h.seen.iter().any(|e| matches!(e, BotEvent::Steered { .. })));
    let last = h.texts(CHAT).last().cloned().unwrap_or_default();
    let alpha = last.find("alpha, sent first");
    let beta = last.find("beta, sent second");
    assert!(
        last.starts_with("answer: ") && alpha.is_some() && beta.is_some() && alpha < beta,
        "the messages in the order they came: {last}"
    );
}

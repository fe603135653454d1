//! A wedged chat (the agent emitted its result and never closed) is released
//! at the grace while other chats keep answering; its queued message runs.

mod support;

use std::time::Duration;

use support::*;
use turnstile::agent::{AfterResult, Scenario, ScriptTurn};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

fn wedging() -> Scenario {
    Scenario::default().with_rule(
        "wedge",
        ScriptTurn {
            steps: vec![result("answered, then wedged")],
            after_result: AfterResult::Hang,
        },
    )
}

#[actix_rt::test]
async fn a_wedged_chat_is_released_at_the_grace_and_its_queue_runs() {
    let grace = Duration::from_millis(600);
    let mut h = Harness::start(wedging(), &[("TURNSTILE_TURN_POST_RESULT_GRACE", "600ms")]).await;
    assert_eq!(
        h.config.turn.post_result_grace, grace,
        "the env knob sets the grace"
    );
    h.say(1, USER, "wedge please");
    h.say(1, USER, "queued behind it");
    // Another chat keeps answering while chat 1 is wedged.
    h.say(2, USER, "meanwhile");
    let (_, _, other_done) = h.turn_ended(2, 1).await;
    let started = h
        .event(
            "chat 1's first turn",
            |e| matches!(e, BotEvent::TurnStarted { chat, .. } if chat.0 == 1),
        )
        .await;
    let BotEvent::TurnStarted { at: started, .. } = started else {
        unreachable!()
    };
    let (_, outcome, released) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::ForceClosedAfterResult);
    assert!(
        released.duration_since(started) >= grace,
        "released at the grace, not before"
    );
    assert!(
        other_done < released,
        "chat 2 answered while chat 1 was wedged"
    );
    h.event(
        "the wedged session killed",
        |e| matches!(e, BotEvent::SessionKilled { chat, .. } if chat.0 == 1),
    )
    .await;
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished());
    assert_eq!(
        h.texts(1),
        vec!["answered, then wedged", "echo: queued behind it"]
    );
    assert_eq!(h.texts(2), vec!["echo: meanwhile"]);
}

#[actix_rt::test]
async fn a_wedge_after_a_terminator_releases_the_chat_at_once_and_the_next_turn_gets_a_fresh_session()
 {
    let scenario = Scenario::default().with_rule(
        "wedge",
        ScriptTurn {
            after_result: AfterResult::Hang,
            ..reply("bye")
        },
    );
    let mut h = Harness::start(scenario, &[("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms")]).await;
    h.say(1, USER, "wedge");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    h.event(
        "the unsettled session force-closed",
        |e| matches!(e, BotEvent::SessionKilled { chat, .. } if chat.0 == 1),
    )
    .await;
    h.say(1, USER, "again");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["bye", "echo: again"]);
    assert_eq!(h.backend.opened(), 2, "the wedged process was not reused");
}

#[actix_rt::test]
async fn a_settled_session_is_reused_for_the_next_turn() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "two");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["echo: one", "echo: two"]);
    assert_eq!(h.backend.opened(), 1, "the warm session served both turns");
}

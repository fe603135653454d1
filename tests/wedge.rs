//! A wedged chat (the agent emitted its result and never closed) is released
//! at the grace while other chats keep answering; its queued message runs.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use turnstile::agent::{
    AfterResult, AgentBackend, AgentError, AgentEvent, AgentSession, BoxFuture, OpenSession,
    Scenario, ScriptTurn, SessionCommand,
};
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
    // Taken on its own (messages that arrive together are one turn).
    let started = h
        .event(
            "chat 1's first turn",
            |e| matches!(e, BotEvent::TurnStarted { chat, .. } if chat.0 == 1),
        )
        .await;
    h.say(1, USER, "queued behind it");
    // Another chat keeps answering while chat 1 is wedged.
    h.say(2, USER, "meanwhile");
    let (_, _, other_done) = h.turn_ended(2, 1).await;
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

#[actix_rt::test]
async fn a_session_that_went_idle_after_its_result_is_reused() {
    let scenario = Scenario::default().with_rule("plain", turn(vec![result("a plain answer")]));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "plain");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(outcome.finished(), "{outcome:?}");
    h.say(1, USER, "two");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["a plain answer", "echo: two"]);
    assert_eq!(
        h.backend.opened(),
        1,
        "the settled session served both turns"
    );
}

/// Opens sessions that report `Exited` at their first prompt but keep
/// their event stream open until the turn lets the session go.
struct ExitsWithStreamOpen {
    opened: std::sync::atomic::AtomicUsize,
}

impl AgentBackend for ExitsWithStreamOpen {
    fn open(&self, _request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        self.opened
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (commands, mut from_turn) = tokio::sync::mpsc::unbounded_channel();
        let (events, to_turn) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(command) = from_turn.recv().await {
                if let SessionCommand::UserTurn(_) = command {
                    let _ = events.send(AgentEvent::Exited {
                        code: Some(1),
                        detail: "crashed".into(),
                    });
                }
            }
            // Only now, with the turn's link gone, does the stream close.
            drop(events);
        });
        Box::pin(async move {
            Ok(AgentSession {
                commands,
                events: to_turn,
                label: "exits with its stream open".into(),
            })
        })
    }
}

#[actix_rt::test]
async fn an_exited_session_is_settled_at_once_even_with_its_stream_open() {
    let backend = Arc::new(ExitsWithStreamOpen {
        opened: Default::default(),
    });
    let shared = Arc::clone(&backend);
    let env = [("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms")];
    let mut h = Harness::launch(&env, Harness::fast_limits(), move |_| shared).await;
    h.say(1, USER, "one");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(
        matches!(outcome, TurnOutcome::AgentFailed { .. }),
        "{outcome:?}"
    );
    h.say(1, USER, "two");
    // The chat's next turn starts without waiting out the grace: the
    // exited session is not held, nor killed as a wedge.
    let next = h
        .event("the next turn, or a kill", |e| {
            matches!(e, BotEvent::TurnStarted { turn, .. } if turn.get() == 2)
                || matches!(e, BotEvent::SessionKilled { .. })
        })
        .await;
    assert!(matches!(next, BotEvent::TurnStarted { .. }), "{next:?}");
    h.turn_ended(1, 2).await;
    assert_eq!(backend.opened.load(std::sync::atomic::Ordering::SeqCst), 2);
}

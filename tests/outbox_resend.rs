//! A copy sent again after an unknown outcome is marked as a resend only
//! when its first copy may be in the chat: the messages the user wrote in
//! the meantime, polled only after the copy went out, do not count.

mod support;

use std::time::Duration;

use support::*;
use turnstile::agent::Scenario;

/// The first copy of an answer gets no answer and never arrived. While
/// the bot waits for Telegram to answer again, the user writes: that
/// message takes the next id in the chat, but the poller, held, brings it
/// only after the copy went out. The copy is the only one: no mark.
#[actix_rt::test]
async fn a_message_the_user_wrote_meanwhile_does_not_mark_the_only_copy() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::NoAnswer);
    // Telegram answers again only after the user wrote.
    h.api.inject("getMe", Fault::Delay(Duration::from_secs(2)));
    h.say(1, USER, "hello");
    h.api
        .wait_for(SOON, "the first copy, unanswered", |calls| {
            calls
                .iter()
                .any(|c| c.method == "sendmessage" && c.status == 0)
                .then_some(())
        })
        .await;
    // The poller is held from its next poll on: the user's message waits
    // at Telegram until after the copy went out.
    let polls = |calls: &[Call]| calls.iter().filter(|c| c.method == "getupdates").count();
    let before = polls(&h.api.calls());
    h.api
        .inject("getUpdates", Fault::Delay(Duration::from_secs(3)));
    h.api
        .wait_for(SOON, "the held poll", |calls| {
            (polls(calls) > before).then_some(())
        })
        .await;
    h.say(1, USER, "more");
    h.turn_ended(1, 2).await;
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    // A mark would come between the two, the chat's order kept.
    assert_eq!(
        texts,
        vec!["echo: hello", "echo: more"],
        "once each, unmarked"
    );
    assert_eq!(
        h.metric_line("turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"false\"}"),
        "turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"false\"} 1"
    );
}

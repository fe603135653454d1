//! Answers wait out Telegram: an outage longer than any retry budget, a
//! stuck connection, the age bound, and what the metrics say meanwhile.
//! The outbox alone against the fake Bot API; a restart of the real binary
//! with answers waiting is in `outbox_restart.rs`.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use serde_json::json;
use support::*;
use teloxide::types::ChatId;
use turnstile::events::EventBus;
use turnstile::ops::Metrics;
use turnstile::telegram::{MAX_IN_FLIGHT, Outbox, RateLimits, SendText};

/// What marks a copy sent again that may show twice.
const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// An outbox sending to `api` with no pacing to speak of, `limits` on top,
/// counting into the metrics it returns.
fn outbox(api: &FakeBotApi, limits: RateLimits) -> (Addr<Outbox>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let outbox = Outbox::new(api.bot(), limits, Arc::clone(&metrics), EventBus::new()).start();
    (outbox, metrics)
}

/// The value of the metric line starting with `name` (labels included).
fn metric(metrics: &Metrics, name: &str) -> Option<f64> {
    let text = metrics.render(0, 0, 0);
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

/// `sendMessage` calls to `chat`, in order of arrival.
fn sends_to(api: &FakeBotApi, chat: i64) -> Vec<Call> {
    api.calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == json!(chat))
        .collect()
}

/// Longer than the old retry budget (5 attempts over 7.5 s) and than any
/// count of retries: 15 answers 502 in a row, about 10 s with the backoff
/// capped at 1 s. The 20 answers queued meanwhile go once each, in order,
/// the first within 2 s of Telegram answering again; the metrics show them
/// waiting, and nothing once they are sent.
#[actix_rt::test]
async fn answers_wait_out_an_outage_longer_than_any_retry_budget_in_order() {
    let api = FakeBotApi::start().await;
    const FAILURES: usize = 15;
    for _ in 0..FAILURES {
        api.inject("sendMessage", Fault::ServerError(502));
    }
    let (outbox, metrics) = outbox(&api, Harness::fast_limits());
    let texts: Vec<String> = (0..20).map(|i| format!("answer {i}")).collect();
    for text in &texts {
        outbox.do_send(SendText::new(ChatId(1), text.clone()));
    }
    // Meanwhile, all 20 wait.
    api.wait_for(SOON, "a few failed attempts", |calls| {
        (calls.iter().filter(|c| c.status == 502).count() >= 3).then_some(())
    })
    .await;
    let waiting = metric(&metrics, "turnstile_outbox_waiting{method=\"sendMessage\"}");
    assert_eq!(waiting, Some(20.0));
    let oldest = metric(
        &metrics,
        "turnstile_outbox_oldest_waiting_seconds{method=\"sendMessage\"}",
    );
    assert!(oldest.is_some_and(|s| s > 0.0), "{oldest:?}");
    let delivered = api
        .wait_for_texts(1, texts.len(), Duration::from_secs(60))
        .await;
    assert_eq!(delivered, texts, "every answer once, in order");
    let sends = sends_to(&api, 1);
    let failed = sends.iter().filter(|c| c.status == 502).count();
    assert_eq!(failed, FAILURES, "each failure was one attempt");
    assert!(
        sends[..FAILURES]
            .iter()
            .all(|c| c.params["text"] == json!("answer 0")),
        "nothing overtook the first answer"
    );
    let back = sends[FAILURES].at.duration_since(sends[FAILURES - 1].at);
    assert!(
        back < Duration::from_secs(2),
        "delivery resumed {back:?} after Telegram answered again"
    );
    let outage = sends[FAILURES - 1].at.duration_since(sends[0].at);
    assert!(
        outage > Duration::from_secs(8),
        "the outage lasted {outage:?}"
    );
    // Settled: nothing waits.
    api.wait_for(SOON, "the gauge back at zero", |_| {
        (metric(&metrics, "turnstile_outbox_waiting{method=\"sendMessage\"}") == Some(0.0))
            .then_some(())
    })
    .await;
}

/// A connection that never answers (half-open) holds one chat for no more
/// than the request timeout, and no other chat at all, even when as many
/// chats are stuck as requests may be out at once. The stuck messages were
/// carried out before the connection hung: each is sent again and marked.
#[actix_rt::test]
async fn stuck_chats_hold_up_no_other_chat() {
    let api = FakeBotApi::start().await;
    let stuck = MAX_IN_FLIGHT as i64;
    for _ in 0..stuck {
        api.inject("sendMessage", Fault::Delay(Duration::from_secs(600)));
    }
    let limits = RateLimits {
        request_timeout: Duration::from_secs(3),
        ..Harness::fast_limits()
    };
    let (outbox, _metrics) = outbox(&api, limits);
    for chat in 1..=stuck {
        outbox.do_send(SendText::new(ChatId(chat), "stuck"));
    }
    api.wait_for(SOON, "every stuck chat's request out", |calls| {
        let out = calls.iter().filter(|c| c.method == "sendmessage").count();
        (out >= stuck as usize).then_some(())
    })
    .await;
    let asked = Instant::now();
    outbox.do_send(SendText::new(ChatId(1000), "free"));
    let free = api.wait_for_texts(1000, 1, Duration::from_secs(20)).await;
    assert_eq!(free, vec!["free"]);
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "another chat waited {waited:?} behind {stuck} stuck ones"
    );
    // The stuck ones come through, each marked: its first copy arrived
    // (the fake carried it out before holding the answer back).
    for chat in [1, stuck / 2, stuck] {
        let texts = api.wait_for_texts(chat, 3, Duration::from_secs(60)).await;
        assert_eq!(texts, vec!["stuck", "stuck", RESENT], "chat {chat}");
    }
}

/// An answer Telegram does not take within `max_pending_age` is dropped:
/// an ERROR names the key, a metric counts it, and the chat is told once
/// Telegram takes that. It is never sent after.
#[actix_rt::test]
async fn an_answer_older_than_its_age_bound_is_dropped_and_the_chat_told() {
    let logs = LogCapture::start();
    let api = FakeBotApi::start().await;
    // More failures than fit in the age bound (attempts 1 s apart at most).
    for _ in 0..12 {
        api.inject("sendMessage", Fault::ServerError(503));
    }
    let limits = RateLimits {
        max_pending_age: Duration::from_secs(3),
        ..Harness::fast_limits()
    };
    let (outbox, metrics) = outbox(&api, limits);
    let asked = Instant::now();
    outbox.do_send(SendText::new(ChatId(1), "too late"));
    let told = api.wait_for_texts(1, 1, Duration::from_secs(60)).await;
    assert_eq!(
        told,
        vec!["⚠️ Telegram could not be reached for 3s: a message of mine was dropped unsent."]
    );
    let tries: Vec<Call> = sends_to(&api, 1)
        .into_iter()
        .filter(|c| c.params["text"] == json!("too late"))
        .collect();
    assert!(tries.iter().all(|c| c.status == 503), "{tries:#?}");
    let last = tries.last().expect("it was tried").at;
    assert!(
        last.duration_since(asked) < Duration::from_secs(3),
        "tried past its age bound"
    );
    assert_eq!(
        metric(
            &metrics,
            "turnstile_outbox_dropped_total{method=\"sendMessage\"}"
        ),
        Some(1.0)
    );
    let log = logs.text();
    let error = log
        .lines()
        .find(|l| l.contains("max_pending_age") && l.contains("ERROR"))
        .unwrap_or_else(|| panic!("no ERROR line:\n{log}"));
    assert!(error.contains("chat_id=1"), "{error}");
}

//! The transport outages of the fake Bot API in `tests/support/bot_api.rs`
//! ([`FakeBotApi::outage`]): refused, half-open (carried out or not), a
//! storm of HTML 502s, slow answers; each switched on and off at run time.

#[path = "support/bot_api.rs"]
mod bot_api;

use std::time::{Duration, Instant};

use bot_api::{FakeBotApi, Outage};
use teloxide::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

/// Writes one HTTP/1.1 request for `method` with a JSON `body` on `stream`
/// (kept alive).
async fn write_request(stream: &mut TcpStream, method: &str, body: &str) {
    let request = format!(
        "POST /bot123:abc/{method} HTTP/1.1\r\nHost: fake\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
}

/// Reads what comes back until the connection ends (or `WAIT` passes).
async fn read_all(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("the connection ends")?;
        if read == 0 {
            return Ok(String::from_utf8_lossy(&response).into_owned());
        }
        response.extend_from_slice(&chunk[..read]);
    }
}

/// One request on a fresh connection that closes after it.
async fn one_shot(fake: &FakeBotApi, method: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(fake.addr()).await.expect("connect");
    let request = format!(
        "POST /bot123:abc/{method} HTTP/1.1\r\nHost: fake\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    read_all(&mut stream).await.expect("read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_resets_open_connections_refuses_new_ones_and_listens_again_after() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    bot.get_me().await.expect("getMe before");
    let mut open = TcpStream::connect(fake.addr()).await.expect("connect");
    // A request being answered when the outage comes: held by a long poll.
    write_request(&mut open, "getUpdates", r#"{"timeout":30}"#).await;
    fake.wait_for_call("getupdates", WAIT).await;

    fake.outage(Outage::Refused).await;
    assert_eq!(fake.current_outage(), Some(Outage::Refused));
    let read = read_all(&mut open).await;
    assert_eq!(
        read.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "the open connection is reset"
    );
    let refused = TcpStream::connect(fake.addr()).await.map_err(|e| e.kind());
    assert_eq!(refused.err(), Some(std::io::ErrorKind::ConnectionRefused));
    assert!(bot.get_me().await.is_err(), "teloxide gets no answer");

    fake.clear_outage().await;
    assert_eq!(fake.current_outage(), None);
    bot.get_me().await.expect("getMe on the same port after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_for_a_while_ends_by_itself_and_a_later_one_is_not_ended_by_it() {
    let fake = FakeBotApi::start().await;
    let started = Instant::now();
    fake.outage_for(Outage::Refused, Duration::from_millis(300))
        .await;
    assert!(TcpStream::connect(fake.addr()).await.is_err());
    assert!(fake.outage_over(WAIT).await, "the outage ends by itself");
    assert!(started.elapsed() >= Duration::from_millis(300));
    fake.bot().get_me().await.expect("getMe after");

    // A timer of an earlier outage leaves a later one alone.
    fake.outage_for(Outage::Storm502, Duration::from_millis(100))
        .await;
    fake.outage(Outage::Refused).await;
    assert!(
        fake.outage_timers_run_out(2, WAIT).await,
        "the storm's timer runs out"
    );
    assert_eq!(fake.current_outage(), Some(Outage::Refused));
    assert!(!fake.outage_over(Duration::from_millis(50)).await);
    fake.clear_outage().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_carried_sends_the_message_and_never_answers() {
    let fake = FakeBotApi::start().await;
    let mut stream = TcpStream::connect(fake.addr()).await.expect("connect");
    fake.outage(Outage::HalfOpen { carried: true }).await;
    write_request(
        &mut stream,
        "sendMessage",
        r#"{"chat_id":7,"text":"hello"}"#,
    )
    .await;
    let call = fake.wait_for_call("sendmessage", WAIT).await;
    assert_eq!(call.status, 200, "carried out");
    assert_eq!(fake.texts_to(7), ["hello"]);
    assert_eq!(fake.counts().messages, 1);
    // No answer while it lasts.
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte)).await;
    assert!(early.is_err(), "held with no answer: {early:?}");

    fake.clear_outage().await;
    let after = read_all(&mut stream).await.unwrap_or_default();
    assert_eq!(after, "", "closed unanswered");
    // Nothing held afterwards.
    let answer = one_shot(&fake, "getMe", "{}").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_not_carried_records_the_request_does_nothing_and_never_answers() {
    let fake = FakeBotApi::start().await;
    fake.push_text(7, 7, "queued");
    fake.outage(Outage::HalfOpen { carried: false }).await;
    let mut send = TcpStream::connect(fake.addr()).await.expect("connect");
    write_request(&mut send, "sendMessage", r#"{"chat_id":7,"text":"hello"}"#).await;
    let mut poll = TcpStream::connect(fake.addr()).await.expect("connect");
    write_request(&mut poll, "getUpdates", r#"{"timeout":0}"#).await;
    fake.wait_for(WAIT, "both requests", |calls| {
        (calls.len() == 2 && calls.iter().all(|c| c.status == 0)).then_some(())
    })
    .await;
    assert_eq!(fake.counts().messages, 0, "not carried out");
    assert!(fake.texts_to(7).is_empty());

    fake.clear_outage().await;
    assert_eq!(read_all(&mut send).await.unwrap_or_default(), "");
    assert_eq!(read_all(&mut poll).await.unwrap_or_default(), "");
    let updates = one_shot(&fake, "getUpdates", r#"{"timeout":0}"#).await;
    assert!(
        updates.contains("queued"),
        "the update is still there: {updates}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_outage_holds_a_long_poll_begun_before_it() {
    let fake = FakeBotApi::start().await;
    let mut poll = TcpStream::connect(fake.addr()).await.expect("connect");
    write_request(&mut poll, "getUpdates", r#"{"timeout":30}"#).await;
    fake.wait_for_call("getupdates", WAIT).await;
    fake.outage(Outage::HalfOpen { carried: true }).await;
    fake.push_text(7, 7, "during");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), poll.read(&mut byte)).await;
    assert!(early.is_err(), "the poll's answer vanished: {early:?}");
    fake.clear_outage().await;
    assert_eq!(read_all(&mut poll).await.unwrap_or_default(), "");
    let updates = one_shot(&fake, "getUpdates", r#"{"timeout":0}"#).await;
    assert!(updates.contains("during"), "{updates}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_answers_every_method_502_in_html_and_does_nothing() {
    let fake = FakeBotApi::start().await;
    fake.push_text(7, 7, "queued");
    fake.outage(Outage::Storm502).await;
    for (method, body) in [
        ("sendMessage", r#"{"chat_id":7,"text":"hello"}"#),
        ("getUpdates", r#"{"timeout":0}"#),
    ] {
        let answer = one_shot(&fake, method, body).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(
            answer.contains("text/html") && answer.contains("<html>"),
            "{answer}"
        );
    }
    assert_eq!(fake.counts().messages, 0);
    assert!(fake.calls().iter().all(|c| c.status == 502));
    fake.clear_outage().await;
    let updates = one_shot(&fake, "getUpdates", r#"{"timeout":0}"#).await;
    assert!(updates.contains("queued"), "{updates}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_outage_delays_every_answer() {
    let fake = FakeBotApi::start().await;
    let delay = Duration::from_millis(400);
    fake.outage(Outage::Slow(delay)).await;
    let started = Instant::now();
    let answer = one_shot(&fake, "sendMessage", r#"{"chat_id":7,"text":"hello"}"#).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
    let started = Instant::now();
    let answer = one_shot(&fake, "getUpdates", r#"{"timeout":0}"#).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() >= delay);
    fake.clear_outage().await;
    let started = Instant::now();
    one_shot(&fake, "getMe", "{}").await;
    assert!(started.elapsed() < delay * 10, "no delay after");
}

//! `[ops] listen`: `/metrics` scraped with a real HTTP client and parsed as
//! Prometheus text, `/healthz` 200 while polling works and 503 when it fails.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{AfterResult, Scenario, ScriptTurn, Step};
use turnstile::events::BotEvent;

fn scenario() -> Scenario {
    Scenario::default()
        .with_rule(
            "think",
            turn(vec![Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "thought"}),
                )],
            }]),
        )
        .with_rule(
            "slow",
            turn(vec![
                Step::Wait { ms: 1500 },
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__end_turn",
                        json!({"text": "slept"}),
                    )],
                },
            ]),
        )
        .with_rule(
            "wedge",
            ScriptTurn {
                steps: vec![result("answered, then wedged")],
                after_result: AfterResult::Hang,
            },
        )
}

const OPS_ENV: &[(&str, &str)] = &[
    ("TURNSTILE_OPS_LISTEN", "127.0.0.1:0"),
    ("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms"),
    ("TURNSTILE_DISPATCHER_MERGE_WINDOW", "20ms"),
    // The queue gauge needs a message that waits.
    ("TURNSTILE_DISPATCHER_BUSY", "queue"),
];

/// The samples of one scrape, by name and sorted labels.
struct Scrape(Vec<prometheus_parse::Sample>);

impl Scrape {
    async fn take(addr: SocketAddr) -> Self {
        let (status, body) = ops_get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text parses");
        Self(parsed.samples)
    }

    /// The value of `name` with exactly these labels (a missing counter is 0).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let found: Vec<f64> = self
            .0
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| {
                let got: BTreeMap<String, String> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                got == want
            })
            .map(|s| match &s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                other => panic!("{name}: unexpected value {other:?}"),
            })
            .collect();
        assert!(
            found.len() <= 1,
            "{name}{labels:?} appears {} times",
            found.len()
        );
        found.first().copied().unwrap_or(0.0)
    }

    /// A histogram's sample count.
    fn count(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|s| s.metric == name)
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.iter().map(|b| b.count as u64).max().unwrap_or(0)
                }
                prometheus_parse::Value::Untyped(v) | prometheus_parse::Value::Counter(v) => {
                    *v as u64
                }
                other => panic!("{name}: unexpected value {other:?}"),
            })
            .unwrap_or(0)
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.metric == name)
    }
}

/// Scrapes until `done` holds, within a generous bound.
async fn scrape_until(addr: SocketAddr, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    eventually(what, SOON, || async {
        let scrape = Scrape::take(addr).await;
        if done(&scrape) {
            Ok(scrape)
        } else {
            Err("the condition did not hold".to_string())
        }
    })
    .await
}

#[actix_rt::test]
async fn metrics_count_turns_outcomes_wedges_queue_and_telegram_requests() {
    let mut h = Harness::start(scenario(), OPS_ENV).await;
    let addr = h.bot.ops_addr().expect("ops.listen is on");
    assert_ne!(addr.port(), 0, "the real port is reported");

    // Nothing ran yet: the turn counters are zero.
    let before = Scrape::take(addr).await;
    assert_eq!(
        before.value("turnstile_turns_total", &[("outcome", "terminated")]),
        0.0
    );
    assert_eq!(before.count("turnstile_turn_duration_seconds"), 0);

    // One 429 on the first reply: counted, and retried once.
    h.api.inject("sendMessage", Fault::RetryAfter(1));
    h.say(1, USER, "think");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "think");
    h.turn_ended(1, 2).await;
    h.say(2, USER, "wedge");
    h.event(
        "the wedged session force-closed",
        |e| matches!(e, BotEvent::SessionKilled { chat, .. } if chat.0 == 2),
    )
    .await;
    h.turn_ended(2, 1).await;

    // A message waiting behind a running turn is queue depth.
    h.say(3, USER, "slow");
    h.event(
        "chat 3's slow turn",
        |e| matches!(e, BotEvent::TurnStarted { chat, .. } if chat.0 == 3),
    )
    .await;
    h.say(3, USER, "think");
    scrape_until(addr, "one message queued", |s| {
        s.value("turnstile_queue_depth", &[]) == 1.0
    })
    .await;
    h.turn_ended(3, 2).await;

    // A turn's calls are observed once its session is done (after
    // `end_turn` its result comes later).
    let s = scrape_until(addr, "every turn's typing stop and calls", |s| {
        s.count("turnstile_typing_stop_latency_seconds") >= 5
            && s.count("turnstile_turn_api_calls") >= 5
    })
    .await;
    assert_eq!(
        s.value("turnstile_turns_total", &[("outcome", "terminated")]),
        4.0,
        "two think turns in chat 1, slow and think in chat 3"
    );
    assert_eq!(
        s.value(
            "turnstile_turns_total",
            &[("outcome", "force_closed_after_result")]
        ),
        1.0
    );
    assert_eq!(s.count("turnstile_turn_duration_seconds"), 5);
    assert_eq!(
        s.count("turnstile_turn_api_calls"),
        5,
        "every turn's result reported its calls, also those that came after end_turn"
    );
    assert_eq!(s.count("turnstile_typing_stop_latency_seconds"), 5);
    assert_eq!(s.value("turnstile_wedges_force_closed_total", &[]), 1.0);
    assert_eq!(s.value("turnstile_queue_depth", &[]), 0.0);
    let supervisors = h
        .bot
        .gauges
        .supervisors
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(s.value("turnstile_live_chats", &[]), supervisors as f64);
    assert_eq!(supervisors, 3, "three chats, none evicted yet");
    assert!(s.has("turnstile_warm_agents"));
    assert!(s.has("turnstile_live_turns"));
    assert_eq!(
        s.value(
            "turnstile_telegram_rate_limited_total",
            &[("method", "sendMessage")]
        ),
        1.0
    );
    assert_eq!(
        s.value(
            "turnstile_telegram_requests_total",
            &[("method", "sendMessage"), ("status", "429")]
        ),
        1.0
    );
    assert_eq!(s.value("turnstile_telegram_retries_total", &[]), 1.0);
    let sent_ok = h
        .api
        .calls_of("sendMessage")
        .iter()
        .filter(|c| c.status == 200)
        .count();
    assert!(sent_ok >= 5, "every turn replied: {sent_ok}");
    let s = scrape_until(addr, "every sendMessage counted", |s| {
        s.value(
            "turnstile_telegram_requests_total",
            &[("method", "sendMessage"), ("status", "200")],
        ) >= sent_ok as f64
    })
    .await;
    assert_eq!(
        s.value(
            "turnstile_telegram_requests_total",
            &[("method", "sendMessage"), ("status", "200")],
        ),
        sent_ok as f64
    );
    assert!(
        s.value(
            "turnstile_telegram_requests_total",
            &[("method", "getUpdates"), ("status", "200")],
        ) >= 1.0
    );
    assert_eq!(
        s.value("turnstile_store_errors_total", &[]),
        h.bot.inbox.errors() as f64
    );
    let (status, _) = ops_get(addr, "/nope").await;
    assert_eq!(status, 404);
    h.bot.stop().await;
}

async fn health(addr: SocketAddr) -> (u16, serde_json::Value) {
    let (status, body) = ops_get(addr, "/healthz").await;
    let json = serde_json::from_str(&body).expect("healthz answers JSON");
    (status, json)
}

async fn health_until(addr: SocketAddr, want: u16) -> serde_json::Value {
    let what = format!("/healthz {want}");
    eventually(&what, Duration::from_secs(20), || async {
        let (status, json) = health(addr).await;
        if status == want {
            Ok(json)
        } else {
            Err(format!("{status} {json}"))
        }
    })
    .await
}

#[actix_rt::test]
async fn healthz_is_503_while_getupdates_fails_and_200_again_after() {
    let h = Harness::start(scenario(), OPS_ENV).await;
    let addr = h.bot.ops_addr().expect("ops.listen is on");
    let ok = health_until(addr, 200).await;
    assert_eq!(ok["status"], "ok");
    // Four failures in a row: backoff 250 ms, 500 ms, 1 s, 2 s, so no poll
    // answers for longer than twice the 1 s poll timeout.
    for _ in 0..4 {
        h.api.inject(
            "getUpdates",
            Fault::BadRequest("Bad Request: injected".into()),
        );
    }
    let down = health_until(addr, 503).await;
    assert_eq!(down["status"], "unhealthy");
    let reason = down["reason"].as_str().expect("a reason");
    assert!(reason.contains("getUpdates"), "{reason}");
    let up = health_until(addr, 200).await;
    assert_eq!(up["status"], "ok");
    let s = Scrape::take(addr).await;
    assert_eq!(
        s.value(
            "turnstile_telegram_requests_total",
            &[("method", "getUpdates"), ("status", "4xx")],
        ),
        4.0
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_taken_port_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let api = FakeBotApi::start().await;
    let listen = format!("127.0.0.1:{port}");
    let config = ConfigVars::new(&api.url())
        .set_all(TEST_DEFAULTS.iter().copied())
        .set_all([("TURNSTILE_OPS_LISTEN", listen.as_str())])
        .load();
    let backend = std::sync::Arc::new(turnstile::agent::ScriptedBackend::new(scenario()));
    match turnstile::Turnstile::start(&config, backend).await {
        Ok(_) => panic!("started on a taken port"),
        Err(err) => assert!(err.to_string().contains("ops.listen"), "{err}"),
    }
}

#[test]
fn a_bad_listen_address_is_a_config_error() {
    let env: BTreeMap<String, String> = [
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TURNSTILE_OPS_LISTEN", "localhost"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
    .collect();
    let err = turnstile::Config::load(None, &env).expect_err("a bad address is refused");
    let text = err.to_string();
    assert!(text.contains("ops.listen"), "{text}");
    let ok: BTreeMap<String, String> = [
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TURNSTILE_OPS_LISTEN", "127.0.0.1:9464"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
    .collect();
    let config = turnstile::Config::load(None, &ok).expect("a good address loads");
    assert_eq!(config.ops.listen, "127.0.0.1:9464");
}

/// A loopback address with a port free now, for `ops.listen`.
fn free_loopback_port() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    probe.local_addr().expect("addr").to_string()
}

/// `/healthz` of the binary at `listen`: the status and reason, `None`
/// while it does not answer yet.
async fn binary_health(listen: &str) -> Option<(u16, String)> {
    let response = reqwest::Client::new()
        .get(format!("http://{listen}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// The binary on the fake Bot API with `ops.listen` and a state file of
/// its own, `poll_timeout` set.
fn spawn_bot(
    api: &FakeBotApi,
    dir: &std::path::Path,
    listen: &str,
    poll_timeout: &str,
) -> BotProcess {
    let env = [
        ("TURNSTILE_OPS_LISTEN", listen.to_owned()),
        ("TURNSTILE_TELEGRAM_POLL_TIMEOUT", poll_timeout.to_owned()),
        (
            "TURNSTILE_STATE_PATH",
            dir.join("state.db").display().to_string(),
        ),
    ];
    BotProcess::spawn(api, &dir.join("bot.log"), &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_bot_is_healthy_while_its_first_long_poll_is_open() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let listen = free_loopback_port();
    let mut bot = spawn_bot(&api, dir.path(), &listen, "60s");
    api.wait_for_call("getUpdates", Duration::from_secs(30))
        .await;
    // The long poll is open and holds for 60 s: healthy all the same,
    // within a few seconds.
    let at = listen.as_str();
    let healthy = eventually("/healthz 200", Duration::from_secs(5), move || async move {
        match binary_health(at).await {
            Some((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(healthy.contains("\"ok\""), "{healthy}");
    assert_eq!(
        api.calls_of("getUpdates").len(),
        1,
        "still in the first long poll"
    );
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_that_never_succeeds_is_unhealthy_after_twice_the_poll_timeout() {
    let api = FakeBotApi::start().await;
    // getMe answers; getUpdates fails long past the 2 s health window
    // (backoff 250 ms doubling to 30 s).
    for _ in 0..12 {
        api.inject(
            "getUpdates",
            Fault::BadRequest("Bad Request: injected".into()),
        );
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let listen = free_loopback_port();
    let mut bot = spawn_bot(&api, dir.path(), &listen, "1s");
    api.wait_for_call("getUpdates", Duration::from_secs(30))
        .await;
    let at = listen.as_str();
    let reason = eventually(
        "/healthz 503",
        Duration::from_secs(20),
        move || async move {
            match binary_health(at).await {
                Some((503, body)) => Ok(body),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        reason.contains("getUpdates has not succeeded in the"),
        "{reason}"
    );
    assert!(
        api.calls_of("getUpdates").len() < 12,
        "the faults outlasted the check"
    );
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

use std::time::Duration;

use actix::{ActorContext, ActorFutureExt, AsyncContext, Handler, Message, WrapFuture};
use serde_json::Value;
use tokio::sync::oneshot;

use super::*;

/// Runs `run` under the JSON subscriber with `filter`: what it wrote, and
/// each line as JSON.
fn logged(filter: &str, run: impl FnOnce()) -> (String, Vec<Value>) {
    let written = Captured::default();
    let writer = written.clone();
    let subscriber = json(EnvFilter::new(filter), move || writer.clone());
    tracing::subscriber::with_default(subscriber, run);
    let text = written.text();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (text, lines)
}

#[test]
fn the_fields_of_an_events_spans_are_at_the_top_level_outermost_first() {
    let (text, lines) = logged("trace", || {
        let _chat = context_span!("chat", chat_id = 1, topic = Some(7)).entered();
        let _turn = context_span!("turn", turn_id = 2).entered();
        tracing::info!(outcome = "completed", "turn ended");
    });
    assert_eq!(lines.len(), 1, "{text}");
    let line = &lines[0];
    assert_eq!(line["chat_id"], 1, "{text}");
    assert_eq!(line["topic"], 7, "{text}");
    assert_eq!(line["turn_id"], 2, "{text}");
    assert_eq!(line["outcome"], "completed", "{text}");
    assert_eq!(line["message"], "turn ended", "{text}");
    assert_eq!(line["level"], "INFO", "{text}");
    assert_eq!(line["target"], module_path!(), "{text}");
    assert!(line["timestamp"].as_str().is_some_and(|t| !t.is_empty()));
    for nested in ["spans", "span", "fields"] {
        assert!(line.get(nested).is_none(), "{nested} in {text}");
    }
    let at = |name: &str| {
        text.find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let order = [
        "timestamp",
        "level",
        "target",
        "chat_id",
        "turn_id",
        "outcome",
        "message",
    ];
    assert!(
        order.map(at).is_sorted(),
        "not in the order {order:?}: {text}"
    );
}

#[test]
fn an_events_field_wins_over_a_spans_and_an_inner_spans_over_an_outer_ones() {
    let (text, lines) = logged("trace", || {
        let _outer = context_span!("outer", who = "outer", depth = 1).entered();
        let inner = context_span!("inner", who = "inner").entered();
        tracing::info!("in the inner span");
        tracing::info!(who = "event", "with a field of its own");
        drop(inner);
        tracing::info!("in the outer span");
    });
    let who: Vec<&str> = lines.iter().filter_map(|l| l["who"].as_str()).collect();
    assert_eq!(who, ["inner", "event", "outer"], "{text}");
    assert!(lines.iter().all(|l| l["depth"] == 1), "{text}");
    for line in text.lines() {
        assert_eq!(line.matches("\"who\":").count(), 1, "{line}");
    }
}

#[test]
fn a_field_recorded_after_its_span_began_is_on_the_lines_after() {
    let (text, lines) = logged("trace", || {
        let update = context_span!("update", update_id = 3, chat_id = tracing::field::Empty);
        let _in = update.enter();
        tracing::info!("before");
        update.record("chat_id", 5);
        tracing::info!("after");
    });
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].get("chat_id").is_none(), "{text}");
    assert_eq!(
        (&lines[1]["update_id"], &lines[1]["chat_id"]),
        (&3.into(), &5.into())
    );
}

#[test]
fn a_filter_that_lets_only_warnings_through_keeps_their_context() {
    let (text, lines) = logged("warn", || {
        let _turn = context_span!("turn", chat_id = 5, turn_id = 9).entered();
        tracing::info!("filtered out");
        tracing::warn!("kept");
    });
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["message"], "kept");
    assert_eq!(
        (&lines[0]["chat_id"], &lines[0]["turn_id"]),
        (&5.into(), &9.into()),
        "{text}"
    );
}

#[test]
fn a_line_outside_any_span_is_one_line_with_the_events_fields_only() {
    let (text, lines) = logged("trace", || {
        let list = vec!["a"];
        tracing::warn!(cause = %"a\nb \"c\"", n = 3u64, ok = true, ratio = 0.5, ?list, "two\nlines");
    });
    assert_eq!(text.matches('\n').count(), 1, "{text}");
    let Value::Object(line) = &lines[0] else {
        panic!("not an object: {text}");
    };
    // serde_json keeps keys in the order written (its `preserve_order`,
    // which the ACP schema crate turns on): compare them as a set.
    let mut names: Vec<&str> = line.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected = [
        "cause",
        "level",
        "list",
        "message",
        "n",
        "ok",
        "ratio",
        "target",
        "timestamp",
    ];
    expected.sort_unstable();
    assert_eq!(names, expected, "{text}");
    assert_eq!(line["cause"], "a\nb \"c\"");
    assert_eq!(line["message"], "two\nlines");
    assert_eq!(
        (&line["n"], &line["ok"], &line["ratio"]),
        (&3.into(), &true.into(), &0.5.into())
    );
    assert_eq!(line["list"], "[\"a\"]");
}

/// Logs from every place an actor's code runs; `stopped` says so on `done`.
struct Logger {
    done: Option<oneshot::Sender<()>>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Go;

impl Actor for Logger {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        tracing::info!("started");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        tracing::info!("stopped");
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

impl Handler<Go> for Logger {
    type Result = ();

    fn handle(&mut self, _msg: Go, ctx: &mut Self::Context) {
        tracing::info!("handler");
        ctx.spawn(async {}.into_actor(self).map(|(), _act, ctx| {
            tracing::info!("future");
            ctx.run_later(Duration::ZERO, |_act, ctx| {
                tracing::info!("timer");
                ctx.stop();
            });
        }));
    }
}

#[test]
fn an_actor_started_in_a_span_logs_in_it_from_start_to_stop() {
    let (text, lines) = logged("trace", || {
        actix::System::new().block_on(async {
            let (done, stopped) = oneshot::channel();
            let addr = Logger { done: Some(done) }.start_in(context_span!("unit", unit_id = 4));
            tracing::info!("outside");
            addr.do_send(Go);
            stopped.await.expect("the actor stopped");
        });
    });
    let inside: Vec<&str> = lines
        .iter()
        .filter(|l| l["unit_id"] == 4)
        .filter_map(|l| l["message"].as_str())
        .collect();
    assert_eq!(
        inside,
        ["started", "handler", "future", "timer", "stopped"],
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "outside" && l.get("unit_id").is_none()),
        "{text}"
    );
}

//! What a turn used: its record in the `turns` table, the per-turn
//! histograms and `/usage` count every result of the turn, also the one
//! that comes after a terminator, and each turn once. Scripted agent, real
//! teloxide client, fake Bot API, state in a file the test reads.

mod support;

use serde_json::json;
use support::*;
use turnstile::agent::{Scenario, Step};

/// Each model call reports 100 tokens read and 10 written. "finish":
/// `end_turn` at once; the result (1 call, 100 in / 10 out tokens) comes
/// after the turn ended. "quiet": a result with no text and
/// nothing sent, so the bot re-prompts, and the re-prompt ends with
/// `end_turn`: two results, one turn. "hang": silent until killed.
fn scenario() -> Scenario {
    let end = || Step::Tools {
        calls: vec![tool(
            "mcp__telegram-tools__end_turn",
            json!({"text": "done"}),
        )],
    };
    Scenario::default()
        .with_rule("[turnstile]", turn(vec![end()]))
        .with_rule("finish", turn(vec![end()]))
        .with_rule("quiet", turn(vec![result("")]))
        .with_rule("hang", turn(vec![Step::HangForever]))
        .with_usage(100, 10)
}

/// The `turns` rows of `chat`: (outcome, api_calls, cost_usd), oldest first.
fn turn_rows(state: &std::path::Path, chat: i64) -> Vec<(String, u32, f64)> {
    let conn = rusqlite::Connection::open(state).expect("the state file opens");
    let mut query = conn
        .prepare("SELECT outcome, api_calls, cost_usd FROM turns WHERE chat_id = ?1 ORDER BY id")
        .expect("the turns table");
    query
        .query_map([chat], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("a query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[actix_rt::test]
async fn a_turn_ended_by_end_turn_is_recorded_with_its_late_results_calls() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let state = dir.path().join("state.sqlite");
    let path = state.display().to_string();
    let mut h = Harness::start(
        scenario(),
        &[
            ("TURNSTILE_STATE_PATH", path.as_str()),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "300ms"),
        ],
    )
    .await;
    h.say(USER, USER, "finish");
    h.turn_ended(USER, 1).await;
    h.say(USER, USER, "hang");
    h.turn_ended(USER, 2).await;
    // Both turns are recorded once their sessions are done (the second
    // killed, its result never come).
    let rows = eventually("both turns recorded", SOON, || {
        let rows = turn_rows(&state, USER);
        async move {
            if rows.len() >= 2 {
                Ok(rows)
            } else {
                Err(format!("{rows:?}"))
            }
        }
    })
    .await;
    assert_eq!(
        rows,
        [
            ("terminated".to_string(), 1, 0.0),
            ("no_progress".to_string(), 0, 0.0)
        ],
        "the result after end_turn counts for its turn"
    );
    assert_eq!(h.metric_value("turnstile_turn_api_calls_count"), 1.0);
    assert_eq!(h.metric_value("turnstile_turn_api_calls_sum"), 1.0);
    assert_eq!(h.metric_value("turnstile_turn_duration_seconds_count"), 2.0);
}

#[actix_rt::test]
async fn usage_counts_a_re_prompted_turn_once_and_both_its_results() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(USER, USER, "quiet");
    h.turn_ended(USER, 1).await;
    let texts = h.api.wait_for_texts(USER, 1, SOON).await;
    assert_eq!(texts, ["done"], "the re-prompt ran");
    // The turn's use is written once its session is done, the metric after
    // the row.
    wait_until("the turn's tokens counted", SOON, || {
        h.metric_value("turnstile_tokens_total{direction=\"input\"}") >= 200.0
    })
    .await;
    h.say(USER, USER, "/usage");
    let usage = h
        .api
        .wait_for(SOON, "the /usage answer", |_| {
            h.texts(USER)
                .into_iter()
                .find(|t| t.contains("This conversation"))
        })
        .await;
    let today = usage.lines().nth(1).unwrap_or_default();
    assert_eq!(
        today, "Today (UTC): 1 turn, 2 model calls, 200 in / 20 out tokens, $0.0000",
        "{usage}"
    );
}

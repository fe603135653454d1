//! The golden fixture pins the mapping from a turn's events to its outcome.

use serde::Deserialize;
use turnstile::chat::{TurnEvent, TurnOutcome, decide};

#[derive(Deserialize)]
struct Row {
    name: String,
    events: Vec<TurnEvent>,
    expect: Expect,
}

#[derive(Deserialize)]
struct Expect {
    outcome: Option<TurnOutcome>,
    finished: bool,
    releases_chat: bool,
}

#[test]
fn every_row_of_the_golden_fixture_holds() {
    let text = include_str!("fixtures/turn_outcome_contract.json");
    let rows: Vec<Row> = serde_json::from_str(text).expect("the fixture parses");
    assert!(rows.len() >= 10);
    let mut failures = Vec::new();
    for row in &rows {
        let got = decide(&row.events);
        let finished = got.as_ref().is_some_and(TurnOutcome::finished);
        let releases = got.is_some();
        if got != row.expect.outcome
            || finished != row.expect.finished
            || releases != row.expect.releases_chat
        {
            failures.push(format!(
                "{}: got {got:?} (finished {finished}, releases {releases}), expected {:?} (finished {}, releases {})",
                row.name, row.expect.outcome, row.expect.finished, row.expect.releases_chat
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_fixture_covers_every_outcome_but_the_backstop() {
    let rows: Vec<Row> =
        serde_json::from_str(include_str!("fixtures/turn_outcome_contract.json")).unwrap();
    let kinds: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.expect.outcome.as_ref().map(TurnOutcome::label))
        .collect();
    for kind in [
        "terminated",
        "completed",
        "idle_resume",
        "interrupted",
        "agent_error",
        "unrecognized",
        "force_closed_after_result",
        "no_progress",
        "unauthenticated",
        "budget_exceeded",
        "agent_failed",
        "host_stopping",
    ] {
        assert!(kinds.contains(kind), "no fixture row for {kind}");
    }
}

//! `contrib/grafana-dashboard.json` is valid JSON, and every metric it
//! queries is one the bot exposes (a renamed metric would leave a panel
//! empty without a word).

use std::collections::BTreeSet;

use serde_json::Value;
use turnstile::ops::Metrics;

/// Every `expr` of every panel, nested rows included.
fn exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The metric names an expression reads, as exposed in `# TYPE` lines
/// (without the `_total`, `_bucket`, `_sum`, `_count` of their samples).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("turnstile_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let mut name = &tail[..end];
        for suffix in ["_total", "_bucket", "_sum", "_count"] {
            if let Some(stripped) = name.strip_suffix(suffix) {
                name = stripped;
                break;
            }
        }
        names.push(name.to_string());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_is_json_and_queries_only_metrics_the_bot_exposes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contrib/grafana-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("valid JSON");
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    assert!(all.len() >= 10, "{} queries", all.len());
    let queried: BTreeSet<String> = all.iter().flat_map(|e| metric_names(e)).collect();
    let exposition = Metrics::new().render(0, 0, 0);
    let exposed: BTreeSet<&str> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let missing: Vec<&String> = queried
        .iter()
        .filter(|name| !exposed.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "not exposed: {missing:?}\n{exposition}");
    for wanted in [
        "turnstile_outbox_waiting",
        "turnstile_outbox_oldest_waiting_seconds",
        "turnstile_outbox_resent",
        "turnstile_outbox_dropped",
        "turnstile_telegram_unknown_outcome",
        "turnstile_turns",
        "turnstile_telegram_requests",
    ] {
        assert!(
            queried.contains(wanted),
            "the dashboard does not draw {wanted}"
        );
    }
}

//! Micro-benchmarks (divan) of the pure functions every turn runs through:
//! the outcome decision, parsing a tool call and message splitting.
//! `cargo bench --bench hot_paths`; the end-to-end benchmarks are in
//! `benches/turns.rs` and `benches/real_cli.rs` (see scripts/bench.sh).

use divan::{Bencher, black_box};
use serde_json::json;
use turnstile::agent::{AgentResult, BatchCall, ToolName, ToolRegistry};
use turnstile::chat::{TurnEvent, decide};
use turnstile::telegram::format::{self, Rendered, TELEGRAM_TEXT_LIMIT};

fn main() {
    divan::main();
}

fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_string()])
}

/// A typical terminator turn: one send + end_turn batch.
#[divan::bench]
fn decide_terminator_batch(bencher: Bencher) {
    let tools = registry();
    let calls: Vec<BatchCall> = ["mcp__telegram-tools__send", "mcp__telegram-tools__end_turn"]
        .into_iter()
        .map(|name| tools.batch_call(&ToolName::parse(name), &json!({})))
        .collect();
    let events = vec![TurnEvent::ToolBatch { calls }];
    bencher.bench(|| decide(black_box(&events)));
}

/// A completed turn: result then idle.
#[divan::bench]
fn decide_settled_result(bencher: Bencher) {
    let events = vec![
        TurnEvent::Result(AgentResult {
            subtype: "success".into(),
            terminal_reason: Some("completed".into()),
            num_turns: 1,
            ..AgentResult::default()
        }),
        TurnEvent::Idle,
    ];
    bencher.bench(|| decide(black_box(&events)));
}

/// One call of a batch as the agent names it, parsed at the boundary.
#[divan::bench]
fn parse_a_batch_call(bencher: Bencher) {
    let tools = registry();
    let input = json!({});
    bencher.bench(|| {
        tools.batch_call(
            &ToolName::parse(black_box("mcp__telegram-tools__end_turn")),
            &input,
        )
    });
}

/// A 5,000-character reply with a code block: split into two messages.
#[divan::bench]
fn split_a_long_reply(bencher: Bencher) {
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(&format!("Paragraph {i}: {}\n\n", "words ".repeat(15)));
    }
    text.push_str("```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\n");
    text.push_str(&"tail ".repeat(200));
    let text = Rendered::plain(text);
    bencher.bench(|| format::split(black_box(&text), TELEGRAM_TEXT_LIMIT));
}

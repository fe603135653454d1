//! Micro-benchmarks (divan) of the pure functions every turn runs through:
//! the outcome decision, terminator detection and message splitting.
//! `cargo bench --bench hot_paths`; the end-to-end benchmarks are in
//! `benches/turns.rs` and `benches/real_cli.rs` (see scripts/bench.sh).

use divan::{Bencher, black_box};
use turnstile::agent::AgentResult;
use turnstile::chat::{ToolRegistry, TurnEvent, bare_tool_name, decide};
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
    let events = vec![TurnEvent::ToolBatch {
        tools: vec![
            "mcp__telegram-tools__send".into(),
            "mcp__telegram-tools__end_turn".into(),
        ],
        inputs: vec![],
    }];
    bencher.bench(|| decide(black_box(&events), &tools));
}

/// A completed turn: result then idle.
#[divan::bench]
fn decide_settled_result(bencher: Bencher) {
    let tools = registry();
    let events = vec![
        TurnEvent::Result(AgentResult {
            subtype: "success".into(),
            terminal_reason: Some("completed".into()),
            num_turns: 1,
            ..AgentResult::default()
        }),
        TurnEvent::Idle,
    ];
    bencher.bench(|| decide(black_box(&events), &tools));
}

#[divan::bench]
fn strip_mcp_prefix() -> &'static str {
    bare_tool_name(black_box("mcp__telegram-tools__end_turn"))
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

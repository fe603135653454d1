//! The progress lines a turn shows while it works: the tool running now,
//! how many ran, for how long.

use std::time::Duration;

/// `12s`, `3m 05s`.
pub fn clock(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}

/// `1 tool call`, `3 tool calls`.
pub fn calls(n: u32) -> String {
    match n {
        1 => "1 tool call".into(),
        n => format!("{n} tool calls"),
    }
}

/// The status message: the tool running now, then the count and the time.
pub fn status_text(current: Option<&str>, n: u32, elapsed: Duration) -> String {
    match current {
        Some(current) => format!("{current}\n{} · {}", calls(n), clock(elapsed)),
        None => format!("⏳ Working… · {}", clock(elapsed)),
    }
}

/// The status folded at the end of the turn.
pub fn folded_text(n: u32, elapsed: Duration) -> String {
    format!("✅ {} · {}", calls(n), clock(elapsed))
}

/// One line about a tool call (`bare` its name): `🔧 Bash: cargo test`,
/// `📖 Read src/main.rs`, `🔍 WebSearch "rust actors"`. `field` reads a
/// field of its input, `path` a path in it, shortened.
pub fn tool_line<'a>(
    bare: &str,
    field: &dyn Fn(&str) -> &'a str,
    path: &dyn Fn(&str) -> &'a str,
) -> String {
    match bare {
        "Bash" => format!("🔧 Bash: {}", first_line(field("command"))),
        "Read" => format!("📖 Read {}", path("file_path")),
        "Write" => format!("✏️ Write {}", path("file_path")),
        "Edit" | "MultiEdit" => format!("✏️ Edit {}", path("file_path")),
        "NotebookEdit" => format!("✏️ Edit {}", path("notebook_path")),
        "Grep" => format!("🔍 Grep \"{}\"", field("pattern")),
        "Glob" => format!("🔍 Glob {}", field("pattern")),
        "WebSearch" => format!("🔍 WebSearch \"{}\"", field("query")),
        "WebFetch" => format!("🌐 WebFetch {}", field("url")),
        "Task" | "Agent" => format!("🤖 {bare}: {}", first_line(field("description"))),
        "TodoWrite" => "📝 Updating the plan".to_string(),
        "send" | "end_turn" => "💬 Writing to the chat".to_string(),
        "send_file" => format!("📎 Sending {}", path("path")),
        "react" => "👍 Reacting".to_string(),
        other => format!("🔧 {other}"),
    }
}

/// The first line of `text` that is not blank.
fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

//! What the live-view benchmarks share (issue 12): the answer every
//! streaming turn writes, and how to tell the calls of the fake Telegram
//! that show it.

use super::bot_api::Call;

/// The answer every streaming turn writes: ten pieces (about 260
/// characters, plain text, so its rendering is itself).
pub const ANSWER_PIECES: [&str; 10] = [
    "Here is what I found. ",
    "The build failed because ",
    "the linker could not find ",
    "libssl; installing the dev ",
    "package fixes it. After that, ",
    "cargo test passes: 212 tests, ",
    "none ignored. I also bumped ",
    "two dependencies that were ",
    "flagged by cargo audit, ",
    "and nothing else changed.",
];

/// The whole answer.
pub fn answer() -> String {
    ANSWER_PIECES.concat()
}

/// The `text` a call carried (empty when none).
pub fn call_text(call: &Call) -> &str {
    call.params["text"].as_str().unwrap_or_default()
}

/// Whether `text` shows some of the answer (a non-empty prefix of it).
pub fn shows_answer(text: &str) -> bool {
    !text.is_empty() && answer().starts_with(text)
}

/// Requests that put text in the chat.
pub fn is_text_request(method: &str) -> bool {
    matches!(
        method,
        "sendmessage" | "editmessagetext" | "sendmessagedraft"
    )
}

/// The whole answer reached the chat (as a message or the preview's edit).
pub fn answer_complete(calls: &[Call]) -> bool {
    calls.iter().any(is_whole_answer)
}

/// A successful `sendMessage` or `editMessageText` carrying the whole answer.
pub fn is_whole_answer(call: &Call) -> bool {
    matches!(call.method.as_str(), "sendmessage" | "editmessagetext")
        && call.status == 200
        && call_text(call) == answer()
}

/// Of `calls` (one turn's, in order): the first successful text request
/// showing some of the answer, the first carrying all of it, and how many
/// successful text requests there were.
pub fn answer_calls<'a>(
    calls: impl IntoIterator<Item = &'a Call>,
) -> (Option<&'a Call>, Option<&'a Call>, usize) {
    let texts: Vec<&Call> = calls
        .into_iter()
        .filter(|c| is_text_request(&c.method) && c.status == 200)
        .collect();
    let first = texts.iter().find(|c| shows_answer(call_text(c))).copied();
    let whole = texts.iter().find(|c| is_whole_answer(c)).copied();
    (first, whole, texts.len())
}

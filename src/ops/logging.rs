//! The binary's log set-up: `[log] format` text or JSON on stderr, filtered
//! by `TURNSTILE_LOG` (default `info`).

use crate::config::LogFormat;

/// Installs the global subscriber. JSON writes one object per line, the
/// event's fields and those of its spans (`chat_id`, `turn_id`) flattened.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
}

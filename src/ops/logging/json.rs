//! `[log] format = "json"`: one object per line, flat. tracing-subscriber's
//! own JSON format nests the fields of an event's spans under `spans`; here
//! they sit at the top level beside the event's, so a turn's every line
//! has its `chat_id` and `turn_id` where a log query looks for them.

use std::fmt;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line of an event: `timestamp`, `level`, `target`, then the
/// fields of every span it is in, outermost first, then its own fields,
/// then `message`. A name is written once: an inner span's field replaces an
/// outer one's, and the event's own field replaces a span's.
///
/// Reads the spans' fields as [`JsonFields`] keeps them (one JSON object
/// per span), so the subscriber must format span fields with it.
#[derive(Debug, Default)]
pub struct FlatJson;

impl<S> FormatEvent<S, JsonFields> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A `log` record's own target and level, not those of the bridge.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut line = JsonLine::default();
        line.set("timestamp", Value::from(timestamp));
        line.set("level", Value::from(meta.level().as_str()));
        line.set("target", Value::from(meta.target()));
        for span in ctx.event_scope().into_iter().flat_map(|s| s.from_root()) {
            let extensions = span.extensions();
            let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                continue;
            };
            // Empty for a span without fields.
            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&fields.fields) {
                for (name, value) in fields {
                    line.set(name, value);
                }
            }
        }
        event.record(&mut line);
        line.write(&mut writer)
    }
}

/// A line's fields in the order they are first set.
#[derive(Default)]
struct JsonLine(Vec<(String, Value)>);

impl JsonLine {
    /// Sets `name`, in its first place when it is there already.
    fn set(&mut self, name: impl Into<String>, value: Value) {
        let name = name.into();
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, old)) => *old = value,
            None => self.0.push((name, value)),
        }
    }

    /// Writes the object, `message` last, and a newline.
    fn write(&self, writer: &mut Writer<'_>) -> fmt::Result {
        let (message, fields): (Vec<_>, Vec<_>) =
            self.0.iter().partition(|(name, _)| name == "message");
        writer.write_char('{')?;
        for (i, (name, value)) in fields.into_iter().chain(message).enumerate() {
            if i > 0 {
                writer.write_char(',')?;
            }
            write!(writer, "{}:{value}", Value::from(name.as_str()))?;
        }
        writer.write_str("}\n")
    }

    /// The name `field` is written under: none for a `log` record's
    /// metadata (its target and level are the line's own), `r#` taken off.
    fn name(field: &Field) -> Option<&'static str> {
        let name = field.name();
        if name.starts_with("log.") {
            return None;
        }
        Some(name.strip_prefix("r#").unwrap_or(name))
    }

    fn record(&mut self, field: &Field, value: impl Into<Value>) {
        if let Some(name) = Self::name(field) {
            self.set(name, value.into());
        }
    }
}

impl Visit for JsonLine {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(field, value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

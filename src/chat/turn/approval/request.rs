//! An ACP request as a question shows it: everything it says it runs or
//! writes, whole (its title is the agent's own words, not a tool name).

use serde_json::Value;

use super::shown::{shown_value, visible, visible_command};
use crate::agent::{Shown, shown_content};

/// The fields of an ACP request a question shows first, in this order;
/// any other follows as JSON.
const REQUEST_FIELDS: &[&str] = &["title", "name", "kind", "rawInput", "content", "locations"];

/// What an ACP request says it does, whole: its title, name and kind, its
/// raw input field by field, each diff as its file and text (a new file
/// whole), text content, locations, and any other field as JSON.
pub(super) fn request_summary(input: &Value) -> String {
    let Some(fields) = input.as_object() else {
        return shown_value(input);
    };
    let known = REQUEST_FIELDS
        .iter()
        .filter_map(|name| fields.get(*name).map(|value| (*name, value)));
    let others = fields
        .iter()
        .filter(|(name, _)| !REQUEST_FIELDS.contains(&name.as_str()))
        .map(|(name, value)| (name.as_str(), value));
    let mut lines = Vec::new();
    for (name, value) in known.chain(others) {
        match (name, value) {
            ("title", Value::String(title)) => {
                lines.push(format!("title: {}", visible_command(title)));
            }
            ("rawInput", Value::Object(input)) => {
                lines.push("input:".to_string());
                for (field, value) in input {
                    let value = match value {
                        Value::String(text) => visible_command(text),
                        other => visible(&other.to_string()),
                    };
                    lines.push(format!("  {}: {value}", visible(field)));
                }
            }
            ("content", Value::Array(items)) => lines.extend(items.iter().map(content_shown)),
            (name, value) => lines.push(format!("{}: {}", visible(name), shown_value(value))),
        }
    }
    lines.join("\n")
}

/// One content item of an ACP request as a question shows it.
fn content_shown(item: &Value) -> String {
    match shown_content(item) {
        Some(Shown::Diff {
            path,
            old: None,
            new,
        }) => format!(
            "writes {} (a new file, {} bytes):\n{}",
            visible(path),
            new.len(),
            visible(new)
        ),
        Some(Shown::Diff {
            path,
            old: Some(old),
            new,
        }) => format!(
            "edits {} ({} bytes):\n- {}\n+ {}",
            visible(path),
            new.len(),
            visible(old),
            visible(new)
        ),
        Some(Shown::Text(text)) => format!("text: {}", visible(text)),
        None => format!("content: {}", visible(&item.to_string())),
    }
}

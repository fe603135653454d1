//! How a question shows one content item of a permission request (the
//! ACP shape: a diff, or a text block), read once, the same for every
//! backend that sends such items and for the chat that shows them.

use serde_json::Value;

/// A content item a question can show as text: a diff, or a text block.
pub enum Shown<'a> {
    /// A file written: its path, its text before (`None`: a new file) and after.
    Diff {
        /// The file.
        path: &'a str,
        /// Its text before.
        old: Option<&'a str>,
        /// Its text after.
        new: &'a str,
    },
    /// Text.
    Text(&'a str),
}

/// How a question shows `item`; `None` for what it cannot show as text (a
/// terminal, an image, an unknown shape), which it then shows as JSON.
pub fn shown_content(item: &Value) -> Option<Shown<'_>> {
    let object = item.as_object()?;
    match object.get("type")?.as_str()? {
        "diff" => {
            let old = match object.get("oldText") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_str()?),
            };
            Some(Shown::Diff {
                path: object.get("path")?.as_str()?,
                old,
                new: object.get("newText")?.as_str()?,
            })
        }
        "content" => {
            let block = object.get("content")?.as_object()?;
            (block.get("type")?.as_str()? == "text")
                .then(|| block.get("text").and_then(Value::as_str))
                .flatten()
                .map(Shown::Text)
        }
        _ => None,
    }
}

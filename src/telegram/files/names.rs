//! How a received file is named (never taken whole from Telegram) and how
//! sizes read in the chat.

use crate::attachment::{Attachment, FileKind};

/// The name stem and extension of a file of `kind` whose sender gave no name.
fn default_name(kind: FileKind) -> (&'static str, &'static str) {
    match kind {
        FileKind::Photo => ("photo", "jpg"),
        FileKind::Document => ("document", "bin"),
        FileKind::Audio => ("audio", "mp3"),
        FileKind::Video => ("video", "mp4"),
        FileKind::Animation => ("animation", "mp4"),
        FileKind::Voice => ("voice", "oga"),
        FileKind::VideoNote => ("video-note", "mp4"),
    }
}

/// The name's stem and extension: from the sender's name when it has a
/// safe one, else from the kind (the extension from Telegram's path).
pub(super) fn name_parts(attachment: &Attachment, telegram_path: &str) -> (String, String) {
    let (kind_stem, kind_ext) = default_name(attachment.kind);
    let from_path = safe_component(telegram_path)
        .and_then(|n| n.rsplit_once('.').map(|(_, e)| e.to_string()))
        .filter(|e| !e.is_empty() && e.len() <= 10);
    let given = attachment.name.as_deref().and_then(safe_component);
    match given {
        Some(name) => match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() && ext.len() <= 10 => {
                (format!("{kind_stem}-{stem}"), ext.to_string())
            }
            _ => (format!("{kind_stem}-{name}"), String::new()),
        },
        None => (
            kind_stem.to_string(),
            from_path.unwrap_or_else(|| kind_ext.to_string()),
        ),
    }
}

/// The last path component of an untrusted name, reduced to letters,
/// digits, `.`, `-` and `_` (others become `_`), without leading dots, at
/// most 64 characters; `None` when nothing is left.
pub fn safe_component(name: &str) -> Option<String> {
    let last = name
        .rsplit(['/', '\\'])
        .find(|part| !part.is_empty() && *part != "." && *part != "..")?;
    let cleaned: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    let cleaned: String = cleaned.chars().take(64).collect();
    (!cleaned.is_empty() && cleaned.chars().any(|c| c != '_')).then_some(cleaned)
}

/// `12.3 MB`, `5 KB`, `12 bytes`.
pub(crate) fn megabytes(bytes: u64) -> String {
    if bytes < 1_000 {
        return format!("{bytes} bytes");
    }
    if bytes < 1_000_000 {
        return format!("{} KB", bytes / 1_000);
    }
    let mb = bytes as f64 / 1_000_000.0;
    if mb >= 10.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{mb:.1} MB")
    }
}

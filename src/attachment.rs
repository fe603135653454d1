//! A file a user's message carried, as Telegram describes it: read from the
//! update by the intake (`telegram::files::attachments`), kept with the
//! message's inbox row (so a recovered message fetches it again), fetched
//! into the working directory by `telegram::files`.

use serde::{Deserialize, Serialize};

/// What kind of file a message carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A photo (its largest size).
    Photo,
    /// A document (any file sent as a file).
    Document,
    /// A music file.
    Audio,
    /// A video.
    Video,
    /// An animation (GIF or soundless video).
    Animation,
    /// A voice note.
    Voice,
    /// A round video note.
    VideoNote,
}

impl FileKind {
    /// How the agent and the chat read it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Photo => "photo",
            Self::Document => "document",
            Self::Audio => "audio",
            Self::Video => "video",
            Self::Animation => "animation",
            Self::Voice => "voice note",
            Self::VideoNote => "video note",
        }
    }
}

/// A file a message carried, as Telegram describes it (kept in the inbox
/// row, so a recovered message fetches it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// What it is.
    pub kind: FileKind,
    /// Telegram's id, for `getFile`.
    pub file_id: String,
    /// The sender's file name, when there was one (untrusted).
    pub name: Option<String>,
    /// Its size in bytes as Telegram announced it (0: unknown).
    pub size: u64,
}

//! `[progress]`: what the chat sees while a turn works.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Keep, Stream};

/// `[progress]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressConfig {
    /// A turn running longer than this gets a status message.
    #[serde(with = "humantime_serde")]
    pub after: Duration,
    /// The shortest time between two edits of the status or the preview.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// What becomes of the status message at the end of the turn.
    pub keep: Keep,
    /// How an answer shows while it is written.
    pub stream: Stream,
    /// An answer still being written this long after its first text gets a
    /// preview; one finished sooner is sent whole, as one message.
    #[serde(with = "humantime_serde")]
    pub preview_after: Duration,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        Self {
            after: Duration::from_secs(3),
            interval: Duration::from_secs(2),
            keep: Keep::Delete,
            stream: Stream::Edit,
            preview_after: Duration::from_secs(1),
        }
    }
}

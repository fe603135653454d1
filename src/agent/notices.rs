//! What an agent's driver tells the chat in front of an answer. (The
//! chat's own notices are `chat::notices`; the agent sits below the chat
//! and cannot reach them.)

/// Told in front of the answer when the stored conversation could not be
/// loaded.
pub(crate) const NOT_RESUMED: &str =
    "ℹ️ The earlier conversation could not be resumed; this is a new one.";

/// Told in front of the answer when the agent cannot load sessions at all.
pub(crate) const CANNOT_RESUME: &str =
    "ℹ️ This agent cannot resume an earlier conversation; this is a new one.";

//! Identifiers that travel between actors. Chats and users are teloxide's
//! own [`ChatId`](teloxide::types::ChatId) and [`UserId`](teloxide::types::UserId);
//! turns are numbered here.

/// A turn, numbered from 1 within one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TurnId(pub u64);

impl TurnId {
    /// The number, for logs and the state file.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for TurnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq<u64> for TurnId {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

impl From<u64> for TurnId {
    fn from(n: u64) -> Self {
        Self(n)
    }
}

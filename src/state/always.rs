//! "Always in this chat": the rules a conversation granted, each kept for
//! the conversation (chat and topic) and the project it was in.

use rusqlite::params;

use super::{StateError, Store, now_ms};
use crate::ids::Conversation;

/// What "always in this chat" lets run without asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AlwaysRule {
    /// Every call of this tool (any tool but Bash).
    Tool(String),
    /// Bash running exactly this command, byte for byte. (Earlier
    /// versions stored the command with its whitespace runs collapsed;
    /// compared byte for byte, such a rule runs only the command it reads
    /// as, which is what the chat was shown.)
    BashCommand(String),
    /// Exactly this request, byte for byte (an ACP request: its title and
    /// everything it says it runs or writes, as JSON).
    Request(String),
}

impl AlwaysRule {
    /// The stored kind and value.
    pub(super) fn stored(&self) -> (&'static str, &str) {
        match self {
            Self::Tool(name) => ("tool", name),
            Self::BashCommand(command) => ("bash_command", command),
            Self::Request(request) => ("request", request),
        }
    }

    /// The rule a stored row holds; `None` for a kind this build does not know.
    pub(super) fn from_stored(kind: &str, value: String) -> Option<Self> {
        match kind {
            "tool" => Some(Self::Tool(value)),
            "bash_command" => Some(Self::BashCommand(value)),
            "request" => Some(Self::Request(value)),
            _ => None,
        }
    }
}

/// An "always" rule and who granted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlwaysGrant {
    /// What runs without asking.
    pub rule: AlwaysRule,
    /// The Telegram user who pressed "Always in this chat".
    pub granted_by: i64,
}

impl Store {
    /// Remembers that `rule` runs without asking in the conversation `to`
    /// while it is in `project` (empty: none), granted by `granted_by`
    /// (the first grant of a rule is kept).
    pub fn allow_always(
        &self,
        to: Conversation,
        project: &str,
        rule: &AlwaysRule,
        granted_by: i64,
    ) -> Result<(), StateError> {
        let (kind, value) = rule.stored();
        self.lock().execute(
            "INSERT INTO always_rules (chat_id, topic, project, kind, value, granted_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(chat_id, topic, project, kind, value) DO NOTHING",
            params![to.chat.0, to.topic_number(), project, kind, value, granted_by, now_ms()],
        )?;
        Ok(())
    }

    /// The "always" rules of the conversation `to` in `project`, oldest
    /// first.
    pub fn always_rules(
        &self,
        to: Conversation,
        project: &str,
    ) -> Result<Vec<AlwaysGrant>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT kind, value, granted_by FROM always_rules
             WHERE chat_id = ?1 AND topic = ?2 AND project = ?3
             ORDER BY created_at, kind, value",
        )?;
        let rows = stmt.query_map(params![to.chat.0, to.topic_number(), project], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        let mut grants = Vec::new();
        for row in rows {
            let (kind, value, granted_by) = row?;
            if let Some(rule) = AlwaysRule::from_stored(&kind, value) {
                grants.push(AlwaysGrant { rule, granted_by });
            }
        }
        Ok(grants)
    }

    /// Forgets the "always" rules of the conversation `to` in `project`;
    /// returns how many there were.
    pub fn clear_always(&self, to: Conversation, project: &str) -> Result<usize, StateError> {
        Ok(self.lock().execute(
            "DELETE FROM always_rules WHERE chat_id = ?1 AND topic = ?2 AND project = ?3",
            params![to.chat.0, to.topic_number(), project],
        )?)
    }
}

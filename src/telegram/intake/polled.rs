//! What `getUpdates` answers, read with what teloxide leaves out: whether
//! a topic the user started in a private chat came without a title
//! (`forum_topic_created.is_name_implicit`, Bot API 9.4), so the bot
//! names it from its first message.

use serde::{Deserialize, Deserializer, Serialize};
use teloxide::payloads::GetUpdates;
use teloxide::requests::Payload;
use teloxide::types::Update;

/// `getUpdates`, answered as [`PolledUpdate`] updates.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub(super) struct PollUpdates(pub(super) GetUpdates);

impl Payload for PollUpdates {
    type Output = Vec<PolledUpdate>;

    const NAME: &'static str = "getUpdates";
}

/// One update, and whether it tells of a topic started without a title.
#[derive(Debug)]
pub(super) struct PolledUpdate {
    /// The update as teloxide reads it.
    pub(super) update: Update,
    /// Its message is a `forum_topic_created` whose name the user did not
    /// give (`is_name_implicit`).
    pub(super) unnamed_topic: bool,
}

impl<'de> Deserialize<'de> for PolledUpdate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = serde_json::Value::deserialize(deserializer)?;
        let unnamed_topic = raw
            .pointer("/message/forum_topic_created/is_name_implicit")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        // Read from a borrow: teloxide reads an update's kind from a
        // borrowed key first, which an owned value cannot give.
        let update = Update::deserialize(&raw).map_err(serde::de::Error::custom)?;
        Ok(Self {
            update,
            unnamed_topic,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::PolledUpdate;

    fn created(implicit: Option<bool>) -> serde_json::Value {
        let mut topic = json!({"name": "New Thread", "icon_color": 7_322_096});
        if let Some(implicit) = implicit {
            topic["is_name_implicit"] = implicit.into();
        }
        json!({"update_id": 4, "message": {
            "message_id": 9, "message_thread_id": 9, "is_topic_message": true, "date": 0,
            "chat": {"id": 5, "type": "private", "first_name": "a"},
            "from": {"id": 5, "is_bot": false, "first_name": "a"},
            "forum_topic_created": topic,
        }})
    }

    #[test]
    fn a_topic_created_without_a_title_is_told_apart() {
        let read = |v| serde_json::from_value::<PolledUpdate>(v).expect("an update");
        assert!(read(created(Some(true))).unnamed_topic);
        assert!(!read(created(Some(false))).unnamed_topic);
        assert!(!read(created(None)).unnamed_topic);
        let polled = read(created(Some(true)));
        assert_eq!(polled.update.id.0, 4);
        assert!(matches!(
            polled.update.kind,
            teloxide::types::UpdateKind::Message(_)
        ));
    }
}

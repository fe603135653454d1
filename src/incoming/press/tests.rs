use super::*;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// One button of every kind (and every list and choice).
fn every_button() -> Vec<Callback> {
    let approval = |choice| {
        Callback::Approval(Approval {
            token: TOKEN.into(),
            choice,
        })
    };
    let pick = |kind, list, entry| Callback::Pick(Pick { kind, list, entry });
    vec![
        Callback::Unschedule(0),
        Callback::Unschedule(i64::MAX),
        pick(ListKind::Models, 1, 0),
        pick(ListKind::Sessions, 42, 3),
        pick(ListKind::Projects, u64::MAX, 9),
        approval(Choice::Allow),
        approval(Choice::Always),
        approval(Choice::Deny),
        approval(Choice::Option {
            question: 1,
            option: 2,
        }),
    ]
}

#[test]
fn no_prefix_starts_another() {
    for (i, (kind, prefix)) in KINDS.iter().enumerate() {
        assert!(!prefix.is_empty(), "{kind:?} has no prefix");
        assert_eq!(kind.prefix(), *prefix);
        for (j, (other, longer)) in KINDS.iter().enumerate() {
            assert!(
                i == j || !longer.starts_with(prefix),
                "{kind:?}'s prefix {prefix:?} starts {other:?}'s {longer:?}"
            );
        }
    }
}

#[test]
fn every_kind_is_written_with_its_prefix_and_read_back() {
    let mut kinds = Vec::new();
    for button in every_button() {
        let data = button.data();
        let kind = button.kind().expect("a kind");
        assert!(data.starts_with(kind.prefix()), "{data:?} for {kind:?}");
        assert!(data.len() <= 64, "{data:?}: Telegram takes 64 bytes");
        assert_eq!(Callback::parse(&data), button, "{data:?}");
        kinds.push(kind);
    }
    for (kind, _) in KINDS {
        assert!(kinds.contains(&kind), "{kind:?} is not tried");
    }
}

#[test]
fn the_data_of_each_shape_is_as_shown() {
    let pick = Pick {
        kind: ListKind::Sessions,
        list: 42,
        entry: 3,
    };
    assert_eq!(pick.data(), "pick:s42:3");
    assert_eq!(Callback::Unschedule(7).data(), "unsched:7");
    let allow = Callback::Approval(Approval {
        token: TOKEN.into(),
        choice: Choice::Allow,
    });
    assert_eq!(allow.data(), format!("ap:{TOKEN}:y"));
    let option = Callback::Approval(Approval {
        token: TOKEN.into(),
        choice: Choice::Option {
            question: 0,
            option: 5,
        },
    });
    assert_eq!(option.data(), format!("aq:{TOKEN}:0:5"));
    assert_eq!(Callback::Unknown.data(), "");
}

#[test]
fn anything_else_is_unknown() {
    let t = TOKEN;
    for bad in [
        String::new(),
        "pick:".into(),
        "pick:s42".into(),
        "pick:x42:3".into(),
        "pick:s:3".into(),
        "pick:s42:".into(),
        "pick:s42:-1".into(),
        "pick:s42:+1".into(),
        "pick:s042:1".into(),
        "pick:s42:3:4".into(),
        "pick:s99999999999999999999:1".into(),
        "pick:é1:1".into(),
        "unsched:".into(),
        "unsched:-4".into(),
        "unsched:+4".into(),
        "unsched:04".into(),
        "unsched:4 ".into(),
        "unsched:9223372036854775808".into(),
        "unschedule:7".into(),
        "tool:abc:y".into(),
        format!("ap:{t}:x"),
        format!("ap:{t}:y:1"),
        format!("ap:{t}"),
        format!("aq:{t}:1"),
        format!("aq:{t}:1:2:3"),
        format!("aq:{t}:01:2"),
        "ap:short:y".into(),
        "ap:nothex:y".into(),
        format!("zz:{t}:y"),
        format!("ap:{}:y", "g".repeat(32)),
        format!("ap:{}:y", t.to_uppercase()),
        format!("AP:{t}:y"),
    ] {
        assert_eq!(Callback::parse(&bad), Callback::Unknown, "{bad:?}");
    }
}

#[test]
fn a_press_is_read_with_its_conversation_presser_and_message() {
    let query: CallbackQuery = serde_json::from_value(serde_json::json!({
        "id": "cb1",
        "from": {"id": 5, "is_bot": false, "first_name": "Ann", "username": "ann"},
        "chat_instance": "i",
        "data": "unsched:3",
        "message": {
            "message_id": 9, "date": 1, "message_thread_id": 4, "is_topic_message": true,
            "chat": {"id": -100, "type": "supergroup", "title": "g", "is_forum": true},
            "from": {"id": 1, "is_bot": true, "first_name": "bot"},
            "text": "q",
        },
    }))
    .expect("a callback query");
    let press = Press::read(&query, Topics::default());
    assert_eq!(press.id, "cb1");
    assert_eq!(
        press.to,
        Conversation::new(ChatId(-100), Some(teloxide::types::ThreadId(MessageId(4))))
    );
    assert_eq!(press.from, UserId(5));
    assert_eq!(press.name, "@ann");
    assert_eq!(press.message, Some(MessageId(9)));
    assert_eq!(press.data, Callback::Unschedule(3));
    // Without its message or data: the presser's private chat; unknown.
    let query: CallbackQuery = serde_json::from_value(serde_json::json!({
        "id": "cb2",
        "from": {"id": 5, "is_bot": false, "first_name": "Ann"},
        "chat_instance": "i",
    }))
    .expect("a callback query");
    let press = Press::read(&query, Topics::default());
    assert_eq!(press.to, Conversation::from(ChatId(5)));
    assert_eq!((press.name.as_str(), press.message), ("Ann", None));
    assert_eq!(press.data, Callback::Unknown);
}

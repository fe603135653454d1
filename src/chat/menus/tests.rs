use teloxide::types::ChatId;

use super::*;

#[test]
fn only_the_latest_list_of_a_kind_is_live() {
    let mut lists = Lists::default();
    let to: Conversation = ChatId(1).into();
    let old = lists.show(to, ListKind::Models, vec!["a".into(), "b".into()]);
    let new = lists.show(to, ListKind::Models, vec!["c".into()]);
    let pick = |list, entry| Pick {
        kind: ListKind::Models,
        list,
        entry,
    };
    assert_eq!(lists.chosen(to, pick(old, 0)), None, "an older list");
    assert_eq!(lists.chosen(to, pick(new, 0)), Some("c"));
    assert_eq!(lists.chosen(to, pick(new, 1)), None, "no such entry");
    assert_eq!(
        lists.chosen(ChatId(2).into(), pick(new, 0)),
        None,
        "another chat"
    );
    let sessions = Pick {
        kind: ListKind::Sessions,
        ..pick(new, 0)
    };
    assert_eq!(lists.chosen(to, sessions), None, "another kind");
    lists.close(to, ListKind::Models);
    assert_eq!(lists.chosen(to, pick(new, 0)), None, "used");
}

#[test]
fn a_choice_the_list_no_longer_has_runs_the_configured_model() {
    let models = Models {
        default: "sonnet".into(),
        listed: vec!["opus".into(), "Haiku".into()],
    };
    assert_eq!(models.find("haiku"), Some("Haiku"));
    assert_eq!(models.find("gpt"), None);
    assert_eq!(models.allowed(Some("opus".into())).as_deref(), Some("opus"));
    assert_eq!(models.allowed(Some("gone".into())), None);
    assert_eq!(models.running(Some("gone")), "sonnet");
    assert_eq!(Models::default().running(None), "the agent's default model");
}

#[test]
fn live_lists_are_bounded() {
    let mut lists = Lists::default();
    let first: Conversation = ChatId(0).into();
    let kept = lists.show(first, ListKind::Models, vec!["a".into()]);
    for chat in 1..MAX_LISTS as i64 {
        lists.show(ChatId(chat).into(), ListKind::Models, vec!["a".into()]);
    }
    let pick = Pick {
        kind: ListKind::Models,
        list: kept,
        entry: 0,
    };
    assert_eq!(
        lists.chosen(first, pick),
        Some("a"),
        "still within the bound"
    );
    lists.show(ChatId(-1).into(), ListKind::Models, vec!["a".into()]);
    assert_eq!(
        lists.chosen(first, pick),
        None,
        "past it, the old lists expire"
    );
    assert!(lists.live.len() <= MAX_LISTS);
}

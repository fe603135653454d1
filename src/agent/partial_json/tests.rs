use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Feeds `pieces` and concatenates the outputs.
fn extract(pieces: &[&str]) -> String {
    let mut field = StringField::new("text");
    pieces.iter().map(|p| field.push(p)).collect()
}

/// Feeds `json` one byte at a time, returning each output.
fn bytewise(json: &str) -> Vec<String> {
    let mut field = StringField::new("text");
    json.as_bytes()
        .iter()
        .map(|b| field.push_bytes(std::slice::from_ref(b)))
        .collect()
}

#[test]
fn the_text_grows_piece_by_piece() {
    let mut field = StringField::new("text");
    assert_eq!(field.push("{\"te"), "");
    assert_eq!(field.push("xt\":\"Hel"), "Hel");
    assert_eq!(field.push("lo wor"), "lo wor");
    assert!(!field.is_complete());
    assert_eq!(field.push("ld\"}"), "ld");
    assert!(field.is_complete());
    assert_eq!(field.push(" trailing \"text\": \"no\""), "");
}

#[test]
fn every_escape_split_at_every_byte_decodes() {
    let json = r#"{"text": "a\nb\"c\\d\/e\bf\fg\rh\ti\u00e9j\ud83e\udd80k"}"#;
    let want = "a\nb\"c\\d/e\u{8}f\u{c}g\rh\ti\u{e9}j🦀k";
    for cut in 0..=json.len() {
        let (a, b) = json.split_at(cut);
        assert_eq!(extract(&[a, b]), want, "cut at {cut}");
    }
    assert_eq!(bytewise(json).concat(), want);
}

#[test]
fn a_surrogate_pair_is_emitted_only_once_both_halves_arrived() {
    let mut field = StringField::new("text");
    assert_eq!(field.push(r#"{"text":"x\ud83e"#), "x");
    assert_eq!(field.push(r"\ud"), "");
    assert_eq!(field.push("d8"), "");
    assert_eq!(field.push("0y\""), "🦀y");
}

#[test]
fn lone_and_broken_surrogates_become_replacement_characters() {
    assert_eq!(extract(&[r#"{"text":"a\ud83eb"}"#]), "a\u{FFFD}b");
    assert_eq!(extract(&[r#"{"text":"a\udd80b"}"#]), "a\u{FFFD}b");
    assert_eq!(extract(&[r#"{"text":"a\ud83e"}"#]), "a\u{FFFD}");
    assert_eq!(extract(&[r#"{"text":"a\ud83e\n"}"#]), "a\u{FFFD}\n");
    assert_eq!(
        extract(&[r#"{"text":"\ud83e\ud83e\udd80"}"#]),
        "\u{FFFD}🦀",
        "a high surrogate after a high surrogate"
    );
    assert_eq!(extract(&[r#"{"text":"\ud83e\u0041"}"#]), "\u{FFFD}A");
    assert_eq!(extract(&[r#"{"text":"\u12x4"}"#]), "\u{FFFD}x4");
}

#[test]
fn utf8_split_across_byte_pieces_is_held_back_until_whole() {
    let json = r#"{"text":"é🦀ж"}"#;
    let outputs = bytewise(json);
    assert_eq!(outputs.concat(), "é🦀ж");
    assert!(
        outputs.iter().all(|o| o.chars().count() <= 1),
        "one character at a time, never a broken one: {outputs:?}"
    );
    let mut field = StringField::new("text");
    assert_eq!(field.push_bytes(b"{\"text\":\"\xF0\x9F"), "");
    assert_eq!(field.push_bytes(b"\xA6\x80\xFF\""), "🦀\u{FFFD}");
}

#[test]
fn only_the_top_level_field_counts() {
    let json = r#" { "title" : "the \"text\": no", "meta": {"text": "nested", "a": ["text", {"text": "x"}]},
            "list": [1, "text", {"text": "y"}], "n": -1.5e3, "ok": true, "none": null,
            "text" : "yes" , "after": {"text": "z"} } "#;
    assert_eq!(extract(&[json]), "yes");
    assert_eq!(bytewise(json).concat(), "yes");
    assert_eq!(extract(&[r#"{"text": 5, "x": "text"}"#]), "");
    assert_eq!(extract(&[r#"{"text": {"text": "inner"}}"#]), "");
    assert_eq!(extract(&[r#"{"texts": "no", "tex": "no"}"#]), "");
    assert_eq!(extract(&[r#"["text", "text"]"#]), "");
    assert_eq!(extract(&[r#""text": "text""#]), "");
    assert_eq!(
        extract(&[r#"{"text": "first", "text": "second"}"#]),
        "first",
        "a duplicate key is ignored"
    );
    assert_eq!(extract(&[r#"{"te\u0078t": "escaped key"}"#]), "escaped key");
    assert_eq!(extract(&[r#"{"a": "x", "text": "v"}"#]), "v");
}

#[test]
fn malformed_input_never_panics() {
    for input in [
        "",
        "}}}]]]",
        "{\"text\":\"\\",
        "{\"text\":\"\\u",
        "{\"text\":\"\\uD8",
        "{\"text\"\"oops\"}",
        "{{{{\"text\":\"deep\"}}}}",
        "\"\\\"",
    ] {
        let mut field = StringField::new("text");
        let _ = field.push(input);
        let _ = field.push_bytes(&[0xFF, 0xC3]);
        let _ = field.push("\"}");
    }
}

#[test]
fn the_state_does_not_grow_with_the_input() {
    let mut field = StringField::new("text");
    let _ = field.push("{\"");
    let _ = field.push(&"k".repeat(100_000));
    let _ = field.push("\": {\"x\": \"");
    let _ = field.push(&"v".repeat(100_000));
    assert!(field.key.len() <= "text".len() + 1);
    assert!(field.out.is_empty());
    assert_eq!(field.push("\"}, \"text\": \"ok\"}"), "ok");
}

/// A short lowercase key (sometimes `text` itself, which is skipped).
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(prop::char::range('a', 'z'), 0..6).prop_map(String::from_iter),
        Just("text".to_string()),
    ]
}

/// A JSON value of limited depth, strings from any characters.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<String>().prop_map(Value::String),
        Just(json!("text")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![any::<String>(), Just("text".to_string())],
                    inner
                ),
                0..4
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_object_cut_anywhere_yields_exactly_its_text(
        text in any::<String>(),
        others in prop::collection::vec((key(), value()), 0..5),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        pretty in any::<bool>(),
    ) {
        let mut object = serde_json::Map::new();
        for (key, value) in others {
            if key != "text" {
                object.insert(key, value);
            }
        }
        object.insert("text".into(), Value::String(text.clone()));
        let json = if pretty {
            serde_json::to_string_pretty(&object).unwrap()
        } else {
            serde_json::to_string(&object).unwrap()
        };
        let boundaries: Vec<usize> = json.char_indices().map(|(i, _)| i).collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| boundaries[c.index(boundaries.len())]).collect();
        at.push(json.len());
        at.sort_unstable();
        let mut field = StringField::new("text");
        let mut got = String::new();
        let mut from = 0;
        for to in at {
            got.push_str(&field.push(&json[from..to]));
            from = to;
        }
        prop_assert_eq!(got, text);
        prop_assert!(field.is_complete());
    }

    #[test]
    fn escaped_non_ascii_cut_at_any_byte_yields_the_text(
        text in any::<String>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        // Every non-ASCII character as `\uXXXX` (pairs for astral ones).
        let mut escaped = String::from("{\"text\":\"");
        for c in text.chars() {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                escaped.push_str(&format!("\\u{unit:04x}"));
            }
        }
        escaped.push_str("\"}");
        let bytes = escaped.as_bytes();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        at.push(bytes.len());
        at.sort_unstable();
        let mut field = StringField::new("text");
        let mut got = String::new();
        let mut from = 0;
        for to in at {
            got.push_str(&field.push_bytes(&bytes[from..to]));
            from = to;
        }
        prop_assert_eq!(got, text);
    }
}

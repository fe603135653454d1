//! The chat commands a newcomer meets first: `/start` and `/help` say what
//! the bot is, what it takes here and which commands the asker may use; an
//! unknown command is answered with a pointer to `/help` and never reaches
//! the agent.

mod support;

use support::bot_api::files::{supergroup, text_message};
use support::*;
use turnstile::agent::Scenario;
use turnstile::events::BotEvent;

/// The commands only admins may use.
const ADMIN_ONLY: [&str; 3] = ["/status", "/restart", "/handoff"];
/// The commands everyone may use.
const EVERYONE: [&str; 4] = ["/stop", "/new", "/permissions", "/help"];

#[actix_rt::test]
async fn an_unknown_command_points_to_help_and_reaches_no_agent() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(USER, USER, "/frobnicate");
    h.say(USER, USER, "/Frobnicate@turnstile_bot with words");
    // A message afterwards proves both commands were handled before it.
    h.say(USER, USER, "hi");
    let (turn, _, _) = h.turn_ended(USER, 1).await;
    assert_eq!(turn, 1, "the first turn is the plain message's");
    let texts = h.api.wait_for_texts(USER, 3, SOON).await;
    let pointer = "There is no /frobnicate command here; /help lists the commands.";
    assert_eq!(texts, [pointer, pointer, "echo: hi"]);
    assert_eq!(
        h.backend.opened(),
        1,
        "only the plain message opened a session"
    );
    let started: Vec<_> = h
        .seen
        .iter()
        .filter(|e| matches!(e, BotEvent::TurnStarted { .. }))
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(h.unfinished().await.is_empty());
}

#[actix_rt::test]
async fn text_that_only_looks_like_a_command_still_reaches_the_agent() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(USER, USER, "/usr/bin/env is missing");
    h.turn_ended(USER, 1).await;
    assert_eq!(h.texts(USER), ["echo: /usr/bin/env is missing"]);
}

#[actix_rt::test]
async fn an_unknown_command_in_a_group_gets_the_pointer_too() {
    const GROUP: i64 = -100_321;
    let h = Harness::start(Scenario::default(), &[]).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "/frobnicate@turnstile_bot",
    ));
    let texts = h.api.wait_for_texts(GROUP, 1, SOON).await;
    assert!(texts[0].contains("/help"), "{texts:?}");
    assert_eq!(h.backend.opened(), 0);
}

/// `/start` and `/help` from `user` in their private chat.
async fn start_and_help(h: &Harness, user: i64) -> (String, String) {
    h.say(user, user, "/start");
    let start = h.api.wait_for_texts(user, 1, SOON).await.remove(0);
    h.say(user, user, "/help");
    let help = h.api.wait_for_texts(user, 2, SOON).await.remove(1);
    (start, help)
}

#[actix_rt::test]
async fn start_greets_a_user_with_what_the_bot_does_and_the_users_commands() {
    let h = Harness::start(Scenario::default(), &[]).await;
    let (start, help) = start_and_help(&h, USER).await;
    assert!(start.contains("AI agent"), "says what the bot is: {start}");
    assert!(
        start.contains("text, photos and files (up to 20 MiB)"),
        "says what it takes: {start}"
    );
    assert!(
        start.contains("voice notes reach the agent as audio files"),
        "no transcriber is configured: {start}"
    );
    for text in [&start, &help] {
        for command in EVERYONE {
            assert!(text.contains(command), "{command} missing from {text}");
        }
        for command in ADMIN_ONLY {
            assert!(!text.contains(command), "{command} shown to a user: {text}");
        }
    }
    assert!(help.starts_with("Send a message"), "{help}");
    assert!(help.len() < start.len(), "/help is the shorter one");
    assert_eq!(h.backend.opened(), 0, "neither reached the agent");
}

#[actix_rt::test]
async fn start_shows_an_admin_the_admin_commands_and_says_voice_is_transcribed() {
    let h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_FILES_TRANSCRIBE", "whisper,{file}")],
    )
    .await;
    let (start, help) = start_and_help(&h, ADMIN).await;
    assert!(
        start.contains("voice notes are transcribed for the agent"),
        "{start}"
    );
    for text in [&start, &help] {
        for command in EVERYONE.iter().chain(&ADMIN_ONLY) {
            assert!(text.contains(command), "{command} missing from {text}");
        }
    }
    assert!(start.contains("Admin commands:\n/status"), "{start}");
    assert!(
        help.contains("/restart: drain and restart the bot (admins)"),
        "{help}"
    );
}

#[actix_rt::test]
async fn start_in_a_group_says_how_to_address_the_bot() {
    const GROUP: i64 = -100_322;
    let h = Harness::start(Scenario::default(), &[]).await;
    h.api
        .push_message(text_message(supergroup(GROUP, false), USER, "/start"));
    let texts = h.api.wait_for_texts(GROUP, 1, SOON).await;
    assert!(
        texts[0].contains("mention @turnstile_bot or reply to its messages"),
        "{texts:?}"
    );
}

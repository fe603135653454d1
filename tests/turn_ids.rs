//! Turn ids go on across restarts of the binary on one state file: after a
//! clean stop from the next number, after a `kill -9` above every id the
//! killed process used; no id is ever used twice, so a turn can be grepped
//! across restarts.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use support::process::BotProcess;
use support::*;

/// Each `turn_id=N` in `log`.
fn turn_ids(log: &str) -> BTreeSet<u64> {
    log.split("turn_id=")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Starts the binary on `dir`'s state file, runs one echo turn of
/// "message `n`" and returns the process and the turn ids it
/// logged, once it logged one.
async fn run_one_turn(api: &FakeBotApi, dir: &Path, n: usize) -> (BotProcess, BTreeSet<u64>) {
    let log = dir.join(format!("bot-{n}.log"));
    let env = [(
        "TURNSTILE_STATE_PATH",
        dir.join("state.db").display().to_string(),
    )];
    let bot = BotProcess::spawn(api, &log, &env);
    api.push_text(USER, USER, &format!("message {n}"));
    // Counted by content: a message a killed process left is answered again.
    let echo = format!("echo: message {n}");
    eventually("the echo", Duration::from_secs(30), || {
        let texts = api.texts_to(USER);
        let answered = texts.contains(&echo);
        async move {
            if answered {
                Ok(())
            } else {
                Err(format!("{texts:?}"))
            }
        }
    })
    .await;
    let ids = eventually("the turn's id in the log", Duration::from_secs(10), || {
        let ids = turn_ids(&bot.log_text());
        let text = bot.log_text();
        async move { if ids.is_empty() { Err(text) } else { Ok(ids) } }
    })
    .await;
    (bot, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_ids_go_on_across_a_clean_restart_and_a_kill_9() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().expect("a temp dir");

    let (mut first, _) = run_one_turn(&api, dir.path(), 1).await;
    first.signal(libc::SIGTERM);
    assert!(first.exit().await.success(), "{}", first.log_text());
    let first_ids = turn_ids(&first.log_text());

    let (mut second, _) = run_one_turn(&api, dir.path(), 2).await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let second_ids = turn_ids(&second.log_text());
    let last_first = *first_ids.last().expect("the first process logged a turn");
    assert_eq!(
        second_ids.first().copied(),
        Some(last_first + 1),
        "after a clean stop the ids go on from the last: {first_ids:?} then {second_ids:?}"
    );

    let (mut killed, killed_ids) = run_one_turn(&api, dir.path(), 3).await;
    killed.signal(libc::SIGKILL);
    let _ = killed.exit().await;
    let killed_ids: BTreeSet<u64> = killed_ids
        .union(&turn_ids(&killed.log_text()))
        .copied()
        .collect();

    let (mut after, _) = run_one_turn(&api, dir.path(), 4).await;
    after.signal(libc::SIGTERM);
    assert!(after.exit().await.success(), "{}", after.log_text());
    let after_ids = turn_ids(&after.log_text());
    let earlier: BTreeSet<u64> = first_ids
        .iter()
        .chain(&second_ids)
        .chain(&killed_ids)
        .copied()
        .collect();
    let highest = *earlier.last().expect("ids before");
    assert!(
        after_ids.iter().all(|id| *id > highest),
        "after a kill -9 every id is above the earlier ones: {earlier:?} then {after_ids:?}"
    );
}

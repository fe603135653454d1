//! Files in and out through the real teloxide client and the fake Bot API:
//! photos, documents, voice notes (transcribed or not), albums, the size
//! limit, hostile file names, `send_file` with its path checks, both raced
//! by a loop that swaps a directory for a symlink, and the transcriber's
//! environment (a plain test re-runs this binary's `#[ignore]`d inner test
//! with secrets in its environment, see [`run_inner`]).

mod support;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::bot_api::files::{
    captioned, document, in_album, photo, private, supergroup, text_message, voice,
};
use support::*;
use turnstile::agent::{Scenario, Step};

/// A bot whose conversations' workdirs are under a temp dir.
struct FileBot {
    h: Harness,
    dir: tempfile::TempDir,
}

impl FileBot {
    async fn start(scenario: Scenario, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workdir = dir.path().join("ws").join("{chat}");
        let workdir = workdir.display().to_string();
        // The transcriber runs under `agent.sandbox`, bubblewrap by default:
        // these tests run it plainly (needing no bwrap) unless `env` asks.
        let mut vars = vec![
            ("TURNSTILE_AGENT_WORKDIR", workdir.as_str()),
            ("TURNSTILE_AGENT_SANDBOX", "none"),
        ];
        vars.extend_from_slice(env);
        let h = Harness::start(scenario, &vars).await;
        Self { h, dir }
    }

    /// The workdir of a conversation (`1001`, `-100_7`).
    fn workdir(&self, key: &str) -> PathBuf {
        self.dir.path().join("ws").join(key)
    }

    /// The names in a conversation's inbox, sorted.
    fn inbox(&self, key: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.workdir(key).join("inbox"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Waits for the `n`-th text to `chat` and returns it.
    async fn nth_text(&self, chat: i64, n: usize) -> String {
        self.h.api.wait_for_texts(chat, n, SOON).await[n - 1].clone()
    }
}

/// `inbox/<name>` mentioned in `text`, as a file name.
fn saved_name(text: &str) -> String {
    let at = text.find("inbox/").expect("the text names an inbox file") + "inbox/".len();
    text[at..]
        .split([']', ';'])
        .next()
        .unwrap()
        .trim()
        .to_string()
}

fn every_file_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir(root) {
        for entry in dir.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                out.extend(every_file_under(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[actix_rt::test]
async fn a_photo_with_a_caption_reaches_the_agent_with_its_file() {
    let bot = FileBot::start(Scenario::default(), &[]).await;
    let bytes = b"\xff\xd8\xff fake jpeg".to_vec();
    bot.h.api.add_file("big-photo", "photos/file_1.jpg", &bytes);
    bot.h.api.push_message(captioned(
        photo(private(USER), USER, "big-photo", bytes.len() as u64),
        "what is this?",
    ));
    let text = bot.nth_text(USER, 1).await;
    assert!(text.starts_with("echo: [photo saved as inbox/"), "{text}");
    assert!(text.ends_with("\n\nwhat is this?"), "{text}");
    let name = saved_name(&text);
    assert!(name.ends_with("-photo.jpg"), "{name}");
    let saved = bot.workdir(&USER.to_string()).join("inbox").join(&name);
    assert_eq!(
        std::fs::read(&saved).unwrap(),
        bytes,
        "the largest size was fetched"
    );
    let gets = bot.h.api.calls_of("getFile");
    assert_eq!(gets.len(), 1);
    assert_eq!(gets[0].params["file_id"], "big-photo");
}

/// Saving a received file (made, written, synced to disk) happens off the
/// actors' thread: a slow disk holds up no other chat. (On a loaded
/// machine an fsync there took up to 150 ms, every chat waiting.)
#[actix_rt::test]
async fn a_slow_disk_while_a_file_is_saved_holds_up_no_other_chat() {
    const STALL: Duration = Duration::from_secs(3);
    let bot = FileBot::start(Scenario::default(), &[]).await;
    let bytes = b"notes".to_vec();
    bot.h
        .api
        .add_file("slow-doc", "documents/notes.txt", &bytes);
    bot.h.bot.files.stall_next_write(STALL);
    let stalled = Instant::now();
    bot.h.api.push_message(captioned(
        document(
            private(USER),
            USER,
            "slow-doc",
            "notes.txt",
            bytes.len() as u64,
        ),
        "read this",
    ));
    bot.h.api.wait_for_call("getFile", SOON).await;
    bot.h.api.push_text(1002, 1002, "meanwhile");
    let answered = bot.h.api.wait_for_texts(1002, 1, SOON).await;
    assert_eq!(answered, vec!["echo: meanwhile"]);
    assert!(
        stalled.elapsed() < STALL,
        "another chat was answered only {:?} after the file's write stalled",
        stalled.elapsed()
    );
    let text = bot.nth_text(USER, 1).await;
    assert!(text.starts_with("echo: [document"), "{text}");
    assert!(
        stalled.elapsed() >= STALL,
        "the stalled write was waited for"
    );
}

#[actix_rt::test]
async fn a_document_named_to_escape_lands_in_the_inbox_and_overwrites_nothing() {
    let bot = FileBot::start(Scenario::default(), &[]).await;
    bot.h.api.add_file("d1", "documents/file_2", b"first");
    bot.h.api.add_file("d2", "documents/file_3", b"second");
    let me = private(USER);
    bot.h
        .api
        .push_message(document(me.clone(), USER, "d1", "../../etc/passwd", 5));
    let first = bot.nth_text(USER, 1).await;
    bot.h
        .api
        .push_message(document(me, USER, "d2", "../../etc/passwd", 6));
    let second = bot.nth_text(USER, 2).await;
    assert!(
        first.starts_with("echo: [document “passwd” saved as inbox/"),
        "{first}"
    );
    let (a, b) = (saved_name(&first), saved_name(&second));
    assert_ne!(a, b, "the second file got a name of its own");
    let inbox = bot.workdir(&USER.to_string()).join("inbox");
    assert_eq!(std::fs::read(inbox.join(&a)).unwrap(), b"first");
    assert_eq!(std::fs::read(inbox.join(&b)).unwrap(), b"second");
    let files = every_file_under(bot.dir.path());
    assert_eq!(files.len(), 2, "nothing landed anywhere else: {files:?}");
    assert!(files.iter().all(|f| f.starts_with(&inbox)), "{files:?}");
}

#[actix_rt::test]
async fn a_file_over_the_limit_is_refused_with_a_reply_and_the_text_still_runs() {
    let bot = FileBot::start(
        Scenario::default(),
        &[("TURNSTILE_FILES_MAX_DOWNLOAD", "1000")],
    )
    .await;
    let me = private(USER);
    // Announced too large in the message: never fetched.
    bot.h.api.add_file("big", "documents/big", &[7u8; 5000]);
    bot.h.api.push_message(captioned(
        document(me.clone(), USER, "big", "big.bin", 5000),
        "summarize it",
    ));
    let notice = bot.nth_text(USER, 1).await;
    assert_eq!(
        notice,
        "⚠️ The document “big.bin” was not received: it is 5 KB and the limit is 1 KB."
    );
    let answer = bot.nth_text(USER, 2).await;
    assert!(answer.contains("not received"), "{answer}");
    assert!(
        answer.ends_with("summarize it"),
        "the text part ran: {answer}"
    );
    assert!(bot.h.api.calls_of("getFile").is_empty());
    // Announced small, but more bytes arrive: cut off, nothing kept.
    bot.h
        .api
        .add_file_announcing("liar", "documents/liar", &[7u8; 5000], 10);
    bot.h
        .api
        .push_message(document(me, USER, "liar", "liar.bin", 10));
    let notice = bot.nth_text(USER, 3).await;
    assert!(notice.contains("was not received"), "{notice}");
    bot.nth_text(USER, 4).await;
    assert_eq!(bot.h.api.calls_of("getFile").len(), 1);
    assert!(
        bot.inbox(&USER.to_string()).is_empty(),
        "no partial file is left: {:?}",
        bot.inbox(&USER.to_string())
    );
}

#[actix_rt::test]
async fn an_album_arrives_as_one_turn() {
    let mut bot = FileBot::start(
        Scenario::default(),
        &[("TURNSTILE_DISPATCHER_MERGE_WINDOW", "0s")],
    )
    .await;
    for (i, id) in ["a1", "a2", "a3"].iter().enumerate() {
        bot.h
            .api
            .add_file(id, &format!("photos/file_{i}.jpg"), id.as_bytes());
        let mut item = in_album(photo(private(USER), USER, id, 2), "album-1");
        if i == 0 {
            item = captioned(item, "three views");
        }
        let polls = bot.h.api.calls_of("getUpdates").len();
        bot.h.api.push_message(item);
        if i == 0 {
            // The rest arrive in a later batch: the first item was taken
            // (the intake polls again only after handing it over).
            bot.h
                .api
                .wait_for(SOON, "the poll after the first item", |calls| {
                    (calls.iter().filter(|c| c.method == "getupdates").count() > polls + 1)
                        .then_some(())
                })
                .await;
        }
    }
    bot.h.turn_ended(USER, 1).await;
    bot.h.say(USER, USER, "and this");
    bot.h.turn_ended(USER, 2).await;
    let texts = bot.h.api.wait_for_texts(USER, 2, SOON).await;
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(
        texts[0].matches("[photo saved as inbox/").count(),
        3,
        "{}",
        texts[0]
    );
    assert!(texts[0].ends_with("three views"), "{}", texts[0]);
    assert_eq!(texts[1], "echo: and this");
    assert_eq!(bot.inbox(&USER.to_string()).len(), 3);
}

/// A stand-in for a transcriber: prints what it was given, or sleeps.
fn transcriber(dir: &Path, body: &str) -> String {
    let script = dir.join("transcribe.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    format!("sh,{},{{file}}", script.display())
}

#[actix_rt::test]
async fn a_voice_note_is_transcribed_by_the_configured_command() {
    let tools = tempfile::tempdir().unwrap();
    let command = transcriber(tools.path(), r#"echo "you said: $(wc -c < "$1") bytes""#);
    let bot = FileBot::start(
        Scenario::default(),
        &[("TURNSTILE_FILES_TRANSCRIBE", command.as_str())],
    )
    .await;
    bot.h.api.add_file("v1", "voice/file_9.oga", b"OggS12345");
    bot.h.api.push_message(voice(private(USER), USER, "v1", 9));
    let text = bot.nth_text(USER, 1).await;
    assert!(
        text.starts_with("echo: [voice note saved as inbox/"),
        "{text}"
    );
    assert!(text.contains("; transcript:]\nyou said: 9 bytes"), "{text}");
}

#[actix_rt::test]
async fn a_transcription_past_its_timeout_gives_the_agent_the_audio_file() {
    let tools = tempfile::tempdir().unwrap();
    // It starts a child of its own too; the timeout ends both.
    let pidfile = tools.path().join("child.pid");
    let command = transcriber(
        tools.path(),
        &format!(
            "sleep 300 &\necho $! > {}.tmp && mv {0}.tmp {0}\nexec sleep 30",
            pidfile.display()
        ),
    );
    let bot = FileBot::start(
        Scenario::default(),
        &[
            ("TURNSTILE_FILES_TRANSCRIBE", command.as_str()),
            ("TURNSTILE_FILES_TRANSCRIBE_TIMEOUT", "300ms"),
        ],
    )
    .await;
    bot.h.api.add_file("v1", "voice/file_9.oga", b"OggS");
    let sent = std::time::Instant::now();
    bot.h.api.push_message(voice(private(USER), USER, "v1", 4));
    let text = bot.nth_text(USER, 1).await;
    assert!(
        text.contains("could not be transcribed: sh took longer than 300ms"),
        "{text}"
    );
    let name = saved_name(&text);
    assert!(name.ends_with("-voice.oga"), "{name}");
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(20),
        "the 30 s transcriber was not waited out"
    );
    let pid = std::fs::read_to_string(&pidfile).expect("the child was started");
    let stat = format!("/proc/{}/stat", pid.trim());
    // Gone, or a zombie nobody reaps yet: not running either way.
    let running = || {
        std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    let deadline = Instant::now() + SOON;
    while running() {
        assert!(
            Instant::now() < deadline,
            "the transcriber's child {} still runs {SOON:?} after the timeout",
            pid.trim()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix_rt::test]
async fn without_a_transcriber_the_agent_gets_the_voice_file() {
    let bot = FileBot::start(Scenario::default(), &[]).await;
    bot.h.api.add_file("v1", "voice/file_9.oga", b"OggS");
    bot.h.api.push_message(voice(private(USER), USER, "v1", 4));
    let text = bot.nth_text(USER, 1).await;
    assert!(
        text.starts_with("echo: [voice note saved as inbox/"),
        "{text}"
    );
    assert!(!text.contains("transcript"), "{text}");
}

fn send_file_scenario() -> Scenario {
    let send = |path: &str, extra: serde_json::Value| {
        let mut input = json!({"path": path});
        for (k, v) in extra.as_object().unwrap() {
            input[k] = v.clone();
        }
        turn(vec![Step::Tools {
            calls: vec![
                tool("mcp__telegram-tools__send_file", input),
                tool("mcp__telegram-tools__end_turn", json!({})),
            ],
        }])
    };
    Scenario::default()
        .with_rule("doc", send("report.txt", json!({"caption": "the report"})))
        .with_rule("pic", send("chart.png", json!({"as_photo": true})))
        .with_rule("link", send("escape.txt", json!({})))
        .with_rule("dots", send("../secret.txt", json!({})))
        .with_rule("etc", send("/etc/passwd", json!({})))
}

#[actix_rt::test]
async fn send_file_sends_a_document_or_a_photo_from_the_workdir() {
    let mut bot = FileBot::start(send_file_scenario(), &[]).await;
    let ws = bot.workdir(&USER.to_string());
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("report.txt"), b"all good").unwrap();
    std::fs::write(ws.join("chart.png"), b"\x89PNG").unwrap();
    bot.h.say(USER, USER, "doc please");
    let uploads = bot.h.api.wait_for_uploads(1, SOON).await;
    assert_eq!(uploads[0].method, "senddocument");
    assert_eq!(uploads[0].chat_id, USER);
    assert_eq!(uploads[0].bytes, b"all good");
    assert_eq!(uploads[0].file_name, "report.txt");
    assert_eq!(uploads[0].caption.as_deref(), Some("the report"));
    bot.h.say(USER, USER, "pic please");
    let uploads = bot.h.api.wait_for_uploads(2, SOON).await;
    assert_eq!(uploads[1].method, "sendphoto");
    assert_eq!(uploads[1].bytes, b"\x89PNG");
    bot.h.turn_ended(USER, 2).await;
    let results = bot.h.backend.log().tool_results;
    let sent: Vec<_> = results
        .iter()
        .filter(|(name, _)| name.ends_with("send_file"))
        .collect();
    assert_eq!(sent.len(), 2, "{results:?}");
    assert!(
        sent.iter().all(|(_, r)| r == "Ok: the file was sent"),
        "{results:?}"
    );
}

#[actix_rt::test]
async fn send_file_refuses_anything_outside_the_workdir() {
    let mut bot = FileBot::start(send_file_scenario(), &[]).await;
    let ws = bot.workdir(&USER.to_string());
    std::fs::create_dir_all(&ws).unwrap();
    // Beside the workdir, where `../secret.txt` leads.
    let secret = ws.parent().unwrap().join("secret.txt");
    std::fs::write(&secret, b"the bot's own secret").unwrap();
    std::os::unix::fs::symlink(&secret, ws.join("escape.txt")).unwrap();
    for (n, ask) in ["link", "dots", "etc"].iter().enumerate() {
        bot.h.say(USER, USER, ask);
        bot.h.turn_ended(USER, n + 1).await;
    }
    let results = bot.h.backend.log().tool_results;
    let refused: Vec<_> = results
        .iter()
        .filter(|(name, _)| name.ends_with("send_file"))
        .map(|(_, r)| r.clone())
        .collect();
    assert_eq!(refused.len(), 3, "{results:?}");
    for r in &refused {
        assert!(
            r.starts_with("Error: ") && r.contains("outside your working directory"),
            "{r}"
        );
    }
    assert!(bot.h.api.uploads().is_empty(), "nothing left the workdir");
}

#[actix_rt::test]
async fn files_in_a_group_need_the_address_too() {
    let bot = FileBot::start(Scenario::default(), &[]).await;
    let group = supergroup(-100, false);
    bot.h.api.add_file("g1", "photos/g.jpg", b"img");
    // Not addressed: never fetched.
    bot.h.api.push_message(photo(group.clone(), USER, "g1", 3));
    bot.h.api.push_message(captioned(
        photo(group.clone(), USER, "g1", 3),
        "@turnstile_bot look",
    ));
    let text = bot.nth_text(-100, 1).await;
    assert!(text.ends_with("look"), "{text}");
    assert_eq!(bot.h.api.calls_of("getFile").len(), 1);
    bot.h
        .api
        .push_message(text_message(group, USER, "@turnstile_bot done"));
    let texts = bot.h.api.wait_for_texts(-100, 2, SOON).await;
    assert_eq!(
        texts[1],
        "echo: [turnstile: message from \"u1001\", user id 1001]\ndone"
    );
    assert_eq!(bot.inbox("-100").len(), 1);
}

/// How long a swap loop may run at most, whatever happens.
const RACE_LIMIT: Duration = Duration::from_secs(120);
/// How many swaps a loop may make at most.
const RACE_SWAPS: u64 = 50_000_000;

/// A thread that swaps two names (`renameat2(RENAME_EXCHANGE)`) as fast
/// as it can until stopped, for at most [`RACE_LIMIT`] and [`RACE_SWAPS`];
/// it leaves them as they were.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<u64, String>>>,
}

impl Swapper {
    fn start(a: &Path, b: &Path) -> Self {
        let a = CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = CString::new(b.as_os_str().as_bytes()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let swap = || {
                // SAFETY: two valid C strings; the kernel checks the rest.
                let done = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                if done == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error().to_string())
                }
            };
            let deadline = Instant::now() + RACE_LIMIT;
            let mut swaps: u64 = 0;
            while !stopped.load(Ordering::Relaxed)
                && swaps < RACE_SWAPS
                && (!swaps.is_multiple_of(1024) || Instant::now() < deadline)
            {
                swap()?;
                swaps += 1;
            }
            if !swaps.is_multiple_of(2) {
                swap()?;
                swaps += 1;
            }
            Ok(swaps)
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the loop; answers how many swaps it made.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("running");
        thread
            .join()
            .expect("the swap loop did not panic")
            .expect("every swap worked")
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the checked file holds, and what is beside it outside the workdir.
const CHECKED: &[u8] = b"the agent's own file, checked";
const SECRET: &[u8] = b"TELEGRAM_BOT_TOKEN=4242:outside-the-workdir";

#[actix_rt::test]
async fn send_file_sends_only_the_checked_file_while_its_directory_is_swapped_for_a_symlink() {
    const ROUNDS: usize = 40;
    let scenario = Scenario::default().with_rule(
        "send",
        turn(vec![Step::Tools {
            calls: vec![
                tool(
                    "mcp__telegram-tools__send_file",
                    json!({"path": "box/x/environ"}),
                ),
                tool("mcp__telegram-tools__end_turn", json!({})),
            ],
        }]),
    );
    let mut bot = FileBot::start(scenario, &[]).await;
    let ws = bot.workdir(&USER.to_string());
    std::fs::create_dir_all(ws.join("box/x")).unwrap();
    std::fs::write(ws.join("box/x/environ"), CHECKED).unwrap();
    // `box/y`: a symlink to a directory outside holding a secret of the
    // same name; the loop swaps it with `box/x`.
    let outside = bot.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("environ"), SECRET).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("box/y")).unwrap();
    let swapper = Swapper::start(&ws.join("box/x"), &ws.join("box/y"));
    let mut fault_queued = false;
    for n in 1..=ROUNDS {
        // Every upload is first answered 429, so it is sent again.
        if !fault_queued {
            bot.h.api.inject("sendDocument", Fault::RetryAfter(0));
        }
        let before = bot.h.api.calls_of("sendDocument").len();
        bot.h.say(USER, USER, "send");
        bot.h.turn_ended(USER, n).await;
        fault_queued = bot.h.api.calls_of("sendDocument").len() == before;
        if bot.h.api.received_files().iter().any(|b| b != CHECKED) {
            break;
        }
    }
    let swaps = swapper.stop();
    let received = bot.h.api.received_files();
    for (i, bytes) in received.iter().enumerate() {
        assert_eq!(
            bytes,
            CHECKED,
            "upload {i} of {} carried something else than the checked file: {:?}",
            received.len(),
            String::from_utf8_lossy(bytes)
        );
    }
    let sent = bot.h.api.uploads().len();
    assert!(sent > 0, "no round was sent ({swaps} swaps)");
    assert!(received.len() > sent, "no upload was retried: {received:?}");
    let results = bot.h.backend.log().tool_results;
    for (name, result) in results.iter().filter(|(n, _)| n.ends_with("send_file")) {
        assert!(
            result == "Ok: the file was sent" || result.contains("symlink"),
            "{name}: {result}"
        );
    }
    println!(
        "{ROUNDS} rounds, {swaps} swaps: {sent} sent, {} upload attempts, all the checked file",
        received.len()
    );
}

#[actix_rt::test]
async fn an_inbox_swapped_for_a_symlink_never_gets_a_file_written_outside() {
    const ROUNDS: usize = 200;
    let mut bot = FileBot::start(Scenario::default(), &[]).await;
    let ws = bot.workdir(&USER.to_string());
    std::fs::create_dir_all(ws.join("inbox")).unwrap();
    let outside = bot.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("inbox.alt")).unwrap();
    bot.h.api.add_file("d1", "documents/file_1", b"payload");
    let swapper = Swapper::start(&ws.join("inbox"), &ws.join("inbox.alt"));
    let outside_files = || std::fs::read_dir(&outside).unwrap().count();
    for n in 1..=ROUNDS {
        bot.h
            .api
            .push_message(document(private(USER), USER, "d1", "report.pdf", 7));
        bot.h.turn_ended(USER, n).await;
        if outside_files() > 0 {
            break;
        }
    }
    let swaps = swapper.stop();
    let escaped: Vec<PathBuf> = every_file_under(&outside);
    assert!(
        escaped.is_empty(),
        "files were written outside the inbox ({swaps} swaps): {escaped:?}"
    );
    let saved = bot.inbox(&USER.to_string());
    assert!(!saved.is_empty(), "no round was saved ({swaps} swaps)");
    let files = every_file_under(bot.dir.path());
    let inbox = ws.join("inbox");
    assert!(files.iter().all(|f| f.starts_with(&inbox)), "{files:?}");
    println!(
        "{ROUNDS} rounds, {swaps} swaps: {} saved in the inbox, none outside",
        saved.len()
    );
}

/// The bot token in the parent's environment.
const PARENT_TOKEN: &str = "4242:parent-token-never-for-the-transcriber";
/// A `TURNSTILE_*` variable in the parent's environment.
const PARENT_TURNSTILE: (&str, &str) = ("TURNSTILE_FILES_SECRET", "turnstile-only");
/// Named in `agent.pass_env`.
const PASSED: (&str, &str) = ("TRANSCRIBE_PASSED", "passed-value");

/// Runs the ignored test `name` of this binary in a child process whose
/// environment holds the bot token, a `TURNSTILE_*` variable and one more.
fn run_inner(name: &str) {
    support::process::run_ignored_test(
        name,
        &[
            ("TELEGRAM_BOT_TOKEN", PARENT_TOKEN),
            PARENT_TURNSTILE,
            PASSED,
        ],
    );
}

/// Panics unless started by [`run_inner`].
fn assert_run_inner() {
    assert_eq!(
        std::env::var("TELEGRAM_BOT_TOKEN").as_deref(),
        Ok(PARENT_TOKEN),
        "run this through its outer test, which sets the parent's environment"
    );
}

/// The transcript of one voice note, with `vars` set: the echoed text.
async fn transcript_of(command: &str, vars: &[(&str, &str)]) -> String {
    let mut env = vec![
        ("TURNSTILE_FILES_TRANSCRIBE", command),
        ("TURNSTILE_AGENT_PASS_ENV", PASSED.0),
    ];
    env.extend_from_slice(vars);
    let bot = FileBot::start(Scenario::default(), &env).await;
    bot.h.api.add_file("v1", "voice/file_9.oga", b"OggS");
    bot.h.api.push_message(voice(private(USER), USER, "v1", 4));
    let text = bot.nth_text(USER, 1).await;
    assert!(text.contains("; transcript:]\n"), "{text}");
    text
}

/// No secret of turnstile's environment in `text`; the passed variable is.
fn assert_clean(text: &str) {
    assert!(!text.contains("TELEGRAM_BOT_TOKEN"), "{text}");
    assert!(!text.contains(PARENT_TOKEN), "{text}");
    assert!(!text.contains("TURNSTILE_"), "{text}");
    assert!(!text.contains(PARENT_TURNSTILE.1), "{text}");
    assert!(
        text.contains(&format!("{}={}", PASSED.0, PASSED.1)),
        "agent.pass_env reaches it: {text}"
    );
    assert!(text.contains("\nPATH="), "{text}");
}

#[test]
fn the_transcriber_gets_the_agents_clean_environment() {
    run_inner("inner_transcriber_environment");
}

#[actix_rt::test]
#[ignore = "run by the_transcriber_gets_the_agents_clean_environment"]
async fn inner_transcriber_environment() {
    assert_run_inner();
    let tools = tempfile::tempdir().unwrap();
    let command = transcriber(tools.path(), "env");
    let text = transcript_of(&command, &[]).await;
    assert_clean(&text);
}

/// The transcriber under bubblewrap: needs root and `bwrap`, so it is part
/// of the real-CLI group and fails naming what is missing.
#[cfg(feature = "real-cli")]
#[test]
fn under_bubblewrap_the_transcriber_runs_in_the_agents_sandbox() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let bwrap = std::process::Command::new("bwrap")
        .arg("--version")
        .output();
    assert!(
        uid == 0 && bwrap.as_ref().is_ok_and(|o| o.status.success()),
        "the bubblewrap test (--features real-cli) cannot run here: it needs root \
         (uid {uid}) and `bwrap` on PATH (Debian package bubblewrap): {bwrap:?}"
    );
    run_inner("inner_transcriber_in_bubblewrap");
}

#[cfg(feature = "real-cli")]
#[actix_rt::test]
#[ignore = "run by under_bubblewrap_the_transcriber_runs_in_the_agents_sandbox"]
async fn inner_transcriber_in_bubblewrap() {
    use std::os::unix::fs::PermissionsExt as _;
    assert_run_inner();
    // The state outside /tmp (which the sandbox replaces anyway), so the
    // state directory's own hiding is what is tested.
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let db = state.path().join("turnstile.db");
    let environ = format!("/proc/{}/environ", std::process::id());
    // The program itself is the script, so the sandbox binds its directory
    // back (it is under /tmp).
    let tools = tempfile::tempdir().unwrap();
    let script = tools.path().join("transcribe");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv\n\
             test -r {db} && echo db:readable || echo db:hidden\n\
             grep -q TELEGRAM {environ} 2>/dev/null && echo environ:readable || echo environ:hidden\n\
             echo \"cwd:$(pwd)\"\n\
             echo \"file:$(wc -c < \"$1\")\"\n",
            db = db.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = format!("{},{{file}}", script.display());
    let db_path = db.display().to_string();
    let text = transcript_of(
        &command,
        &[
            ("TURNSTILE_STATE_PATH", db_path.as_str()),
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap"),
        ],
    )
    .await;
    assert!(db.exists(), "the state file is there, outside");
    assert_clean(&text);
    assert!(text.contains("db:hidden"), "{text}");
    assert!(text.contains("environ:hidden"), "{text}");
    assert!(
        text.contains("file:4"),
        "the voice note is readable: {text}"
    );
    assert!(text.contains("cwd:"), "{text}");
}

#[actix_rt::test]
async fn inbox_files_older_than_the_retention_are_pruned_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("ws").join(USER.to_string()).join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let hours_ago = |h: u64| std::time::SystemTime::now() - Duration::from_secs(h * 3600);
    for (name, when) in [("old.oga", hours_ago(3)), ("new.oga", hours_ago(0))] {
        let file = std::fs::File::create(inbox.join(name)).unwrap();
        file.set_modified(when).unwrap();
    }
    let workdir = dir.path().join("ws").join("{chat}").display().to_string();
    let _h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_AGENT_WORKDIR", workdir.as_str()),
            ("TURNSTILE_STATE_RETENTION", "1h"),
        ],
    )
    .await;
    let deadline = Instant::now() + SOON;
    while inbox.join("old.oga").exists() {
        assert!(
            Instant::now() < deadline,
            "the old inbox file is still there after {SOON:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(inbox.join("new.oga").exists(), "a recent file is kept");
}

//! `turnstile attach` at a terminal: the client run in a pseudo-terminal
//! as a person would use it. A typed line is answered and the answer
//! rendered (in colour, a terminal being there); a line that comes while
//! another is being typed prints above it and the typed line is drawn
//! again below; Ctrl-D and Ctrl-C end the client with exit code 0, a short
//! line, and the terminal's mode as it was; `NO_COLOR` is honoured.

mod support;

use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use support::*;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use turnstile::agent::{Scenario, Step};

/// The client in a pseudo-terminal, and what it printed so far.
struct Pty {
    child: Child,
    /// The terminal's side the client does not hold: what it prints comes
    /// out here, what is written here is typed.
    master: std::fs::File,
    /// The client's side, kept to read its mode after the client ended.
    slave: OwnedFd,
    chunks: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Everything printed so far, as bytes came.
    raw: Vec<u8>,
    /// The terminal's screen, as what was printed drew it.
    terminal: vt100::Parser,
    /// What [`Pty::expect`] matched up to, in `printed()`.
    read_to: usize,
}

/// The pseudo-terminal's two ends, 80 by 24.
fn open_pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: out pointers to two ints; no name, no termios, a valid size.
    let made = unsafe {
        libc::openpty(
            &raw mut master,
            &raw mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &raw const size,
        )
    };
    assert_eq!(made, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened and are owned here alone.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// The local modes of the terminal `fd` (ICANON, ECHO, ISIG, …).
fn local_modes(fd: &OwnedFd) -> libc::tcflag_t {
    // SAFETY: termios is plain data that tcgetattr fills.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a termios.
    let got = unsafe { libc::tcgetattr(fd.as_raw_fd(), &raw mut mode) };
    assert_eq!(got, 0, "tcgetattr: {}", std::io::Error::last_os_error());
    mode.c_lflag
}

/// `text` without terminal escapes (CSI sequences) and carriage returns.
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' if chars.peek() == Some(&'[') => {
                chars.next();
                // Parameters, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

impl Pty {
    /// `turnstile attach CONVERSATION` for the bot whose state is `db`, on
    /// a terminal, with `env` set too.
    fn attach(db: &Path, conversation: &str, env: &[(&str, &str)]) -> Self {
        let (master, slave) = open_pty();
        let end = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the terminal"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
        command
            .args(["attach", conversation])
            .env_clear()
            .env("TURNSTILE_STATE_PATH", db)
            .env("TERM", "xterm")
            .envs(env.iter().copied())
            .stdin(end(&slave))
            .stdout(end(&slave))
            .stderr(end(&slave))
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // A session of its own, with this terminal its controlling one.
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("the client starts");
        let master = std::fs::File::from(master);
        let (tx, chunks) = mpsc::unbounded_channel();
        let mut reader = master.try_clone().expect("dup the master");
        let mut answerer = master.try_clone().expect("dup the master");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once no one holds the client's side.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                let chunk = buf[..n].to_vec();
                // The line editor asks where the cursor is, as a terminal
                // would be asked: the first column.
                if chunk.windows(4).any(|w| w == b"\x1b[6n") {
                    let _ = answerer.write_all(b"\x1b[1;1R");
                }
                if tx.send(chunk).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            master,
            slave,
            chunks,
            raw: Vec::new(),
            terminal: vt100::Parser::new(24, 80, 0),
            read_to: 0,
        }
    }

    /// Everything printed, as it came.
    fn raw(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// Everything printed, escapes dropped.
    fn printed(&self) -> String {
        plain(&self.raw())
    }

    /// The screen's rows now, without their trailing blanks; the empty
    /// rows at the bottom dropped.
    fn screen(&self) -> Vec<String> {
        let mut rows: Vec<String> = (self.terminal.screen().contents().lines())
            .map(|row| row.trim_end().to_string())
            .collect();
        while rows.last().is_some_and(String::is_empty) {
            rows.pop();
        }
        rows
    }

    /// Reads what comes until the screen shows `what` (`shows`, given the
    /// rows and the cursor's column).
    async fn until_screen(&mut self, what: &str, shows: impl Fn(&[String], u16) -> bool) {
        let wait = async {
            while !shows(&self.screen(), self.terminal.screen().cursor_position().1) {
                self.read_some(what).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .is_err()
        {
            panic!("no {what} in time: {:#?}", self.screen());
        }
    }

    /// Takes one chunk of what the client printed.
    async fn read_some(&mut self, what: &str) {
        match self.chunks.recv().await {
            Some(chunk) => {
                self.terminal.process(&chunk);
                self.raw.extend(chunk);
            }
            None => panic!("the terminal closed before {what}: {:?}", self.printed()),
        }
    }

    /// Types `keys` one at a time, as a person does, each seen at the end
    /// of the line being typed before the next. (Keys that come in one
    /// read wait in rustyline's buffer while its external printer is on,
    /// until the next key: kkawakam/rustyline#976.)
    async fn type_line(&mut self, keys: &str) {
        let mut typed = String::new();
        for key in keys.chars() {
            typed.push(key);
            self.type_keys(&key.to_string());
            // Rows are read without their trailing blanks: the cursor
            // tells a blank typed.
            let line = format!("> {typed}").trim_end().to_string();
            let column = u16::try_from(2 + typed.chars().count()).unwrap();
            self.until_screen(&format!("{typed:?} typed"), |rows, cursor| {
                cursor == column && rows.last().is_some_and(|row| row.ends_with(&line))
            })
            .await;
        }
    }

    /// Waits until `needle` is printed after what was matched before; the
    /// screen from there.
    async fn expect(&mut self, needle: &str) -> String {
        let wait = async {
            loop {
                let printed = self.printed();
                if let Some(at) = printed.get(self.read_to..).and_then(|p| p.find(needle)) {
                    let from = self.read_to;
                    self.read_to += at + needle.len();
                    return printed[from..self.read_to].to_string();
                }
                self.read_some(&format!("{needle:?}")).await;
            }
        };
        match tokio::time::timeout(Duration::from_secs(20), wait).await {
            Ok(seen) => seen,
            Err(_) => panic!("no {needle:?} in time: {:?}", self.raw()),
        }
    }

    /// Types `keys`.
    fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).expect("typing");
    }

    /// The client's exit, within a generous bound.
    async fn exited(&mut self) -> ExitStatus {
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the client did not exit: {:?}", self.printed()))
            .expect("the client's status")
    }
}

/// `ask`: the agent asks to run Bash `echo hi`, then ends its turn.
fn asking() -> Scenario {
    Scenario::default().with_rule(
        "ask",
        turn(vec![
            Step::Ask {
                tool: "Bash".into(),
                input: serde_json::json!({"command": "echo hi"}),
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", serde_json::json!({}))],
            },
        ]),
    )
}

#[actix_rt::test]
async fn at_a_terminal_a_typed_line_is_answered_in_colour_and_ctrl_d_leaves_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(asking(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let mut pty = Pty::attach(&db, "1", &[]);
    let before = local_modes(&pty.slave);
    pty.expect("-- following 1").await;
    pty.expect("> ").await;

    pty.type_line("hello").await;
    pty.type_keys("\r");
    // Taken: said without the inbox row's id, nothing to a person.
    pty.until_screen("the line taken", |rows, _| {
        rows.iter().any(|row| row == "(sent)")
    })
    .await;
    pty.expect("bot: echo: hello").await;
    assert!(
        pty.raw().contains("\x1b[1;32mbot:\x1b[0m echo: hello"),
        "the answer in colour on a terminal: {:?}",
        pty.raw()
    );
    h.turn_ended(1, 1).await;

    // A line being typed when the chat decides: what comes prints above
    // it, and it is drawn again below, whole.
    h.say(1, USER, "ask please");
    pty.expect("(type a number to answer)").await;
    pty.type_line("half a li").await;
    let (_, buttons) = question(&h, 1, 1).await;
    h.api.push_callback(1, USER, 0, &data(&buttons, "Allow"));
    // Each on a row of its own, whole; the line typed drawn again last.
    let said = "bot: allowed: {\"command\":\"echo hi\"}";
    pty.until_screen("the answer above the line typed", |rows, cursor| {
        rows.iter().any(|row| row == said)
            && rows.last().is_some_and(|row| row == "> half a li")
            && cursor == 11
    })
    .await;
    h.turn_ended(1, 2).await;

    // Ctrl-U clears the line, Ctrl-D on an empty line ends.
    pty.type_keys("\x15");
    pty.until_screen("the line cleared", |rows, cursor| {
        rows.last().is_some_and(|row| row == ">") && cursor == 2
    })
    .await;
    pty.type_keys("\x04");
    pty.expect("-- detached; the conversation goes on").await;
    let status = pty.exited().await;
    assert!(status.success(), "{status:?}: {:?}", pty.printed());
    assert_eq!(
        local_modes(&pty.slave),
        before,
        "the terminal's mode restored"
    );
    assert!(
        !h.texts(1).iter().any(|t| t.contains("half a li")),
        "a line not entered is not sent: {:?}",
        h.texts(1)
    );
}

#[actix_rt::test]
async fn ctrl_c_leaves_cleanly_and_no_color_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    let mut pty = Pty::attach(&db, "1", &[("NO_COLOR", "1")]);
    let before = local_modes(&pty.slave);
    pty.expect("bot: echo: hello").await;
    pty.expect("-- following 1").await;
    pty.expect("> ").await;
    pty.type_line("not sent").await;
    pty.type_keys("\x03");
    pty.expect("-- detached; the conversation goes on").await;
    let status = pty.exited().await;
    assert!(status.success(), "{status:?}: {:?}", pty.printed());
    assert_eq!(
        local_modes(&pty.slave),
        before,
        "the terminal's mode restored"
    );
    assert!(
        !pty.raw().contains("\x1b[1;32m") && !pty.raw().contains("\x1b[2m"),
        "no colour with NO_COLOR: {:?}",
        pty.raw()
    );
    assert_eq!(h.texts(1), ["echo: hello"], "Ctrl-C sends nothing");
}

#[actix_rt::test]
async fn the_bots_stop_ends_the_client_at_its_prompt_with_the_terminal_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    let mut pty = Pty::attach(&db, "1", &[]);
    let before = local_modes(&pty.slave);
    pty.expect("-- following 1").await;
    pty.type_line("half").await;
    // The line editor holds the terminal in its raw mode now.
    assert_ne!(local_modes(&pty.slave), before, "the editor's mode");

    h.bot.stop().await;
    pty.expect("-- the bot stopped: the attachment ended").await;
    let status = pty.exited().await;
    assert!(status.success(), "{status:?}: {:?}", pty.printed());
    assert_eq!(
        local_modes(&pty.slave),
        before,
        "the terminal's mode restored though the editor was reading"
    );
}

//! The client's terminal: where typed lines come from and where shown
//! lines go. On a terminal (stdin and stdout both one, not `--json`) a line
//! editor with history reads the lines, and what comes meanwhile is printed
//! above the line being typed, not through it; the terminal's mode is
//! restored however the client ends. Otherwise stdin is read line by line
//! and stdout written as it is.

use std::io::{BufRead as _, Write as _};

use rustyline::error::ReadlineError;
use rustyline::{Config, DefaultEditor, ExternalPrinter};
use tokio::sync::mpsc;

/// The prompt of the line being typed.
const PROMPT: &str = "> ";

/// Typed lines kept for the up arrow.
const HISTORY: usize = 500;

/// What the person at the terminal did; the channel's end is the end of
/// input (Ctrl-D).
#[derive(Debug)]
pub enum Entered {
    /// A line (not blank).
    Line(String),
    /// Ctrl-C at the line editor.
    Interrupted,
}

/// Where shown lines go.
enum Screen {
    /// stdout as it is.
    Plain,
    /// Above the line editor's line.
    Editor(Box<dyn ExternalPrinter + Send>),
}

/// The typed lines, as they come.
pub type TypedLines = mpsc::UnboundedReceiver<Entered>;

/// The client's terminal.
pub struct Terminal {
    screen: Screen,
    /// The terminal's mode before the editor changed it, put back at the end.
    saved: Option<libc::termios>,
}

impl Terminal {
    /// Lines read from stdin as they come (`read`: else none), shown on
    /// stdout as they are.
    pub fn plain(read: bool) -> (Self, TypedLines) {
        let (tx, typed) = mpsc::unbounded_channel();
        if read {
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { return };
                    if !line.trim().is_empty() && tx.send(Entered::Line(line)).is_err() {
                        return;
                    }
                }
            });
        }
        let terminal = Self {
            screen: Screen::Plain,
            saved: None,
        };
        (terminal, typed)
    }

    /// A line editor on the terminal, with history; lines shown print above
    /// the line being typed.
    pub fn editor() -> Result<(Self, TypedLines), String> {
        let saved = terminal_mode();
        let config = Config::builder()
            .auto_add_history(true)
            .max_history_size(HISTORY)
            .map_err(|err| format!("line editor: {err}"))?
            .build();
        let mut editor =
            DefaultEditor::with_config(config).map_err(|err| format!("line editor: {err}"))?;
        let printer = editor
            .create_external_printer()
            .map_err(|err| format!("line editor: {err}"))?;
        let (tx, typed) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            loop {
                match editor.readline(PROMPT) {
                    Ok(line) if line.trim().is_empty() => {}
                    Ok(line) => {
                        if tx.send(Entered::Line(line)).is_err() {
                            return;
                        }
                    }
                    Err(ReadlineError::Interrupted) => {
                        let _ = tx.send(Entered::Interrupted);
                        return;
                    }
                    Err(ReadlineError::Eof) => return,
                    Err(err) => {
                        tracing::warn!(cause = %err, "attach: the line editor failed; input ends");
                        return;
                    }
                }
            }
        });
        let terminal = Self {
            screen: Screen::Editor(Box::new(printer)),
            saved,
        };
        Ok((terminal, typed))
    }

    /// Shows `text` (one or more lines).
    pub fn show(&mut self, text: &str) {
        match &mut self.screen {
            Screen::Plain => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
            Screen::Editor(printer) => {
                if let Err(err) = printer.print(format!("{text}\n")) {
                    tracing::warn!(cause = %err, "attach: a line could not be shown");
                }
            }
        }
    }

    /// Tells the person something went wrong: on stderr, or above the line
    /// being typed.
    pub fn warn(&mut self, text: &str) {
        match &self.screen {
            Screen::Plain => eprintln!("turnstile: {text}"),
            Screen::Editor(_) => self.show(&format!("turnstile: {text}")),
        }
    }

    /// Ends: the terminal's mode put back, the prompt's line cleared, and
    /// `last` shown when there is one.
    pub fn close(mut self, last: Option<&str>) {
        let editing = matches!(self.screen, Screen::Editor(_));
        self.restore();
        let mut out = std::io::stdout().lock();
        if editing {
            let _ = write!(out, "\r\x1b[K");
        }
        if let Some(last) = last {
            let _ = writeln!(out, "{last}");
        }
        let _ = out.flush();
    }

    fn restore(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: `saved` is a termios read by tcgetattr from the same
            // descriptor.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const saved) };
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The terminal's mode now (stdin's), if stdin is one.
fn terminal_mode() -> Option<libc::termios> {
    // SAFETY: termios is plain data; tcgetattr fills it or fails.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a termios.
    (unsafe { libc::tcgetattr(libc::STDIN_FILENO, &raw mut mode) } == 0).then_some(mode)
}

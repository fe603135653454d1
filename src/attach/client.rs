//! `turnstile attach [--config FILE] [--json] [CONVERSATION]`: without a
//! conversation, the list; with one, its recent history, then what it
//! shows live, and each line typed sent to it. On a terminal the lines are
//! typed in a line editor with history (`terminal`) and rendered in
//! colour (`render`; not with `NO_COLOR`); `--json` prints the server's
//! lines as they come and reads stdin line by line. Ctrl-C, Ctrl-D (the
//! end of stdin) and the bot's stop end it cleanly, with exit code 0 and
//! the terminal as it was.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::protocol::{ClientLine, PROTOCOL_VERSION, ServerLine};
use super::render::{LineRenderer, colour_wanted};
use super::server::socket_path;
use super::terminal::{Entered, Terminal, TypedLines};
use crate::config::Config;
use crate::events::Offer;

/// The usage line.
const USAGE: &str = "usage: turnstile attach [--config FILE] [--json] [CONVERSATION]";

/// What the command line asks.
struct Options {
    config: Option<PathBuf>,
    json: bool,
    conversation: Option<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        config: None,
        json: false,
        conversation: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--config" | "-c" => match args.next() {
                Some(path) => options.config = Some(PathBuf::from(path)),
                None => return Err("--config needs a path".into()),
            },
            "--json" => options.json = true,
            key if options.conversation.is_none() && !key.starts_with("--") => {
                options.conversation = Some(key.to_string());
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(options)
}

/// Runs the client (`args`: what follows `attach`).
pub fn run_client(args: &[String]) -> ExitCode {
    let options = match parse(args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("turnstile: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let config = match Config::offline_from_env_and_file(options.config.as_deref()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("turnstile: configuration error: {err}");
            return ExitCode::from(2);
        }
    };
    let Some(path) = socket_path(&config.state.path) else {
        eprintln!("turnstile: the state is kept in memory (state.path): there is no attach socket");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("turnstile: {err}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(attach(path, options));
    // The stdin reader may be blocked in a read: not waited for.
    runtime.shutdown_background();
    code
}

/// A client at work: how it shows lines, and what it knows of the
/// conversation it follows.
struct ClientSession {
    /// Lines shown as they come (`--json`), else rendered.
    json: bool,
    renderer: LineRenderer,
    terminal: Terminal,
    /// Until the server says it follows, an error ends the client.
    followed: bool,
    /// The answers of the latest question still open.
    open: Vec<Offer>,
}

/// How a session ended: the exit code, and a last line for stdout.
type Ended = (ExitCode, Option<String>);

/// The line shown when the person leaves (Ctrl-C, Ctrl-D).
const DETACHED: &str = "-- detached; the conversation goes on";

/// Connects, asks, and prints until the end; the exit code.
async fn attach(path: PathBuf, options: Options) -> ExitCode {
    let stream = match UnixStream::connect(&path).await {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!(
                "turnstile: cannot open {}: {err} (is the bot running?)",
                path.display()
            );
            return ExitCode::from(1);
        }
    };
    let following = options.conversation.is_some();
    let on_terminal = std::io::stdout().is_terminal();
    let colour = colour_wanted(on_terminal, std::env::var_os("NO_COLOR").as_deref());
    let interactive = following && !options.json && on_terminal && std::io::stdin().is_terminal();
    let (terminal, typed) = match interactive.then(Terminal::editor) {
        Some(Ok(editor)) => editor,
        Some(Err(err)) => {
            eprintln!("turnstile: {err}; reading plain lines");
            Terminal::plain(true)
        }
        None => Terminal::plain(following),
    };
    let mut session = ClientSession {
        json: options.json,
        renderer: LineRenderer::new(colour),
        terminal,
        followed: false,
        open: Vec::new(),
    };
    let (code, last) = session.run(stream, &options, typed).await;
    session.terminal.close(last.as_deref());
    code
}

impl ClientSession {
    /// Greets, asks, then shows what comes and sends what is typed.
    async fn run(&mut self, stream: UnixStream, options: &Options, mut typed: TypedLines) -> Ended {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        if let Err(err) = self.greeted(&mut lines).await {
            self.terminal.warn(&err);
            return (ExitCode::from(1), None);
        }
        if send(&mut write, &opening(options)).await.is_err() {
            self.terminal.warn("the bot closed the socket");
            return (ExitCode::from(1), None);
        }
        let following = options.conversation.is_some();
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return self.detached(),
                text = typed.recv(), if following => match text {
                    Some(Entered::Line(text)) => {
                        let request = match typed_request(&text, &self.open) {
                            Ok(request) => request,
                            Err(err) => {
                                self.terminal.warn(&err);
                                continue;
                            }
                        };
                        if send(&mut write, &request).await.is_err() {
                            self.terminal.warn("the bot closed the socket");
                            return (ExitCode::from(1), None);
                        }
                    }
                    // Ctrl-C at the editor, Ctrl-D.
                    Some(Entered::Interrupted) | None => return self.detached(),
                },
                raw = lines.next_line() => {
                    let Ok(Some(raw)) = raw else {
                        self.terminal.warn("the bot closed the attachment");
                        return (ExitCode::from(1), None);
                    };
                    if let Some(ended) = self.heard(&raw) {
                        return ended;
                    }
                }
            }
        }
    }

    /// The person left: a short line (none in `--json`), exit code 0.
    fn detached(&self) -> Ended {
        (
            ExitCode::SUCCESS,
            (!self.json).then(|| DETACHED.to_string()),
        )
    }

    /// Shows one line of the server; the end, when it ends the session
    /// (its line then is the last one).
    fn heard(&mut self, raw: &str) -> Option<Ended> {
        let Ok(line) = serde_json::from_str::<ServerLine>(raw) else {
            self.terminal
                .warn(&format!("an unreadable line from the bot: {raw}"));
            return None;
        };
        let shown = if self.json {
            Some(raw.to_string())
        } else {
            self.renderer.render(&line)
        };
        let code = match line {
            ServerLine::Listed { .. } | ServerLine::Bye { .. } => Some(ExitCode::SUCCESS),
            ServerLine::Error { .. } if !self.followed => Some(ExitCode::from(1)),
            ServerLine::Asked { options, .. } => {
                self.open = options;
                None
            }
            ServerLine::Decided { .. } => {
                self.open.clear();
                None
            }
            ServerLine::Following { .. } => {
                self.followed = true;
                None
            }
            _ => None,
        };
        match code {
            // The last line goes out as the terminal is given back.
            Some(code) => Some((code, shown)),
            None => {
                if let Some(shown) = shown {
                    self.terminal.show(&shown);
                }
                None
            }
        }
    }

    /// Reads the server's first line: it must speak [`PROTOCOL_VERSION`].
    async fn greeted(
        &mut self,
        lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    ) -> Result<(), String> {
        let Ok(Some(raw)) = lines.next_line().await else {
            return Err("the bot closed the socket before greeting".into());
        };
        match serde_json::from_str::<ServerLine>(&raw) {
            Ok(ServerLine::Hello { version }) if version == PROTOCOL_VERSION => {
                if self.json {
                    self.terminal.show(&raw);
                }
                Ok(())
            }
            _ => Err(format!(
                "the bot speaks another attach protocol (this client speaks {PROTOCOL_VERSION}): {raw}"
            )),
        }
    }
}

/// The first request: the list, or following the conversation named.
fn opening(options: &Options) -> ClientLine {
    match &options.conversation {
        None => ClientLine::List,
        Some(key) => ClientLine::Follow {
            conversation: key.clone(),
        },
    }
}

/// What a typed line asks: an answer to the open question (its option's
/// number, or `{"answer": NUMBER or LABEL}`), else a line for the
/// conversation.
fn typed_request(text: &str, open: &[Offer]) -> Result<ClientLine, String> {
    let trimmed = text.trim();
    let numbered = |n: u64| {
        usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| open.get(i))
            .map(|offer| ClientLine::Answer {
                answer: offer.answer.clone(),
            })
    };
    if trimmed.starts_with('{')
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed)
        && let Some(answer) = value.get("answer")
    {
        let chosen = match answer {
            serde_json::Value::Number(n) => n.as_u64().and_then(numbered),
            serde_json::Value::String(label) => open
                .iter()
                .find(|offer| offer.label == *label)
                .map(|offer| ClientLine::Answer {
                    answer: offer.answer.clone(),
                }),
            _ => None,
        };
        return chosen.ok_or_else(|| format!("no open question offers {answer}"));
    }
    if !open.is_empty()
        && let Ok(n) = trimmed.parse::<u64>()
    {
        return numbered(n).ok_or_else(|| format!("the question offers 1 to {}", open.len()));
    }
    Ok(ClientLine::Say {
        text: text.to_string(),
    })
}

/// Writes one request.
async fn send(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    line: &ClientLine,
) -> std::io::Result<()> {
    let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
    text.push('\n');
    write.write_all(text.as_bytes()).await
}

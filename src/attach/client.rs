//! `turnstile attach [--config FILE] [--json] [CONVERSATION]`: without a
//! conversation, the list; with one, its recent history, then what it
//! shows live, and each line typed on stdin sent to it. `--json` prints
//! the server's lines as they come; otherwise they are rendered, in colour
//! only on a terminal. Ctrl-C, Ctrl-D (the end of stdin) and the bot's
//! stop end it cleanly.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::protocol::{ClientLine, PROTOCOL_VERSION, ServerLine};
use super::server::socket_path;
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

/// How lines are printed.
struct Printer {
    json: bool,
    colour: bool,
}

impl Printer {
    fn print(&self, raw: &str, line: &ServerLine) {
        let mut out = std::io::stdout().lock();
        let _ = if self.json {
            writeln!(out, "{raw}")
        } else {
            writeln!(out, "{}", self.render(line))
        };
        let _ = out.flush();
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn render(&self, line: &ServerLine) -> String {
        match line {
            ServerLine::Hello { version } => format!("protocol {version}"),
            ServerLine::Conversation {
                conversation,
                title,
                state,
                last_activity,
                ..
            } => format!(
                "{:<24} {:<8} {:<20} {}",
                conversation,
                state,
                chrono::DateTime::from_timestamp(*last_activity, 0)
                    .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default(),
                title
            ),
            ServerLine::Listed { count } => format!("{count} conversation(s)"),
            ServerLine::Following { conversation } => self.paint(
                "2",
                &format!("-- following {conversation} (Ctrl-D or Ctrl-C ends)"),
            ),
            ServerLine::Message { from, text } => {
                format!("{} {text}", self.paint("1;36", &format!("{from}:")))
            }
            ServerLine::TurnStarted { turn } => self.paint("2", &format!("-- turn {turn} started")),
            ServerLine::Said { text } => format!("{} {text}", self.paint("1;32", "bot:")),
            ServerLine::TurnEnded { turn, outcome } => {
                self.paint("2", &format!("-- turn {turn} ended: {outcome}"))
            }
            ServerLine::Asked { question, options } => {
                let mut shown = format!("{} {question}", self.paint("1;33", "approval asked:"));
                for (n, offer) in options.iter().enumerate() {
                    shown.push_str(&format!("\n  [{}] {}", n + 1, offer.label));
                }
                if !options.is_empty() {
                    shown.push_str(&self.paint("2", "\n  (type a number to answer)"));
                }
                shown
            }
            ServerLine::Decided { decision } => self.paint("33", &format!("-- {decision}")),
            ServerLine::Accepted { update_id } => self.paint("2", &format!("(sent, #{update_id})")),
            ServerLine::Missed { count } => self.paint(
                "33",
                &format!("… {count} line(s) missed: this terminal fell behind"),
            ),
            ServerLine::Bye { reason } => self.paint("33", &format!("-- {reason}")),
            ServerLine::Error { message } => self.paint("31", &format!("error: {message}")),
        }
    }
}

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
    let printer = Printer {
        json: options.json,
        colour: std::io::stdout().is_terminal(),
    };
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    if let Err(err) = greeted(&mut lines, &printer).await {
        eprintln!("turnstile: {err}");
        return ExitCode::from(1);
    }
    let first = opening(&options);
    if send(&mut write, &first).await.is_err() {
        eprintln!("turnstile: the bot closed the socket");
        return ExitCode::from(1);
    }
    let following = options.conversation.is_some();
    let mut typed = if following {
        read_stdin()
    } else {
        mpsc::unbounded_channel().1
    };
    // Until the server says it follows, an error ends the client.
    let mut followed = false;
    // The answers of the latest question still open.
    let mut open: Vec<Offer> = Vec::new();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            text = typed.recv(), if following => match text {
                Some(text) => {
                    let request = match typed_request(&text, &open) {
                        Ok(request) => request,
                        Err(err) => {
                            eprintln!("turnstile: {err}");
                            continue;
                        }
                    };
                    if send(&mut write, &request).await.is_err() {
                        eprintln!("turnstile: the bot closed the socket");
                        return ExitCode::from(1);
                    }
                }
                // Ctrl-D.
                None => return ExitCode::SUCCESS,
            },
            raw = lines.next_line() => {
                let Ok(Some(raw)) = raw else {
                    eprintln!("turnstile: the bot closed the attachment");
                    return ExitCode::from(1);
                };
                let Ok(line) = serde_json::from_str::<ServerLine>(&raw) else {
                    eprintln!("turnstile: an unreadable line from the bot: {raw}");
                    continue;
                };
                printer.print(&raw, &line);
                match line {
                    ServerLine::Asked { options, .. } => open = options,
                    ServerLine::Decided { .. } => open.clear(),
                    ServerLine::Listed { .. } => return ExitCode::SUCCESS,
                    ServerLine::Bye { .. } => return ExitCode::SUCCESS,
                    ServerLine::Following { .. } => followed = true,
                    ServerLine::Error { .. } if !followed => return ExitCode::from(1),
                    _ => {}
                }
            }
        }
    }
}

/// Reads the server's first line: it must speak [`PROTOCOL_VERSION`].
async fn greeted(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    printer: &Printer,
) -> Result<(), String> {
    let Ok(Some(raw)) = lines.next_line().await else {
        return Err("the bot closed the socket before greeting".into());
    };
    match serde_json::from_str::<ServerLine>(&raw) {
        Ok(line @ ServerLine::Hello { version }) if version == PROTOCOL_VERSION => {
            if printer.json {
                printer.print(&raw, &line);
            }
            Ok(())
        }
        _ => Err(format!("the bot speaks another attach protocol: {raw}")),
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

/// The lines typed on stdin, read on a thread of their own; closed at its end.
fn read_stdin() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if line.trim().is_empty() {
                continue;
            }
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

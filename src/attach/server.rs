//! The attach socket: bound beside the state file, mode 0600 from the
//! start (bound in a fresh 0700 directory, then renamed into place, which
//! also replaces a stale socket a crashed run left), served until the bot
//! stops, then every client told why and the socket removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use actix::Addr;
use teloxide::types::{MessageId, UserId};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::feed::Feed;
use super::protocol::{ClientLine, PROTOCOL_VERSION, ServerLine, conversation};
use crate::chat::dispatcher::{Dispatcher, TerminalAnswer, Typed};
use crate::events::EventBus;
use crate::ids::Conversation;
use crate::incoming::{Ask, Author, Callback, ChatKind, Incoming, Parsed, Source, cut, parse};
use crate::state::StoreHandle;

/// How long the stop waits for clients to read their last line.
const BYE_WAIT: Duration = Duration::from_secs(2);

/// How many conversations a list shows.
const LISTED: usize = 100;

/// Where the attach socket of the state file `state` is: beside it, its
/// name and `.attach`; none for a state kept in memory.
pub fn socket_path(state: &Path) -> Option<PathBuf> {
    let text = state.as_os_str();
    if text.is_empty() || text == ":memory:" {
        return None;
    }
    let mut name = text.to_os_string();
    name.push(".attach");
    Some(PathBuf::from(name))
}

/// What a client connection uses.
#[derive(Clone)]
struct Core {
    feed: Feed,
    inbox: StoreHandle,
    dispatcher: Addr<Dispatcher>,
    /// Set once the bot stops: why, for the client.
    bye: watch::Receiver<Option<String>>,
}

/// The running attach server.
pub struct AttachServer {
    path: PathBuf,
    bye: watch::Sender<Option<String>>,
    served: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl AttachServer {
    /// Binds `path` (mode 0600) and serves it; `None`, logged, when it
    /// cannot (the bot runs on without attach) or another live bot serves it.
    pub fn start(
        path: PathBuf,
        events: &EventBus,
        inbox: StoreHandle,
        dispatcher: Addr<Dispatcher>,
    ) -> Option<Self> {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            tracing::error!(path = %path.display(), "attach: another turnstile serves this socket; attach is off");
            return None;
        }
        let listener = match bind_private(&path) {
            Ok(listener) => listener,
            Err(err) => {
                tracing::error!(path = %path.display(), cause = %err, "attach: the socket could not be bound; attach is off");
                return None;
            }
        };
        tracing::info!(path = %path.display(), "attach: listening (turnstile attach)");
        let (bye, rx) = watch::channel(None);
        let core = Core {
            feed: Feed::start(events),
            inbox,
            dispatcher,
            bye: rx,
        };
        let served = tokio::spawn(serve(listener, core));
        Some(Self {
            path,
            bye,
            served: tokio::sync::Mutex::new(Some(served)),
        })
    }

    /// Ends every attachment saying the bot restarts or stops, waits (up
    /// to 2 s) for the clients to be told, and removes the socket.
    pub async fn close(&self, restarting: bool) {
        let reason = if restarting {
            "the bot is restarting: the attachment ended (attach again once it is back)"
        } else {
            "the bot stopped: the attachment ended"
        };
        self.bye.send_replace(Some(reason.to_string()));
        if let Some(served) = self.served.lock().await.take() {
            let _ = served.await;
        }
        if let Err(err) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), cause = %err, "attach: the socket could not be removed");
        }
    }
}

/// A listener on `path`, mode 0600 before anyone can reach it.
fn bind_private(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let dir = path.parent().unwrap_or(Path::new("."));
    let staging = dir.join(format!(".attach-{}", std::process::id()));
    // A leftover of a crashed run with this pid.
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let staged = staging.join("socket");
    let bound = (|| -> std::io::Result<std::os::unix::net::UnixListener> {
        let listener = std::os::unix::net::UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        if path.exists() {
            tracing::info!(path = %path.display(), "attach: a stale socket replaced");
        }
        std::fs::rename(&staged, path)?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    tokio::net::UnixListener::from_std(bound?)
}

/// Resolves once the bot stops, with the reason (empty when the server
/// went away without one).
async fn said_bye(bye: &mut watch::Receiver<Option<String>>) -> String {
    if bye.wait_for(Option::is_some).await.is_err() {
        return String::new();
    }
    bye.borrow().clone().unwrap_or_default()
}

/// Accepts clients until the stop, then waits for them to be told.
async fn serve(listener: tokio::net::UnixListener, core: Core) {
    let mut clients = JoinSet::new();
    let mut bye = core.bye.clone();
    loop {
        tokio::select! {
            _ = said_bye(&mut bye) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    clients.spawn(client(stream, core.clone()));
                }
                Err(err) => tracing::warn!(cause = %err, "attach: accept failed"),
            },
            Some(_) = clients.join_next(), if !clients.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(BYE_WAIT, async {
        while clients.join_next().await.is_some() {}
    })
    .await;
}

/// One client: its requests, then (following) its conversation's lines.
async fn client(stream: UnixStream, core: Core) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut bye = core.bye.clone();
    let hello = ServerLine::Hello {
        version: PROTOCOL_VERSION,
    };
    if write.write_all(hello.to_line().as_bytes()).await.is_err() {
        return;
    }
    let mut following: Option<(Conversation, mpsc::Receiver<ServerLine>)> = None;
    loop {
        let live = async {
            match &mut following {
                Some((_, rx)) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let out = tokio::select! {
            reason = said_bye(&mut bye) => {
                let _ = write.write_all(ServerLine::Bye { reason }.to_line().as_bytes()).await;
                return;
            }
            line = live => match line {
                Some(line) => vec![line],
                None => return,
            },
            asked = lines.next_line() => match asked {
                Ok(Some(asked)) => answer(&asked, &core, &mut following).await,
                // EOF (the client is gone) or a read error.
                Ok(None) | Err(_) => return,
            },
        };
        for line in out {
            if write.write_all(line.to_line().as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// The lines that answer one request.
async fn answer(
    asked: &str,
    core: &Core,
    following: &mut Option<(Conversation, mpsc::Receiver<ServerLine>)>,
) -> Vec<ServerLine> {
    let error = |message: String| vec![ServerLine::Error { message }];
    match serde_json::from_str::<ClientLine>(asked) {
        Err(err) => error(format!("not a request: {err}")),
        Ok(ClientLine::List) => list(core).await,
        Ok(ClientLine::Follow { conversation: key }) => {
            let Some(to) = conversation(&key) else {
                return error(format!(
                    "no such conversation: {key:?} (a chat id, or CHAT_TOPIC)"
                ));
            };
            let (mut out, rx) = core.feed.follow(to);
            *following = Some((to, rx));
            out.push(ServerLine::Following {
                conversation: to.key(),
            });
            out
        }
        Ok(ClientLine::Say { text }) => match following {
            None => error("follow a conversation before writing to it".into()),
            Some(_) if text.trim().is_empty() => error("an empty line is not sent".into()),
            Some((to, _)) => say(*to, &text, core).await,
        },
        Ok(ClientLine::Answer { answer }) => match (following, Callback::parse(&answer)) {
            (None, _) => error("follow a conversation before answering its question".into()),
            (Some((to, _)), Callback::Approval(approval)) => {
                if !core.feed.open(*to, &approval.token) {
                    tracing::info!(conversation = %to, "attach: an answer to a question not open; refused");
                    return error(
                        "no question of this conversation waits for that answer: it was decided, or its turn ended".into(),
                    );
                }
                core.dispatcher
                    .do_send(TerminalAnswer { to: *to, approval });
                Vec::new()
            }
            (Some(_), _) => error(format!("not an answer a question offers: {answer:?}")),
        },
    }
}

/// The conversations, latest active first.
async fn list(core: &Core) -> Vec<ServerLine> {
    let seen = core
        .inbox
        .read("listing conversations for attach", |s| {
            s.seen_conversations(LISTED)
        })
        .await;
    let Ok(seen) = seen else {
        return vec![ServerLine::Error {
            message: "the state file could not be read; see the bot's log".into(),
        }];
    };
    let mut out: Vec<ServerLine> = seen
        .iter()
        .map(|c| {
            let state = match core.feed.busy(c.to) {
                Some(busy) => busy,
                None if c.handed_off => "handed off",
                None if c.parked => "parked",
                None => "idle",
            };
            ServerLine::Conversation {
                conversation: c.to.key(),
                chat: c.to.chat.0,
                topic: c.to.topic_number(),
                title: c.opening.clone(),
                state: state.into(),
                last_activity: c.last,
            }
        })
        .collect();
    out.push(ServerLine::Listed { count: seen.len() });
    out
}

/// A typed line: written to the inbox, then to the dispatcher; the client
/// hears it was taken only once it is written. A command is read by the
/// one command table, as a chat message's is.
async fn say(to: Conversation, text: &str, core: &Core) -> Vec<ServerLine> {
    let (ask, text) = match parse(text.trim(), "") {
        Parsed::Text => (Ask::Agent, cut(text.trim()).0),
        Parsed::Known(command, args) => (Ask::Command(command), args.to_string()),
        Parsed::Unknown(word) => (Ask::Unknown(word), String::new()),
        Parsed::ForAnotherBot => {
            return vec![ServerLine::Error {
                message: "a command for another bot; write it without @NAME".into(),
            }];
        }
    };
    let mut m = Incoming {
        to,
        from: UserId(0),
        message_id: MessageId(0),
        date: crate::state::now_ms() / 1000,
        place: ChatKind::Private,
        ask,
        text,
        author: Author {
            name: "terminal".into(),
            username: None,
        },
        source: Source::Terminal,
        ..Incoming::default()
    };
    let written = core
        .inbox
        .ask("writing a typed line", move |s| {
            s.accept_typed(&mut m)?;
            Ok(m)
        })
        .await;
    match written {
        Some(m) => {
            let update_id = m.update_id;
            tracing::info!(update_id, conversation = %to, "attach: a typed line accepted");
            core.dispatcher.do_send(Typed(m));
            vec![ServerLine::Accepted { update_id }]
        }
        None => vec![ServerLine::Error {
            message: "the line could not be written to the inbox; not sent".into(),
        }],
    }
}

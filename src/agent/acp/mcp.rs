//! The chat tools (`send`, `end_turn`, `react`, `send_file`, …) as an MCP
//! server: over HTTP on loopback for an agent that advertises
//! `mcpCapabilities.http` (one listener per session on `127.0.0.1:0`,
//! answering only requests that carry the session's random bearer token,
//! 256 bits from the OS, never logged); otherwise over stdio, through
//! `turnstile mcp-bridge` (`bridge.rs`), which the agent starts and which
//! connects back to a Unix socket of the session in the conversation's
//! workdir, its first line the token; or, for an agent in a network of
//! its own (which can make no UNIX socket), to `127.0.0.1:3129` of its
//! sandbox, which the relay takes to the session's socket in the
//! process's chat tools directory (`network::ToolsDir`). The MCP messages are served as the
//! claude backend serves its in-process `telegram-tools` server
//! (`host::mcp`); a tool call goes to the turn as an
//! [`AgentEvent::ToolCall`] and its answer is the HTTP response.

use std::convert::Infallible;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    EnvVariable, HttpHeader, McpServer, McpServerHttp, McpServerStdio,
};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::agent::AgentEvent;
use crate::agent::host::jsonrpc::{self, PARSE_ERROR};
use crate::agent::host::mcp::{self, McpRequest};
use crate::agent::tools::{TOOL_SERVER, ToolRegistry};
use crate::shutdown::Shutdown;

/// The largest request body read.
const MAX_BODY: usize = 4 << 20;

/// A session's tool server: where it listens and its token. Dropped, it
/// stops listening (and its socket goes).
pub(crate) struct ToolServer {
    /// How the agent reaches it.
    reach: Reach,
    /// The token (hex).
    token: String,
    /// The accept loop.
    task: tokio::task::JoinHandle<()>,
}

/// What a stdio server serves with: the chat tools, where their calls
/// go, and the host's stop.
pub(crate) type Serve = (
    Arc<ToolRegistry>,
    mpsc::UnboundedSender<AgentEvent>,
    Shutdown,
);

/// How the agent reaches a tool server.
enum Reach {
    /// `http://127.0.0.1:PORT/mcp`.
    Http(String),
    /// The bridge command, started by the agent, and the session's socket.
    Stdio {
        /// `turnstile` (the bridge).
        bridge: PathBuf,
        /// The socket (in the conversation's workdir, or in the process's
        /// chat tools directory).
        socket: PathBuf,
        /// What the bridge connects to: the socket's path, or the relay's
        /// `127.0.0.1:PORT` in the agent's own network.
        connect: String,
    },
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Reach::Stdio { socket, .. } = &self.reach {
            let _ = std::fs::remove_file(socket);
        }
    }
}

impl std::fmt::Debug for ToolServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token stays out of every log.
        let at = match &self.reach {
            Reach::Http(url) => url.clone(),
            Reach::Stdio { socket, .. } => socket.display().to_string(),
        };
        f.debug_struct("ToolServer").field("at", &at).finish()
    }
}

/// What every request of one server shares.
#[derive(Clone)]
struct Serving {
    /// `Bearer <token>`, as the header must read.
    expected: Arc<str>,
    /// The chat tools.
    tools: Arc<ToolRegistry>,
    /// Where tool calls go.
    events: mpsc::UnboundedSender<AgentEvent>,
    /// Set once the host stops: calls are refused.
    shutdown: Shutdown,
}

impl ToolServer {
    /// Starts listening; `None` (logged) when no port or no random token
    /// can be had: the agent then gets no tools, and its answer is its
    /// message chunks.
    pub(crate) fn start(
        tools: Arc<ToolRegistry>,
        events: mpsc::UnboundedSender<AgentEvent>,
        shutdown: Shutdown,
    ) -> Option<Self> {
        let Some(token) = random_token() else {
            tracing::warn!("no random token for the chat tools' MCP server; not offered");
            return None;
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std);
        let listener = match listener {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(cause = %err, "the chat tools' MCP server could not listen; not offered");
                return None;
            }
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let serving = Serving {
            expected: format!("Bearer {token}").into(),
            tools,
            events,
            shutdown,
        };
        let task = tokio::spawn(accept(listener, serving));
        Some(Self {
            reach: Reach::Http(format!("http://127.0.0.1:{port}/mcp")),
            token,
            task,
        })
    }

    /// Starts listening on a Unix socket in `dir` (the conversation's
    /// workdir, mode 0600) for the stdio bridge `bridge`; `None` (logged)
    /// when it cannot.
    pub(crate) fn start_stdio(dir: &Path, bridge: PathBuf, serve: Serve) -> Option<Self> {
        let token = random_token()?;
        let socket = dir.join(format!(".turnstile-mcp-{}.sock", &token[..12]));
        let connect = socket.display().to_string();
        Self::listen_stdio(token, socket, connect, bridge, serve)
    }

    /// Starts listening on `socket` (in the process's chat tools
    /// directory, mode 0600) for the stdio bridge `bridge`, which connects
    /// to `relay` (the relay's `127.0.0.1:PORT` in the agent's sandbox);
    /// `None` (logged) when it cannot.
    pub(crate) fn start_relayed(
        socket: PathBuf,
        relay: String,
        bridge: PathBuf,
        serve: Serve,
    ) -> Option<Self> {
        let token = random_token()?;
        Self::listen_stdio(token, socket, relay, bridge, serve)
    }

    fn listen_stdio(
        token: String,
        socket: PathBuf,
        connect: String,
        bridge: PathBuf,
        (tools, events, shutdown): Serve,
    ) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let listener = match tokio::net::UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(socket = %socket.display(), cause = %err, "the chat tools' MCP socket could not be made; not offered");
                return None;
            }
        };
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        let serving = Serving {
            expected: token.clone().into(),
            tools,
            events,
            shutdown,
        };
        let task = tokio::spawn(accept_stdio(listener, serving));
        Some(Self {
            reach: Reach::Stdio {
                bridge,
                socket,
                connect,
            },
            token,
            task,
        })
    }

    /// The server as `session/new` names it.
    pub(crate) fn describe(&self) -> McpServer {
        match &self.reach {
            Reach::Http(url) => {
                McpServer::Http(McpServerHttp::new(TOOL_SERVER, url.clone()).headers(vec![
                    HttpHeader::new("Authorization", format!("Bearer {}", self.token)),
                ]))
            }
            Reach::Stdio {
                bridge, connect, ..
            } => McpServer::Stdio(
                McpServerStdio::new(TOOL_SERVER, bridge.clone())
                    .args(vec![
                        super::bridge::BRIDGE_COMMAND.to_owned(),
                        connect.clone(),
                    ])
                    .env(vec![EnvVariable::new(
                        super::bridge::TOKEN_ENV,
                        self.token.clone(),
                    )]),
            ),
        }
    }
}

/// Serves the bridges that connect to `listener`: the first line must be
/// the token; then one JSON-RPC message a line, each request answered on a
/// line of its own.
async fn accept_stdio(listener: tokio::net::UnixListener, serving: Serving) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    while let Ok((stream, _)) = listener.accept().await {
        let serving = serving.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = tokio::io::BufReader::new(read).lines();
            let token = lines.next_line().await.ok().flatten().unwrap_or_default();
            if !same(token.as_bytes(), serving.expected.as_bytes()) {
                tracing::warn!(
                    "chat tools' MCP socket: a bridge without the session's token refused"
                );
                return;
            }
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if message.get("id").is_none() {
                    continue;
                }
                let mut answer = serve(&serving, &message).await.to_string();
                answer.push('\n');
                if write.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// 256 random bits as hex, from the OS; `None` when it cannot be read.
fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` equals `expected`, in time that does not depend on
/// where they differ.
fn same(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn accept(listener: tokio::net::TcpListener, serving: Serving) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::debug!(cause = %err, "chat tools' MCP server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let serving = serving.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let serving = serving.clone();
                async move { Ok::<_, Infallible>(answer(&serving, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(err) = conn.await {
                tracing::debug!(cause = %err, "chat tools' MCP server: connection ended");
            }
        });
    }
}

fn reply(status: StatusCode, body: Option<Value>) -> Response<Full<Bytes>> {
    let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let mut response = Response::new(Full::new(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn answer(serving: &Serving, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|v| same(v.as_bytes(), serving.expected.as_bytes()));
    if !authorized {
        tracing::warn!("chat tools' MCP server: a request without the session's token refused");
        return reply(StatusCode::UNAUTHORIZED, None);
    }
    if req.method() != Method::POST {
        // No server-sent stream: every answer comes in its POST's response.
        return reply(StatusCode::METHOD_NOT_ALLOWED, None);
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, None),
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        let error = jsonrpc::error(&Value::Null, PARSE_ERROR, "parse error");
        return reply(StatusCode::BAD_REQUEST, Some(error));
    };
    if message.get("id").is_none() {
        // A notification or a response: nothing to answer.
        return reply(StatusCode::ACCEPTED, None);
    }
    reply(StatusCode::OK, Some(serve(serving, &message).await))
}

/// Serves one MCP request: answered at once, or a chat tool call handed to
/// the turn (refused once the host is stopping).
async fn serve(serving: &Serving, message: &Value) -> Value {
    match mcp::mcp(message, &serving.tools) {
        McpRequest::Answer(answer) => answer,
        McpRequest::Call {
            rpc_id,
            tool_use_id,
            call,
        } => {
            let stopping = serving.shutdown.is_closing();
            mcp::hand_over(rpc_id, tool_use_id, call, stopping, &serving.events).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"Bearer abc", b"Bearer abc"));
        assert!(!same(b"Bearer abd", b"Bearer abc"));
        assert!(!same(b"Bearer ab", b"Bearer abc"));
        assert!(!same(b"", b"Bearer abc"));
    }

    #[test]
    fn tokens_are_256_random_bits() {
        let a = random_token().expect("token");
        let b = random_token().expect("token");
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}

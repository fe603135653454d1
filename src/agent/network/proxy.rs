//! turnstile's HTTP proxy for the agent: `CONNECT host:port` (HTTPS, git,
//! anything over TLS) and plain HTTP in absolute form (`GET
//! http://host/…`), on a UNIX socket. Only hosts and ports the allowlist
//! names go through; a name that resolves to an address of this host
//! (loopback, link-local, unspecified, one of its interfaces' addresses)
//! goes through only when an exact entry names that host and port (so
//! `*.example.com` pointing at 127.0.0.1 opens no loopback service).
//! Everything is bounded: connections at once, the request head's size,
//! the wait for it, the connect, and the idle time of a tunnel. Garbage
//! gets a 400, never a panic.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::{Semaphore, oneshot};

use super::local::{host_addresses, is_local};
use super::tunnel::tunnel;
use crate::config::{HostPattern, HostRule, normal_host};

/// The proxy's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; past it, a 503.
    pub max_connections: usize,
    /// The largest request head read (request line and headers).
    pub max_head: usize,
    /// How long a client has to send its request head.
    pub head_timeout: Duration,
    /// How long a name lookup and connect may take.
    pub connect_timeout: Duration,
    /// A tunnel with no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_head: 16 * 1024,
            head_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// The proxy: its allowlist and bounds.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// What goes through.
    rules: Arc<Vec<HostRule>>,
    /// Its bounds.
    limits: Limits,
    /// How names are looked up.
    resolver: Resolver,
}

/// How the proxy looks names up.
#[derive(Debug, Clone)]
enum Resolver {
    /// The system's resolver.
    System,
    /// Every name resolves to these (unit tests).
    #[cfg(test)]
    Fixed(Vec<IpAddr>),
}

/// Why a request gets no tunnel: its status and the body the agent reads.
struct NoTunnel(u16, &'static str, String);

/// Binds the proxy's `socket`, its directory made 0700 (which must not
/// exist).
///
/// # Errors
///
/// The directory or the socket could not be made.
pub fn bind(socket: &Path) -> Result<std::os::unix::net::UnixListener, String> {
    use std::os::unix::fs::DirBuilderExt as _;
    if let Some(dir) = socket.parent() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::os::unix::net::UnixListener::bind(socket).map_err(|e| format!("{}: {e}", socket.display()))
}

impl Proxy {
    /// A proxy letting `rules` through within `limits`.
    #[must_use]
    pub fn new(rules: Vec<HostRule>, limits: Limits) -> Self {
        Self {
            rules: Arc::new(rules),
            limits,
            resolver: Resolver::System,
        }
    }

    /// The same proxy, every name resolving to `addrs`.
    #[cfg(test)]
    pub(crate) fn resolving_to(mut self, addrs: Vec<IpAddr>) -> Self {
        self.resolver = Resolver::Fixed(addrs);
        self
    }

    /// Binds `socket` (its directory made 0700, which must not exist) and
    /// serves on a thread of its own until the answer's sender is used or
    /// dropped.
    ///
    /// # Errors
    ///
    /// The directory, the socket or the thread could not be made.
    pub fn serve_on_thread(self, socket: &Path) -> Result<oneshot::Sender<()>, String> {
        self.serve_listener_on_thread(bind(socket)?)
    }

    /// Serves `listener` on a thread of its own until the answer's sender
    /// is used or dropped.
    ///
    /// # Errors
    ///
    /// The listener or the thread could not be set up.
    pub fn serve_listener_on_thread(
        self,
        listener: std::os::unix::net::UnixListener,
    ) -> Result<oneshot::Sender<()>, String> {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the proxy's socket: {e}"))?;
        let (stop, stopped) = oneshot::channel();
        std::thread::Builder::new()
            .name("net-proxy".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    tracing::error!("the agent's network proxy could not start its runtime");
                    return;
                };
                runtime.block_on(async move {
                    let Ok(listener) = UnixListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = self.serve(listener) => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| format!("a thread for the proxy: {e}"))?;
        Ok(stop)
    }

    /// Serves every connection `listener` accepts.
    pub async fn serve(self, listener: UnixListener) {
        let slots = Arc::new(Semaphore::new(self.limits.max_connections));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                tracing::warn!(
                    max = self.limits.max_connections,
                    "the agent's network proxy is full; a connection is refused"
                );
                let _ = stream.try_write(&response(
                    503,
                    "Service Unavailable",
                    "turnstile's proxy serves too many connections at once\n",
                ));
                continue;
            };
            let proxy = self.clone();
            tokio::spawn(async move {
                proxy.handle(stream).await;
                drop(slot);
            });
        }
    }

    /// One client connection: its request head, the decision, the tunnel.
    pub async fn handle<S>(&self, mut client: S)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let head = tokio::time::timeout(
            self.limits.head_timeout,
            read_head(&mut client, self.limits.max_head),
        )
        .await;
        let (head, early) = match head {
            Ok(Ok(read)) => read,
            Ok(Err(NoTunnel(status, reason, body))) => {
                let _ = client.write_all(&response(status, reason, &body)).await;
                return;
            }
            Err(_) => {
                let _ = client
                    .write_all(&response(
                        408,
                        "Request Timeout",
                        "turnstile's proxy: no request head in time\n",
                    ))
                    .await;
                return;
            }
        };
        let opened = match parse(&head) {
            Ok(request) => self.open(request).await,
            Err(refusal) => Err(refusal),
        };
        let (upstream, first) = match opened {
            Ok(open) => open,
            Err(NoTunnel(status, reason, body)) => {
                let _ = client.write_all(&response(status, reason, &body)).await;
                return;
            }
        };
        let mut upstream = upstream;
        let sent = match first {
            First::Established => client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_ok(),
            First::Forward(head) => upstream.write_all(&head).await.is_ok(),
        };
        if !sent || upstream.write_all(&early).await.is_err() {
            return;
        }
        tunnel(client, upstream, self.limits.idle_timeout).await;
    }

    /// The decision on `request`, and its connection when allowed.
    async fn open(&self, request: Request) -> Result<(TcpStream, First), NoTunnel> {
        let Request { host, port, first } = request;
        let Some(rule) = self.rules.iter().find(|r| r.allows(&host, port)) else {
            tracing::info!(host = %host, port, "the agent's network proxy refused a host not on its allowlist");
            return Err(refused(&host, port, "is not on the agent's allowlist"));
        };
        let exact = matches!(rule.host, HostPattern::Exact(_));
        let addrs = tokio::time::timeout(self.limits.connect_timeout, self.resolve(&host, port))
            .await
            .map_err(|_| bad_gateway(&host, port, "the name lookup timed out"))?
            .map_err(|e| bad_gateway(&host, port, &format!("the name lookup failed: {e}")))?;
        if !exact {
            let own = host_addresses();
            if let Some(addr) = addrs.iter().find(|a| is_local(a.ip(), &own)) {
                tracing::info!(host = %host, port, address = %addr.ip(), "the agent's network proxy refused a host that resolves to this host's own address");
                return Err(refused(
                    &host,
                    port,
                    &format!(
                        "resolves to {}, an address of turnstile's host, which only an exact entry may open",
                        addr.ip()
                    ),
                ));
            }
        }
        let connect = async {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for addr in &addrs {
                match TcpStream::connect(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = e,
                }
            }
            Err(last)
        };
        let stream = tokio::time::timeout(self.limits.connect_timeout, connect)
            .await
            .map_err(|_| bad_gateway(&host, port, "the connect timed out"))?
            .map_err(|e| bad_gateway(&host, port, &format!("the connect failed: {e}")))?;
        tracing::debug!(host = %host, port, "the agent's network proxy opened a connection");
        Ok((stream, first))
    }
}

/// What goes first once connected.
enum First {
    /// `CONNECT`: the client is told, then bytes flow.
    Established,
    /// Plain HTTP: this head goes to the server.
    Forward(Vec<u8>),
}

/// A request the proxy understood.
struct Request {
    /// Its host, as [`normal_host`] makes it.
    host: String,
    /// Its port.
    port: u16,
    /// What goes first.
    first: First,
}

/// `status` with a plain-text `body`, closing the connection.
fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A 403 naming the host, the port and the key that would allow it.
fn refused(host: &str, port: u16, why: &str) -> NoTunnel {
    NoTunnel(
        403,
        "Forbidden",
        format!(
            "turnstile refused the connection to {host}:{port}: it {why}. The agent's network \
             reaches only the model API and the hosts in the config key agent.network.allow \
             (ask the bot's operator).\n"
        ),
    )
}

/// A 502 naming the host and what failed.
fn bad_gateway(host: &str, port: u16, why: &str) -> NoTunnel {
    NoTunnel(
        502,
        "Bad Gateway",
        format!("turnstile's proxy could not reach {host}:{port}: {why}\n"),
    )
}

/// A 400 saying what was wrong.
fn bad_request(why: &str) -> NoTunnel {
    NoTunnel(400, "Bad Request", format!("turnstile's proxy: {why}\n"))
}

/// Reads up to the end of the request head (`\r\n\r\n`), at most `max`
/// bytes; answers the head and whatever came after it.
async fn read_head<S>(client: &mut S, max: usize) -> Result<(Vec<u8>, Vec<u8>), NoTunnel>
where
    S: AsyncRead + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > max {
            return Err(NoTunnel(
                431,
                "Request Header Fields Too Large",
                format!("turnstile's proxy: a request head is at most {max} bytes\n"),
            ));
        }
        let read = client
            .read(&mut chunk)
            .await
            .map_err(|_| bad_request("the connection failed"))?;
        if read == 0 {
            return Err(bad_request("the connection ended before the request head"));
        }
        buf.extend_from_slice(&chunk[..read]);
    }
}

/// The request a head asks for.
fn parse(head: &[u8]) -> Result<Request, NoTunnel> {
    let text = std::str::from_utf8(head).map_err(|_| bad_request("the head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(bad_request("expected `METHOD TARGET HTTP/1.x`"));
    };
    if !version.starts_with("HTTP/1.")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
    {
        return Err(bad_request("expected `METHOD TARGET HTTP/1.x`"));
    }
    if method == "CONNECT" {
        let (host, port) = authority(target)?;
        return Ok(Request {
            host,
            port,
            first: First::Established,
        });
    }
    let url = reqwest::Url::parse(target)
        .map_err(|_| bad_request("expected CONNECT host:port, or an absolute http:// URL"))?;
    if url.scheme() != "http" {
        return Err(bad_request(
            "only http:// URLs are forwarded; use CONNECT for https",
        ));
    }
    let host = normal_host(
        url.host_str()
            .ok_or_else(|| bad_request("the URL has no host"))?,
    );
    let port = url.port_or_known_default().unwrap_or(80);
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let mut out = format!("{method} {path} {version}\r\n");
    for header in lines.filter(|h| !h.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        let hop = [
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if !hop.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            out.push_str(header);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        first: First::Forward(out.into_bytes()),
    })
}

/// `host:port` of a `CONNECT` (`[v6]:port` too).
fn authority(target: &str) -> Result<(String, u16), NoTunnel> {
    let bad = || bad_request("CONNECT needs host:port");
    let (host, port) = target.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
    let host = normal_host(host);
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host, port))
}

impl Proxy {
    /// The addresses of `host` (an IP address stands for itself).
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        match &self.resolver {
            Resolver::System => lookup(host, port).await,
            #[cfg(test)]
            Resolver::Fixed(ips) => Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()),
        }
    }
}

/// The system's addresses of `host`.
async fn lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no address"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests;

//! The `[ops] listen` endpoint: `GET /healthz` and `GET /metrics` over
//! HTTP/1 (hyper), on the bot's own runtime.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::metrics::Metrics;
use crate::events::Gauges;
use crate::state::StoreHandle;

/// How long the dispatcher may take to answer a health ping.
const PING_BOUND: Duration = Duration::from_secs(2);

/// Asks the dispatcher whether it runs: `true` once it answered, `false`
/// when it is gone. Handed in by the wiring, so ops knows no chat actor.
pub type Ping = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// What the endpoint reads.
#[derive(Clone)]
pub struct Probe {
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// The store, for its error count.
    pub inbox: StoreHandle,
    /// Pings the dispatcher for `/healthz`.
    pub ping: Ping,
    /// `telegram.poll_timeout`: a poll must have answered within twice it.
    pub poll_timeout: Duration,
}

impl Probe {
    /// `None` when healthy, else why not.
    pub async fn unhealthy(&self) -> Option<String> {
        if let Some(reason) = self.poller_unhealthy() {
            return Some(reason);
        }
        match tokio::time::timeout(PING_BOUND, (self.ping)()).await {
            Ok(true) => None,
            Ok(false) => Some("the dispatcher is not running".into()),
            Err(_) => Some(format!(
                "the dispatcher did not answer within {}s",
                PING_BOUND.as_secs()
            )),
        }
    }

    /// Why the poller looks stuck or dead, if it does: no `getUpdates`
    /// answered within twice `telegram.poll_timeout`, counted from the last
    /// one, or, before the first (a long poll on a quiet bot answers only
    /// at its timeout), from `getMe`'s answer at start.
    fn poller_unhealthy(&self) -> Option<String> {
        let window = self.poll_timeout.saturating_mul(2);
        let limit = window.as_secs();
        match (
            self.metrics.since_last_poll(),
            self.metrics.since_met_telegram(),
        ) {
            (Some(ago), _) if ago > window => Some(format!(
                "telegram getUpdates last succeeded {}s ago (limit {limit}s)",
                ago.as_secs()
            )),
            (Some(_), _) => None,
            (None, Some(ago)) if ago > window => Some(format!(
                "telegram getUpdates has not succeeded in the {}s since getMe answered (limit {limit}s)",
                ago.as_secs()
            )),
            (None, Some(_)) => None,
            (None, None) => Some("telegram getUpdates has not succeeded yet".into()),
        }
    }
}

/// A running endpoint; stops when dropped.
#[derive(Debug)]
pub struct OpsServer {
    /// Where it listens (the real port when 0 was asked).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `listen`, first thing at start, so that a taken port fails the
/// start before anything else runs.
///
/// # Errors
///
/// The address does not parse or cannot be bound.
pub fn bind(listen: &str) -> std::io::Result<std::net::TcpListener> {
    let addr: SocketAddr = listen
        .trim()
        .parse()
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves on `listener` (from [`bind`]) on the current runtime.
///
/// # Errors
///
/// The listener cannot be registered with the runtime.
pub fn serve(listener: std::net::TcpListener, probe: Probe) -> std::io::Result<OpsServer> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving /healthz and /metrics");
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(cause = %err, "ops endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let probe = probe.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let probe = probe.clone();
                    async move { Ok::<_, Infallible>(answer(&probe, &req).await) }
                });
                let conn = http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(err) = conn.await {
                    tracing::debug!(cause = %err, "ops endpoint: connection ended");
                }
            });
        }
    });
    Ok(OpsServer { addr, task })
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

async fn answer(probe: &Probe, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        );
    }
    match req.uri().path() {
        "/healthz" => match probe.unhealthy().await {
            None => text(
                StatusCode::OK,
                "application/json",
                serde_json::json!({"status": "ok"}).to_string(),
            ),
            Some(reason) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "application/json",
                serde_json::json!({"status": "unhealthy", "reason": reason}).to_string(),
            ),
        },
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            probe.metrics.render(
                probe
                    .gauges
                    .supervisors
                    .load(std::sync::atomic::Ordering::SeqCst),
                probe.gauges.turns.load(std::sync::atomic::Ordering::SeqCst),
                probe.inbox.errors(),
            ),
        ),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

//! A tunnel's bytes, both ways, until both ends are done or it idles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Bytes both ways until both ends are done, or neither way moved a byte
/// for `idle`.
pub(super) async fn tunnel<S>(client: S, upstream: TcpStream, idle: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = upstream.into_split();
    let both = async {
        tokio::join!(
            copy(&mut client_read, &mut up_write, start, &last),
            copy(&mut up_read, &mut client_write, start, &last),
        );
    };
    let watchdog = async {
        loop {
            let seen = Duration::from_millis(last.load(Ordering::Relaxed));
            let quiet = start.elapsed().saturating_sub(seen);
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::select! {
        () = both => {}
        () = watchdog => tracing::debug!(?idle, "the agent's network proxy closed an idle tunnel"),
    }
}

/// One way of a tunnel; each chunk marks `last` (ms since `start`).
async fn copy<R, W>(from: &mut R, to: &mut W, start: Instant, last: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if to.write_all(&buf[..read]).await.is_err() {
            break;
        }
        let now = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.store(now, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}

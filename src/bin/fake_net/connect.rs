//! The fakes' network probes: what connecting to a target from where the
//! fake runs (in the sandbox, in the tests) gives. A target is
//! `tcp:HOST:PORT`, `unix:PATH`, `abstract:NAME`, or `proxy:HOST:PORT`
//! (a `CONNECT` through `HTTPS_PROXY`); what it gives, `ok: <what it
//! read>` or `error: <why>`.

use std::io::Write as _;

use serde_json::{Value, json};

/// Each target of the variable `var` (`,`-separated), probed.
pub(crate) fn connects(var: &str) -> serde_json::Map<String, Value> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| (t.to_string(), json!(connect(t))))
        .collect()
}

/// One target: what connecting and reading (a few
/// seconds at most) gave.
pub(crate) fn connect(target: &str) -> String {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let wait = std::time::Duration::from_secs(5);
    let read_some = |stream: &mut dyn std::io::Read| {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        // A few reads: a proxy's status line may come before the banner.
        for _ in 0..4 {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        format!("ok: {}", String::from_utf8_lossy(&seen))
    };
    let result: std::io::Result<String> = (|| {
        if let Some(addr) = target.strip_prefix("tcp:") {
            let addr: std::net::SocketAddr = addr.parse().map_err(std::io::Error::other)?;
            let mut stream = std::net::TcpStream::connect_timeout(&addr, wait)?;
            stream.set_read_timeout(Some(wait))?;
            return Ok(read_some(&mut stream));
        }
        if let Some(path) = target.strip_prefix("unix:") {
            let mut stream = UnixStream::connect(path)?;
            stream.set_read_timeout(Some(wait))?;
            return Ok(read_some(&mut stream));
        }
        if let Some(name) = target.strip_prefix("abstract:") {
            let addr = SocketAddr::from_abstract_name(name)?;
            let mut stream = UnixStream::connect_addr(&addr)?;
            stream.set_read_timeout(Some(wait))?;
            return Ok(read_some(&mut stream));
        }
        if let Some(authority) = target.strip_prefix("proxy:") {
            let proxy = std::env::var("HTTPS_PROXY").map_err(std::io::Error::other)?;
            let proxy = proxy.trim_start_matches("http://").trim_end_matches('/');
            let addr: std::net::SocketAddr = proxy.parse().map_err(std::io::Error::other)?;
            let mut stream = std::net::TcpStream::connect_timeout(&addr, wait)?;
            stream.set_read_timeout(Some(wait))?;
            stream.write_all(
                format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
            )?;
            return Ok(read_some(&mut stream));
        }
        Err(std::io::Error::other("unknown target"))
    })();
    result.unwrap_or_else(|e| format!("error: {e}"))
}

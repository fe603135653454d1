//! `turnstile mcp-bridge SOCKET`: the chat tools' MCP server over stdio,
//! for an agent that takes no HTTP MCP. The agent starts it (as
//! `session/new` named it); it connects to SOCKET, the session's Unix
//! socket in the conversation's workdir (or, as `127.0.0.1:PORT`, to the
//! relay of an agent in a network of its own, which takes it to the
//! session's socket), sends the session's token (from [`TOKEN_ENV`]) as
//! the first line, then relays lines both ways until either side ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

/// The bridge's first word on turnstile's command line.
pub const BRIDGE_COMMAND: &str = "mcp-bridge";

/// Carries the session's token to the bridge (set by the agent, as
/// `session/new` asked).
pub const TOKEN_ENV: &str = "ACP_MCP_TOKEN";

/// Runs the bridge with its arguments (after `mcp-bridge`): the socket.
pub fn run_bridge(args: &[String]) -> ExitCode {
    let [socket] = args else {
        eprintln!("turnstile {BRIDGE_COMMAND}: usage: turnstile {BRIDGE_COMMAND} SOCKET");
        return ExitCode::from(2);
    };
    let token = std::env::var(TOKEN_ENV).unwrap_or_default();
    let connected = match socket.parse::<SocketAddr>() {
        Ok(addr) => TcpStream::connect(addr).map(Stream::Tcp),
        Err(_) => UnixStream::connect(socket).map(Stream::Unix),
    };
    let stream = match connected {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!("turnstile {BRIDGE_COMMAND}: {socket}: {err}");
            return ExitCode::from(1);
        }
    };
    let Ok(mut to_host) = stream.try_clone() else {
        return ExitCode::from(1);
    };
    if writeln!(to_host, "{token}").is_err() {
        return ExitCode::from(1);
    }
    // Stdin to the host, line by line; its end ends the host's side.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if writeln!(to_host, "{line}").is_err() {
                break;
            }
        }
        to_host.end_writing();
    });
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

/// The connection to the host: the session's socket, or the relay's port.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> std::io::Result<Self> {
        match self {
            Self::Unix(s) => s.try_clone().map(Self::Unix),
            Self::Tcp(s) => s.try_clone().map(Self::Tcp),
        }
    }

    /// The host sees the end of its input.
    fn end_writing(&self) {
        let _ = match self {
            Self::Unix(s) => s.shutdown(Shutdown::Write),
            Self::Tcp(s) => s.shutdown(Shutdown::Write),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Unix(s) => s.write(buf),
            Self::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Unix(s) => s.flush(),
            Self::Tcp(s) => s.flush(),
        }
    }
}

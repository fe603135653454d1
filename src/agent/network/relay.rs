//! `turnstile net-relay SOCKET -- COMMAND…`: run inside the sandbox's own
//! network namespace, first thing. It binds `127.0.0.1:`[`RELAY_PORT`]
//! there, forks a relay that takes each connection to SOCKET (turnstile's
//! proxy, bound into the sandbox), and becomes COMMAND (the agent) in the
//! same process, so the agent keeps its pid, pipes and signals. The relay
//! has no stdio (the agent's pipes end with the agent) and dies with it.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::RELAY_PORT;

/// The relay's first word on turnstile's command line.
pub const RELAY_COMMAND: &str = "net-relay";

/// Connections relayed at once; past it, one is closed at once.
const MAX_CONNECTIONS: usize = 256;

/// Runs the relay with its arguments (after `net-relay`). Call it before
/// any thread starts: it forks.
#[must_use]
pub fn run_relay(args: &[String]) -> ExitCode {
    let usage = || {
        eprintln!(
            "turnstile {RELAY_COMMAND}: usage: turnstile {RELAY_COMMAND} SOCKET -- COMMAND [ARG…]"
        );
        ExitCode::from(2)
    };
    let [socket, dashes, command, rest @ ..] = args else {
        return usage();
    };
    if dashes != "--" {
        return usage();
    }
    let listener = match TcpListener::bind(("127.0.0.1", RELAY_PORT)) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("turnstile {RELAY_COMMAND}: 127.0.0.1:{RELAY_PORT}: {err}");
            return ExitCode::from(1);
        }
    };
    // SAFETY: no other thread runs yet (the relay is the first thing the
    // binary does), so the child may go on as a normal program.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "turnstile {RELAY_COMMAND}: fork: {}",
                std::io::Error::last_os_error()
            );
            ExitCode::from(1)
        }
        0 => {
            become_relay();
            serve(&listener, socket);
            ExitCode::SUCCESS
        }
        _ => {
            drop(listener);
            let err = std::process::Command::new(command).args(rest).exec();
            let _ = writeln!(
                std::io::stderr(),
                "turnstile {RELAY_COMMAND}: {command}: {err}"
            );
            ExitCode::from(127)
        }
    }
}

/// The forked child: killed with the agent, its stdio on `/dev/null` so
/// that the agent's pipes end when the agent does.
fn become_relay() {
    // SAFETY: prctl and open/dup2/close on descriptors this process owns.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

/// Relays every connection `listener` accepts to `socket`.
fn serve(listener: &TcpListener, socket: &str) {
    let open = Arc::new(AtomicUsize::new(0));
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let socket = socket.to_owned();
        let mine = Arc::clone(&open);
        let spawned = std::thread::Builder::new().spawn(move || {
            if let Ok(proxy) = UnixStream::connect(&socket) {
                relay(client, proxy);
            }
            mine.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Bytes both ways until both are done.
fn relay(client: TcpStream, proxy: UnixStream) {
    let (Ok(client_in), Ok(proxy_out)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let Ok(up) = std::thread::Builder::new().spawn(move || {
        let (mut from, mut to) = (client_in, proxy_out);
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    }) else {
        return;
    };
    let (mut from, mut to) = (proxy, client);
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

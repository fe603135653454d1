//! `turnstile net-relay [--no-unix-sockets] [--tools TOOLS] SOCKET --
//! COMMAND…`: run inside the sandbox's own network namespace, first
//! thing. It binds `127.0.0.1:`[`RELAY_PORT`] there (and
//! `127.0.0.1:`[`TOOLS_PORT`] with `--tools`), forks a relay that takes
//! each connection to SOCKET (turnstile's proxy, bound into the sandbox),
//! or to TOOLS (the session's chat tools socket, bound read-only), and
//! becomes COMMAND (the agent) in the same process, so the agent keeps its
//! pid, pipes and signals; with `--no-unix-sockets` only after a seccomp
//! filter forbids it UNIX sockets (the relay, forked before, is not
//! filtered: it reaches the two sockets it was given, and nothing the
//! agent names). The relay has no stdio (the agent's pipes end with the
//! agent) and dies with it.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{RELAY_PORT, TOOLS_PORT};

/// The relay's first word on turnstile's command line.
pub const RELAY_COMMAND: &str = "net-relay";

/// The flag that forbids the agent new UNIX sockets.
pub const NO_UNIX_SOCKETS: &str = "--no-unix-sockets";

/// The flag naming the chat tools' socket, relayed from
/// `127.0.0.1:`[`TOOLS_PORT`].
pub const TOOLS_FLAG: &str = "--tools";

/// The relay's command line, read.
struct Args<'a> {
    /// Whether the agent may make UNIX sockets.
    unix_sockets: bool,
    /// The chat tools' socket, when relayed.
    tools: Option<&'a str>,
    /// The proxy's socket.
    socket: &'a str,
    /// The agent's command and its arguments.
    command: &'a str,
    rest: &'a [String],
}

/// Reads the arguments after `net-relay`; `None` when they are not right.
fn parse(mut args: &[String]) -> Option<Args<'_>> {
    let (mut unix_sockets, mut tools) = (true, None);
    loop {
        match args {
            [flag, rest @ ..] if flag == NO_UNIX_SOCKETS => {
                unix_sockets = false;
                args = rest;
            }
            [flag, path, rest @ ..] if flag == TOOLS_FLAG => {
                tools = Some(path.as_str());
                args = rest;
            }
            _ => break,
        }
    }
    let [socket, dashes, command, rest @ ..] = args else {
        return None;
    };
    (dashes == "--").then_some(Args {
        unix_sockets,
        tools,
        socket,
        command,
        rest,
    })
}

/// Binds `127.0.0.1:port` in the sandbox.
fn bind(port: u16) -> Result<TcpListener, ExitCode> {
    TcpListener::bind(("127.0.0.1", port)).map_err(|err| {
        eprintln!("turnstile {RELAY_COMMAND}: 127.0.0.1:{port}: {err}");
        ExitCode::from(1)
    })
}

/// Connections relayed at once; past it, one is closed at once.
const MAX_CONNECTIONS: usize = 256;

/// Runs the relay with its arguments (after `net-relay`). Call it before
/// any thread starts: it forks.
#[must_use]
pub fn run_relay(args: &[String]) -> ExitCode {
    let Some(args) = parse(args) else {
        eprintln!(
            "turnstile {RELAY_COMMAND}: usage: turnstile {RELAY_COMMAND} [{NO_UNIX_SOCKETS}] \
             [{TOOLS_FLAG} TOOLS] SOCKET -- COMMAND [ARG…]"
        );
        return ExitCode::from(2);
    };
    let listener = match bind(RELAY_PORT) {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    let tools = match args.tools.map(|path| bind(TOOLS_PORT).map(|l| (l, path))) {
        Some(Err(code)) => return code,
        Some(Ok(tools)) => Some(tools),
        None => None,
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
            if let Some((listener, path)) = tools {
                let path = path.to_owned();
                let _ = std::thread::Builder::new().spawn(move || serve(&listener, &path));
            }
            serve(&listener, args.socket);
            ExitCode::SUCCESS
        }
        _ => {
            drop(listener);
            drop(tools);
            if !args.unix_sockets
                && let Err(err) = forbid_unix_sockets()
            {
                eprintln!("turnstile {RELAY_COMMAND}: seccomp: {err}");
                return ExitCode::from(1);
            }
            let command = args.command;
            let err = std::process::Command::new(command).args(args.rest).exec();
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

/// The audit architecture of this build, as seccomp names it.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
/// The audit architecture of this build, as seccomp names it.
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// A classic BPF instruction.
const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The seccomp program: `socket(AF_UNIX, …)` fails with EPERM (a UNIX
/// socket file of the host, such as a root-owned `docker.sock`, cannot be
/// reached however visible); so does `io_uring_setup` (its ops would go
/// around the filter), every syscall of another ABI (x32, i386 and its
/// `socketcall`); everything else is allowed. `socketpair` stays (pipes
/// between a program and its children).
#[must_use]
pub fn unix_socket_filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JGE: u16 = 0x35;
    const RET: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    const X32: u32 = 0x4000_0000;
    #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
    let (socket, uring, unix, eperm) = (
        libc::SYS_socket as u32,
        libc::SYS_io_uring_setup as u32,
        libc::AF_UNIX as u32,
        libc::EPERM as u32,
    );
    vec![
        op(LD_W_ABS, 0, 0, 4),        // 0: arch
        op(JEQ, 0, 7, AUDIT_ARCH),    // 1: another ABI: 9
        op(LD_W_ABS, 0, 0, 0),        // 2: nr
        op(JGE, 5, 0, X32),           // 3: x32: 9
        op(JEQ, 4, 0, uring),         // 4: io_uring_setup: 9
        op(JEQ, 0, 2, socket),        // 5: not socket: 8
        op(LD_W_ABS, 0, 0, 16),       // 6: its domain (args[0], low half)
        op(JEQ, 1, 0, unix),          // 7: AF_UNIX: 9
        op(RET, 0, 0, ALLOW),         // 8
        op(RET, 0, 0, ERRNO | eperm), // 9
    ]
}

/// Installs [`unix_socket_filter`] on this process (kept across `exec`).
///
/// # Errors
///
/// The kernel refused it.
pub fn forbid_unix_sockets() -> std::io::Result<()> {
    let mut filter = unix_socket_filter();
    let program = libc::sock_fprog {
        len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl with a valid, live program; no_new_privs first, as the
    // kernel requires of an unprivileged filter.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const program,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

//! The start's probe of the sandbox: `bwrap … true` run as every session
//! will run it, to learn whether bwrap can make its own user namespace, or
//! why it cannot run at all.

use std::process::Stdio;
use std::time::Duration;

use super::STDERR_LINE_CHARS;
use crate::agent::host::seal;

/// How long the start probe waits for `bwrap … true`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `bwrap <base flags> true` (see `seal::bwrap_base`) as every
/// session will. It tries bwrap's own user namespace with nested ones
/// forbidden (`seal::NO_NESTED_USERNS`) first, root too; not root, then
/// that namespace alone; then neither. Never a user namespace with a
/// setuid bwrap, which uses its own privileges (and whose child bubblewrap
/// 0.8 leaves behind, stuck, when that namespace cannot be made); root
/// drops its capabilities anyway. Answers whether the user namespace is
/// to be used and whether nested ones are forbidden, or why bwrap cannot
/// run.
pub(in crate::agent::host) fn probe_bubblewrap(root: bool) -> Result<(bool, bool), String> {
    let path = std::env::var_os("PATH");
    let Some(bwrap) = seal::find_program(seal::BWRAP, path.as_deref()) else {
        return Err(format!("`{}` is not on PATH", seal::BWRAP));
    };
    let tries: &[(bool, bool)] = if is_setuid(&bwrap) {
        &[(false, false)]
    } else if root {
        &[(true, true), (false, false)]
    } else {
        &[(true, true), (true, false), (false, false)]
    };
    let mut failed = Vec::new();
    for &(user_ns, no_nested) in tries {
        let mut argv = seal::bwrap_base(user_ns);
        argv.extend(seal::userns_seal(user_ns, no_nested));
        argv.extend(["--".to_owned(), "true".to_owned()]);
        match run_probe(&bwrap, &argv[1..], path.as_deref()) {
            Ok(()) => return Ok((user_ns, no_nested)),
            Err(why) => {
                let why = format!("`{}` {why}", argv.join(" "));
                if user_ns {
                    tracing::info!(cause = %why, "bwrap cannot make its own user namespace so; trying with less");
                }
                failed.push(why);
            }
        }
    }
    Err(failed.join("; "))
}

/// Whether `file` is set-user-ID.
fn is_setuid(file: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o4000 != 0)
}

/// Runs `program args` from an environment of `path` alone; waits for the
/// process itself (not for its stderr to close, which a child it leaves
/// behind may hold), at most [`PROBE_TIMEOUT`].
fn run_probe(
    program: &std::path::Path,
    args: &[String],
    path: Option<&std::ffi::OsStr>,
) -> Result<(), String> {
    use std::io::Read as _;
    use std::os::fd::AsRawFd as _;
    let mut child = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(path.map(|path| ("PATH", path)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("could not be run: {err}"))?;
    let mut stderr = child.stderr.take();
    if let Some(pipe) = &stderr {
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    }
    let deadline = std::time::Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {PROBE_TIMEOUT:?}"));
            }
            Err(err) => return Err(format!("could not be waited for: {err}")),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut said = vec![0u8; 4 * STDERR_LINE_CHARS];
    let read = stderr
        .as_mut()
        .and_then(|pipe| pipe.read(&mut said).ok())
        .unwrap_or(0);
    let said = String::from_utf8_lossy(&said[..read]);
    let said: String = said.trim().chars().take(STDERR_LINE_CHARS).collect();
    Err(format!("failed ({status}): {said}"))
}

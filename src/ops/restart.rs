//! `/restart`: the binary re-executes itself with the same arguments (same
//! pid), its idle agents handed over (`agent::host::handover`).

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use crate::agent::host::handover;
use crate::config::RESTARTED_FROM_ENV;
use crate::ids::Conversation;

/// At start, in the binary (before anything spawns): this process
/// re-executes itself on `/restart`, so idle agents go along; what the
/// previous one handed over is taken now.
pub fn take_over() {
    handover::enable();
    let handed = handover::inherit();
    if handed > 0 {
        tracing::info!(handed, "idle agents handed over across the restart");
    }
}

/// Re-executes this binary with the same arguments, telling the new
/// process `to` asked; returns only on failure.
pub fn reexec(to: &Conversation) -> anyhow::Error {
    let exe = match restart_exe() {
        Ok(exe) => exe,
        Err(err) => return anyhow::anyhow!("cannot find this binary to restart: {err}"),
    };
    let mut command = std::process::Command::new(&exe);
    command
        .arg0(
            std::env::args_os()
                .next()
                .unwrap_or_else(|| "turnstile".into()),
        )
        .args(std::env::args_os().skip(1))
        .env(RESTARTED_FROM_ENV, to.key());
    match handover::prepare_exec(&mut command) {
        Ok(handed) => tracing::warn!(exe = %exe.display(), handed, "re-executing for /restart"),
        Err(err) => tracing::warn!(
            exe = %exe.display(),
            cause = %err,
            "re-executing for /restart; the idle agents could not be handed over and end with this process"
        ),
    }
    let err = command.exec();
    anyhow::anyhow!("restart failed: could not execute {}: {err}", exe.display())
}

/// The binary to re-execute. On Linux `/proc/self/exe`, which still opens
/// the running binary's inode after an in-place upgrade replaced or deleted
/// its path (whose name then ends in " (deleted)"); elsewhere the path.
fn restart_exe() -> std::io::Result<PathBuf> {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if cfg!(target_os = "linux") && proc_exe.exists() {
        return Ok(proc_exe);
    }
    std::env::current_exe()
}

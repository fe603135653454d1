use std::process::{Command, Stdio};

use super::*;

fn cloexec(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
}

fn handed(child: &mut std::process::Child, key: &str) -> HandedProcess {
    let pid = child.id();
    HandedProcess {
        key: key.into(),
        session_id: format!("session of {key}"),
        started_as: "as started".into(),
        pid,
        start_time: super::super::process::start_time(pid).expect("start time"),
        stdin: OwnedFd::from(child.stdin.take().expect("stdin")),
        stdout: OwnedFd::from(child.stdout.take().expect("stdout")),
        stderr: OwnedFd::from(child.stderr.take().expect("stderr")),
    }
}

/// A child leading its own process group, as an agent does.
fn sleeper() -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    Command::new("sleep")
        .arg("60")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sleep starts")
}

/// Whether `pid` has exited (the release thread closes it): waited for on
/// its pidfd, at most 30 s.
fn gone(pid: u32) -> bool {
    // SAFETY: pidfd_open makes a new descriptor for our own child.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        // Already reaped by the release thread.
        return true;
    }
    // SAFETY: `fd` is a fresh descriptor this test owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Readable once the process has exited; at most 30 s.
    // SAFETY: one valid pollfd for the call's duration.
    unsafe { libc::poll(&raw mut poll, 1, 30_000) == 1 }
}

/// One test: the registry is the process's, as an exec is.
#[test]
fn what_is_handed_over_crosses_the_exec_once_and_only_as_it_was_started() {
    let mut kept = sleeper();
    let mut other = sleeper();
    let mut stray = sleeper();
    let (kept_pid, other_pid) = (kept.id(), other.id());
    give(handed(&mut kept, "1"));
    give(handed(&mut other, "2"));
    let mut stray_record = handed(&mut stray, "3");
    stray_record.start_time += 1;
    give(stray_record);
    let mut command = Command::new("true");
    assert_eq!(prepare_exec(&mut command).expect("record written"), 3);
    let fd: RawFd = command
        .get_envs()
        .find(|(k, _)| *k == HANDOVER_FD_ENV)
        .and_then(|(_, v)| v?.to_str()?.parse().ok())
        .expect("the record's descriptor is named");
    assert!(!cloexec(fd), "the record crosses the exec");
    let record_bytes = std::fs::read(format!("/proc/self/fd/{fd}")).expect("record");
    let record: Record = serde_json::from_slice(&record_bytes).expect("a record");
    let pipes: Vec<RawFd> = (record.processes.iter())
        .flat_map(|p| [p.stdin, p.stdout, p.stderr])
        .collect();
    assert!(
        pipes.iter().all(|fd| !cloexec(*fd)),
        "the pipes cross the exec"
    );
    assert!(
        prepare_exec(&mut Command::new("true")).expect("nothing") == 0,
        "what was handed over goes once"
    );

    // The next process's side.
    assert_eq!(inherit_from(fd), 2, "the stray's start time is not its own");
    assert!(
        pipes.iter().all(|fd| cloexec(*fd)),
        "no later child inherits them"
    );
    assert!(
        came_across_the_exec(kept_pid) && came_across_the_exec(other_pid),
        "never a leftover to kill"
    );
    assert!(!came_across_the_exec(stray.id()), "not adopted");
    assert!(
        claim("1", "session of 1", "otherwise").is_none(),
        "started otherwise"
    );
    assert!(gone(kept_pid), "the one started otherwise is closed");
    assert!(
        claim("1", "session of 1", "as started").is_none(),
        "claimed once"
    );
    let taken = claim("2", "session of 2", "as started").expect("the same start");
    assert_eq!(taken.pid, other_pid);
    assert!(is_own_child(taken.pid, taken.start_time));
    assert!(!is_own_child(1, taken.start_time), "not a child");
    assert_eq!(release_unclaimed(), 0, "nothing else waits");
    drop(taken);
    other.kill().expect("kill");
    other.wait().expect("reaped");
    stray.kill().expect("kill");
    stray.wait().expect("reaped");
    let _ = kept.try_wait();
}

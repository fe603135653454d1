use super::*;

#[test]
fn a_cli_that_is_missing_or_not_executable_is_found_out_before_the_sandbox_runs() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").expect("written");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let errno = |command: &str, path: Option<&str>| {
        executable(command, path.map(std::ffi::OsStr::new))
            .err()
            .and_then(|e| e.raw_os_error())
    };
    let missing = dir.path().join("missing");
    assert_eq!(errno(&missing.to_string_lossy(), None), Some(libc::ENOENT));
    assert_eq!(errno(&plain.to_string_lossy(), None), Some(libc::EACCES));
    assert_eq!(
        errno(&dir.path().to_string_lossy(), None),
        Some(libc::EACCES)
    );
    assert_eq!(errno("sh", Some("/usr/bin:/bin")), None);
    assert_eq!(errno("/bin/sh", None), None);
    assert_eq!(
        errno("no-such-cli-here", Some("/usr/bin:/bin")),
        Some(libc::ENOENT)
    );
    assert_eq!(
        errno("sh", None),
        Some(libc::ENOENT),
        "no PATH, no bare name"
    );
    assert_eq!(errno("./relative/cli", None), None, "left to the exec");
}

#[tokio::test]
async fn a_10_mb_stderr_line_without_a_newline_is_cut_not_held() {
    let mut big = vec![b'x'; 10 * 1024 * 1024];
    big.extend_from_slice(b"\nnext line\nlast without newline");
    let mut reader = LineReader::new(
        BufReader::new(&big[..]),
        STDERR_LINE_BYTES,
        STDERR_LINE_BYTES,
    );
    let first = reader.next().await.unwrap().unwrap();
    assert_eq!(
        first.lossy().len(),
        STDERR_LINE_BYTES,
        "held only up to the bound"
    );
    let second = reader.next().await.unwrap().map(|f| f.lossy());
    assert_eq!(second.as_deref(), Some("next line"));
    let third = reader.next().await.unwrap().map(|f| f.lossy());
    assert_eq!(third.as_deref(), Some("last without newline"));
    assert_eq!(reader.next().await.unwrap(), None);
}

#[tokio::test]
async fn the_kept_stderr_tail_is_cut_at_the_line_bound() {
    // No newline at all: an agent writing 10 MB and exiting.
    let big = vec![b'y'; 10 * 1024 * 1024];
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    log_stderr(&big[..], 1, Arc::clone(&tail)).await;
    let tail = tail.lock().unwrap();
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].chars().count(), STDERR_LINE_CHARS);
}

/// A `sleep` leading its own process group, and its start time.
fn group_leader() -> (std::process::Child, AgentGroup) {
    use std::os::unix::process::CommandExt as _;
    let child = std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .expect("sleep runs");
    let group = AgentGroup {
        pgid: i64::from(child.id()),
        start_time: start_time(child.id()).expect("its start time"),
        boot_id: boot_id().expect("this boot's id"),
    };
    (child, group)
}

/// The signal that ended `child`, after a SIGTERM of the test's own: a
/// SIGKILL sent before it wins, so SIGTERM means nothing killed it.
fn ended_by(mut child: std::process::Child) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt as _;
    kill_group(child.id(), libc::SIGTERM);
    child.wait().expect("reaped").signal()
}

#[test]
fn a_group_recorded_in_an_earlier_boot_is_never_killed() {
    let now = boot_id().expect("this boot's id");
    let (child, this_boot) = group_leader();
    let earlier = AgentGroup {
        boot_id: "00000000-0000-4000-8000-000000000000".into(),
        ..this_boot.clone()
    };
    let unknown = AgentGroup {
        boot_id: String::new(),
        ..this_boot.clone()
    };
    assert_eq!(kill_leftover_groups(&[earlier, unknown], Some(&now)), 0);
    assert_eq!(
        kill_leftover_groups(std::slice::from_ref(&this_boot), None),
        0
    );
    assert_eq!(ended_by(child), Some(libc::SIGTERM), "nothing killed it");
    // Recorded in this boot, the same group is killed.
    let (child, this_boot) = group_leader();
    assert_eq!(kill_leftover_groups(&[this_boot], Some(&now)), 1);
    assert_eq!(ended_by(child), Some(libc::SIGKILL));
}

#[tokio::test]
async fn all_reaped_resolves_when_the_last_process_is_reaped() {
    let running = RunningProcesses::new();
    running.started();
    running.started();
    let waiter = tokio::spawn({
        let running = running.clone();
        async move { running.all_reaped().await }
    });
    running.reaped();
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "one process is still live");
    running.reaped();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken without polling")
        .unwrap();
    assert_eq!(running.get(), 0);
}

//! The tests of `telegram::files`.

use std::time::SystemTime;

use super::*;

#[test]
fn untrusted_names_are_reduced_to_a_safe_last_component() {
    assert_eq!(
        safe_component("../../etc/passwd").as_deref(),
        Some("passwd")
    );
    assert_eq!(
        safe_component("..\\..\\boot.ini").as_deref(),
        Some("boot.ini")
    );
    assert_eq!(safe_component("/abs/.bashrc").as_deref(), Some("bashrc"));
    assert_eq!(
        safe_component("ok name (1).pdf").as_deref(),
        Some("ok_name__1_.pdf")
    );
    assert_eq!(safe_component(".."), None);
    assert_eq!(safe_component("///"), None);
    assert_eq!(safe_component("日本"), None);
    assert_eq!(safe_component(&"a".repeat(300)).map(|s| s.len()), Some(64));
}

#[test]
fn names_come_from_the_sender_or_the_kind() {
    let doc = Attachment {
        kind: FileKind::Document,
        file_id: "x".into(),
        name: Some("../../etc/passwd".into()),
        size: 0,
    };
    assert_eq!(
        name_parts(&doc, "documents/file_1"),
        ("document-passwd".into(), String::new())
    );
    let photo = Attachment {
        kind: FileKind::Photo,
        file_id: "x".into(),
        name: None,
        size: 0,
    };
    assert_eq!(
        name_parts(&photo, "photos/file_7.png"),
        ("photo".into(), "png".into())
    );
    assert_eq!(
        name_parts(&photo, "photos/file_7"),
        ("photo".into(), "jpg".into())
    );
}

#[test]
fn a_taken_name_gets_a_number_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Dir::open(dir.path()).unwrap();
    let (a, mut fa) = create_unique(&inbox, "x", "txt").unwrap();
    fa.write_all(b"first").unwrap();
    let (b, _) = create_unique(&inbox, "x", "txt").unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("x.txt", "x-2.txt"));
    assert_eq!(std::fs::read(dir.path().join(&a)).unwrap(), b"first");
    // A symlink where a name would go is a taken name, never followed.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("y.txt"), dir.path().join("y.txt")).unwrap();
    let (c, _) = create_unique(&inbox, "y", "txt").unwrap();
    assert_eq!(c, "y-2.txt");
    assert!(!outside.path().join("y.txt").exists());
}

#[test]
fn only_regular_files_inside_the_workdir_go_out() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("ok.txt"), "hi").unwrap();
    std::fs::write(base.path().join("secret.txt"), "no").unwrap();
    std::os::unix::fs::symlink(base.path().join("secret.txt"), ws.join("link.txt")).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/in.txt"), "deep").unwrap();
    std::os::unix::fs::symlink(ws.join("sub"), ws.join("subl")).unwrap();
    std::os::unix::fs::symlink(base.path(), ws.join("up")).unwrap();
    std::fs::write(ws.join("empty"), "").unwrap();
    let sent = |path: &str| {
        let file = outgoing(&ws, path, false).unwrap();
        (file.name.clone(), file.read().unwrap())
    };
    assert_eq!(sent("ok.txt"), ("ok.txt".into(), b"hi".to_vec()));
    assert_eq!(sent(&ws.join("ok.txt").to_string_lossy()).1, b"hi");
    assert_eq!(sent("sub/in.txt"), ("in.txt".into(), b"deep".to_vec()));
    assert_eq!(sent("./sub/../ok.txt").1, b"hi");
    for bad in [
        "link.txt",
        "../secret.txt",
        "up/secret.txt",
        "subl/in.txt",
        "sub",
        "missing",
        "empty",
        "/etc/passwd",
        ".",
        "",
    ] {
        assert!(outgoing(&ws, bad, false).is_err(), "{bad} was let out");
    }
    let why = outgoing(&ws, "up/secret.txt", false).unwrap_err();
    assert!(why.contains("symlink"), "{why}");
    let why = outgoing(&ws, "sub/../../secret.txt", false).unwrap_err();
    assert!(why.contains("outside your working directory"), "{why}");
}

#[test]
fn a_file_that_grows_past_the_limit_after_the_check_is_not_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.png"), b"x").unwrap();
    let file = outgoing(dir.path(), "p.png", true).unwrap();
    let grown = vec![7u8; usize::try_from(MAX_PHOTO_UPLOAD).unwrap() + 1];
    std::fs::write(dir.path().join("p.png"), grown).unwrap();
    let why = file.read().unwrap_err().to_string();
    assert!(why.contains("grew past"), "{why}");
}

#[test]
fn an_inbox_that_is_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(INBOX_DIR)).unwrap();
    let why = open_inbox(dir.path()).unwrap_err().to_string();
    assert!(why.contains("not a directory"), "{why}");
    let linked = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), linked.path().join("ws")).unwrap();
    assert!(open_inbox(&linked.path().join("ws")).is_err());
    let fresh = tempfile::tempdir().unwrap();
    let made = open_inbox(&fresh.path().join("ws")).unwrap();
    made.create_file("a").unwrap();
    assert!(fresh.path().join("ws/inbox/a").is_file());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(fresh.path().join("ws/inbox"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// Sets a file's (or, for a symlink, the link's own) modification time
/// `ago` in the past.
fn age(path: &Path, ago: Duration) {
    let when = SystemTime::now() - ago;
    let secs = when
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let times = [libc::timespec {
        tv_sec: i64::try_from(secs).unwrap(),
        tv_nsec: 0,
    }; 2];
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string and two timespecs.
    let done = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
}

#[test]
fn old_inbox_files_are_pruned_and_nothing_is_followed() {
    let base = tempfile::tempdir().unwrap();
    let month = Duration::from_secs(40 * 86_400);
    let retention = Duration::from_secs(30 * 86_400);
    let ws = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("old.txt"), "keep").unwrap();
    age(&outside.join("old.txt"), month);
    for chat in ["1001", "-100_7"] {
        let inbox = ws.join(format!("c{chat}")).join("work/inbox");
        std::fs::create_dir_all(inbox.join("sub")).unwrap();
        std::fs::write(inbox.join("old.oga"), "old").unwrap();
        std::fs::write(inbox.join("new.oga"), "new").unwrap();
        std::fs::write(inbox.join("sub/old.txt"), "agent's").unwrap();
        age(&inbox.join("old.oga"), month);
        age(&inbox.join("sub/old.txt"), month);
        age(&inbox.join("sub"), month);
        std::os::unix::fs::symlink(outside.join("old.txt"), inbox.join("link")).unwrap();
        age(&inbox.join("link"), month);
    }
    // A chat whose inbox, or whose workdir, is a symlink to outside.
    std::fs::create_dir_all(ws.join("c5/work")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("c5/work/inbox")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("c6")).unwrap();
    std::fs::create_dir_all(outside.join("work/inbox")).unwrap();
    std::fs::write(outside.join("work/inbox/old.txt"), "keep").unwrap();
    age(&outside.join("work/inbox/old.txt"), month);
    let template = ws.join("c{chat}").join("work");
    assert_eq!(prune_inboxes(&template, retention), 4);
    for chat in ["1001", "-100_7"] {
        let inbox = ws.join(format!("c{chat}")).join("work/inbox");
        assert!(!inbox.join("old.oga").exists());
        assert!(std::fs::symlink_metadata(inbox.join("link")).is_err());
        assert!(inbox.join("new.oga").exists());
        assert!(inbox.join("sub/old.txt").exists(), "not recursed into");
    }
    assert_eq!(std::fs::read(outside.join("old.txt")).unwrap(), b"keep");
    assert!(outside.join("work/inbox/old.txt").exists());
    assert_eq!(prune_inboxes(&template, retention), 0);
    assert_eq!(
        prune_inboxes(&base.path().join("none/{chat}"), retention),
        0
    );
}

#[test]
fn a_failed_fetch_keeps_telegrams_answer_as_its_source() {
    use std::error::Error as _;
    let answer = teloxide::ApiError::Unknown("Bad Gateway".into());
    let err = FetchError::from(teloxide::RequestError::Api(answer));
    let source = err
        .source()
        .and_then(|s| s.downcast_ref::<teloxide::RequestError>());
    assert!(
        matches!(source, Some(teloxide::RequestError::Api(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains("Bad Gateway"), "{err}");
    let saved = FetchError::from(std::io::Error::other("disk full"));
    assert!(saved.source().is_some_and(|s| s.is::<std::io::Error>()));
}

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;

use super::*;

#[test]
fn the_proxy_starts_once_on_a_private_socket_and_goes_with_its_isolation() {
    let isolation = Isolation::new(
        vec![HostRule::parse("example.com").expect("rule")],
        PathBuf::from("/usr/bin/turnstile"),
    );
    assert!(
        !isolation.socket().exists(),
        "nothing starts before a spawn"
    );
    isolation.start().expect("starts");
    isolation
        .start()
        .expect("a second start answers as the first");
    let dir = isolation.socket().parent().expect("dir").to_owned();
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let mut stream =
        std::os::unix::net::UnixStream::connect(isolation.socket()).expect("it listens");
    stream
        .write_all(b"CONNECT elsewhere.org:443 HTTP/1.1\r\n\r\n")
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(answer.contains("elsewhere.org:443"), "{answer}");
    drop(isolation);
    assert!(!dir.exists(), "its directory goes with it");
}

#[test]
fn each_process_gets_a_private_tools_directory_that_goes_with_it() {
    let isolation = Isolation::new(Vec::new(), PathBuf::from("/usr/bin/turnstile"));
    let one = isolation.tools_dir().expect("made");
    let two = isolation.tools_dir().expect("made");
    assert_ne!(one.path(), two.path(), "one a process");
    assert_eq!(one.path().parent(), isolation.socket().parent());
    let mode = std::fs::metadata(one.path())
        .expect("dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert_eq!(one.socket(), one.path().join(TOOLS_SOCKET));
    std::fs::write(one.socket(), b"").expect("a file where the socket goes");
    let dir = one.path().to_owned();
    drop(one);
    assert!(!dir.exists(), "it goes with its process, socket and all");
    assert!(two.path().exists());
}

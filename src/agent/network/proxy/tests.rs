use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio::net::TcpListener;

use super::*;

/// The longest any single step here may take on a loaded machine.
const BOUND: Duration = Duration::from_secs(20);

fn rule(text: &str) -> HostRule {
    HostRule::parse(text).expect("a rule")
}

/// An echo server on 127.0.0.1; its port.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// `proxy` serving one client; the client's end.
fn client_of(proxy: Proxy) -> DuplexStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { proxy.handle(server).await });
    client
}

/// Everything the proxy sends until it closes, within [`BOUND`].
async fn read_all(client: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(BOUND, client.read_to_end(&mut out))
        .await
        .expect("the proxy answers and closes in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `request` through a proxy of `rules`; its whole answer.
async fn ask(proxy: Proxy, request: &[u8]) -> String {
    let mut client = client_of(proxy);
    client.write_all(request).await.expect("write");
    read_all(&mut client).await
}

#[tokio::test]
async fn an_allowed_host_and_port_is_tunnelled_both_ways() {
    let port = echo_server().await;
    let proxy = Proxy::new(vec![rule(&format!("127.0.0.1:{port}"))], Limits::default());
    let mut client = client_of(proxy);
    // The first bytes of the tunnel may come with the head.
    let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\nping");
    client.write_all(head.as_bytes()).await.expect("write");
    let want = b"HTTP/1.1 200 Connection Established\r\n\r\nping";
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(BOUND, client.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    client.write_all(b" pong").await.expect("write");
    let mut more = [0u8; 5];
    tokio::time::timeout(BOUND, client.read_exact(&mut more))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&more, b" pong");
}

#[tokio::test]
async fn another_port_of_an_allowed_host_gets_a_403_naming_host_and_key() {
    let allowed = echo_server().await;
    let other = echo_server().await;
    let proxy = Proxy::new(
        vec![rule(&format!("127.0.0.1:{allowed}"))],
        Limits::default(),
    );
    let answer = ask(
        proxy.clone(),
        format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\nping").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains(&format!("127.0.0.1:{other}")), "{answer}");
    assert!(answer.contains("agent.network.allow"), "{answer}");
    assert!(
        !answer.contains("ping"),
        "nothing reached the server: {answer}"
    );
    let plain = ask(
        proxy,
        format!("GET http://127.0.0.1:{other}/ HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(plain.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{plain}");
}

#[tokio::test]
async fn a_wildcard_name_resolving_to_this_host_is_refused_an_exact_one_is_not() {
    let port = echo_server().await;
    let loopback = vec![IpAddr::from([127, 0, 0, 1])];
    let wildcard = Proxy::new(
        vec![rule(&format!("*.example.com:{port}"))],
        Limits::default(),
    )
    .resolving_to(loopback.clone());
    let answer = ask(
        wildcard,
        format!("CONNECT api.example.com:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("resolves to 127.0.0.1"), "{answer}");
    let mapped = Proxy::new(
        vec![rule(&format!("*.example.com:{port}"))],
        Limits::default(),
    )
    .resolving_to(vec!["::ffff:127.0.0.1".parse().expect("ip")]);
    let answer = ask(
        mapped,
        format!("CONNECT api.example.com:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    let exact = Proxy::new(
        vec![rule(&format!("api.example.com:{port}"))],
        Limits::default(),
    )
    .resolving_to(loopback);
    let mut client = client_of(exact);
    client
        .write_all(format!("CONNECT API.Example.com.:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut got = [0u8; 12];
    tokio::time::timeout(BOUND, client.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&got, b"HTTP/1.1 200");
}

#[tokio::test]
async fn plain_http_goes_in_origin_form_without_proxy_headers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.expect("read");
            head.push(byte[0]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .expect("write");
        String::from_utf8(head).expect("utf-8")
    });
    let proxy = Proxy::new(vec![rule(&format!("127.0.0.1:{port}"))], Limits::default());
    let answer = ask(
        proxy,
        format!(
            "POST http://127.0.0.1:{port}/v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    let head = tokio::time::timeout(BOUND, server)
        .await
        .expect("in time")
        .expect("server");
    assert!(
        head.starts_with("POST /v1/messages?beta=true HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
    assert!(!head.contains("keep-alive"), "{head}");
}

#[tokio::test]
async fn an_oversized_head_gets_a_431_not_a_bigger_buffer() {
    let limits = Limits {
        max_head: 1024,
        ..Limits::default()
    };
    let proxy = Proxy::new(vec![rule("example.com")], limits);
    let mut client = client_of(proxy);
    let mut request = b"CONNECT example.com:443 HTTP/1.1\r\n".to_vec();
    request.extend(std::iter::repeat_n(b'a', 8 * 1024));
    // The proxy may stop reading once it has seen too much.
    let _ = client.write_all(&request).await;
    let answer = read_all(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert!(answer.contains("at most 1024 bytes"), "{answer}");
}

#[tokio::test]
async fn garbage_gets_a_400_and_the_proxy_goes_on() {
    let port = echo_server().await;
    let proxy = Proxy::new(vec![rule(&format!("127.0.0.1:{port}"))], Limits::default());
    let garbage: [&[u8]; 10] = [
        b"\0\0\0\0\r\n\r\n",
        b"GET\r\n\r\n",
        b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
        b"CONNECT :443 HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
        b"\xff\xfe CONNECT x HTTP/1.1\r\n\r\n",
        b"get http://127.0.0.1/ HTTP/1.1\r\n\r\n",
    ];
    for request in garbage {
        let answer = ask(proxy.clone(), request).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{:?}: {answer}",
            String::from_utf8_lossy(request)
        );
    }
    // A client that goes away mid-head gets nothing, and nothing breaks.
    let mut client = client_of(proxy.clone());
    client.write_all(b"CONNECT 127.0").await.expect("write");
    client.shutdown().await.expect("shutdown");
    let answer = read_all(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let mut fine = client_of(proxy);
    fine.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut got = [0u8; 12];
    tokio::time::timeout(BOUND, fine.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&got, b"HTTP/1.1 200");
}

#[tokio::test]
async fn a_silent_client_and_an_idle_tunnel_are_closed() {
    let port = echo_server().await;
    let limits = Limits {
        head_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let proxy = Proxy::new(vec![rule(&format!("127.0.0.1:{port}"))], limits);
    let mut silent = client_of(proxy.clone());
    let answer = read_all(&mut silent).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let mut idle = client_of(proxy);
    let opened = std::time::Instant::now();
    idle.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let answer = read_all(&mut idle).await;
    assert_eq!(answer, "HTTP/1.1 200 Connection Established\r\n\r\n");
    assert!(
        opened.elapsed() >= Duration::from_millis(300),
        "{:?}",
        opened.elapsed()
    );
}

#[tokio::test]
async fn past_its_connection_bound_the_server_answers_503() {
    let dir = std::env::temp_dir().join(format!("turnstile-proxy-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("dir");
    let socket = dir.join("proxy.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    tokio::spawn(Proxy::new(vec![rule("example.com")], limits).serve(listener));
    // The first holds the only slot (it never sends its head).
    let _first = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("first");
    let mut second = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("second");
    let mut out = Vec::new();
    tokio::time::timeout(BOUND, second.read_to_end(&mut out))
        .await
        .expect("in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn this_hosts_own_addresses_are_local() {
    let own = host_addresses();
    assert!(own.contains(&IpAddr::from([127, 0, 0, 1])), "{own:?}");
    for ip in [
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "::",
        "169.254.169.254",
        "fe80::1",
    ] {
        assert!(is_local(ip.parse().expect("ip"), &[]), "{ip}");
    }
    for ip in &own {
        assert!(is_local(*ip, &own), "{ip}");
    }
    assert!(!is_local("203.0.113.7".parse().expect("ip"), &own));
    assert!(!is_local("2001:db8::7".parse().expect("ip"), &own));
}

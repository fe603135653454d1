//! The agent's own network, proven with the real `turnstile` binary and
//! `fake-claude` under bubblewrap (with `--features real-cli`, as root;
//! and with the bot as `nobody`): from inside the sandbox the agent reaches
//! no service on the host's loopback (the ops port included), no host
//! abstract socket, no UNIX socket file (a root-owned 0600 one, in `/run`
//! and elsewhere); through turnstile's proxy it reaches the model API's
//! host and port and nothing else, and a refusal is a 403 it can read.
//! `agent.network.mode = "host"` shows what the same probes reach without
//! it.

mod support;

use std::process::Command;

#[cfg(feature = "real-cli")]
mod sandboxed {
    use std::io::Write as _;
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    use std::process::Command;
    use std::time::Duration;

    use super::support::*;
    use serde_json::Value;

    /// A child killed when the test ends, however it ends.
    struct Reaped(std::process::Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Panics unless this runs as root with `bwrap` on PATH.
    fn require_bubblewrap_as_root() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        let bwrap = Command::new("bwrap").arg("--version").output();
        assert!(
            uid == 0 && bwrap.as_ref().is_ok_and(|o| o.status.success()),
            "the network test (--features real-cli) needs root (uid {uid}) and `bwrap` on PATH \
         (Debian package bubblewrap): {bwrap:?}"
        );
    }

    /// Listens on host loopback TCP, an abstract socket or a socket file;
    /// every connection gets `banner` and is closed.
    fn serve_banners<L>(listener: L, banner: &'static str)
    where
        L: Send + 'static + Accept,
    {
        std::thread::spawn(move || {
            while let Some(mut stream) = listener.next() {
                let _ = stream.write_all(banner.as_bytes());
            }
        });
    }

    /// A listener of any kind, as [`serve_banners`] takes it.
    trait Accept {
        fn next(&self) -> Option<Box<dyn std::io::Write>>;
    }

    impl Accept for std::net::TcpListener {
        fn next(&self) -> Option<Box<dyn std::io::Write>> {
            self.accept().ok().map(|(s, _)| Box::new(s) as _)
        }
    }

    impl Accept for std::os::unix::net::UnixListener {
        fn next(&self) -> Option<Box<dyn std::io::Write>> {
            self.accept().ok().map(|(s, _)| Box::new(s) as _)
        }
    }

    /// A TCP banner server on host loopback; its port.
    fn tcp_banner(banner: &'static str) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        serve_banners(listener, banner);
        port
    }

    /// A port nothing listens on now (for `ops.listen`).
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    }

    /// Makes `command` run as `nobody`.
    fn as_nobody(command: &mut Command) {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: setgroups, setgid and setuid are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                let nobody: libc::uid_t = 65534;
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(nobody) != 0
                    || libc::setuid(nobody) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// What the agent reached: `connects` of its dump, by name.
    struct Reached {
        /// Target name to what `fake-claude` got.
        seen: Value,
        /// The bot's log, for failures.
        log: String,
    }

    impl Reached {
        fn of(&self, name: &str) -> &str {
            self.seen[name]
                .as_str()
                .unwrap_or_else(|| panic!("{name} not probed: {:#}", self.seen))
        }

        /// `name` got nothing: the connect failed.
        fn refused(&self, name: &str) {
            let got = self.of(name);
            assert!(
                got.starts_with("error: "),
                "{name} was reached: {got:?}\n{:#}\n{}",
                self.seen,
                self.log
            );
        }
    }

    /// One turn of the real `turnstile` (as root, or as `nobody`), its agent
    /// `fake-claude` under bubblewrap with `network` as `agent.network.mode`,
    /// probing host services; what it reached.
    async fn probe_the_network(nobody: bool, network: &str) -> Reached {
        let api = FakeBotApi::start().await;
        let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        if nobody {
            std::os::unix::fs::chown(state.path(), Some(65534), Some(65534)).expect("chown");
        }
        let db = state.path().join("turnstile.db");
        let log = state.path().join("bot.log");
        let stderr = std::fs::File::create(&log).expect("log");
        let model_api = tcp_banner("BANNER-model-api");
        let other = tcp_banner("BANNER-other-port");
        let ops = free_port();
        let name = format!("turnstile-test-{}-{network}-{nobody}", std::process::id());
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        serve_banners(
            std::os::unix::net::UnixListener::bind_addr(&addr).expect("abstract"),
            "BANNER-abstract",
        );
        // Root-only socket files: one where daemons keep theirs, one elsewhere.
        let run_socket = format!("/run/{name}.sock");
        let sockets = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let other_socket = sockets.path().join("root-only.sock").display().to_string();
        for path in [&run_socket, &other_socket] {
            let _ = std::fs::remove_file(path);
            let listener = std::os::unix::net::UnixListener::bind(path).expect("socket file");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            serve_banners(listener, "BANNER-root-socket");
        }
        let targets = [
            ("direct model api", format!("tcp:127.0.0.1:{model_api}")),
            ("direct other port", format!("tcp:127.0.0.1:{other}")),
            ("direct ops port", format!("tcp:127.0.0.1:{ops}")),
            ("abstract socket", format!("abstract:{name}")),
            ("socket in /run", format!("unix:{run_socket}")),
            ("socket elsewhere", format!("unix:{other_socket}")),
            ("proxy model api", format!("proxy:127.0.0.1:{model_api}")),
            ("proxy other port", format!("proxy:127.0.0.1:{other}")),
            ("proxy ops port", format!("proxy:127.0.0.1:{ops}")),
            ("proxy other name", format!("proxy:localhost:{model_api}")),
        ];
        let connect: Vec<&str> = targets.iter().map(|(_, t)| t.as_str()).collect();
        let vars = ConfigVars::new(&api.url())
            .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
            .set("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string())
            .set("TURNSTILE_STATE_PATH", db.display().to_string())
            .set("TURNSTILE_OPS_LISTEN", format!("127.0.0.1:{ops}"))
            .set("TURNSTILE_PROGRESS_AFTER", "1h")
            .set("TURNSTILE_AGENT_BACKEND", "claude")
            .set("TURNSTILE_AGENT_COMMAND", env!("CARGO_BIN_EXE_fake-claude"))
            .set("TURNSTILE_AGENT_KEEP_WARM", "0s")
            .set("TURNSTILE_AGENT_NETWORK_MODE", network)
            .set(
                "TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{model_api}"),
            )
            .set("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl")
            .set("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_CONNECT", connect.join(","));
        let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
        command
            .current_dir(state.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TURNSTILE_LOG", "info")
            .envs(vars.iter())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        if nobody {
            as_nobody(&mut command);
        }
        let mut bot = Reaped(command.spawn().expect("turnstile starts"));
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        eventually("turnstile polling", SOON, || {
            let polled = !api.calls_of("getUpdates").is_empty();
            let exited = bot.0.try_wait().ok().flatten();
            let log = log_text();
            async move {
                if polled {
                    Ok(())
                } else {
                    Err(format!("exited: {exited:?}; log:\n{log}"))
                }
            }
        })
        .await;
        api.push_text(USER, USER, "hi");
        let told = api.wait_for_texts(USER, 1, Duration::from_secs(60)).await;
        assert_eq!(told, vec!["echo: hi"], "{}", log_text());
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(bot.0.id() as libc::pid_t, libc::SIGTERM) };
        let status = bot.0.wait().expect("turnstile exits");
        assert!(status.success(), "{status:?}\n{}", log_text());
        let _ = std::fs::remove_file(&run_socket);
        let dump = state.path().join(format!("workspaces/{USER}/dump.jsonl"));
        let text = std::fs::read_to_string(&dump).unwrap_or_default();
        let line: Value = serde_json::from_str(text.lines().next().unwrap_or_default())
            .unwrap_or_else(|e| panic!("no dump ({e}): {text}\n{}", log_text()));
        let connects = &line["connects"];
        let mut seen = serde_json::Map::new();
        for (name, target) in &targets {
            seen.insert((*name).to_owned(), connects[target.as_str()].clone());
        }
        Reached {
            seen: Value::Object(seen),
            log: log_text(),
        }
    }

    /// Everything but the model API's host and port is closed; the proxy's
    /// refusals say why.
    fn assert_isolated(reached: &Reached) {
        for name in [
            "direct model api",
            "direct other port",
            "direct ops port",
            "abstract socket",
            "socket in /run",
            "socket elsewhere",
        ] {
            reached.refused(name);
        }
        assert_eq!(
            reached.of("proxy model api"),
            "ok: HTTP/1.1 200 Connection Established\r\n\r\nBANNER-model-api",
            "{}",
            reached.log
        );
        for name in ["proxy other port", "proxy ops port", "proxy other name"] {
            let got = reached.of(name);
            assert!(
                got.starts_with("ok: HTTP/1.1 403 Forbidden\r\n"),
                "{name}: {got:?}"
            );
            assert!(got.contains("agent.network.allow"), "{name}: {got:?}");
            assert!(!got.contains("BANNER"), "{name}: {got:?}");
        }
        assert!(
            reached.log.contains("refused a host not on its allowlist"),
            "each refusal is logged: {}",
            reached.log
        );
    }

    #[actix_rt::test]
    async fn as_root_the_agent_has_a_network_of_its_own() {
        require_bubblewrap_as_root();
        assert_isolated(&probe_the_network(false, "isolated").await);
    }

    #[actix_rt::test]
    async fn as_nobody_the_agent_has_a_network_of_its_own() {
        require_bubblewrap_as_root();
        assert_isolated(&probe_the_network(true, "isolated").await);
    }

    /// The same probes with the opt-out: they do reach what the default
    /// keeps closed (so the test above would see a hole).
    #[actix_rt::test]
    async fn with_the_host_network_the_same_probes_reach_the_host() {
        require_bubblewrap_as_root();
        let reached = probe_the_network(false, "host").await;
        for (name, banner) in [
            ("direct model api", "BANNER-model-api"),
            ("direct other port", "BANNER-other-port"),
            ("abstract socket", "BANNER-abstract"),
            ("socket in /run", "BANNER-root-socket"),
            ("socket elsewhere", "BANNER-root-socket"),
        ] {
            assert_eq!(reached.of(name), format!("ok: {banner}"), "{name}");
        }
        assert!(
            reached.of("direct ops port").starts_with("ok: "),
            "{:#}",
            reached.seen
        );
        assert!(
            reached.of("proxy model api").starts_with("error: "),
            "no proxy: {:#}",
            reached.seen
        );
    }
}

/// `check-config` says the effective policy, and warns about the opt-out.
#[test]
fn check_config_shows_the_network_policy() {
    let run = |mode: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("check-config")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("TURNSTILE_AGENT_BACKEND", "claude")
            .env("TURNSTILE_AGENT_NETWORK_MODE", mode)
            .env("TURNSTILE_AGENT_NETWORK_ALLOW", "github.com,*.crates.io")
            .output()
            .expect("check-config runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let isolated = run("isolated");
    assert!(
        isolated.contains(
            "network: the agent has a network namespace of its own; out only through \
             turnstile's proxy, to api.anthropic.com:443, github.com:443, *.crates.io:443"
        ),
        "{isolated}"
    );
    assert!(!isolated.contains("warning: agent.network"), "{isolated}");
    let host = run("host");
    assert!(
        host.contains("warning: agent.network.mode = \"host\""),
        "{host}"
    );
    assert!(
        host.contains("network: the agent shares the host's network"),
        "{host}"
    );
}

//! The agent's own network, proven with the real `turnstile` binary and
//! `fake-claude` (the `claude` backend) or `fake-acp` (the `acp` backend)
//! under bubblewrap (with `--features real-cli`, as root; and with the bot
//! as `nobody`): from inside the sandbox the agent reaches no service on
//! the host's loopback (the ops port included), no host abstract socket,
//! no UNIX socket file (a root-owned 0600 one, in `/run` and elsewhere,
//! nor the proxy's or the chat tools' own); through turnstile's proxy it
//! reaches the model API's host and port and nothing else, and a refusal
//! is a 403 it can read. The ACP agent's chat tools still reach it.
//! `agent.network.mode = "host"` shows what the same probes reach without
//! it.

mod support;

use std::process::Command;

#[cfg(feature = "real-cli")]
mod sandboxed {
    use std::io::Write as _;
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    use super::support::process::{RunAs, SealedBot, require_bubblewrap_as_root};
    use super::support::*;
    use serde_json::Value;

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

    /// The agent whose network is probed.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Agent {
        /// `fake-claude` on the `claude` backend.
        Claude,
        /// `fake-acp` on the `acp` backend, which also reaches the chat
        /// tools through the stdio bridge.
        Acp,
    }

    /// The backend's variables: its fake, where its model API is, what it
    /// probes; the message it is sent and the answer it gives.
    fn backend(
        agent: Agent,
        model_api: u16,
        connect: &str,
    ) -> (Vec<(&'static str, String)>, &'static str, &'static str) {
        let api = format!("http://127.0.0.1:{model_api}");
        match agent {
            Agent::Claude => (
                vec![
                    ("TURNSTILE_AGENT_BACKEND", "claude".into()),
                    (
                        "TURNSTILE_AGENT_COMMAND",
                        env!("CARGO_BIN_EXE_fake-claude").into(),
                    ),
                    ("TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL", api),
                    ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_DUMP", "dump.jsonl".into()),
                    ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_CONNECT", connect.into()),
                ],
                "hi",
                "echo: hi",
            ),
            Agent::Acp => (
                vec![
                    ("TURNSTILE_AGENT_BACKEND", "acp".into()),
                    (
                        "TURNSTILE_AGENT_COMMAND",
                        env!("CARGO_BIN_EXE_fake-acp").into(),
                    ),
                    ("TURNSTILE_AGENT_ENV_GOOGLE_GEMINI_BASE_URL", api),
                    ("TURNSTILE_AGENT_ENV_FAKE_ACP_LOG", "fake.log".into()),
                    ("TURNSTILE_AGENT_ENV_FAKE_ACP_CONNECT", connect.into()),
                ],
                "tools please",
                "via mcp: tools please",
            ),
        }
    }

    /// What the agent reached, from what it wrote in its workdir.
    fn connects_of(agent: Agent, workdir: &std::path::Path) -> Value {
        let file = match agent {
            Agent::Claude => "dump.jsonl",
            Agent::Acp => "fake.log",
        };
        let text = std::fs::read_to_string(workdir.join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|l| l.get("connects").cloned())
            .unwrap_or_else(|| panic!("no connects in {file}: {text}"))
    }

    /// One turn of the real `turnstile` (as root, or as `nobody`), its agent
    /// under bubblewrap with `network` as `agent.network.mode`, probing host
    /// services; what it reached.
    async fn probe_the_network(agent: Agent, who: RunAs, network: &str) -> Reached {
        let api = FakeBotApi::start().await;
        let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        if who == RunAs::Nobody {
            std::os::unix::fs::chown(state.path(), Some(65534), Some(65534)).expect("chown");
        }
        let db = state.path().join("turnstile.db");
        let log = state.path().join("bot.log");
        let model_api = tcp_banner("BANNER-model-api");
        let other = tcp_banner("BANNER-other-port");
        let ops = free_port();
        let tag = match agent {
            Agent::Claude => "claude",
            Agent::Acp => "acp",
        };
        let name = format!(
            "turnstile-test-{}-{tag}-{network}-{}",
            std::process::id(),
            who == RunAs::Nobody
        );
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
            ("proxy socket", "unix:/tmp/.turnstile-proxy.sock".to_owned()),
            (
                "tools socket",
                "unix:/tmp/.turnstile-tools/mcp.sock".to_owned(),
            ),
            ("proxy model api", format!("proxy:127.0.0.1:{model_api}")),
            ("proxy other port", format!("proxy:127.0.0.1:{other}")),
            ("proxy ops port", format!("proxy:127.0.0.1:{ops}")),
            ("proxy other name", format!("proxy:localhost:{model_api}")),
        ];
        let connect: Vec<&str> = targets.iter().map(|(_, t)| t.as_str()).collect();
        let (vars, said, answer) = backend(agent, model_api, &connect.join(","));
        let vars = ConfigVars::new(&api.url())
            .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
            .set("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string())
            .set("TURNSTILE_STATE_PATH", db.display().to_string())
            .set("TURNSTILE_OPS_LISTEN", format!("127.0.0.1:{ops}"))
            .set("TURNSTILE_PROGRESS_AFTER", "1h")
            .set("TURNSTILE_AGENT_KEEP_WARM", "0s")
            .set("TURNSTILE_AGENT_NETWORK_MODE", network)
            .set_all(vars);
        let mut bot = SealedBot::start(
            std::path::Path::new(env!("CARGO_BIN_EXE_turnstile")),
            &[],
            state.path(),
            who,
            &vars,
            &[],
            &log,
        );
        bot.wait_polling(&api).await;
        api.push_text(USER, USER, said);
        let told = api.wait_for_texts(USER, 1, Duration::from_secs(60)).await;
        assert_eq!(told, vec![answer], "{}", bot.log_text());
        let log = bot.stop();
        let _ = std::fs::remove_file(&run_socket);
        let connects = connects_of(agent, &state.path().join(format!("workspaces/{USER}")));
        let mut seen = serde_json::Map::new();
        for (name, target) in &targets {
            seen.insert((*name).to_owned(), connects[target.as_str()].clone());
        }
        Reached {
            seen: Value::Object(seen),
            log,
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
            "proxy socket",
            "tools socket",
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
        assert_isolated(&probe_the_network(Agent::Claude, RunAs::Me, "isolated").await);
    }

    #[actix_rt::test]
    async fn as_nobody_the_agent_has_a_network_of_its_own() {
        require_bubblewrap_as_root();
        assert_isolated(&probe_the_network(Agent::Claude, RunAs::Nobody, "isolated").await);
    }

    /// The `acp` backend's agent alike: no UNIX socket of its own (the
    /// chat tools still reach it, relayed: its answer came through them).
    #[actix_rt::test]
    async fn as_root_an_acp_agent_has_a_network_of_its_own() {
        require_bubblewrap_as_root();
        assert_isolated(&probe_the_network(Agent::Acp, RunAs::Me, "isolated").await);
    }

    #[actix_rt::test]
    async fn as_nobody_an_acp_agent_has_a_network_of_its_own() {
        require_bubblewrap_as_root();
        assert_isolated(&probe_the_network(Agent::Acp, RunAs::Nobody, "isolated").await);
    }

    /// The same probes with the opt-out: they do reach what the default
    /// keeps closed (so the test above would see a hole).
    #[actix_rt::test]
    async fn with_the_host_network_the_same_probes_reach_the_host() {
        require_bubblewrap_as_root();
        let reached = probe_the_network(Agent::Claude, RunAs::Me, "host").await;
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

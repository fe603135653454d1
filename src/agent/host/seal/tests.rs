use super::*;

fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn names(env: &BTreeMap<OsString, OsString>) -> Vec<String> {
    env.keys()
        .map(|k| k.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_clean_env_is_the_base_pass_env_and_agent_env_only() {
    let parent = os(&[
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C"),
        ("TZ", "UTC"),
        ("TMPDIR", "/var/tmp"),
        ("TELEGRAM_BOT_TOKEN", "123:secret"),
        ("TURNSTILE_AGENT_ENV_X", "1"),
        ("AWS_SECRET_ACCESS_KEY", "nope"),
        ("ANTHROPIC_API_KEY", "key"),
    ]);
    let extra = BTreeMap::from([("DEBUG".to_owned(), "1".to_owned())]);
    let env = clean_env(parent, &["ANTHROPIC_API_KEY".into()], &extra);
    assert_eq!(
        names(&env),
        [
            "ANTHROPIC_API_KEY",
            "DEBUG",
            "HOME",
            "LANG",
            "LC_ALL",
            "PATH",
            "TMPDIR",
            "TZ"
        ]
    );
}

#[test]
fn the_token_and_turnstile_vars_never_pass_even_when_named() {
    let parent = os(&[("TELEGRAM_BOT_TOKEN", "t"), ("TURNSTILE_LOG", "debug")]);
    let extra = BTreeMap::from([("TURNSTILE_X".to_owned(), "1".to_owned())]);
    let pass = ["TELEGRAM_BOT_TOKEN".into(), "TURNSTILE_LOG".into()];
    assert!(clean_env(parent, &pass, &extra).is_empty());
}

#[test]
fn session_ids_are_uuids() {
    assert!(is_session_id("0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3c"));
    assert!(is_session_id("0B5E4C2A-1F3D-4E6A-9B7C-8D9E0F1A2B3C"));
    for bad in [
        "",
        "fake-session-1",
        "--help",
        "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3",
        "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3cd",
        "0b5e4c2a 1f3d-4e6a-9b7c-8d9e0f1a2b3c",
        "0b5e4c2a-1f3d-4e6a-9b7c-8d9e0f1a2b3g",
    ] {
        assert!(!is_session_id(bad), "{bad:?}");
    }
}

#[test]
fn placeholders_are_filled() {
    assert_eq!(
        chat_path(Path::new("/srv/ws/{chat}"), "-1001"),
        PathBuf::from("/srv/ws/-1001")
    );
    let launcher = [
        "ssh".into(),
        "box".into(),
        "cd {workdir} && run {chat}".into(),
    ];
    assert_eq!(
        launcher_argv(&launcher, "7", Path::new("/w/7")),
        ["ssh", "box", "cd /w/7 && run 7"]
    );
}

fn seal(sandbox: Sandbox) -> Seal {
    Seal {
        workdir: PathBuf::from("/var/lib/turnstile/workspaces/{chat}"),
        home: PathBuf::from("/var/lib/turnstile/homes/{chat}"),
        pass_env: Vec::new(),
        sandbox,
        launcher: Vec::new(),
        secrets: vec![
            PathBuf::from("/var/lib/turnstile/turnstile.db"),
            PathBuf::from("/etc/turnstile.toml"),
        ],
        user_ns: false,
        no_nested_userns: false,
        places: Vec::new(),
        network: None,
        tools: None,
    }
}

#[test]
fn without_a_sandbox_the_cli_runs_directly_in_its_workdir() {
    let parent = os(&[("HOME", "/root"), ("TELEGRAM_BOT_TOKEN", "t")]);
    let plan = plan(
        &seal(Sandbox::None),
        "5",
        "claude",
        &["-p".into()],
        parent,
        &BTreeMap::new(),
        |_| true,
    );
    assert_eq!(plan.argv, ["claude", "-p"]);
    assert_eq!(
        plan.workdir,
        PathBuf::from("/var/lib/turnstile/workspaces/5")
    );
    assert_eq!(plan.create, std::slice::from_ref(&plan.workdir));
    assert_eq!(
        names(&plan.env),
        [
            "CLAUDE_CODE_ENTRYPOINT",
            "CLAUDE_CODE_SDK_READS_SESSION_STATE",
            "HOME"
        ]
    );
}

#[test]
fn bubblewrap_hides_the_state_dir_and_binds_the_workdir_and_home() {
    let plan = plan(
        &seal(Sandbox::Bubblewrap),
        "5",
        "/usr/bin/claude",
        &[],
        os(&[("HOME", "/root")]),
        &BTreeMap::new(),
        |p| p == Path::new("/etc/turnstile.toml"),
    );
    let argv = plan.argv.join(" ");
    assert!(argv.starts_with("bwrap --die-with-parent "), "{argv}");
    for part in [
        "--unshare-pid",
        "--cap-drop ALL",
        "--ro-bind / /",
        "--proc /proc",
        "--tmpfs /tmp",
        "--tmpfs /var/lib/turnstile",
        "--ro-bind /dev/null /etc/turnstile.toml",
        "--bind /var/lib/turnstile/workspaces/5 /var/lib/turnstile/workspaces/5",
        "--bind /var/lib/turnstile/homes/5 /var/lib/turnstile/homes/5",
        "--chdir /var/lib/turnstile/workspaces/5 -- /usr/bin/claude",
    ] {
        assert!(argv.contains(part), "{part:?} not in {argv}");
    }
    // The hide comes before the binds, which show through it.
    assert!(argv.find("--tmpfs /var/lib").unwrap() < argv.find("--bind ").unwrap());
    assert!(!argv.contains("--unshare-net"), "the agent needs its API");
    assert_eq!(
        plan.env[&OsString::from("HOME")],
        "/var/lib/turnstile/homes/5"
    );
    assert_eq!(
        plan.env[&OsString::from("CLAUDE_CONFIG_DIR")],
        "/var/lib/turnstile/homes/5"
    );
    assert_eq!(plan.env[&OsString::from("TMPDIR")], "/tmp");
    // The chat's own, then the roots holding every chat's.
    assert_eq!(
        plan.create,
        [
            "/var/lib/turnstile/workspaces/5",
            "/var/lib/turnstile/homes/5",
            "/var/lib/turnstile/workspaces",
            "/var/lib/turnstile/homes",
        ]
        .map(PathBuf::from)
    );
}

/// Every place's root is hidden, each project's too, wherever it lies
/// (beside the state, elsewhere, without `{chat}`), and made before the
/// spawn; the chat's own workdir in its project shows through its root.
#[test]
fn every_projects_directories_are_hidden_but_the_chats_own() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.places = [
        "/var/lib/turnstile/homes",
        "/var/lib/turnstile/workspaces",
        "/srv/alpha",
        "/srv/beta-shared",
        "/var/lib/turnstile/gamma",
    ]
    .map(PathBuf::from)
    .to_vec();
    seal.workdir = PathBuf::from("/srv/alpha/{chat}");
    let plan = plan(
        &seal,
        "5",
        "/usr/bin/claude",
        &[],
        Vec::new(),
        &BTreeMap::new(),
        |_| false,
    );
    let argv = plan.argv.join(" ");
    for part in [
        "--tmpfs /var/lib/turnstile ",
        "--tmpfs /srv/alpha ",
        "--tmpfs /srv/beta-shared ",
        "--bind /srv/alpha/5 /srv/alpha/5 ",
    ] {
        assert!(argv.contains(part), "{part:?} not in {argv}");
    }
    assert!(argv.find("--tmpfs /srv/alpha").unwrap() < argv.find("--bind /srv/alpha/5").unwrap());
    for root in ["/srv/alpha", "/srv/beta-shared", "/var/lib/turnstile/gamma"] {
        assert!(
            plan.create.contains(&PathBuf::from(root)),
            "{root}: {plan:?}"
        );
    }
}

/// The mounts after the base, as text.
fn mount_args(seal: &Seal, writable: Vec<Bind>, cli: &[&str], exists: &[&str]) -> String {
    let cli: Vec<PathBuf> = cli.iter().map(PathBuf::from).collect();
    let mounts = mounts(seal, writable, &cli, &|p: &Path| {
        exists.iter().any(|e| Path::new(e) == p)
    });
    let argv = bwrap_argv(seal, &mounts, Path::new("/w"));
    let base =
        bwrap_base(seal.user_ns).len() + userns_seal(seal.user_ns, seal.no_nested_userns).len();
    argv[base..].join(" ")
}

#[test]
fn every_sandbox_drops_every_capability_and_takes_a_user_namespace_when_asked() {
    let base = bwrap_base(false).join(" ");
    assert!(base.contains(" --cap-drop ALL "), "{base}");
    assert!(!base.contains("--unshare-user"), "{base}");
    let base = bwrap_base(true).join(" ");
    assert!(base.contains(" --unshare-user --cap-drop ALL "), "{base}");
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.user_ns = true;
    let plan = plan(
        &seal,
        "1",
        "/nowhere/claude",
        &[],
        Vec::new(),
        &BTreeMap::new(),
        |_| false,
    );
    assert_eq!(plan.argv[..bwrap_base(true).len()], bwrap_base(true)[..]);
    assert!(!plan.argv.iter().any(|a| a == NO_NESTED_USERNS), "{plan:?}");
}

#[test]
fn nested_user_namespaces_are_forbidden_when_bwrap_can_and_has_its_own() {
    let mut seal = seal(Sandbox::Bubblewrap);
    let argv = |seal: &Seal| {
        plan(
            seal,
            "1",
            "/nowhere/claude",
            &[],
            Vec::new(),
            &BTreeMap::new(),
            |_| false,
        )
        .argv
    };
    seal.user_ns = true;
    seal.no_nested_userns = true;
    let sealed = argv(&seal);
    let base = bwrap_base(true).len();
    assert_eq!(sealed[..base], bwrap_base(true)[..]);
    assert_eq!(sealed[base], NO_NESTED_USERNS, "{sealed:?}");
    // The flag needs bwrap's own user namespace: never without it.
    seal.user_ns = false;
    assert!(!argv(&seal).iter().any(|a| a == NO_NESTED_USERNS));
}

#[test]
fn the_whole_state_dir_is_hidden_even_when_it_holds_the_cli() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.secrets = vec![PathBuf::from("/opt/bot/state.db")];
    seal.workdir = PathBuf::from("/opt/bot/ws/{chat}");
    seal.home = PathBuf::from("/opt/bot/homes/{chat}");
    let args = mount_args(
        &seal,
        vec![
            Bind::Made("/opt/bot/ws/1".into()),
            Bind::Made("/opt/bot/homes/1".into()),
        ],
        &[
            "/opt/bot/.local/bin/claude",
            "/opt/bot/.local/share/claude/versions/2.1.0",
        ],
        &["/opt/bot/state.db", "/opt/bot/state.db-wal"],
    );
    assert_eq!(
        args,
        "--tmpfs /opt/bot \
             --bind /opt/bot/ws/1 /opt/bot/ws/1 \
             --bind /opt/bot/homes/1 /opt/bot/homes/1 \
             --ro-bind /opt/bot/.local/bin /opt/bot/.local/bin \
             --ro-bind /opt/bot/.local/share/claude/versions /opt/bot/.local/share/claude/versions \
             --chdir /w --"
    );
}

#[test]
fn a_cli_beside_a_secret_or_a_chat_dir_is_bound_back_alone() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.secrets = vec![PathBuf::from("/opt/bot/state.db")];
    seal.workdir = PathBuf::from("/opt/bot/x/ws/{chat}");
    seal.home = PathBuf::from("/opt/bot/homes/{chat}");
    let args = mount_args(
        &seal,
        Vec::new(),
        &[
            "/opt/bot/claude",
            "/opt/bot/x/claude",
            "/tmp/claude",
            "/tmp/t/claude",
        ],
        &[],
    );
    assert_eq!(
        args,
        "--tmpfs /opt/bot \
             --ro-bind /tmp/claude /tmp/claude \
             --ro-bind /tmp/t /tmp/t \
             --ro-bind /opt/bot/claude /opt/bot/claude \
             --ro-bind /opt/bot/x/claude /opt/bot/x/claude \
             --chdir /w --"
    );
}

#[test]
fn every_chats_dirs_are_hidden_wherever_they_are() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.workdir = PathBuf::from("/srv/agents/{chat}/work");
    seal.home = PathBuf::from("/home/bot/{chat}");
    let args = mount_args(
        &seal,
        vec![
            Bind::Made("/srv/agents/1/work".into()),
            Bind::Made("/home/bot/1".into()),
        ],
        &["/usr/bin/claude"],
        &[],
    );
    assert_eq!(
        args,
        "--tmpfs /srv/agents --tmpfs /home/bot --tmpfs /var/lib/turnstile \
             --bind /home/bot/1 /home/bot/1 \
             --bind /srv/agents/1/work /srv/agents/1/work \
             --chdir /w --"
    );
}

#[test]
fn secrets_in_system_dirs_are_hidden_file_by_file_even_under_a_writable_dir() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.secrets = vec![
        PathBuf::from("/var/lib/state.db"),
        PathBuf::from("/etc/turnstile.toml"),
        PathBuf::from("/h/conf/turnstile.toml"),
    ];
    seal.workdir = PathBuf::from("/var/lib/ws/{chat}");
    let args = mount_args(
        &seal,
        vec![Bind::Given("/h".into())],
        &[],
        &[
            "/var/lib/state.db",
            "/var/lib/state.db-shm",
            "/etc/turnstile.toml",
        ],
    );
    assert_eq!(
        args,
        "--bind-try /h /h \
             --tmpfs /h/conf \
             --ro-bind /dev/null /etc/turnstile.toml \
             --tmpfs /var/lib/ws \
             --ro-bind /dev/null /var/lib/state.db \
             --ro-bind /dev/null /var/lib/state.db-shm \
             --tmpfs /var/lib/turnstile/homes \
             --chdir /w --"
    );
}

#[test]
fn the_cli_is_found_on_path_through_its_links_and_its_interpreter() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical");
    for sub in ["bin", "pkg", "node/bin"] {
        std::fs::create_dir_all(root.join(sub)).expect("dirs");
    }
    let node = root.join("node/bin/node");
    std::fs::write(&node, "\x7fELF").expect("node");
    std::fs::write(root.join("pkg/cli.js"), "#!/usr/bin/env -S node --x\n").expect("cli");
    for file in [&node, &root.join("pkg/cli.js")] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    symlink("../pkg/cli.js", root.join("bin/claude")).expect("link");
    let path = std::env::join_paths([
        root.join("nothing"),
        root.join("bin"),
        root.join("node/bin"),
    ])
    .expect("PATH");
    assert_eq!(
        cli_files("claude", Some(&path)),
        [
            root.join("bin/claude"),
            root.join("pkg/cli.js"),
            root.join("node/bin/node"),
        ]
    );
    assert_eq!(cli_files("absent", Some(&path)), Vec::<PathBuf>::new());
    assert_eq!(cli_files("./claude", Some(&path)), Vec::<PathBuf>::new());
    assert_eq!(cli_files(&node.display().to_string(), None), [node]);
}

#[test]
fn the_launcher_goes_first() {
    let mut seal = seal(Sandbox::Bubblewrap);
    seal.launcher = vec!["/wrap.sh".into(), "{chat}".into(), "{workdir}".into()];
    let plan = plan(
        &seal,
        "3",
        "claude",
        &[],
        Vec::new(),
        &BTreeMap::new(),
        |_| false,
    );
    assert_eq!(
        plan.argv[..4],
        ["/wrap.sh", "3", "/var/lib/turnstile/workspaces/3", "bwrap"]
    );
}

#[test]
fn an_isolated_agent_gets_its_own_network_and_only_the_relay_as_proxy() {
    let isolation = Arc::new(Isolation::new(
        vec![crate::config::HostRule::parse("api.anthropic.com").expect("rule")],
        PathBuf::from("/opt/turnstile/turnstile"),
    ));
    let socket = isolation.socket().to_string_lossy().into_owned();
    let mut sealed = seal(Sandbox::Bubblewrap);
    sealed.network = Some(isolation);
    let parent = os(&[("PATH", "/usr/bin"), ("NO_PROXY", "*")]);
    let extra = BTreeMap::from([
        ("no_proxy".to_owned(), "127.0.0.1".to_owned()),
        ("HTTPS_PROXY".to_owned(), "http://elsewhere:1".to_owned()),
        ("ALL_PROXY".to_owned(), "socks5://elsewhere:1".to_owned()),
    ]);
    let pass = vec!["NO_PROXY".to_owned()];
    sealed.pass_env = pass;
    let plan = plan(
        &sealed,
        "5",
        "claude",
        &["-p".into()],
        parent,
        &extra,
        |_| false,
    );
    let argv = plan.argv.join(" ");
    let bwrap_end = plan
        .argv
        .iter()
        .position(|a| a == "--")
        .expect("bwrap's --");
    let flags = plan.argv[..bwrap_end].join(" ");
    assert!(flags.contains("--unshare-net"), "{argv}");
    // The host's /run is empty before anything is bound (a workdir may lie
    // beneath it).
    let base = bwrap_base(false).len();
    assert_eq!(plan.argv[base..base + 2], ["--tmpfs", "/run"], "{argv}");
    assert!(
        flags.contains(&format!("--ro-bind {socket} /tmp/.turnstile-proxy.sock")),
        "{argv}"
    );
    assert_eq!(
        plan.argv[bwrap_end + 1..],
        [
            "/opt/turnstile/turnstile",
            "net-relay",
            "--no-unix-sockets",
            "/tmp/.turnstile-proxy.sock",
            "--",
            "claude",
            "-p"
        ],
        "{argv}"
    );
    for var in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        assert_eq!(
            plan.env.get(&OsString::from(var)),
            Some(&OsString::from("http://127.0.0.1:3128")),
            "{var}"
        );
    }
    for var in ["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"] {
        assert!(!plan.env.contains_key(&OsString::from(var)), "{var}");
    }
    // Without the sandbox there is no namespace, and nothing pretends.
    sealed.sandbox = Sandbox::None;
    let plain = super::plan(
        &sealed,
        "5",
        "claude",
        &[],
        Vec::new(),
        &BTreeMap::new(),
        |_| false,
    );
    assert_eq!(plain.argv, ["claude"]);
    assert!(!sealed.isolates_network());
    assert!(!plain.env.contains_key(&OsString::from("HTTPS_PROXY")));
}

#[test]
fn an_acp_process_gets_its_tools_directory_read_only_and_relayed_with_no_unix_socket() {
    let isolation = Arc::new(Isolation::new(
        vec![crate::config::HostRule::parse("generativelanguage.googleapis.com").expect("rule")],
        PathBuf::from("/opt/turnstile/turnstile"),
    ));
    let mut sealed = seal(Sandbox::Bubblewrap);
    sealed.network = Some(isolation);
    sealed.tools = Some(PathBuf::from("/run/turnstile-net/tools-3"));
    let plan = plan(
        &sealed,
        "5",
        "gemini",
        &["--acp".into()],
        Vec::new(),
        &BTreeMap::new(),
        |_| false,
    );
    let argv = plan.argv.join(" ");
    let bwrap_end = plan
        .argv
        .iter()
        .position(|a| a == "--")
        .expect("bwrap's --");
    let flags = plan.argv[..bwrap_end].join(" ");
    assert!(
        flags.contains("--ro-bind /run/turnstile-net/tools-3 /tmp/.turnstile-tools"),
        "{argv}"
    );
    assert_eq!(
        plan.argv[bwrap_end + 1..],
        [
            "/opt/turnstile/turnstile",
            "net-relay",
            "--no-unix-sockets",
            "--tools",
            "/tmp/.turnstile-tools/mcp.sock",
            "/tmp/.turnstile-proxy.sock",
            "--",
            "gemini",
            "--acp"
        ],
        "{argv}"
    );
}

#[test]
fn the_homes_a_handoff_names_are_the_ones_the_process_gets() {
    let parent = os(&[("HOME", "/root"), ("PATH", "/usr/bin")]);
    let given = BTreeMap::from([("CLAUDE_CONFIG_DIR".to_owned(), "/srv/claude".to_owned())]);
    for sandbox in [Sandbox::Bubblewrap, Sandbox::None] {
        for extra in [BTreeMap::new(), given.clone()] {
            let seal = seal(sandbox);
            let planned = plan(&seal, "-5_7", "claude", &[], parent.clone(), &extra, |_| {
                true
            });
            let named = homes(&seal, "-5_7", parent.clone(), &extra);
            for var in HOME_VARS {
                let from_plan = planned.env.get(&OsString::from(var));
                let from_homes = named.iter().find(|(v, _)| *v == var).map(|(_, p)| p);
                assert_eq!(from_homes, from_plan, "{var} under {sandbox:?}, {extra:?}");
            }
        }
    }
    let sealed = homes(&seal(Sandbox::Bubblewrap), "-5_7", parent, &BTreeMap::new());
    assert_eq!(
        sealed,
        [
            ("HOME", "/var/lib/turnstile/homes/-5_7".into()),
            ("CLAUDE_CONFIG_DIR", "/var/lib/turnstile/homes/-5_7".into()),
        ]
    );
}

#[test]
fn a_shell_word_is_quoted_only_when_a_shell_would_read_it() {
    assert_eq!(
        shell_word("/var/lib/turnstile/homes/-5_7"),
        "/var/lib/turnstile/homes/-5_7"
    );
    assert_eq!(shell_word("/srv/my dir"), "'/srv/my dir'");
    assert_eq!(shell_word("/srv/it's"), r"'/srv/it'\''s'");
    assert_eq!(shell_word("$HOME;rm -rf ~"), "'$HOME;rm -rf ~'");
    assert_eq!(shell_word(""), "''");
}

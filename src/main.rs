//! The `turnstile` binary: parses arguments, starts tracing, loads the
//! configuration and runs the bot until SIGINT, SIGTERM or SIGHUP; or
//! checks the configuration, or backs up the state file (`--help`).

// No function over 80 lines (`clippy.toml` sets the bar).
#![warn(clippy::too_many_lines)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use turnstile::chat::HostRequest;
use turnstile::config::RESTARTED_FROM_ENV;
use turnstile::ids::Conversation;
use turnstile::{Config, Turnstile};

/// `--help`: the commands, options, environment and exit codes.
const HELP: &str = "\
turnstile: a Telegram bot that gives every chat its own LLM agent (Claude Code,
or an ACP agent such as Gemini CLI)

Usage:
  turnstile [run] [--config FILE]         run the bot until SIGINT, SIGTERM or SIGHUP
  turnstile check-config [--config FILE]  check the configuration as a start would
                                          (the agent's sandbox too; without the token
                                          when it is unset): print it (token redacted)
                                          on stdout, its warnings and the agent's
                                          network policy on stderr
  turnstile backup [--config FILE] PATH   copy the state file to PATH, consistently,
                                          while the bot runs (PATH must not exist)
  turnstile healthcheck [--config FILE]   GET /healthz of the running bot (ops.listen):
                                          exit 0 when it says ok, 1 otherwise (a
                                          container's HEALTHCHECK)
  turnstile attach [--config FILE] [--json] [CONVERSATION]
                                          list the conversations; or follow one (CHAT
                                          or CHAT_TOPIC) and write to it from stdin
  turnstile mcp-bridge SOCKET             started by an ACP agent (agent.backend = acp):
                                          the chat tools' MCP server on its stdio
  turnstile net-relay SOCKET -- COMMAND…  run in the agent's sandbox: relays its
                                          127.0.0.1:3128 to turnstile's network proxy
  turnstile --help | --version

Options:
  -c, --config FILE  the TOML configuration (see config.example.toml); without it,
                     the defaults and the environment alone
  -h, --help         print this help
  -V, --version      print the version

Environment:
  TELEGRAM_BOT_TOKEN          the bot token (never read from the config file)
  CREDENTIALS_DIRECTORY       set by systemd's LoadCredential=: when TELEGRAM_BOT_TOKEN
                              is unset, the token is read from its file telegram-bot-token
  TURNSTILE_<SECTION>_<KEY>   overrides a config key, e.g. TURNSTILE_STATE_PATH,
                              TURNSTILE_ACCESS_ALLOWED_USERS=1,2 (lists comma-separated);
                              an unknown TURNSTILE_* variable is an error
  TURNSTILE_AGENT_ENV_<NAME>  sets agent.env.<NAME>, a variable of the agent's environment
  TURNSTILE_LOG               the log filter, e.g. debug or turnstile=debug (default info)

Exit codes:
  0  stopped by SIGINT, SIGTERM or SIGHUP after draining; a command succeeded
  1  an error a restart may cure (the Telegram client, a failed /restart), or a
     failed backup
  2  a bad command line or configuration; a state file that cannot be used
     (unreadable, corrupt, or written by a newer turnstile); an agent sandbox
     that cannot run; an ops.listen address that cannot be bound
  3  Telegram rejected the bot token, or a webhook is set on it
  70 a panic (a bug): the service manager restarts the bot
";

/// The short usage, after a bad command line.
const USAGE: &str = "usage: turnstile [run | check-config | backup PATH | healthcheck] [--config FILE]\n\
                     (turnstile --help says more)";

/// What the command line asks for.
enum CliCommand {
    Run(Option<PathBuf>),
    CheckConfig(Option<PathBuf>),
    Backup(Option<PathBuf>, PathBuf),
    Healthcheck(Option<PathBuf>),
    Help,
    Version,
}

/// The subcommands.
#[derive(Clone, Copy, PartialEq)]
enum Sub {
    Run,
    CheckConfig,
    Backup,
    Healthcheck,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<CliCommand, String> {
    let mut args = args.into_iter();
    let mut sub = None;
    let mut config = None;
    let mut dest = None;
    while let Some(arg) = args.next() {
        match (arg.as_str(), sub) {
            ("--config" | "-c", _) => match args.next() {
                Some(_) if config.is_some() => return Err("--config given twice".into()),
                Some(path) => config = Some(PathBuf::from(path)),
                None => return Err("--config needs a path".into()),
            },
            ("--help" | "-h", _) => return Ok(CliCommand::Help),
            ("--version" | "-V", _) => return Ok(CliCommand::Version),
            ("run", None) => sub = Some(Sub::Run),
            ("check-config", None) => sub = Some(Sub::CheckConfig),
            ("backup", None) => sub = Some(Sub::Backup),
            ("healthcheck", None) => sub = Some(Sub::Healthcheck),
            (path, Some(Sub::Backup)) if dest.is_none() && !path.starts_with('-') => {
                dest = Some(PathBuf::from(path));
            }
            (other, _) => return Err(format!("unexpected argument {other:?}")),
        }
    }
    match sub {
        None | Some(Sub::Run) => Ok(CliCommand::Run(config)),
        Some(Sub::CheckConfig) => Ok(CliCommand::CheckConfig(config)),
        Some(Sub::Healthcheck) => Ok(CliCommand::Healthcheck(config)),
        Some(Sub::Backup) => match dest {
            Some(dest) => Ok(CliCommand::Backup(config, dest)),
            None => Err("backup needs the PATH to write the copy to".into()),
        },
    }
}

fn main() -> ExitCode {
    forbid_same_user_reads();
    if std::env::var_os(RESTARTED_FROM_ENV).is_some() {
        keep_process_name();
    }
    // Started by an ACP agent as the chat tools' stdio MCP server.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(turnstile::agent::backends::BRIDGE_COMMAND) {
        return turnstile::agent::backends::run_bridge(&args[1..]);
    }
    // Run inside the sandbox, before the agent: its network's relay.
    if args.first().map(String::as_str) == Some(turnstile::agent::network::RELAY_COMMAND) {
        return turnstile::agent::network::run_relay(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(turnstile::attach::ATTACH_COMMAND) {
        return turnstile::attach::run_client(&args[1..]);
    }
    let command = match parse_args(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(err) => {
            eprintln!("turnstile: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (path, check) = match command {
        CliCommand::Help => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        CliCommand::Version => {
            println!("turnstile {}", turnstile::VERSION);
            return ExitCode::SUCCESS;
        }
        CliCommand::Backup(path, dest) => return backup(path.as_deref(), &dest),
        CliCommand::Healthcheck(path) => return healthcheck(path.as_deref()),
        CliCommand::Run(path) => (path, false),
        CliCommand::CheckConfig(path) => (path, true),
    };
    let config = match Config::from_env_and_file(path.as_deref()) {
        Ok(config) => config,
        // Everything else can be checked before there is a bot.
        Err(turnstile::config::ConfigError::MissingToken) if check => {
            match Config::offline_from_env_and_file(path.as_deref()) {
                Ok(config) => {
                    eprintln!(
                        "turnstile: note: TELEGRAM_BOT_TOKEN is not set: the token was not checked"
                    );
                    config
                }
                Err(err) => {
                    eprintln!("turnstile: configuration error: {err}");
                    return ExitCode::from(2);
                }
            }
        }
        Err(err) => {
            eprintln!("turnstile: configuration error: {err}");
            return ExitCode::from(2);
        }
    };
    turnstile::ops::logging::init(config.log.format);
    // A panic never leaves a live process that answers nobody.
    turnstile::ops::panics::exit_on_uncontained_panic();
    // A state file that cannot be used is a start-up error like bad config.
    if !check && let Err(err) = turnstile::state::Store::open(&config.state.path) {
        eprintln!("turnstile: {err}");
        return ExitCode::from(2);
    }
    if check {
        return check_config(&config);
    }
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    turnstile::ops::restart::take_over();
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => ExitCode::from(report(&err)),
    }
}

/// `turnstile check-config`: the warnings, then what the start checks of
/// the agent (exit 2 when the start would refuse it), then the effective
/// configuration.
fn check_config(config: &Config) -> ExitCode {
    for warning in config.warnings() {
        eprintln!("turnstile: warning: {warning}");
    }
    eprintln!(
        "turnstile: {}",
        config.network_summary(|var| std::env::var(var).ok())
    );
    if let Err(err) = turnstile::check_agent(config) {
        // What the start would refuse is a bad configuration here.
        eprintln!("turnstile: {}", causes(&err.into()));
        return ExitCode::from(2);
    }
    print!("{}", config.to_redacted_toml());
    ExitCode::SUCCESS
}

/// `turnstile backup PATH`: the state file named by the configuration,
/// copied to `dest` (the token is not needed).
fn backup(path: Option<&std::path::Path>, dest: &std::path::Path) -> ExitCode {
    let config = match Config::offline_from_env_and_file(path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("turnstile: configuration error: {err}");
            return ExitCode::from(2);
        }
    };
    let state = &config.state.path;
    match turnstile::state::backup(state, dest) {
        Ok(report) => {
            eprintln!(
                "turnstile: backed up {} to {} ({} bytes, schema version {}, {} inbox rows)",
                state.display(),
                dest.display(),
                report.bytes,
                report.schema_version,
                report.inbox_rows
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("turnstile: backup failed: {err}");
            ExitCode::from(1)
        }
    }
}

/// `turnstile healthcheck`: `GET /healthz` on `ops.listen` (the loopback
/// address when it listens on all); 0 when it answers 200, 1 when it
/// answers otherwise or not within 5 s, 2 when `ops.listen` is off.
fn healthcheck(path: Option<&std::path::Path>) -> ExitCode {
    let config = match Config::offline_from_env_and_file(path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("turnstile: configuration error: {err}");
            return ExitCode::from(2);
        }
    };
    let listen = config.ops.listen.trim();
    let Ok(mut addr) = listen.parse::<std::net::SocketAddr>() else {
        eprintln!("turnstile: healthcheck needs ops.listen (now {listen:?})");
        return ExitCode::from(2);
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    match get_healthz(addr) {
        Ok((200, body)) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!("turnstile: unhealthy ({status}): {body}");
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("turnstile: no answer from http://{addr}/healthz: {err}");
            ExitCode::from(1)
        }
    }
}

/// `GET /healthz` at `addr`: the status and the body.
fn get_healthz(addr: std::net::SocketAddr) -> std::io::Result<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let bound = std::time::Duration::from_secs(5);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, bound)?;
    stream.set_read_timeout(Some(bound))?;
    stream.set_write_timeout(Some(bound))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.trim().to_string()))
}

/// Prints why the bot could not run; answers its exit code (a rejected
/// token is 3 and a bad sandbox 2: restarting cannot help).
fn report(err: &anyhow::Error) -> u8 {
    eprintln!("turnstile: {}", causes(err));
    let code = err
        .downcast_ref::<turnstile::StartError>()
        .map_or(1, turnstile::StartError::exit_code);
    u8::try_from(code).unwrap_or(1)
}

/// After `/restart` re-executed `/proc/self/exe`, the kernel names the
/// process `exe`: it takes back its own name (argv[0]'s, which the re-exec
/// kept), so `pgrep`, `pidof` and `ps` still find it.
fn keep_process_name() {
    let Some(name) = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|arg0| {
            arg0.file_name()
                .map(|name| name.as_encoded_bytes().to_vec())
        })
    else {
        return;
    };
    // The kernel keeps 15 bytes of it; no NUL may be inside.
    let mut name: Vec<u8> = name.into_iter().take(15).take_while(|b| *b != 0).collect();
    name.push(0);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes
    // and only renames this (the main) thread, that is the process.
    if unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) } != 0 {
        eprintln!(
            "turnstile: warning: prctl(PR_SET_NAME) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Makes this process not dumpable, first thing (and so again after
/// `/restart`'s re-exec, which runs `main` anew: an exec makes a process
/// dumpable again): no process of the same user, the agent without a
/// sandbox included, can read its `/proc/<pid>/environ` (the bot token),
/// `mem` or `fd`s, nor attach to it.
fn forbid_same_user_reads() {
    // SAFETY: PR_SET_DUMPABLE only changes an attribute of this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        eprintln!(
            "turnstile: warning: prctl(PR_SET_DUMPABLE, 0) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// An error and its causes, each said once: a message that already quotes
/// its cause (as the start-up errors do) is not followed by it again.
fn causes(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Why the bot stopped.
enum Exit {
    /// SIGINT or SIGTERM.
    Signal,
    /// `/restart` from this conversation: re-execute.
    Restart(Conversation),
}

fn run(config: Config) -> anyhow::Result<()> {
    let system = turnstile::system();
    let exit = system.block_on(async move {
        let backend =
            turnstile::backend_from_config(&config).context("starting the agent backend")?;
        // A start that fails once actors run ends here, inside the runtime:
        // dropping the actix system with those actors still in it panics.
        let bot = match Turnstile::start(&config, backend).await {
            Ok(bot) => bot,
            Err(err) => std::process::exit(i32::from(report(&err.into()))),
        };
        // The conversation `/restart` came from (its key: the chat, and
        // `_TOPIC` in a topic), told where it asked.
        if let Some(to) = std::env::var(RESTARTED_FROM_ENV)
            .ok()
            .and_then(|key| Conversation::from_key(&key))
        {
            bot.outbox.do_send(turnstile::telegram::SendText::new(
                to,
                turnstile::chat::notices::RESTARTED,
            ));
        }
        let exit = tokio::select! {
            () = wait_for_signal() => Exit::Signal,
            request = bot.host_request() => match request {
                Some(HostRequest::Restart { to }) => Exit::Restart(to),
                None => Exit::Signal,
            },
        };
        tracing::info!("stopping");
        turnstile::ops::notify::stopping();
        let cut = bot.stop().await;
        if cut > 0 {
            tracing::warn!(cut, "stopped with turns cut short");
        }
        anyhow::Ok(exit)
    })?;
    match exit {
        Exit::Signal => Ok(()),
        // With the actix system still alive: the sessions handed over, and
        // the agent network's proxy socket they reach, are still open here.
        Exit::Restart(chat) => Err(turnstile::ops::restart::reexec(&chat)),
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // SIGHUP (a closed terminal, `systemctl reload` by habit) drains
        // like SIGTERM instead of killing the bot mid-turn.
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(mut term), Ok(mut hup)) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                    _ = hup.recv() => tracing::info!("SIGHUP: stopping as for SIGTERM"),
                }
            }
            (Err(err), _) | (_, Err(err)) => {
                tracing::warn!(cause = %err, "SIGTERM/SIGHUP handler unavailable; waiting for SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

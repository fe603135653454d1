//! The `turnstile` binary: parses arguments, starts tracing, loads the
//! configuration and runs the bot until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use turnstile::{Config, Turnstile};

const USAGE: &str =
    "usage: turnstile [--config PATH]\n       turnstile check-config [--config PATH]";

/// What the command line asks for.
enum Command {
    Run(Option<PathBuf>),
    CheckConfig(Option<PathBuf>),
    Help,
}

fn parse_args() -> Result<Command, String> {
    let mut args = std::env::args().skip(1);
    let mut check = false;
    let mut config = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "check-config" if !check => check = true,
            "--config" | "-c" => match args.next() {
                Some(path) => config = Some(PathBuf::from(path)),
                None => return Err("--config needs a path".into()),
            },
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(if check {
        Command::CheckConfig(config)
    } else {
        Command::Run(config)
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let command = match parse_args() {
        Ok(command) => command,
        Err(err) => {
            eprintln!("turnstile: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (path, check) = match command {
        Command::Help => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Command::Run(path) => (path, false),
        Command::CheckConfig(path) => (path, true),
    };
    let config = match Config::from_env_and_file(path.as_deref()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("turnstile: configuration error: {err}");
            return ExitCode::from(2);
        }
    };
    if check {
        print!("{}", config.to_redacted_toml());
        return ExitCode::SUCCESS;
    }
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("turnstile: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: Config) -> anyhow::Result<()> {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let backend =
            turnstile::app::backend_from_config(&config).context("starting the agent backend")?;
        let bot = Turnstile::start(&config, backend).context("starting turnstile")?;
        wait_for_signal().await;
        tracing::info!("stopping");
        let left = bot.stop().await;
        if left > 0 {
            tracing::warn!(left, "stopped with turns still running");
        }
        anyhow::Ok(())
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(err) => {
                tracing::warn!(cause = %err, "SIGTERM handler unavailable; waiting for SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

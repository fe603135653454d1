//! Code shared by the benchmarks: argument handling, running a benchmark in
//! a child process, statistics, the report's tables, process figures (RSS,
//! open files), and (for the bot-driving benches) the event collector and a
//! timing wrapper around an agent backend. The fake Telegram Bot API and the
//! configuration builder are the tests' own (`tests/support/bot_api.rs`,
//! `tests/support/config.rs`), included here.
//!
//! Every figure is computed from `Instant`s taken where the thing happened:
//! bot events carry their own `Instant`, the fakes record arrivals on their
//! own thread, and [`timed::Timed`] stamps agent events as they leave the
//! backend. Percentiles are nearest-rank over every sample (no sampling, no
//! interpolation).
#![allow(dead_code)]

pub mod alloc;
#[path = "../../tests/support/bot_api.rs"]
pub mod bot_api;
pub mod collect;
#[path = "../../tests/support/config.rs"]
pub mod config;
pub mod figures;
pub mod live;
pub mod stats;
pub mod timed;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bot_api::{FakeBotApi, Options};
use config::ConfigVars;
use turnstile::Config;
use turnstile::telegram::RateLimits;

/// The one allowed user every benchmark speaks as.
pub const USER: i64 = 1001;

/// Command-line options of a bench binary. Unknown arguments (cargo passes
/// `--bench`) are ignored.
#[derive(Debug, Clone, Default)]
pub struct Args {
    /// Small sizes (the CI mode).
    pub quick: bool,
    /// Run only this benchmark, in this process (set when re-executed).
    pub only: Option<String>,
    /// Also write the report fragment here.
    pub report: Option<PathBuf>,
}

impl Args {
    /// Parses `std::env::args`.
    pub fn parse() -> Self {
        let mut args = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--quick" => args.quick = true,
                "--only" => args.only = it.next(),
                "--report" => args.report = it.next().map(PathBuf::from),
                _ => {}
            }
        }
        args
    }

    /// `--quick` when set, for passing on to a child.
    pub fn mode_flag(&self) -> Vec<String> {
        if self.quick {
            vec!["--quick".into()]
        } else {
            Vec::new()
        }
    }

    /// `quick` or `full`.
    pub fn mode(&self) -> &'static str {
        if self.quick { "quick" } else { "full" }
    }
}

/// The exit code of a benchmark that ran but broke an invariant (its
/// report fragment is on stdout, listing what broke).
pub const BROKEN: i32 = 3;

/// How a child benchmark process ended.
pub struct ChildOutput {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its stdout: the report fragment.
    pub stdout: String,
}

/// Runs `program` with stdout captured (the report fragment) and stderr
/// passed through (progress); `Err` only when it could not be run.
pub fn run_child(program: &mut Command) -> Result<ChildOutput, String> {
    let mut child = program
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not start {program:?}: {e}"))?;
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the child: {e}"))?;
    Ok(ChildOutput {
        code: status.code(),
        stdout,
    })
}

/// Prints a fragment, then (when any) the invariants a run broke, and exits
/// with [`BROKEN`] if it broke one.
pub fn finish(name: &str, fragment: &str, broken: &[String]) {
    print!("{fragment}");
    if broken.is_empty() {
        return;
    }
    println!("**Broken invariants ({name}):**\n");
    for b in broken {
        println!("- {b}");
        eprintln!("{name}: BROKEN: {b}");
    }
    println!();
    std::process::exit(BROKEN);
}

/// Writes `text` to `path` (creating its directory) when a path is given.
pub fn write_report(path: Option<&Path>, text: &str) {
    if let Some(path) = path {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("could not write {}: {e}", path.display());
        }
    }
}

/// The build profile, as the report states it.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug build (unoptimised, debug assertions on)"
    } else {
        "release build (`cargo bench` profile: optimised, no debug assertions)"
    }
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Raises the soft open-file limit to the hard one (sockets: both ends of
/// every loopback connection live in this process).
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}

/// Outbox limits that never hold a request back: the benchmarks measure
/// the actors, not the rate limiter.
pub fn generous_limits() -> RateLimits {
    RateLimits {
        chat_burst: 1e9,
        chat_per_sec: 1e9,
        group_per_sec: 1e9,
        global_burst: 1e9,
        global_per_sec: 1e9,
        backoff: Duration::from_millis(20),
        ..RateLimits::default()
    }
}

/// A configuration against the fake Bot API at `api_url`, with the bench
/// defaults (long polls, the one [`USER`], state in `state_dir`) and `extra`
/// `TURNSTILE_*` overrides on top.
pub fn config(api_url: &str, state_dir: &Path, extra: &[(&str, String)]) -> Config {
    let state = state_dir.join("bench.db").display().to_string();
    ConfigVars::new(api_url)
        .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "5s")
        .set("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string())
        .set("TURNSTILE_STATE_PATH", state)
        .set_all(extra.iter().map(|(k, v)| (k, v)))
        .load()
}

/// Installs a log subscriber when `TURNSTILE_LOG` is set (off otherwise:
/// logging is not what is measured).
pub fn init_logging() {
    if let Ok(filter) = std::env::var("TURNSTILE_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// A small deterministic generator (xorshift64*), for spreading arrivals.
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tokio runtime on its own thread for the fake servers, so serving
/// Telegram and Anthropic does not compete with the bot's actix thread for
/// its event loop (the machine still has only two cores).
pub struct Fakes {
    rt: Option<tokio::runtime::Runtime>,
}

impl Default for Fakes {
    fn default() -> Self {
        Self::new()
    }
}

impl Fakes {
    /// One worker thread.
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-fakes")
            // The fakes' memory is not the bot's (benches/support/alloc.rs).
            .on_thread_start(alloc::exclude_this_thread)
            .enable_all()
            .build();
        match rt {
            Ok(rt) => Self { rt: Some(rt) },
            Err(e) => panic!("could not start the fakes' runtime: {e}"),
        }
    }

    /// Starts a fake Bot API served from the fakes' runtime.
    pub async fn bot_api(&self, options: Options) -> FakeBotApi {
        self.run(FakeBotApi::start_with(options)).await
    }

    /// Runs `fut` on the fakes' runtime and awaits its output.
    pub async fn run<F>(&self, fut: F) -> F::Output
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(rt) = &self.rt else {
            panic!("the fakes' runtime is gone")
        };
        match rt.spawn(fut).await {
            Ok(out) => out,
            Err(e) => panic!("a fake failed to start: {e}"),
        }
    }
}

impl Drop for Fakes {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

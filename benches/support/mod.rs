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

/// Runs `f` in a fresh actix system on a thread of its own; everything it
/// started is dropped with the system.
pub fn in_system<T, F, Fut>(f: F) -> Result<T, String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, String>>,
    T: Send + 'static,
{
    std::thread::spawn(move || turnstile::system().block_on(f()))
        .join()
        .map_err(|_| "the benchmark thread panicked".to_string())?
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

/// Where this process's resident memory is, from `/proc/self/smaps` and
/// glibc's `mallinfo2` (all arenas; the fakes' allocations included).
#[derive(Debug, Clone, Copy, Default)]
pub struct MemParts {
    /// The main arena (`[heap]`, grown with brk).
    pub brk_heap: u64,
    /// Anonymous mappings: the other malloc arenas, large allocations,
    /// thread stacks.
    pub anon: u64,
    /// File-backed pages: the program's code and data, libraries.
    pub file: u64,
    /// Threads of the process.
    pub threads: u64,
    /// Bytes in use as glibc counts them.
    pub in_use: u64,
    /// Free bytes glibc keeps in its arenas (resident or not).
    pub free: u64,
}

/// [`MemParts`] now.
pub fn mem_parts() -> MemParts {
    let mut parts = MemParts::default();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut kind = 0u8;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let path = line.split_whitespace().nth(5).unwrap_or_default();
            kind = match path {
                "[heap]" => 0,
                p if p.starts_with('/') => 2,
                _ => 1,
            };
        } else if let Some(kb) = line.strip_prefix("Rss:") {
            let bytes = kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                * 1024;
            match kind {
                0 => parts.brk_heap += bytes,
                1 => parts.anon += bytes,
                _ => parts.file += bytes,
            }
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    parts.threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    // SAFETY: mallinfo2 only reads glibc's counters.
    let info = unsafe { libc::mallinfo2() };
    parts.in_use = (info.uordblks + info.hblkhd) as u64;
    parts.free = info.fordblks as u64;
    parts
}

/// glibc's arenas as `malloc_info` reports them: per arena, the bytes it
/// holds from the system and how many of them are free.
pub fn arenas() -> Vec<(u64, u64)> {
    let mut buf: *mut libc::c_char = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream allocates the buffer it reports; malloc_info
    // writes to the stream; the buffer is read once the stream is closed
    // and then freed.
    let text = unsafe {
        let stream = libc::open_memstream(&raw mut buf, &raw mut len);
        if stream.is_null() {
            return Vec::new();
        }
        libc::malloc_info(0, stream);
        libc::fclose(stream);
        let bytes = std::slice::from_raw_parts(buf.cast::<u8>(), len);
        let text = String::from_utf8_lossy(bytes).into_owned();
        libc::free(buf.cast());
        text
    };
    let number = |line: &str| -> u64 {
        line.split("size=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    for heap in text.split("<heap nr=").skip(1) {
        let heap = heap.split("</heap>").next().unwrap_or_default();
        let (mut system, mut free) = (0, 0);
        for line in heap.lines() {
            if line.contains("<system type=\"current\"") {
                system = number(line);
            } else if line.contains("<total type=\"fast\"") || line.contains("<total type=\"rest\"")
            {
                free += number(line);
            }
        }
        out.push((system, free));
    }
    out
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
            .thread_name(FAKES_THREAD)
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

/// The live bytes of counted blocks by the thread that made them, by the
/// thread's name (threads of one name summed; "gone" for ended threads).
pub fn live_by_thread() -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = Vec::new();
    for p in &alloc::THREADS {
        let tid = p.tid.load(std::sync::atomic::Ordering::Relaxed);
        if tid == 0 {
            continue;
        }
        let name = thread_name(tid).unwrap_or_else(|| "gone".to_string());
        let live = p.live.load(std::sync::atomic::Ordering::Relaxed) as i64;
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, sum)) => *sum += live,
            None => out.push((name, live)),
        }
    }
    out
}

/// The name of thread `tid` of this process, while it runs.
fn thread_name(tid: isize) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(comm.trim().to_string())
}

/// The name of the thread the fakes run on.
pub const FAKES_THREAD: &str = "bench-fakes";

/// One anonymous mapping holding 128 KiB or more resident: a malloc
/// arena's heap, a thread's stack, a large block mapped on its own.
pub struct Mapping {
    pub rss: u64,
    /// The threads whose last small block lies in it (its arena's users),
    /// by name.
    pub threads: Vec<String>,
}

/// The process's anonymous mappings of 128 KiB or more resident, each
/// with the threads whose arena it is ([`alloc::THREADS`]).
pub fn mappings() -> Vec<Mapping> {
    let owners: Vec<(String, usize)> = alloc::THREADS
        .iter()
        .filter_map(|p| {
            let tid = p.tid.load(std::sync::atomic::Ordering::Relaxed);
            let last = p.last.load(std::sync::atomic::Ordering::Relaxed);
            Some((thread_name(tid)?, last))
        })
        .collect();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            let path = words.nth(4).unwrap_or_default();
            current = (path.is_empty() || path == "[heap]").then_some((a, b));
        } else if let Some(kb) = line.strip_prefix("Rss:")
            && let Some((a, b)) = current
        {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            if kb >= 128 {
                let threads = owners
                    .iter()
                    .filter(|(_, p)| (a..b).contains(p))
                    .map(|(n, _)| n.clone())
                    .collect();
                out.push(Mapping {
                    rss: kb * 1024,
                    threads,
                });
            }
        }
    }
    out
}

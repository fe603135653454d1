//! Telegram formatting benchmark (issue 12, item 5: "time to split 8 MB,
//! target under 100 ms"): `format::split` of 8 MB of rendered text
//! (paragraphs, code blocks, entities), `format::render` + `split` of 8 MB
//! of Markdown, `format::split` of 8 MB of plain text (as the outbox cuts a
//! plain text), and, for comparison, the old quadratic `split_message` on
//! 1.6 MB (the size of issue 12's report; a copy of it lives in
//! benches/legacy/split_quadratic.rs).
//!
//! `cargo bench --bench format [-- --quick] [--report PATH]` prints a
//! markdown table and writes it to PATH. A figure that misses its target is
//! reported, not failed; the run fails only if a piece breaks Telegram's
//! rules or content is lost.

#[path = "support/figures.rs"]
#[allow(dead_code)]
mod figures;
#[path = "legacy/split_quadratic.rs"]
#[allow(dead_code)]
mod legacy;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use turnstile::telegram::format::{self, Rendered, TELEGRAM_TEXT_LIMIT};

const MB: usize = 1 << 20;
const TARGET: Duration = Duration::from_millis(100);

struct Args {
    quick: bool,
    report: Option<PathBuf>,
}

fn args() -> Args {
    let mut args = Args {
        quick: false,
        report: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--report" => args.report = it.next().map(PathBuf::from),
            _ => {}
        }
    }
    args
}

/// Realistic agent Markdown of at least `size` bytes: paragraphs with
/// inline formatting and links, lists, a table, code blocks of all sizes.
fn markdown(size: usize) -> String {
    let mut out = String::with_capacity(size + 4096);
    let mut i = 0usize;
    while out.len() < size {
        let _ = write!(
            out,
            "## Step {i}\n\nThe **{i}th** change moves `parse_{i}` into *its own* module, see \
             [the notes](https://example.com/notes_({i})) — it keeps `a < b && c` intact 😀. \
             Then the caller retries up to {i} times before it gives up and reports.\n\n\
             - first item with `code`\n- second item\n  - nested ~~item~~\n\n"
        );
        if i.is_multiple_of(3) {
            out.push_str("```rust\n");
            for line in 0..(20 + i % 200) {
                let _ = writeln!(
                    out,
                    "    let value_{line} = compute(&input[{line}..], flag);"
                );
            }
            out.push_str("```\n\n");
        }
        if i.is_multiple_of(7) {
            out.push_str("| key | value |\n|---|---:|\n| retries | 3 |\n| timeout | 30 s |\n\n");
        }
        i += 1;
    }
    out
}

/// The median of `runs` timings of `f`.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        let out = std::hint::black_box(f());
        times.push(t0.elapsed());
        last = Some(out);
    }
    times.sort();
    (times[times.len() / 2], last.expect("at least one run"))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn non_whitespace(s: &str) -> usize {
    s.chars().filter(|c| !c.is_whitespace()).count()
}

/// Breaks of Telegram's rules or lost content in `pieces` of `whole`.
fn broken(whole: &Rendered, pieces: &[Rendered]) -> Vec<String> {
    let mut broken = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        if let Err(e) = format::validate(&p.text, &p.entities) {
            broken.push(format!("piece {i}: {e}"));
            break;
        }
    }
    let kept: usize = pieces.iter().map(|p| non_whitespace(&p.text)).sum();
    if kept != non_whitespace(&whole.text) {
        broken.push("non-whitespace content lost".into());
    }
    broken
}

fn main() {
    let args = args();
    let (size, old_size, runs) = if args.quick {
        (MB, MB / 5, 3)
    } else {
        (8 * MB, 8 * MB / 5, 7)
    };
    let md = markdown(size);
    let rendered = format::render(&md);
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut problems = Vec::new();

    let (split_time, pieces) = time(runs, || format::split(&rendered, TELEGRAM_TEXT_LIMIT));
    problems.extend(broken(&rendered, &pieces));
    rows.push([
        format!(
            "`format::split` of {:.1} MB rendered text ({} entities)",
            rendered.text.len() as f64 / MB as f64,
            rendered.entities.len()
        ),
        ms(split_time),
        format!("{} pieces", pieces.len()),
        format!(
            "split 8 MB < 100 ms: {}",
            if args.quick {
                "n/a (quick: 1 MB)".to_string()
            } else {
                verdict(split_time < TARGET).to_string()
            }
        ),
    ]);

    figures::figure(
        "format",
        &format!("split {} MB (ms)", size / MB),
        split_time.as_secs_f64() * 1e3,
        "ms",
        figures::Better::Lower,
        (30.0, 5.0),
    );

    let (both_time, pieces) = time(runs, || format::pieces(&md));
    rows.push([
        format!(
            "`format::render` + `split` of {:.1} MB Markdown",
            md.len() as f64 / MB as f64
        ),
        ms(both_time),
        format!("{} pieces", pieces.len()),
        "—".into(),
    ]);

    let plain = &rendered.text;
    let plain_split = |text: &str| format::split(&Rendered::plain(text), TELEGRAM_TEXT_LIMIT);
    let (plain_time, plain_pieces) = time(runs, || plain_split(plain));
    rows.push([
        format!(
            "`format::split` of {:.1} MB plain text",
            plain.len() as f64 / MB as f64
        ),
        ms(plain_time),
        format!("{} pieces", plain_pieces.len()),
        format!(
            "< 100 ms: {}",
            if args.quick {
                "n/a (quick)".to_string()
            } else {
                verdict(plain_time < TARGET).to_string()
            }
        ),
    ]);

    let cut = plain.floor_char_boundary(old_size.min(plain.len()));
    let small = &plain[..cut];
    let (new_small, _) = time(runs, || plain_split(small));
    let (old_small, old_pieces) = time(1.max(runs / 3), || {
        legacy::split_message(small, TELEGRAM_TEXT_LIMIT)
    });
    rows.push([
        format!(
            "old quadratic `split_message` of {:.1} MB (for comparison)",
            small.len() as f64 / MB as f64
        ),
        ms(old_small),
        format!("{} pieces", old_pieces.len()),
        format!(
            "now {} ({:.0}× faster)",
            ms(new_small),
            old_small.as_secs_f64() / new_small.as_secs_f64().max(1e-9)
        ),
    ]);

    let mut report = String::new();
    let _ = writeln!(report, "### `format`: Telegram formatting and splitting\n");
    let _ = writeln!(
        report,
        "Mode {}; {}; median of {runs} runs (the old splitter: {} runs). Target: split 8 MB under 100 ms.\n",
        if args.quick { "quick" } else { "full" },
        if cfg!(debug_assertions) {
            "debug build"
        } else {
            "release build"
        },
        1.max(runs / 3),
    );
    let _ = writeln!(report, "| what | time | output | target |");
    let _ = writeln!(report, "|---|---|---|---|");
    for row in &rows {
        let _ = writeln!(report, "| {} |", row.join(" | "));
    }
    report.push('\n');
    if !problems.is_empty() {
        let _ = writeln!(report, "**Broken invariants (format):**\n");
        for p in &problems {
            let _ = writeln!(report, "- {p}");
        }
        report.push('\n');
    }
    if let Some(path) = &args.report {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = std::fs::write(path, &report) {
            eprintln!("could not write {}: {e}", path.display());
        }
    }
    print!("{report}");
    if !problems.is_empty() {
        std::process::exit(3);
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "✅ met" } else { "❌ missed" }
}

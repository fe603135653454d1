//! Percentiles (nearest rank over every sample), formatting, and markdown tables.

use std::fmt::Write as _;
use std::time::Instant;

/// p50, p99 and the extremes of a set of samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Smallest.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank; with fewer than 100 samples it is the maximum).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Summary {
    /// `None` for no samples.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Summary {
            n: sorted.len(),
            min: sorted[0],
            p50: nearest_rank(&sorted, 0.50),
            p99: nearest_rank(&sorted, 0.99),
            max: sorted[sorted.len() - 1],
        })
    }

    /// `p50 / p99 / max` in milliseconds.
    pub fn ms3(&self) -> [String; 3] {
        [ms(self.p50), ms(self.p99), ms(self.max)]
    }
}

/// The value at rank ⌈q·n⌉ of `sorted` (1-based).
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// `to - from` in milliseconds, negative when `to` is earlier.
pub fn ms_between(from: Instant, to: Instant) -> f64 {
    if to >= from {
        (to - from).as_secs_f64() * 1e3
    } else {
        -((from - to).as_secs_f64() * 1e3)
    }
}

/// Milliseconds with a precision that suits the size.
pub fn ms(v: f64) -> String {
    let a = v.abs();
    if a < 1.0 {
        format!("{v:.3} ms")
    } else if a < 10.0 {
        format!("{v:.2} ms")
    } else if a < 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// The p50 of `values` (NaN when there are none).
pub fn p50_of(values: &[f64]) -> f64 {
    Summary::of(values).map_or(f64::NAN, |s| s.p50)
}

/// `p50 / p99 / max` of `values` in ms, or "–" when there are none.
pub fn ms_cells(values: &[f64]) -> String {
    Summary::of(values).map_or("–".to_string(), |s| {
        format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
    })
}

/// `a / b` as `×1.23`.
pub fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "n/a".into()
    } else {
        format!("×{:.2}", a / b)
    }
}

/// Bytes as KiB or MiB.
pub fn bytes(v: f64) -> String {
    let a = v.abs();
    if a < 10.0 * 1024.0 * 1024.0 {
        format!("{:.2} KiB", v / 1024.0)
    } else {
        format!("{:.1} MiB", v / (1024.0 * 1024.0))
    }
}

/// A markdown table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        header.iter().map(|_| "---|").collect::<String>()
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

/// `✅ met` or `❌ missed`.
pub fn verdict(met: bool) -> &'static str {
    if met { "✅ met" } else { "❌ missed" }
}

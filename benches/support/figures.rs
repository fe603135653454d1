//! Figures for `scripts/bench.sh --compare BASE`: each benchmark appends the
//! figures it measured, one line each, to the file named by
//! `TURNSTILE_BENCH_FIGURES` (nothing when it is not set):
//!
//! `bench <TAB> figure <TAB> value <TAB> unit <TAB> lower|higher <TAB> band % <TAB> band floor`
//!
//! A figure is worse between two commits when it moved the wrong way by more
//! than its noise band: `band %` of the base value, and at least the floor
//! (in the figure's unit; for figures near zero). The bands are what repeated
//! runs of one build on the 2-core machine spread over, not targets.

use std::io::Write as _;

/// Which way a figure gets better.
#[derive(Debug, Clone, Copy)]
pub enum Better {
    /// A time, a size, a growth.
    Lower,
    /// A rate.
    Higher,
}

/// Appends one figure (see the module docs).
pub fn figure(bench: &str, name: &str, value: f64, unit: &str, better: Better, band: (f64, f64)) {
    let Ok(path) = std::env::var("TURNSTILE_BENCH_FIGURES") else {
        return;
    };
    if !value.is_finite() {
        return;
    }
    let better = match better {
        Better::Lower => "lower",
        Better::Higher => "higher",
    };
    let line = format!(
        "{bench}\t{name}\t{value}\t{unit}\t{better}\t{}\t{}\n",
        band.0, band.1
    );
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path);
    match file {
        Ok(mut file) => {
            if let Err(e) = file.write_all(line.as_bytes()) {
                eprintln!("could not write a figure to {path}: {e}");
            }
        }
        Err(e) => eprintln!("could not open {path}: {e}"),
    }
}

//! Placeholder; see scripts/bench.sh.
fn main() {}

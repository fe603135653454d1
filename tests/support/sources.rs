//! The crate's own source files, for the tests that read the code itself
//! (`tests/bars.rs`, `tests/names.rs`).

use std::path::{Path, PathBuf};

/// The checkout's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, but a test module's own (`tests.rs`, or a
/// file under a `tests/` folder).
pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read a source folder")
        .map(|e| e.expect("a folder entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

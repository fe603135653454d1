//! Names the build: `--version` says which commit it came from.

#[path = "build/describe.rs"]
mod describe;

fn main() {
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    for file in describe::watched(&dir) {
        println!("cargo::rerun-if-changed={file}");
    }
    println!(
        "cargo::rustc-env=TURNSTILE_BUILD_COMMIT={}",
        describe::describe(&dir)
    );
}

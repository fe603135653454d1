//! The bot gives the heap's free memory back to the system
//! (`turnstile::trim_memory`, run every 5 minutes by its housekeeping):
//! without it, what a burst of turns freed stays in the process's RSS.
//! And its runtime (`turnstile::system`) keeps large buffers out of the
//! heap, where they would leave pages no trim can return.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::sync::Mutex;

/// The allocator's counters are the whole process's: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The process's resident set, in bytes (`/proc/self/statm`).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("a resident page count");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

#[test]
fn free_heap_memory_goes_back_to_the_system() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const CHUNKS: usize = 200_000;
    // Many small blocks (below the size glibc maps on its own), written so
    // their pages are resident, and one more above them that stays: the
    // free space below it is not at the heap's top, so free() alone keeps it.
    let mut blocks: Vec<Box<[u8; 256]>> = (0..CHUNKS).map(|i| Box::new([i as u8; 256])).collect();
    let pin = Box::new([1u8; 256]);
    blocks.clear();
    blocks.shrink_to_fit();
    let before = rss();
    turnstile::trim_memory();
    let after = rss();
    assert!(
        before.saturating_sub(after) > 20 << 20,
        "RSS {before} → {after} bytes: the ~50 MB freed did not go back"
    );
    assert_eq!(pin[0], 1);
}

#[test]
fn large_buffers_stay_mapped_on_their_own_after_a_larger_one_was_freed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    drop(turnstile::system());
    // Freeing a mapped block of 8 MiB would raise glibc's dynamic threshold
    // to 8 MiB, and the next 256 KiB buffer would come from the heap.
    drop(std::hint::black_box(vec![1u8; 8 << 20]));
    // SAFETY: mallinfo2 only reads glibc's counters.
    let mapped = || unsafe { libc::mallinfo2() }.hblks;
    let before = mapped();
    let buffer = std::hint::black_box(vec![2u8; 256 << 10]);
    let during = mapped();
    drop(buffer);
    assert_eq!(
        during,
        before + 1,
        "a 256 KiB buffer is a mapping of its own ({before} → {during} mapped blocks)"
    );
}

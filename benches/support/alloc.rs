//! A counting global allocator: live heap bytes (as requested, without the
//! allocator's own overhead), counted only once switched on, so the other
//! benchmarks in the same binary pay one relaxed load per call.
//!
//! Only the bot's memory is counted, not the fakes': allocations made on a
//! thread marked with [`exclude_this_thread`] (the fakes' runtime) are not
//! counted, wherever they are freed. Each allocation carries a small header
//! saying whether it was counted, so an allocation made on one side and
//! freed on the other (an update the driver queues in the fake, the log the
//! fake hands back) is accounted once, correctly.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Allocations made on this thread are not counted.
    static EXCLUDED: Cell<bool> = const { Cell::new(false) };
}

/// The allocator; declare it with `#[global_allocator]`.
pub struct Counting;

/// Starts counting (call first thing in `main`).
pub fn start() {
    ON.store(true, Ordering::SeqCst);
}

/// Live heap bytes allocated since [`start`], outside excluded threads.
pub fn live() -> i64 {
    LIVE.load(Ordering::SeqCst) as i64
}

/// Stops counting what this thread allocates (the fakes' threads).
pub fn exclude_this_thread() {
    EXCLUDED.with(|e| e.set(true));
}

fn counting_here() -> bool {
    ON.load(Ordering::Relaxed) && !EXCLUDED.try_with(Cell::get).unwrap_or(true)
}

/// The header in front of each allocation: its last byte says whether the
/// allocation is counted; it keeps the caller's alignment.
fn header(layout: Layout) -> Option<(usize, Layout)> {
    let h = layout.align().max(16);
    let full = Layout::from_size_align(layout.size().checked_add(h)?, layout.align()).ok()?;
    Some((h, full))
}

// SAFETY: every block comes from the system allocator with `header` bytes
// in front, and the same offset is undone before it goes back to it; the
// counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((h, full)) = header(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `full` is a valid, non-zero layout.
        let base = unsafe { System.alloc(full) };
        if base.is_null() {
            return base;
        }
        // SAFETY: `h` is within the block; the flag byte is its own.
        unsafe { mark(base, h, layout.size()) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some((h, full)) = header(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as above.
        let base = unsafe { System.alloc_zeroed(full) };
        if base.is_null() {
            return base;
        }
        // SAFETY: as above.
        unsafe { mark(base, h, layout.size()) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((h, full)) = header(layout) else {
            return;
        };
        // SAFETY: `ptr` came from `alloc` with this layout: its header is
        // the `h` bytes before it.
        let counted = unsafe { *ptr.sub(1) } == 1;
        unsafe { System.dealloc(ptr.sub(h), full) };
        if counted {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some((h, full)) = header(layout) else {
            return std::ptr::null_mut();
        };
        let Some(new_full) = new_size.checked_add(h) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as in `dealloc`; the header moves with the block.
        let counted = unsafe { *ptr.sub(1) } == 1;
        let base = unsafe { System.realloc(ptr.sub(h), full, new_full) };
        if base.is_null() {
            return base;
        }
        if counted {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        // SAFETY: `h` is within the new block.
        unsafe { base.add(h) }
    }
}

/// Writes the flag of a new block and counts it; returns the caller's part.
///
/// # Safety
/// `base` must be a block of at least `h + size` bytes, `h >= 1`.
unsafe fn mark(base: *mut u8, h: usize, size: usize) -> *mut u8 {
    let counted = counting_here();
    // SAFETY: the caller's contract.
    let ptr = unsafe { base.add(h) };
    unsafe { *ptr.sub(1) = u8::from(counted) };
    if counted {
        LIVE.fetch_add(size as isize, Ordering::Relaxed);
    }
    ptr
}

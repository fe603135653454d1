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
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The live bytes the excluded threads (the fakes) allocated.
static FAKES: AtomicIsize = AtomicIsize::new(0);

/// A block's flag: not counted (made before [`start`]), the bot's, the fakes'.
const NOT_COUNTED: u8 = 0;
const BOT: u8 = 1;
const FAKE: u8 = 2;

thread_local! {
    /// Allocations made on this thread are not counted.
    static EXCLUDED: Cell<bool> = const { Cell::new(false) };
    /// This thread's place in [`THREADS`], once it allocated after [`start`].
    static PLACE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// How many threads [`THREADS`] follows.
const PLACES: usize = 64;

/// One thread that allocated since [`start`]: its id; the address of the
/// last small block it took, which lies in the malloc arena it uses (glibc
/// keeps a thread on one arena), so [`super::mappings`] can tell whose
/// arena a mapping is; and the live bytes of the counted blocks it made,
/// wherever they are freed.
pub struct ChatKind {
    pub tid: AtomicIsize,
    pub last: AtomicUsize,
    pub live: AtomicIsize,
}

pub static THREADS: [ChatKind; PLACES] = [const {
    ChatKind {
        tid: AtomicIsize::new(0),
        last: AtomicUsize::new(0),
        live: AtomicIsize::new(0),
    }
}; PLACES];

/// A block's place byte when its thread has none in [`THREADS`].
const NO_PLACE: u8 = u8::MAX;
static NEXT_PLACE: AtomicUsize = AtomicUsize::new(0);

/// Blocks from this size up may be mapped on their own, outside the arena.
const SMALL: usize = 64 * 1024;

/// Notes a block of this thread's: where it lies (when small) and its
/// bytes; returns the thread's place.
fn note_place(base: *mut u8, size: usize) -> u8 {
    PLACE
        .try_with(|place| {
            let mut i = place.get();
            if i == usize::MAX {
                i = NEXT_PLACE.fetch_add(1, Ordering::Relaxed);
                if let Some(p) = THREADS.get(i) {
                    // SAFETY: gettid has no preconditions.
                    p.tid
                        .store(unsafe { libc::gettid() } as isize, Ordering::Relaxed);
                }
                place.set(i);
            }
            let Some(p) = THREADS.get(i) else {
                return NO_PLACE;
            };
            if size < SMALL {
                p.last.store(base as usize, Ordering::Relaxed);
            }
            p.live.fetch_add(size as isize, Ordering::Relaxed);
            i as u8
        })
        .unwrap_or(NO_PLACE)
}

/// Takes `size` bytes off the live bytes of the thread at `place`.
fn place_freed(place: u8, size: isize) {
    if let Some(p) = THREADS.get(usize::from(place)) {
        p.live.fetch_sub(size, Ordering::Relaxed);
    }
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

/// Live heap bytes the fakes' threads allocated since [`start`].
pub fn fakes_live() -> i64 {
    FAKES.load(Ordering::SeqCst) as i64
}

/// Stops counting what this thread allocates (the fakes' threads).
pub fn exclude_this_thread() {
    EXCLUDED.with(|e| e.set(true));
}

/// The flag of a block made on this thread now.
fn counting_here() -> u8 {
    if !ON.load(Ordering::Relaxed) {
        return NOT_COUNTED;
    }
    match EXCLUDED.try_with(Cell::get) {
        Ok(false) => BOT,
        _ => FAKE,
    }
}

/// The counter of blocks flagged `flag`.
fn counter(flag: u8) -> Option<&'static AtomicIsize> {
    match flag {
        BOT => Some(&LIVE),
        FAKE => Some(&FAKES),
        _ => None,
    }
}

/// The header in front of each allocation: its last byte says whether the
/// allocation is counted, the one before it which thread made it (its
/// place in [`THREADS`]); it keeps the caller's alignment.
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
        let (flag, place) = unsafe { (*ptr.sub(1), *ptr.sub(2)) };
        unsafe { System.dealloc(ptr.sub(h), full) };
        if let Some(counter) = counter(flag) {
            counter.fetch_sub(layout.size() as isize, Ordering::Relaxed);
            place_freed(place, layout.size() as isize);
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
        let (flag, place) = unsafe { (*ptr.sub(1), *ptr.sub(2)) };
        let base = unsafe { System.realloc(ptr.sub(h), full, new_full) };
        if base.is_null() {
            return base;
        }
        if let Some(counter) = counter(flag) {
            let change = new_size as isize - layout.size() as isize;
            counter.fetch_add(change, Ordering::Relaxed);
            place_freed(place, -change);
        }
        // SAFETY: `h` is within the new block.
        unsafe { base.add(h) }
    }
}

/// Writes the flag of a new block and counts it; returns the caller's part.
///
/// # Safety
/// `base` must be a block of at least `h + size` bytes, `h >= 2`.
unsafe fn mark(base: *mut u8, h: usize, size: usize) -> *mut u8 {
    let flag = counting_here();
    let place = if flag == NOT_COUNTED {
        NO_PLACE
    } else {
        note_place(base, size)
    };
    // SAFETY: the caller's contract.
    let ptr = unsafe { base.add(h) };
    unsafe {
        *ptr.sub(1) = flag;
        *ptr.sub(2) = place;
    }
    if let Some(counter) = counter(flag) {
        counter.fetch_add(size as isize, Ordering::Relaxed);
    }
    ptr
}

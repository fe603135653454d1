//! What the start does about what the previous process left, and keeps
//! doing: agent process groups a `kill -9` left running are killed, old
//! state and received files are pruned once a day, and the heap's free
//! memory goes back to the system every few minutes.

use std::time::Duration;

use crate::state::{Store, StoreHandle};

/// Kills the agent process groups the previous process recorded and left
/// running (a `kill -9`), and forgets them.
pub(super) fn kill_leftovers(store: &Store) {
    match store.groups() {
        Ok(groups) if !groups.is_empty() => {
            let boot = crate::agent::host::boot_id();
            let killed = crate::agent::host::kill_leftover_groups(&groups, boot.as_deref());
            tracing::info!(
                recorded = groups.len(),
                killed,
                "agent process groups of the previous run checked"
            );
            for group in groups {
                let _ = store.forget_group(group.pgid);
            }
        }
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(cause = %err, "recorded agent process groups could not be read")
        }
    }
}

/// Prunes old state now and then once a day, on the store thread; and as
/// often the files in each conversation's `inbox/` as old, off the actors'
/// thread.
pub(super) fn start_pruning(
    inbox: &StoreHandle,
    retention: Duration,
    workdirs: std::path::PathBuf,
) {
    inbox.prune(retention);
    let inbox = inbox.clone();
    actix_rt::spawn(async move {
        let day = Duration::from_secs(86_400);
        let mut every_day = tokio::time::interval(day);
        let mut first = true;
        loop {
            every_day.tick().await;
            if !std::mem::take(&mut first) {
                inbox.prune(retention);
            }
            let workdirs = workdirs.clone();
            let files = tokio::task::spawn_blocking(move || {
                crate::telegram::files::prune_inboxes(&workdirs, retention)
            })
            .await
            .unwrap_or(0);
            if files > 0 {
                tracing::info!(files, "pruned inbox files older than the retention");
            }
        }
    });
}

/// How often the heap's free memory is given back to the system.
pub(super) const TRIM_EVERY: Duration = Duration::from_secs(300);

/// Gives the heap's free pages back to the system (glibc's `malloc_trim`):
/// the allocator keeps what a burst of turns freed, and without this the
/// process's RSS drifts with the bursts it has seen, though its live heap
/// does not. Nothing elsewhere (another libc).
pub fn trim_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; it takes the arenas'
    // own locks and may run on any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Trims every [`TRIM_EVERY`], off the actors' thread (a trim of a large
/// heap takes milliseconds).
pub(super) fn start_trimming() {
    actix_rt::spawn(async move {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            let _ = tokio::task::spawn_blocking(trim_memory).await;
        }
    });
}

/// At most this many threads run the bot's blocking work (received files
/// written and fsynced, at most 4 at once; files read for upload; pruning;
/// the trim). Unbounded, the pool grew a thread whenever a burst found every
/// thread busy, and each new thread's stack and malloc arena stayed resident:
/// a long run's RSS kept stepping up with the busiest burst it had seen.
pub const BLOCKING_THREADS: usize = 8;

/// Blocks from this size up are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Free memory at the top of a thread's heap is given back on `free` past
/// this much. `malloc_trim` ([`trim_memory`]) does not shrink those heaps'
/// tops (only the main heap's), so each thread's heap keeps up to this much
/// resident between bursts. At 1 MiB the soak's RSS after the trim moved
/// up to ±2 % from one sample to the next (which heaps' tops a burst had
/// left large), with no trend; at 256 KiB, with fast bins off, the bot's
/// part moved within ±0.4 %, at the same turns per second. At 128 KiB
/// (glibc's default) the heaps shrank and grew again with every burst:
/// 2,309 soak turns a second against 3,000. At 4 MiB and more the RSS
/// after the trim rose 7-9 % over 100,000 turns.
const TRIM_THRESHOLD: i32 = 256 * 1024;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (its initial value)
/// and its trim threshold at [`TRIM_THRESHOLD`], and turns its fast bins
/// off.
/// Left dynamic, freeing one large mapped block (a file's download buffer,
/// a large HTTP body) raises the threshold to that block's size, and from
/// then on such buffers come from the arenas, where they leave pages that
/// a trim cannot return between the small blocks that outlive them: the
/// soak's RSS after the trim rose a few percent over 100,000 turns with the
/// live heap flat.
/// Fast bins hold small freed blocks unmerged; `malloc_trim` merges them
/// first, and in a thread's heap what it merges into the top stays there,
/// resident, until a later large `free` in that heap: the HTTP thread's
/// heap held 3.7 MiB after one trim of the soak against 0.5 MiB at every
/// other sample. The per-thread caches (tcache) in front of the bins stay
/// on, so the hot path is the same; the scale benchmark's turns per second
/// did not drop.
/// Nothing elsewhere (another libc).
fn fix_malloc_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters, under its lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

/// The actix system the bot runs in: glibc's mmap and trim thresholds fixed
/// ([`fix_malloc_thresholds`]); a current-thread runtime whose
/// blocking pool is bounded ([`BLOCKING_THREADS`]) and named
/// (`turnstile-blocking`, as `top -H` shows it).
pub fn system() -> actix_rt::SystemRunner {
    fix_malloc_thresholds();
    actix_rt::System::with_tokio_rt(|| {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(BLOCKING_THREADS)
            .thread_name("turnstile-blocking")
            .build()
        {
            Ok(runtime) => runtime,
            // What `actix_rt::System::new` does too: without a runtime
            // (no file descriptors left for its driver) nothing can run.
            Err(err) => panic!("the bot's runtime could not be built: {err}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::{Arc, Condvar, Mutex};

    /// Blocking work queued faster than it finishes waits for one of the
    /// pool's threads instead of growing the pool past its bound.
    #[test]
    fn the_blocking_pool_stays_within_its_bound() {
        const TASKS: usize = 4 * super::BLOCKING_THREADS;
        // (tasks running now, released): every task holds its thread until
        // the pool's bound of them run at once.
        let gate = Arc::new((Mutex::new((0usize, false)), Condvar::new()));
        let threads = super::system().block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..TASKS {
                let gate = gate.clone();
                tasks.push(tokio::task::spawn_blocking(move || {
                    let (lock, cvar) = &*gate;
                    let mut state = lock.lock().unwrap();
                    state.0 += 1;
                    cvar.notify_all();
                    while !state.1 {
                        state = cvar.wait(state).unwrap();
                    }
                    (
                        std::thread::current().id(),
                        std::thread::current().name().map(str::to_owned),
                    )
                }));
            }
            {
                let (lock, cvar) = &*gate;
                let mut state = lock.lock().unwrap();
                while state.0 < super::BLOCKING_THREADS {
                    state = cvar.wait(state).unwrap();
                }
                state.1 = true;
                cvar.notify_all();
            }
            let mut threads = HashSet::new();
            for task in tasks {
                threads.insert(task.await.unwrap());
            }
            threads
        });
        assert!(
            threads.len() <= super::BLOCKING_THREADS,
            "{TASKS} blocking tasks ran on {} threads (bound {})",
            threads.len(),
            super::BLOCKING_THREADS
        );
        assert!(
            threads
                .iter()
                .all(|(_, name)| name.as_deref() == Some("turnstile-blocking")),
            "the pool's threads are named: {threads:?}"
        );
    }
}

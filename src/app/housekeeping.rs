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
            let boot = crate::agent::claude::boot_id();
            let killed = crate::agent::claude::kill_leftover_groups(&groups, boot.as_deref());
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

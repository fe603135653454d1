//! What the start does about what the previous process left, and keeps
//! doing: agent process groups a `kill -9` left running are killed, and old
//! state and received files are pruned once a day.

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

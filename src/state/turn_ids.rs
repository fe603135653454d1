//! Turn ids that go on across restarts: [`TurnIds`] hands them out from a
//! high-water mark kept in the state file, so a turn's id names it in the
//! logs of every process that ever ran on that file.
//!
//! The mark is moved ahead a block at a time, before an id of the block is
//! used: a process killed with `kill -9` leaves it past every id it used,
//! and the next process starts above them. A clean stop writes the last id
//! used, so after a restart the numbers go on without a gap.

use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{OptionalExtension, params};

use super::{StateError, Store};
use crate::ids::TurnId;

/// How many ids the mark moves ahead at a time: one write to the state
/// file per this many turns.
pub const TURN_ID_BLOCK: u64 = 1_000;

impl Store {
    /// The turn ids' high-water mark: no process used an id above it (0 for
    /// a new file).
    pub fn turn_ids_through(&self) -> Result<u64, StateError> {
        let value: Option<String> = self
            .lock()
            .query_row("SELECT value FROM meta WHERE key = 'turn_ids'", [], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Sets the turn ids' high-water mark.
    pub fn set_turn_ids_through(&self, through: u64) -> Result<(), StateError> {
        self.lock().execute(
            "INSERT INTO meta (key, value) VALUES ('turn_ids', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![through.to_string()],
        )?;
        Ok(())
    }
}

/// Hands out turn ids: each above every id any process on this state file
/// used before.
#[derive(Debug)]
pub struct TurnIds {
    /// Where the mark is kept. Written on the caller's thread, once per
    /// [`TURN_ID_BLOCK`] turns and at the stop.
    store: Arc<Store>,
    /// The ids handed out and reserved.
    range: Mutex<Range>,
}

/// The ids of this process.
#[derive(Debug)]
struct Range {
    /// The last id handed out (the mark found at start, before the first).
    last: u64,
    /// The mark in the file: ids up to it may be handed out.
    through: u64,
}

impl TurnIds {
    /// The ids after the mark in `store` (the first block is reserved
    /// with the first id).
    ///
    /// # Errors
    ///
    /// The mark could not be read.
    pub fn open(store: Arc<Store>) -> Result<Self, StateError> {
        let last = store.turn_ids_through()?;
        Ok(Self {
            store,
            range: Mutex::new(Range {
                last,
                through: last,
            }),
        })
    }

    /// The next id; the mark moves a block ahead first when the reserved
    /// ones are used up.
    pub fn next(&self) -> TurnId {
        let mut range = self.lock();
        if range.last >= range.through
            && let Err(err) = self.reserve(&mut range)
        {
            // The turn runs all the same; only its id may come again after
            // a crash. The next id tries the write again.
            tracing::error!(cause = %err, "the turn ids' mark could not be moved ahead");
        }
        range.last = range.last.saturating_add(1);
        TurnId(range.last)
    }

    /// The last id handed out (the mark found at start, before the first).
    pub fn last(&self) -> TurnId {
        TurnId(self.lock().last)
    }

    /// At a clean stop: the mark back to the last id used, so the next
    /// process goes on from it. An id handed out after this reserves anew.
    pub fn release(&self) {
        let mut range = self.lock();
        match self.store.set_turn_ids_through(range.last) {
            Ok(()) => range.through = range.last,
            Err(err) => tracing::warn!(cause = %err, "the turn ids' mark was not written back"),
        }
    }

    fn reserve(&self, range: &mut Range) -> Result<(), StateError> {
        let through = range.last.saturating_add(TURN_ID_BLOCK);
        self.store.set_turn_ids_through(through)?;
        range.through = through;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Range> {
        self.range
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Arc<Store> {
        Arc::new(Store::in_memory().expect("a store"))
    }

    #[test]
    fn ids_go_on_after_a_clean_stop_without_a_gap() {
        let store = store();
        let first = TurnIds::open(Arc::clone(&store)).expect("opens");
        assert_eq!(first.last(), TurnId(0));
        assert_eq!((first.next(), first.next()), (TurnId(1), TurnId(2)));
        first.release();
        let second = TurnIds::open(Arc::clone(&store)).expect("opens");
        assert_eq!(second.last(), TurnId(2));
        assert_eq!(second.next(), TurnId(3));
    }

    #[test]
    fn after_a_crash_ids_start_above_the_block_the_dead_process_held() {
        let store = store();
        let crashed = TurnIds::open(Arc::clone(&store)).expect("opens");
        let used: Vec<TurnId> = (0..3).map(|_| crashed.next()).collect();
        // The mark is already past them, before any stop.
        assert_eq!(store.turn_ids_through().expect("reads"), TURN_ID_BLOCK);
        drop(crashed);
        let next = TurnIds::open(Arc::clone(&store)).expect("opens");
        let id = next.next();
        assert!(used.iter().all(|old| *old < id), "{id} after {used:?}");
    }

    #[test]
    fn the_mark_moves_ahead_before_a_new_block_is_used() {
        let store = store();
        let ids = TurnIds::open(Arc::clone(&store)).expect("opens");
        for _ in 0..TURN_ID_BLOCK {
            ids.next();
        }
        assert_eq!(store.turn_ids_through().expect("reads"), TURN_ID_BLOCK);
        assert_eq!(ids.next(), TurnId(TURN_ID_BLOCK + 1));
        assert_eq!(store.turn_ids_through().expect("reads"), 2 * TURN_ID_BLOCK);
    }

    #[test]
    fn an_id_handed_out_after_the_release_is_reserved_first() {
        let store = store();
        let ids = TurnIds::open(Arc::clone(&store)).expect("opens");
        ids.next();
        ids.release();
        assert_eq!(store.turn_ids_through().expect("reads"), 1);
        assert_eq!(ids.next(), TurnId(2));
        assert!(store.turn_ids_through().expect("reads") >= 2);
    }
}

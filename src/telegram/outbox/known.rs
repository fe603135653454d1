//! What a lane knows of its chat's message ids: which ids exist and are no
//! unconfirmed copy of one of its messages (see `resend.rs`).

use teloxide::types::MessageId;

/// How many of the most recent ids are remembered: an unknown outcome
/// spanning more is simply marked. A fixed window, so what a lane keeps of
/// its chat does not grow with the messages it has seen.
const WINDOW: i32 = 1_024;
/// The window's bitmap, in 64-bit words.
const WORDS: usize = WINDOW as usize / 64;

/// The message ids a lane knows in its chat.
#[derive(Debug)]
pub(super) struct Known {
    /// The highest id seen.
    highest: Option<i32>,
    /// Which of the ids `highest - WINDOW + 1 ..= highest` are known not to
    /// be an unconfirmed copy: bit `id mod WINDOW`.
    explained: [u64; WORDS],
}

impl Known {
    /// A lane that knows its chat's messages up to `highest` (kept in the
    /// state store across restarts).
    pub(super) fn from(highest: Option<i32>) -> Self {
        Self {
            highest,
            explained: [0; WORDS],
        }
    }

    /// Where `id`'s bit is.
    fn bit(id: i32) -> (usize, u64) {
        let at = id.rem_euclid(WINDOW) as usize;
        (at / 64, 1 << (at % 64))
    }

    /// `id` exists and is no unconfirmed copy: a message of the lane's,
    /// confirmed, or an incoming one.
    pub(super) fn saw(&mut self, id: MessageId) {
        let id = id.0;
        // In i64: ids come from Telegram, and no difference of two may wrap.
        let gap = self
            .highest
            .map(|highest| i64::from(id) - i64::from(highest));
        match (self.highest, gap) {
            (Some(_), Some(gap)) if gap <= 0 => {
                if gap <= -i64::from(WINDOW) {
                    return; // older than the window: nothing to remember
                }
            }
            (Some(highest), Some(gap)) if gap < i64::from(WINDOW) => {
                // The ids the window now takes in are not known yet.
                for fresh in highest + 1..id {
                    let (word, mask) = Self::bit(fresh);
                    self.explained[word] &= !mask;
                }
                self.highest = Some(id);
            }
            _ => {
                self.explained = [0; WORDS];
                self.highest = Some(id);
            }
        }
        let (word, mask) = Self::bit(id);
        self.explained[word] |= mask;
    }

    /// Whether `id` is known to be no unconfirmed copy.
    fn explained(&self, id: i32) -> bool {
        let Some(highest) = self.highest else {
            return false;
        };
        let behind = i64::from(highest) - i64::from(id);
        if behind < 0 || behind >= i64::from(WINDOW) {
            return false;
        }
        let (word, mask) = Self::bit(id);
        self.explained[word] & mask != 0
    }

    /// The highest id seen: a request's baseline, taken before it leaves.
    pub(super) fn baseline(&self) -> Option<i32> {
        self.highest
    }

    /// Whether a copy sent again as `got`, after a first copy that left
    /// when the highest id seen was `baseline`, is provably the only one:
    /// every id between the two is known.
    pub(super) fn ruled_out(&self, baseline: Option<i32>, got: MessageId) -> bool {
        let Some(baseline) = baseline else {
            return false;
        };
        // The ids between the two, all of which must be known.
        let between = i64::from(got.0) - i64::from(baseline) - 1;
        if !(0..=i64::from(WINDOW)).contains(&between) {
            return false;
        }
        (baseline + 1..got.0).all(|id| self.explained(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_copy_with_no_unknown_id_before_it_is_the_only_one() {
        let mut known = Known::from(Some(10));
        // Nothing made between: the first copy never arrived.
        assert!(known.ruled_out(Some(10), MessageId(11)));
        // One id unaccounted for: it may be the first copy.
        assert!(!known.ruled_out(Some(10), MessageId(12)));
        // Our own confirmed message in between is accounted for.
        known.saw(MessageId(11));
        assert!(known.ruled_out(Some(10), MessageId(12)));
        // No baseline (nothing known of the chat): never ruled out.
        assert!(!known.ruled_out(None, MessageId(1)));
        // An id at or below the baseline cannot be a later copy's.
        assert!(!known.ruled_out(Some(10), MessageId(10)));
        assert_eq!(known.baseline(), Some(11));
    }

    #[test]
    fn what_a_lane_knows_is_a_window_of_fixed_size() {
        let mut known = Known::from(Some(0));
        // Thousands of messages later, only the recent window is known,
        // in the same fixed memory.
        for id in 1..=5_000 {
            known.saw(MessageId(id));
        }
        assert_eq!(std::mem::size_of::<Known>(), 8 + WINDOW as usize / 8);
        assert!(known.ruled_out(Some(5_000 - WINDOW), MessageId(5_001)));
        // An id that left the window is no longer known.
        assert!(!known.ruled_out(Some(5_000 - WINDOW - 1), MessageId(5_001)));
        // Ids the window took in by a jump are not known.
        known.saw(MessageId(5_010));
        assert!(!known.ruled_out(Some(5_000), MessageId(5_011)));
        known.saw(MessageId(5_005));
        assert!(!known.ruled_out(Some(5_004), MessageId(5_011)));
        for id in 5_001..5_010 {
            known.saw(MessageId(id));
        }
        assert!(known.ruled_out(Some(4_999), MessageId(5_011)));
        // A late id from before the window changes nothing.
        known.saw(MessageId(1));
        assert_eq!(known.baseline(), Some(5_010));
        // A jump past the whole window forgets it all.
        known.saw(MessageId(9_000));
        assert!(!known.ruled_out(Some(8_998), MessageId(9_001)));
        assert!(known.ruled_out(Some(9_000), MessageId(9_001)));
    }
}

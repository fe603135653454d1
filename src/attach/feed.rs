//! What attach clients follow: one task reads the event bus and keeps, per
//! conversation, its recent history and whether a turn runs; each
//! follower gets the live lines through a bounded buffer. A full buffer
//! drops the line and counts it; the follower is told the count before its
//! next line. Nothing here waits on a client.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, mpsc};

use super::protocol::ServerLine;
use crate::events::{BotEvent, EventBus, FeedItem};
use crate::ids::Conversation;

/// Lines of history kept per conversation.
pub const HISTORY: usize = 200;

/// Bytes of history kept per conversation (its lines as the client gets
/// them): a few long answers fill it.
pub const HISTORY_BYTES: usize = 32 * 1024;

/// Conversations whose history is kept: the most recently active ones. With
/// [`HISTORY_BYTES`], the feed holds at most 1 MiB of history however many
/// conversations the bot serves for however long.
pub const CONVERSATIONS: usize = 32;

/// Lines a follower's buffer holds.
pub const BUFFER: usize = 256;

/// A client following a conversation.
struct Follower {
    /// The conversation.
    to: Conversation,
    /// Its buffer.
    tx: mpsc::Sender<ServerLine>,
    /// Lines dropped since it was last told.
    missed: u64,
}

impl Follower {
    /// Hands `line` on, or counts it dropped; `false` once the client is gone.
    fn offer(&mut self, line: ServerLine) -> bool {
        if self.missed > 0 {
            let told = ServerLine::Missed { count: self.missed };
            match self.tx.try_send(told) {
                Ok(()) => self.missed = 0,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.missed += 1;
                    return true;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        match self.tx.try_send(line) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.missed += 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// A conversation's recent lines, within [`HISTORY`] and [`HISTORY_BYTES`].
#[derive(Default)]
struct History {
    /// The lines, oldest first, with their size.
    lines: VecDeque<HistoryLine>,
    /// Their sizes summed.
    bytes: usize,
    /// When the conversation last had a line (the feed's count of items).
    last: u64,
}

/// One line of a [`History`].
struct HistoryLine {
    /// The line.
    line: ServerLine,
    /// Its size as the client gets it.
    bytes: usize,
}

impl History {
    /// Keeps `line`, dropping the oldest lines past the bounds (the newest
    /// line stays, however long).
    fn push(&mut self, line: ServerLine, now: u64) {
        let bytes = serde_json::to_vec(&line).map_or(0, |json| json.len());
        self.bytes += bytes;
        self.lines.push_back(HistoryLine { line, bytes });
        self.last = now;
        while self.lines.len() > HISTORY || (self.bytes > HISTORY_BYTES && self.lines.len() > 1) {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.bytes;
            }
        }
    }
}

/// What the feed knows.
#[derive(Default)]
struct FeedState {
    /// Recent lines of the [`CONVERSATIONS`] most recently active
    /// conversations.
    history: HashMap<Conversation, History>,
    /// Items taken so far: the clock of [`History::last`].
    taken: u64,
    /// Conversations with a turn running.
    running: HashMap<Conversation, u64>,
    /// Approvals asked and not yet decided (their tokens), per
    /// conversation.
    asked: HashMap<Conversation, Vec<String>>,
    /// The followers.
    followers: Vec<Follower>,
}

/// The shared feed.
#[derive(Clone, Default)]
pub struct Feed {
    known: Arc<Mutex<FeedState>>,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts reading `events`; the task ends with the bus.
    pub fn start(events: &EventBus) -> Self {
        let feed = Self::default();
        let mut rx = events.subscribe();
        let reader = feed.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(BotEvent::Feed { to, item }) => reader.take(to, &item),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => reader.lagged(n),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        feed
    }

    /// One item of a conversation: kept (not the live-only lines), and
    /// handed to its followers.
    fn take(&self, to: Conversation, item: &FeedItem) {
        let mut known = self.lock();
        match item {
            FeedItem::TurnStarted { turn } => {
                known.running.insert(to, turn.get());
            }
            FeedItem::TurnEnded { turn, .. } => {
                if known.running.get(&to) == Some(&turn.get()) {
                    known.running.remove(&to);
                    known.asked.remove(&to);
                }
            }
            FeedItem::Asked { token, .. } => known.asked.entry(to).or_default().push(token.clone()),
            FeedItem::Decided { token, .. } => {
                if let Some(asked) = known.asked.get_mut(&to) {
                    asked.retain(|open| open != token);
                    if asked.is_empty() {
                        known.asked.remove(&to);
                    }
                }
            }
            FeedItem::Message { .. }
            | FeedItem::Said { .. }
            | FeedItem::Status { .. }
            | FeedItem::Writing { .. } => {}
        }
        let line = ServerLine::of(item);
        if line.kept() {
            known.taken += 1;
            let now = known.taken;
            if !known.history.contains_key(&to) && known.history.len() >= CONVERSATIONS {
                let oldest = known.history.iter().min_by_key(|(_, h)| h.last);
                if let Some(oldest) = oldest.map(|(to, _)| *to) {
                    known.history.remove(&oldest);
                }
            }
            known.history.entry(to).or_default().push(line.clone(), now);
        }
        known
            .followers
            .retain_mut(|f| f.to != to || f.offer(line.clone()));
    }

    /// The bus dropped `n` events before this reader saw them: every
    /// follower may have missed them.
    fn lagged(&self, n: u64) {
        tracing::warn!(missed = n, "attach: the event bus ran ahead of the feed");
        for follower in &mut self.lock().followers {
            follower.missed += n;
        }
    }

    /// Follows `to`: its history, and a buffer that gets what comes after
    /// it (nothing between the two is lost: both are taken at once).
    pub fn follow(&self, to: Conversation) -> (Vec<ServerLine>, mpsc::Receiver<ServerLine>) {
        let (tx, rx) = mpsc::channel(BUFFER);
        let mut known = self.lock();
        let history = known
            .history
            .get(&to)
            .map(|h| h.lines.iter().map(|kept| kept.line.clone()).collect())
            .unwrap_or_default();
        known.followers.push(Follower { to, tx, missed: 0 });
        (history, rx)
    }

    /// What `to` is doing, when it is busy: `running`, or `waiting for an
    /// approval`.
    pub fn busy(&self, to: Conversation) -> Option<&'static str> {
        let known = self.lock();
        if known.asked.contains_key(&to) {
            return Some("waiting for an approval");
        }
        known.running.contains_key(&to).then_some("running")
    }

    /// Whether the ask `token` of `to` is still waiting for its answer.
    pub fn open(&self, to: Conversation, token: &str) -> bool {
        let known = self.lock();
        known
            .asked
            .get(&to)
            .is_some_and(|asked| asked.iter().any(|t| t == token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TurnId;
    use teloxide::types::ChatId;

    fn said(n: usize) -> FeedItem {
        FeedItem::Said {
            text: format!("line {n}"),
        }
    }

    #[test]
    fn a_client_that_falls_behind_is_told_how_many_lines_it_missed() {
        let feed = Feed::default();
        let to = Conversation::from(ChatId(5));
        let (history, mut rx) = feed.follow(to);
        assert!(history.is_empty());
        // Nobody reads: the buffer fills, the rest is counted, the feed
        // never waits.
        for n in 0..BUFFER + 10 {
            feed.take(to, &said(n));
        }
        // Another conversation's lines are not this client's.
        feed.take(ChatId(6).into(), &said(0));
        let mut got = Vec::new();
        while let Ok(line) = rx.try_recv() {
            got.push(line);
        }
        assert_eq!(got.len(), BUFFER);
        assert_eq!(got[0], ServerLine::of(&said(0)));
        feed.take(to, &said(BUFFER + 10));
        assert_eq!(rx.try_recv(), Ok(ServerLine::Missed { count: 10 }));
        assert_eq!(rx.try_recv(), Ok(ServerLine::of(&said(BUFFER + 10))));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn history_is_kept_for_the_most_recently_active_conversations_within_its_bytes() {
        let feed = Feed::default();
        for chat in 0..=CONVERSATIONS as i64 {
            feed.take(ChatId(chat).into(), &said(0));
        }
        // The first conversation was the least recently active: its
        // history went to make room for the last one's.
        assert!(feed.follow(ChatId(0).into()).0.is_empty());
        assert_eq!(feed.follow(ChatId(1).into()).0.len(), 1);
        let to = Conversation::from(ChatId(1));
        let long = |c: char| FeedItem::Said {
            text: c.to_string().repeat(HISTORY_BYTES / 3),
        };
        for c in ['a', 'b', 'c', 'd'] {
            feed.take(to, &long(c));
        }
        let (history, _rx) = feed.follow(to);
        let kept: Vec<(Option<char>, usize)> = (history.iter())
            .map(|line| match line {
                ServerLine::Said { text } => (text.chars().next(), text.len()),
                other => panic!("{other:?}"),
            })
            .collect();
        let third = HISTORY_BYTES / 3;
        assert_eq!(kept, [(Some('c'), third), (Some('d'), third)]);
    }

    #[test]
    fn history_is_bounded_and_a_turn_runs_from_its_start_to_its_end() {
        let feed = Feed::default();
        let to = Conversation::from(ChatId(5));
        for n in 0..HISTORY + 3 {
            feed.take(to, &said(n));
        }
        feed.take(to, &FeedItem::TurnStarted { turn: TurnId(4) });
        assert_eq!(feed.busy(to), Some("running"));
        let asked = FeedItem::Asked {
            token: "t1".into(),
            question: "Run `ls`?".into(),
            options: Vec::new(),
        };
        feed.take(to, &asked);
        assert_eq!(feed.busy(to), Some("waiting for an approval"));
        let decided = FeedItem::Decided {
            token: "t1".into(),
            decision: "✅ Allowed".into(),
        };
        feed.take(to, &decided);
        assert_eq!(feed.busy(to), Some("running"));
        feed.take(to, &asked);
        let (history, _rx) = feed.follow(to);
        assert_eq!(history.len(), HISTORY);
        assert_eq!(history[0], ServerLine::of(&said(7)));
        feed.take(
            to,
            &FeedItem::TurnEnded {
                turn: TurnId(4),
                outcome: crate::outcome::TurnOutcome::ForceReleased,
            },
        );
        assert_eq!(feed.busy(to), None, "a turn's end closes its questions");
    }

    #[test]
    fn a_question_is_open_from_its_asking_to_its_decision_in_its_conversation_alone() {
        let feed = Feed::default();
        let to = Conversation::from(ChatId(5));
        let ask = |token: &str| FeedItem::Asked {
            token: token.into(),
            question: "Run `ls`?".into(),
            options: Vec::new(),
        };
        feed.take(to, &FeedItem::TurnStarted { turn: TurnId(1) });
        feed.take(to, &ask("a"));
        feed.take(to, &ask("b"));
        assert!(feed.open(to, "a") && feed.open(to, "b"));
        assert!(!feed.open(ChatId(6).into(), "a"), "another conversation's");
        let decided = |token: &str| FeedItem::Decided {
            token: token.into(),
            decision: "✅ Allowed".into(),
        };
        feed.take(to, &decided("a"));
        assert!(!feed.open(to, "a"), "decided");
        assert!(feed.open(to, "b"), "the other one waits still");
        assert_eq!(feed.busy(to), Some("waiting for an approval"));
        feed.take(to, &decided("b"));
        assert_eq!(feed.busy(to), Some("running"));
    }

    #[test]
    fn the_status_and_the_pieces_of_an_answer_are_live_only() {
        let feed = Feed::default();
        let to = Conversation::from(ChatId(5));
        let (_, mut rx) = feed.follow(to);
        let live = [
            FeedItem::Status {
                text: "🔧 Bash: ls\n1 tool call · 0s".into(),
            },
            FeedItem::Writing {
                text: "Here is".into(),
                fresh: true,
            },
            FeedItem::Writing {
                text: " the answer".into(),
                fresh: false,
            },
            FeedItem::Said {
                text: "Here is the answer".into(),
            },
        ];
        for item in &live {
            feed.take(to, item);
        }
        let mut got = Vec::new();
        while let Ok(line) = rx.try_recv() {
            got.push(line);
        }
        let sent: Vec<ServerLine> = live.iter().map(ServerLine::of).collect();
        assert_eq!(got, sent, "a follower gets every line, in order");
        let (history, _rx) = feed.follow(to);
        assert_eq!(
            history,
            [ServerLine::Said {
                text: "Here is the answer".into()
            }],
            "the history keeps the answer whole, not its pieces nor the status"
        );
    }
}

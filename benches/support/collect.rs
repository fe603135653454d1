//! The event collector: a dedicated OS thread that drains the bot's event
//! broadcast as it comes (the broadcast keeps 65,536 events; a slow reader
//! loses some and the run is then reported as broken), keeps a compact copy
//! of each event, and reports each turn that is fully over (TurnEnded seen
//! and its typing lease stopped) to the driver.

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Instant;

use teloxide::types::ChatId;
use tokio::sync::{broadcast, mpsc};
use turnstile::events::{BotEvent, EventBus};

/// The marker published to end collection (no real chat has this id).
const SENTINEL: i64 = i64::MIN;

/// A compact copy of a bot event.
#[derive(Debug, Clone, Copy)]
pub enum Ev {
    /// A turn actor started.
    Started {
        /// Chat.
        chat: i64,
        /// Turn.
        turn: u64,
        /// When.
        at: Instant,
    },
    /// TurnEnded.
    Ended {
        /// Chat.
        chat: i64,
        /// Turn.
        turn: u64,
        /// The outcome's label.
        outcome: &'static str,
        /// When.
        at: Instant,
    },
    /// A typing lease ended.
    TypingStopped {
        /// Chat.
        chat: i64,
        /// The lease's turn.
        turn: u64,
        /// When.
        at: Instant,
    },
    /// The outbox dispatched a `sendChatAction`.
    ChatAction {
        /// Chat.
        chat: i64,
        /// When it left.
        at: Instant,
    },
    /// A session was force-closed.
    Killed {
        /// Chat.
        chat: i64,
        /// Turn.
        turn: u64,
    },
}

/// A turn that is over: ended, and its typing lease stopped.
#[derive(Debug, Clone, Copy)]
pub struct TurnOver {
    /// Chat.
    pub chat: i64,
    /// Turn.
    pub turn: u64,
    /// The outcome's label.
    pub outcome: &'static str,
    /// TurnEnded.
    pub ended: Instant,
    /// TypingStopped.
    pub typing_stopped: Instant,
}

/// What the collector saw.
#[derive(Debug, Default)]
pub struct Collected {
    /// Every event, in the order the bus delivered them.
    pub events: Vec<Ev>,
    /// Events lost to a slow reader (0 in a sound run).
    pub lagged: u64,
}

/// The running collector.
pub struct Collector {
    bus: EventBus,
    thread: Option<JoinHandle<Collected>>,
}

impl Collector {
    /// Subscribes now and starts draining; the receiver gets each turn that is over.
    pub fn start(bus: &EventBus) -> (Collector, mpsc::UnboundedReceiver<TurnOver>) {
        let rx = bus.subscribe();
        let (tx, over) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("bench-collector".into())
            .spawn(move || drain(rx, tx));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => panic!("could not start the collector thread: {e}"),
        };
        (
            Collector {
                bus: bus.clone(),
                thread: Some(thread),
            },
            over,
        )
    }

    /// Stops collecting (after every event published so far) and returns them.
    pub fn finish(mut self) -> Collected {
        self.bus.publish(BotEvent::AccessDenied {
            chat: ChatId(SENTINEL),
            user: teloxide::types::UserId(0),
        });
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

fn drain(
    mut rx: broadcast::Receiver<BotEvent>,
    over: mpsc::UnboundedSender<TurnOver>,
) -> Collected {
    let mut out = Collected::default();
    // Turn → (chat, outcome, ended) or typing stopped, whichever came first.
    let mut ended: HashMap<u64, (i64, &'static str, Instant)> = HashMap::new();
    let mut stopped: HashMap<u64, Instant> = HashMap::new();
    loop {
        let event = match rx.blocking_recv() {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                out.lagged += n;
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return out,
        };
        let ev = match event {
            BotEvent::AccessDenied { chat, .. } if chat.0 == SENTINEL => return out,
            BotEvent::TurnStarted { chat, turn, at, .. } => Ev::Started {
                turn: turn.get(),
                chat: chat.0,
                at,
            },
            BotEvent::TurnEnded {
                chat,
                turn,
                outcome,
                at,
                ..
            } => {
                let outcome = outcome.label();
                let turn = turn.get();
                match stopped.remove(&turn) {
                    Some(typing_stopped) => {
                        let _ = over.send(TurnOver {
                            chat: chat.0,
                            turn,
                            outcome,
                            ended: at,
                            typing_stopped,
                        });
                    }
                    None => {
                        ended.insert(turn, (chat.0, outcome, at));
                    }
                }
                Ev::Ended {
                    chat: chat.0,
                    turn,
                    outcome,
                    at,
                }
            }
            BotEvent::TypingStopped { chat, turn, at } => {
                let turn = turn.get();
                match ended.remove(&turn) {
                    Some((chat, outcome, ended)) => {
                        let _ = over.send(TurnOver {
                            chat,
                            turn,
                            outcome,
                            ended,
                            typing_stopped: at,
                        });
                    }
                    None => {
                        stopped.insert(turn, at);
                    }
                }
                Ev::TypingStopped {
                    chat: chat.0,
                    turn,
                    at,
                }
            }
            BotEvent::ChatActionSent { chat, at } => Ev::ChatAction { chat: chat.0, at },
            BotEvent::SessionKilled { chat, turn } => Ev::Killed {
                chat: chat.0,
                turn: turn.get(),
            },
            _ => continue,
        };
        out.events.push(ev);
    }
}

/// A check of the typing contract over one run: for each chat, every
/// `sendChatAction` the outbox dispatched after a TurnEnded and before the
/// chat's next message was pushed is a violation; requests the fake
/// received in that window (dispatched before TurnEnded, still on the
/// wire) are counted apart.
#[derive(Debug, Default, Clone, Copy)]
pub struct TypingCheck {
    /// Dispatched after TurnEnded (must be 0).
    pub dispatched_after_end: usize,
    /// Of those, dispatched before the typing actor ended the lease (the
    /// window between TurnEnded and the typing actor handling it).
    pub dispatched_before_stop: usize,
    /// Received by the fake after TurnEnded (still on the wire when the
    /// turn ended, plus any dispatched after it).
    pub landed_after_end: usize,
    /// Turns checked.
    pub turns: usize,
}

/// Runs [`TypingCheck`]: `pushes[chat]` are the moments each message of the
/// chat was pushed; `arrivals` the fake's `sendChatAction` log.
pub fn check_typing(
    events: &[Ev],
    pushes: &HashMap<i64, Vec<Instant>>,
    arrivals: &[(i64, Instant)],
) -> TypingCheck {
    let mut check = TypingCheck::default();
    let mut ends: HashMap<i64, Vec<(Instant, u64)>> = HashMap::new();
    let mut dispatched: HashMap<i64, Vec<Instant>> = HashMap::new();
    let mut stopped: HashMap<u64, Instant> = HashMap::new();
    for ev in events {
        match *ev {
            Ev::Ended { chat, turn, at, .. } => ends.entry(chat).or_default().push((at, turn)),
            Ev::ChatAction { chat, at } => dispatched.entry(chat).or_default().push(at),
            Ev::TypingStopped { turn, at, .. } => {
                stopped.insert(turn, at);
            }
            _ => {}
        }
    }
    let mut landed: HashMap<i64, Vec<Instant>> = HashMap::new();
    for (chat, at) in arrivals {
        landed.entry(*chat).or_default().push(*at);
    }
    for (chat, ends) in &ends {
        let mut ends = ends.clone();
        ends.sort();
        let mut next_push: Vec<Instant> = pushes.get(chat).cloned().unwrap_or_default();
        next_push.sort();
        for (end, turn) in ends {
            check.turns += 1;
            let until = next_push.iter().find(|p| **p > end).copied();
            let inside = |at: &&Instant| **at >= end && until.is_none_or(|u| **at < u);
            let after: Vec<Instant> = dispatched
                .get(chat)
                .map(|d| d.iter().filter(inside).copied().collect())
                .unwrap_or_default();
            check.dispatched_after_end += after.len();
            if let Some(stop) = stopped.get(&turn) {
                check.dispatched_before_stop += after.iter().filter(|at| *at < stop).count();
            }
            check.landed_after_end += landed
                .get(chat)
                .map_or(0, |d| d.iter().filter(inside).count());
        }
    }
    check
}

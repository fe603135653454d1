//! [`Link`]: the session a turn talks to, held only by the phases that have
//! one (running, awaiting settle, closing): its commands, its events (in
//! hand, or out with the pending read), whether it settled, and which of
//! the turn's sessions it is, so a read from a replaced one is ignored.

use actix::SpawnHandle;
use tokio::sync::mpsc;

use super::phase::TurnPhase;
use crate::agent::{AgentEvent, AgentSession, SessionCommand};

/// The session the turn talks to.
pub(super) struct Link {
    /// Commands to the session.
    pub(super) commands: mpsc::UnboundedSender<SessionCommand>,
    /// Its events: in hand, or out with the pending read.
    events: Events,
    /// Its label, for logs.
    pub(super) label: String,
    /// Set once it reported itself idle (settled, reusable) or exited.
    settled: Option<Settled>,
    /// Which of the turn's sessions this is (the turn counts those attached).
    generation: u64,
}

/// Where a session's events are.
enum Events {
    /// In hand: no read is pending.
    InHand(mpsc::UnboundedReceiver<AgentEvent>),
    /// Out with the pending read, which brings them back with its event
    /// (cancelled if the session is replaced first).
    Reading(SpawnHandle),
}

/// How a session settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settled {
    /// It reported itself idle: done with the turn, reusable.
    Idle,
    /// It exited, or its event stream closed.
    Exited,
    /// Past the turn's `result` it goes on with a message steered into the
    /// turn, as its next turn: done with this one, handed back running.
    Continues,
}

impl Link {
    /// The link to `session`, the turn's `generation`th.
    pub(super) fn new(session: AgentSession, generation: u64) -> Self {
        let AgentSession {
            commands,
            events,
            label,
        } = session;
        Self {
            commands,
            events: Events::InHand(events),
            label,
            settled: None,
            generation,
        }
    }

    /// Which of the turn's sessions this is.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Starts a read of the next event with `start`, unless one is pending.
    pub(super) fn read(
        &mut self,
        start: impl FnOnce(mpsc::UnboundedReceiver<AgentEvent>) -> SpawnHandle,
    ) {
        let events = std::mem::replace(&mut self.events, Events::Reading(SpawnHandle::default()));
        self.events = match events {
            Events::InHand(events) => Events::Reading(start(events)),
            reading => reading,
        };
    }

    /// The pending read, to cancel when the session is replaced.
    pub(super) fn pending_read(&self) -> Option<SpawnHandle> {
        match self.events {
            Events::Reading(read) => Some(read),
            Events::InHand(_) => None,
        }
    }

    /// Marks the session settled.
    pub(super) fn settle(&mut self, how: Settled) {
        self.settled = Some(how);
    }

    /// Whether the session is done with the turn: idle or gone.
    pub(super) fn is_settled(&self) -> bool {
        self.settled.is_some()
    }

    /// The session, to hand back for the chat's next turn: only when it
    /// reported itself idle and no read holds its events.
    pub(super) fn into_session(self) -> Option<AgentSession> {
        match self {
            Self {
                commands,
                events: Events::InHand(events),
                label,
                settled: Some(Settled::Idle | Settled::Continues),
                ..
            } => Some(AgentSession {
                commands,
                events,
                label,
            }),
            _ => None,
        }
    }
}

impl<S> TurnPhase<S, Link> {
    /// Takes back the events a read of the turn's `generation`th session
    /// took out. False when that session was replaced (a fresh one is
    /// opening or attached): its event is ignored. Once the turn closed its
    /// session, the event is still read, as a late one.
    pub(super) fn read_back(
        &mut self,
        generation: u64,
        events: mpsc::UnboundedReceiver<AgentEvent>,
    ) -> bool {
        if let Self::Opening { .. } = self {
            return false;
        }
        match self.link_mut() {
            Some(link) if link.generation != generation => false,
            Some(link) => {
                link.events = Events::InHand(events);
                true
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::turn::phase::{Leftover, TurnStep};

    /// A session over channels the test holds the other ends of.
    fn session(
        label: &str,
    ) -> (
        AgentSession,
        mpsc::UnboundedReceiver<SessionCommand>,
        mpsc::UnboundedSender<AgentEvent>,
    ) {
        let (commands, from_turn) = mpsc::unbounded_channel();
        let (to_turn, events) = mpsc::unbounded_channel();
        let session = AgentSession {
            commands,
            events,
            label: label.into(),
        };
        (session, from_turn, to_turn)
    }

    /// Starts a read that takes the events out and hands them to the test.
    fn read(link: &mut Link, handle: SpawnHandle) -> mpsc::UnboundedReceiver<AgentEvent> {
        let mut taken = None;
        link.read(|events| {
            taken = Some(events);
            handle
        });
        taken.expect("the read started")
    }

    #[test]
    fn a_session_is_handed_back_only_once_idle_with_its_events_in_hand() {
        let busy = Link::new(session("busy").0, 1);
        assert!(!busy.is_settled());
        assert!(busy.into_session().is_none(), "not settled");

        let mut exited = Link::new(session("exited").0, 1);
        exited.settle(Settled::Exited);
        assert!(exited.is_settled());
        assert!(exited.into_session().is_none(), "exited");

        let mut reading = Link::new(session("reading").0, 1);
        let _events = read(&mut reading, SpawnHandle::default().next());
        reading.settle(Settled::Idle);
        assert!(reading.into_session().is_none(), "its events are out");

        let mut idle = Link::new(session("idle").0, 1);
        idle.settle(Settled::Idle);
        let back = idle.into_session().expect("an idle session is handed back");
        assert_eq!(back.label, "idle");
    }

    #[test]
    fn a_read_starts_once_until_its_events_come_back() {
        let mut phase = TurnPhase::<(), Link>::Opening { warm: None };
        let link = Link::new(session("a").0, 1);
        (phase, _) = phase.after(TurnStep::Attached { link, warm: false });
        let first = SpawnHandle::default().next();
        let events = read(phase.link_mut().unwrap(), first);
        phase
            .link_mut()
            .unwrap()
            .read(|_| panic!("a read is already pending"));
        assert_eq!(phase.link().unwrap().pending_read(), Some(first));
        assert!(phase.read_back(1, events));
        assert_eq!(phase.link().unwrap().pending_read(), None);
    }

    #[test]
    fn a_read_from_a_replaced_session_is_ignored() {
        let (warm, warm_commands, _) = session("warm");
        let mut phase = TurnPhase::<(), Link>::Opening { warm: None };
        let link = Link::new(warm, 1);
        (phase, _) = phase.after(TurnStep::Attached { link, warm: true });
        let old_read = SpawnHandle::default().next();
        let _old_events = read(phase.link_mut().unwrap(), old_read);

        // The silent warm session is let go with its pending read, to be
        // killed and cancelled; a fresh one takes its place.
        let left;
        (phase, left) = phase.after(TurnStep::ReplacingWarm);
        let Some(Leftover::Link(old)) = left else {
            panic!("the warm session's link is let go")
        };
        assert_eq!(old.pending_read(), Some(old_read));
        drop(old);
        assert!(
            warm_commands.is_closed(),
            "the replaced session's link is gone"
        );
        let (_, stale) = mpsc::unbounded_channel();
        assert!(
            !phase.read_back(1, stale),
            "a read of the replaced session is ignored while a fresh one opens"
        );

        let link = Link::new(session("fresh").0, 2);
        (phase, _) = phase.after(TurnStep::Attached { link, warm: false });
        let new_read = old_read.next();
        let _new_events = read(phase.link_mut().unwrap(), new_read);
        let (_, stale) = mpsc::unbounded_channel();
        assert!(
            !phase.read_back(1, stale),
            "a read of the replaced session is ignored once a fresh one is attached"
        );
        let fresh = phase.link().unwrap();
        assert_eq!(fresh.label, "fresh");
        assert_eq!(
            fresh.pending_read(),
            Some(new_read),
            "the fresh session's read is still pending"
        );
    }

    #[test]
    fn a_read_of_a_closed_session_still_comes_in_as_a_late_event() {
        use crate::chat::outcome::TurnOutcome::Interrupted;
        let mut phase = TurnPhase::<(), Link>::Closing {
            link: None,
            outcome: Interrupted,
        };
        let (_, events) = mpsc::unbounded_channel();
        assert!(phase.read_back(1, events));
    }

    #[test]
    fn a_warm_session_never_begun_on_is_dropped_at_the_end() {
        let (warm, warm_commands, _) = session("warm");
        let phase = TurnPhase::<AgentSession, Link>::Opening { warm: Some(warm) };
        let (phase, left) = phase.after(TurnStep::Ended(
            crate::chat::outcome::TurnOutcome::Interrupted,
        ));
        assert!(phase.link().is_none());
        let Some(Leftover::Warm(warm)) = left else {
            panic!("the warm session is let go")
        };
        assert_eq!(warm.label, "warm");
        drop(warm);
        assert!(warm_commands.is_closed(), "dropped, the session closes");
    }
}

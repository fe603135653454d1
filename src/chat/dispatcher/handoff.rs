//! At start, the conversations an earlier process handed off to the host
//! (`/handoff`) are told so before anything else reaches them: their
//! supervisors then hold no agent process until a message takes them back.

use actix::Context;

use super::Dispatcher;
use crate::chat::supervisor::handoff::HandedOffBefore;
use crate::state::{HandedOff, ReadFailed};

impl Dispatcher {
    /// Starts the supervisor of each conversation in `found` and tells it
    /// it is handed off. Whether they are known: when they could not be
    /// read, no session may be prewarmed (one of them could be).
    pub(super) fn handed_off_before(
        &mut self,
        found: Result<Vec<HandedOff>, ReadFailed>,
        ctx: &mut Context<Self>,
    ) -> bool {
        let Ok(found) = found else {
            tracing::error!(
                "the conversations handed off to the host could not be read: no session is prewarmed now"
            );
            return false;
        };
        for HandedOff { to, session } in found {
            let entry = self.supervisor(self.topics.now(to), ctx);
            entry.routed += 1;
            entry.addr.do_send(HandedOffBefore(session));
        }
        true
    }
}

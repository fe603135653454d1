//! A line typed in `turnstile attach`: already in the inbox (the client
//! was told so), shown in the chat as coming from the terminal, then
//! handled as any message just received, by the same rules.

use actix::{Context, Handler, Message};

use super::Dispatcher;
use crate::chat::notices::terminal;
use crate::incoming::Incoming;

/// A typed line, written to the inbox.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Typed(pub Incoming);

impl Handler<Typed> for Dispatcher {
    type Result = ();

    fn handle(&mut self, Typed(m): Typed, ctx: &mut Context<Self>) {
        self.say(m.to, terminal::typed(&m.text));
        self.contained_message(m, ctx);
    }
}

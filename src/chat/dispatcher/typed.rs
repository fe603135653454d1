//! A line typed in `turnstile attach`: already in the inbox (the client
//! was told so), shown in the chat as coming from the terminal, then
//! handled as any message just received, by the same rules (a command
//! with the operator's rights); and an answer given there to a question.

use actix::{Context, Handler, Message};

use teloxide::types::UserId;

use super::{Dispatcher, ForChat};
use crate::chat::notices::terminal;
use crate::chat::turn::ButtonPressed;
use crate::ids::Conversation;
use crate::incoming::{Approval, Ask, Callback, Command, Incoming, Press};

/// A typed line, written to the inbox.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Typed(pub Incoming);

impl Handler<Typed> for Dispatcher {
    type Result = ();

    fn handle(&mut self, Typed(m): Typed, ctx: &mut Context<Self>) {
        let shown = match &m.ask {
            Ask::Agent => m.text.clone(),
            Ask::Command(command) => format!("/{} {}", command.word(), m.text)
                .trim_end()
                .to_string(),
            Ask::Unknown(word) => format!("/{word}"),
        };
        // A stop its chat acts on drops what the conversation has queued,
        // this line with it: the stop says it after that.
        let stopping_a_chat =
            matches!(m.ask, Ask::Command(Command::Stop)) && self.chats.contains_key(&m.to);
        if !stopping_a_chat {
            self.say(m.to, terminal::typed(&shown));
        }
        self.contained_message(m, ctx);
    }
}

/// An answer given at the terminal to a conversation's question: decided
/// as a press of its button by the operator (an admin), with no callback
/// query to answer; the question then says it was decided at the terminal.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct TerminalAnswer {
    /// The conversation whose question it answers.
    pub to: Conversation,
    /// The ask and the choice, as the button's callback data names them.
    pub approval: Approval,
}

impl Handler<TerminalAnswer> for Dispatcher {
    type Result = ();

    fn handle(&mut self, answer: TerminalAnswer, ctx: &mut Context<Self>) {
        let TerminalAnswer { to, approval } = answer;
        if !self.chats.contains_key(&to) {
            tracing::info!(conversation = %to, "attach: an answer for a conversation with no turn; ignored");
            return;
        }
        tracing::info!(conversation = %to, "attach: a question answered at the terminal");
        let press = Press {
            id: String::new(),
            to,
            from: UserId(0),
            name: terminal::OPERATOR.to_string(),
            message: None,
            data: Callback::Unknown,
        };
        let pressed = ButtonPressed::new(press, approval, true);
        self.deliver(to, ForChat::Press(pressed), ctx);
    }
}

//! Running it like a service: the Prometheus [`Metrics`] every part of the
//! bot counts into ([`metrics`]; reached through the
//! [`EventBus`](crate::events::EventBus)), what only the bus tells them
//! ([`follow`]), the `[ops] listen` HTTP endpoint serving `GET /healthz` and
//! `GET /metrics` ([`server`]), the log set-up and the spans that give a
//! line its context ([`logging`]), what a panic does ([`panics`]),
//! systemd's readiness and watchdog notifications ([`notify`]), and
//! `/restart`'s re-execution ([`restart`]).

pub mod logging;
pub mod metrics;
pub mod notify;
pub mod panics;
pub mod restart;
pub mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use teloxide::types::ChatId;

use crate::events::{BotEvent, EventBus};
use crate::ids::TurnId;
pub use metrics::{Metrics, OutboxMetrics, WaitingMessage};

/// Follows `events` for what only the bus knows: typing-stop latency
/// (TurnEnded → TypingStopped of the same turn) and force-closed sessions.
pub fn follow(metrics: &Arc<Metrics>, events: &EventBus) -> tokio::task::JoinHandle<()> {
    let mut rx = events.subscribe();
    let metrics = Arc::clone(metrics);
    tokio::spawn(async move {
        // Whichever of TurnEnded and TypingStopped came first, by turn.
        let mut ended: HashMap<(ChatId, TurnId), Instant> = HashMap::new();
        let mut stopped: HashMap<(ChatId, TurnId), Instant> = HashMap::new();
        loop {
            let event = match rx.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            match event {
                BotEvent::TurnEnded { chat, turn, at, .. } => match stopped.remove(&(chat, turn)) {
                    Some(_) => metrics.typing_stopped_after(0.0),
                    None => {
                        ended.insert((chat, turn), at);
                    }
                },
                BotEvent::TypingStopped { chat, turn, at } => match ended.remove(&(chat, turn)) {
                    Some(end) => metrics
                        .typing_stopped_after(at.saturating_duration_since(end).as_secs_f64()),
                    None => {
                        stopped.insert((chat, turn), at);
                    }
                },
                BotEvent::SessionKilled { .. } => {
                    metrics.wedged();
                }
                _ => {}
            }
            // A lease without a turn end (or the reverse) is forgotten
            // rather than kept forever.
            for map in [&mut ended, &mut stopped] {
                if map.len() > 10_000 {
                    map.clear();
                }
            }
        }
    })
}

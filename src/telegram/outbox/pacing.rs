//! Pacing: the token buckets every message passes. Each chat has its own
//! (about one message a second in a private chat, 20 a minute in a group,
//! edits included) and all chats share one; a 429 holds a chat's bucket.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use teloxide::types::ChatId;

/// Rate limits and retry policy.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// Messages a chat may burst.
    pub chat_burst: f64,
    /// Messages per second a private chat refills (Telegram: about one).
    pub chat_per_sec: f64,
    /// Messages per second a group refills (Telegram: 20 a minute).
    pub group_per_sec: f64,
    /// Messages all chats may burst.
    pub global_burst: f64,
    /// Messages per second all chats refill.
    pub global_per_sec: f64,
    /// Retries of a 5xx or connection failure.
    pub max_retries: u32,
    /// The first backoff; it doubles per retry.
    pub backoff: Duration,
    /// The longest `retry_after` honoured before giving up (requests
    /// that give way; an answer waits out any).
    pub max_retry_after: Duration,
    /// The longest backoff of an answer (a message, file or question),
    /// which is retried until Telegram takes it: once Telegram is back,
    /// delivery resumes within about this long.
    pub max_backoff: Duration,
    /// The longest one attempt may wait for its answer (an upload gets
    /// four times as long): a connection that never answers holds its lane
    /// and its place among the requests out no longer than this.
    pub request_timeout: Duration,
    /// An answer Telegram has not taken after this long is dropped, and the
    /// chat told (`telegram.max_pending_age`).
    pub max_pending_age: Duration,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            chat_burst: 5.0,
            chat_per_sec: 1.0,
            group_per_sec: 20.0 / 60.0,
            global_burst: 30.0,
            global_per_sec: 30.0,
            max_retries: 4,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(300),
            max_backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(20),
            max_pending_age: Duration::from_secs(24 * 60 * 60),
        }
    }
}

/// A token bucket that hands out reservations: the wait before the next send.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: f64,
    burst: f64,
    per_sec: f64,
    at: Instant,
    /// Until when a 429 holds the chat.
    held: Option<Instant>,
}

impl Bucket {
    pub(super) fn new(burst: f64, per_sec: f64) -> Self {
        Self {
            tokens: burst,
            burst,
            per_sec,
            at: Instant::now(),
            held: None,
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
    }

    /// How long until the hold of a 429 is over.
    fn held_for(&self) -> Duration {
        self.held
            .map(|until| until.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    }

    /// How long until `need` tokens are free.
    fn short_of(&self, need: f64) -> Duration {
        let short = need - self.tokens;
        let wait = if short <= 0.0 || self.per_sec <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(short / self.per_sec)
        };
        wait.max(self.held_for())
    }

    /// How long until a token is free; takes none.
    pub(super) fn wait(&mut self) -> Duration {
        self.refill();
        self.short_of(1.0)
    }

    /// Takes one token, returning how long to wait before using it.
    pub(super) fn reserve(&mut self) -> Duration {
        self.refill();
        self.tokens -= 1.0;
        self.short_of(0.0)
    }

    /// Gives back a token taken for a send that never reached Telegram.
    fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }

    /// How long live text must wait: it may not take the last token a real
    /// message could use (one is kept back when the burst allows it), nor
    /// go while a 429 holds the chat. Takes nothing.
    pub(super) fn light_wait(&mut self) -> Duration {
        self.refill();
        let keep = (self.burst - 1.0).clamp(0.0, 1.0);
        self.short_of(1.0 + keep)
    }

    /// Telegram said to wait (a 429): nothing of this chat goes before.
    pub(super) fn hold(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        self.held = Some(self.held.map_or(until, |held| held.max(until)));
    }

    /// Tokens left (for tests).
    #[cfg(test)]
    pub(super) fn tokens(&self) -> f64 {
        self.tokens
    }
}

/// The buckets a chat's messages pass: its own and the one all chats
/// share. Owned by the chat's lane.
#[derive(Debug)]
pub(super) struct Pacing {
    chat: Bucket,
    global: Arc<Mutex<Bucket>>,
}

/// The bucket all chats share.
pub(super) fn global(limits: &RateLimits) -> Arc<Mutex<Bucket>> {
    Arc::new(Mutex::new(Bucket::new(
        limits.global_burst,
        limits.global_per_sec,
    )))
}

impl Pacing {
    /// A chat's pacing: its own limit and the shared `global` one.
    pub(super) fn of_chat(limits: &RateLimits, chat: ChatId, global: Arc<Mutex<Bucket>>) -> Self {
        let per_sec = if chat.is_user() {
            limits.chat_per_sec
        } else {
            limits.group_per_sec
        };
        Self {
            chat: Bucket::new(limits.chat_burst, per_sec),
            global,
        }
    }

    fn global(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long until a message could go; takes nothing.
    pub(super) fn wait(&mut self) -> Duration {
        let global = self.global().wait();
        self.chat.wait().max(global)
    }

    /// Takes a send of the chat and of all chats: how long to wait first.
    pub(super) fn reserve(&mut self) -> Duration {
        let global = self.global().reserve();
        self.chat.reserve().max(global)
    }

    /// A send taken by [`Pacing::reserve`] never reached Telegram (the
    /// connection was refused): its tokens are given back, so an outage
    /// costs the chat none of its budget.
    pub(super) fn give_back(&mut self) {
        self.global().give_back();
        self.chat.give_back();
    }

    /// How long live text must wait (see [`Bucket::light_wait`]).
    pub(super) fn light_wait(&mut self) -> Duration {
        self.chat.light_wait()
    }

    /// A 429: the chat waits `wait`.
    pub(super) fn hold(&mut self, wait: Duration) {
        self.chat.hold(wait);
    }

    /// The chat's bucket and the shared one (for tests).
    #[cfg(test)]
    pub(super) fn parts(&mut self) -> (&mut Bucket, std::sync::MutexGuard<'_, Bucket>) {
        let global = self
            .global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (&mut self.chat, global)
    }
}

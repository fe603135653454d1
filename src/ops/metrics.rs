//! The Prometheus [`Metrics`] every part of the bot counts into, and their
//! text exposition. Nothing here reads the event bus: [`crate::ops::follow`]
//! does, and counts what only the bus knows.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use teloxide::RequestError;
use tokio::sync::Semaphore;

use crate::outcome::TurnOutcome;

mod outbox;

pub use outbox::{OutboxMetrics, WaitingMessage};

/// Registers each metric (a field of `Metrics`, cloned: the registry
/// and the field share it) under its name and help text.
macro_rules! register {
    ($registry:expr, $($name:literal, $help:literal => $metric:expr;)*) => {
        $($registry.register($name, $help, $metric.clone());)*
    };
}

/// `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// `method` and `status` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    status: String,
}

/// `direction` label: `input` (read) or `output` (written).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

/// `method` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: String,
}

/// Every metric of one bot (listed in docs/operations.md, "Health and metrics").
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    turns: Family<OutcomeLabel, Counter>,
    turn_duration: Histogram,
    turn_api_calls: Histogram,
    turn_cost: Histogram,
    cost_total: Counter<f64, AtomicU64>,
    typing_stop: Histogram,
    wedges: Counter,
    queue_depth: Gauge<i64, AtomicI64>,
    live_chats: Gauge<i64, AtomicI64>,
    live_turns: Gauge<i64, AtomicI64>,
    warm_agents: Gauge<i64, AtomicI64>,
    telegram_requests: Family<RequestLabels, Counter>,
    rate_limited: Family<MethodLabel, Counter>,
    unknown_outcome: Family<MethodLabel, Counter>,
    retries: Counter,
    store_errors: Counter,
    /// Scheduled runs by outcome: `delivered`, `failed`, `missed`.
    schedule_runs: Family<OutcomeLabel, Counter>,
    /// Schedules the scheduler keeps.
    schedules: Gauge<i64, AtomicI64>,
    /// Messages steered into a running turn.
    steered: Counter,
    /// Conversations whose messages wait out a usage limit.
    limit_parked: Gauge<i64, AtomicI64>,
    /// Parked messages run again, and parked ones given up (`/stop`).
    limit_retries: Family<OutcomeLabel, Counter>,
    /// Tokens the agents' model calls read and wrote (`/usage` shows them
    /// per conversation).
    tokens: Family<DirectionLabel, Counter>,
    /// What waits for Telegram, resends and drops.
    outbox: OutboxMetrics,
    /// The last successful `getUpdates`.
    last_poll: Mutex<Option<Instant>>,
    /// When `getMe` answered at start: until the first long poll answers
    /// (up to `telegram.poll_timeout` on a quiet bot), the poller's health
    /// is counted from here.
    met_telegram: Mutex<Option<Instant>>,
    /// The shared warm-process slots and their number, once the dispatcher exists.
    warm: Mutex<Option<(Arc<Semaphore>, usize)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            turns: Family::<OutcomeLabel, Counter>::default(),
            turn_duration: Histogram::new(exponential_buckets(0.05, 2.0, 16)),
            turn_api_calls: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            turn_cost: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            cost_total: Counter::<f64, AtomicU64>::default(),
            typing_stop: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            wedges: Counter::default(),
            queue_depth: Gauge::<i64, AtomicI64>::default(),
            live_chats: Gauge::<i64, AtomicI64>::default(),
            live_turns: Gauge::<i64, AtomicI64>::default(),
            warm_agents: Gauge::<i64, AtomicI64>::default(),
            telegram_requests: Family::<RequestLabels, Counter>::default(),
            rate_limited: Family::<MethodLabel, Counter>::default(),
            unknown_outcome: Family::<MethodLabel, Counter>::default(),
            retries: Counter::default(),
            store_errors: Counter::default(),
            schedule_runs: Family::<OutcomeLabel, Counter>::default(),
            schedules: Gauge::<i64, AtomicI64>::default(),
            steered: Counter::default(),
            limit_parked: Gauge::<i64, AtomicI64>::default(),
            limit_retries: Family::<OutcomeLabel, Counter>::default(),
            tokens: Family::<DirectionLabel, Counter>::default(),
            outbox: OutboxMetrics::default(),
            last_poll: Mutex::new(None),
            met_telegram: Mutex::new(None),
            warm: Mutex::new(None),
        };
        metrics.outbox.register(&mut metrics.registry);
        metrics.register_turns();
        metrics.register_requests();
        metrics.register_schedules();
        metrics
    }

    /// Registers the metrics of schedules.
    fn register_schedules(&mut self) {
        register!(
            self.registry,
            "turnstile_schedule_runs", "Scheduled runs by outcome: delivered (its turn completed), failed (not queued, or its turn did not complete), missed (a slot that did not run on time)" => self.schedule_runs;
            "turnstile_schedules", "Schedules kept by the scheduler" => self.schedules;
            "turnstile_limit_parked", "Conversations whose messages wait out a model usage limit" => self.limit_parked;
            "turnstile_limit_retries", "Parked turns by what became of them: retried (ran again), given_up (/stop)" => self.limit_retries;
            "turnstile_steered_messages", "Messages written into a running turn (dispatcher.busy = steer)" => self.steered;
            "turnstile_tokens", "Tokens the agent's model calls read (input, cache included) and wrote (output), as each turn's result reported them" => self.tokens;
        );
    }

    /// A turn's results reported `input` tokens read, `output` written and
    /// what that cost, summed over every result (also one that came after
    /// the turn ended, as it does after a terminator): counted when the
    /// turn is done with its session, as `/usage`'s row is written, so
    /// these totals are `/usage`'s.
    pub fn usage(&self, input: u64, output: u64, cost_usd: f64) {
        for (direction, n) in [("input", input), ("output", output)] {
            self.tokens
                .get_or_create(&DirectionLabel { direction })
                .inc_by(n);
        }
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost_total.inc_by(cost_usd);
        }
    }

    /// A message was steered into a running turn.
    pub fn steered(&self) {
        self.steered.inc();
    }

    /// A conversation's messages were parked for a usage limit (`1`), or
    /// left the parking (`-1`).
    pub fn parked(&self, delta: i64) {
        self.limit_parked.inc_by(delta);
    }

    /// Parked messages ran again.
    pub fn limit_retried(&self) {
        self.limit_retry("retried");
    }

    /// Parked messages were given up (`/stop`).
    pub fn limit_given_up(&self) {
        self.limit_retry("given_up");
    }

    fn limit_retry(&self, outcome: &str) {
        self.limit_retries
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Scheduled runs (or slots) ended with `outcome`: `delivered`,
    /// `failed` or `missed`.
    pub fn schedule_runs(&self, outcome: &str, n: u64) {
        self.schedule_runs
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc_by(n);
    }

    /// The scheduler now keeps `n` schedules.
    pub fn schedules(&self, n: usize) {
        self.schedules.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Registers the metrics of turns, chats and agents.
    fn register_turns(&mut self) {
        register!(
            self.registry,
            "turnstile_turns", "Turns ended, by outcome" => self.turns;
            "turnstile_turn_duration_seconds", "How long turns took, start to end" => self.turn_duration;
            "turnstile_turn_api_calls", "Model API calls per turn, as the agent's result reports them" => self.turn_api_calls;
            "turnstile_turn_cost_usd", "Cost per turn in USD, as the agent's result reports it" => self.turn_cost;
            "turnstile_cost_usd", "Cost of all turns in USD, as the agents' results report it" => self.cost_total;
            "turnstile_typing_stop_latency_seconds", "From a turn's end to its typing indicator stopping" => self.typing_stop;
            "turnstile_wedges_force_closed", "Agent sessions force-closed because they did not settle" => self.wedges;
            "turnstile_queue_depth", "Messages waiting for a turn, all chats together" => self.queue_depth;
            "turnstile_live_chats", "Chat supervisors alive" => self.live_chats;
            "turnstile_live_turns", "Turns running" => self.live_turns;
            "turnstile_warm_agents", "Agent processes kept warm between turns" => self.warm_agents;
        );
    }

    /// Registers the metrics of Bot API requests and of the store.
    fn register_requests(&mut self) {
        self.registry.register("turnstile_telegram_requests",
            "Bot API requests by method and status (200, 429, 4xx, 5xx, network, invalid_json, timeout, error)",
            self.telegram_requests.clone());
        register!(
            self.registry,
            "turnstile_telegram_rate_limited", "Bot API answers 429 (retry after), by method" => self.rate_limited;
        );
        self.registry.register("turnstile_telegram_unknown_outcome",
            "Bot API messages that left but got no answer (a network failure after sending, an answer that is not JSON, none in time), so Telegram may or may not have them; each is sent again (turnstile_outbox_resent), by method",
            self.unknown_outcome.clone());
        register!(
            self.registry,
            "turnstile_telegram_retries", "Bot API requests sent again after a failure" => self.retries;
            "turnstile_store_errors", "State store statements that failed" => self.store_errors;
        );
    }

    /// A turn ended after `took`.
    pub fn turn_ended(&self, outcome: &TurnOutcome, took: Duration) {
        self.turns
            .get_or_create(&OutcomeLabel {
                outcome: outcome.label().to_string(),
            })
            .inc();
        self.turn_duration.observe(took.as_secs_f64());
    }

    /// What a turn's results reported, all of them (after a terminator the
    /// result comes after the turn ended): once per turn, when the turn is
    /// done with its session.
    pub fn turn_used(&self, api_calls: u32, cost_usd: f64) {
        if api_calls > 0 {
            self.turn_api_calls.observe(f64::from(api_calls));
        }
        if cost_usd.is_finite() && cost_usd > 0.0 {
            // The total is counted with the tokens (`usage`).
            self.turn_cost.observe(cost_usd);
        }
    }

    /// A message joined a chat's queue (`1`) or left it (`-n`).
    pub fn queued(&self, delta: i64) {
        self.queue_depth.inc_by(delta);
    }

    /// A Bot API request was answered with `result`.
    pub fn telegram<T>(&self, method: &str, result: &Result<T, RequestError>) {
        let status = match result {
            Ok(_) => "200",
            Err(RequestError::RetryAfter(_)) => "429",
            Err(RequestError::Api(teloxide::ApiError::Unknown(why)))
                if [
                    "Internal Server Error",
                    "Bad Gateway",
                    "Service Unavailable",
                    "Gateway Timeout",
                ]
                .iter()
                .any(|s| why.contains(s)) =>
            {
                "5xx"
            }
            Err(RequestError::Api(_) | RequestError::MigrateToChatId(_)) => "4xx",
            Err(RequestError::Network(_)) => "network",
            Err(RequestError::InvalidJson { .. }) => "invalid_json",
            Err(RequestError::Io(io)) if io.kind() == std::io::ErrorKind::TimedOut => "timeout",
            Err(_) => "error",
        };
        self.telegram_requests
            .get_or_create(&RequestLabels {
                method: method.to_string(),
                status: status.to_string(),
            })
            .inc();
        if status == "429" {
            self.rate_limited
                .get_or_create(&MethodLabel {
                    method: method.to_string(),
                })
                .inc();
        }
    }

    /// A message of `method` may or may not have reached Telegram.
    pub fn unknown_outcome(&self, method: &str) {
        self.unknown_outcome
            .get_or_create(&MethodLabel {
                method: method.to_string(),
            })
            .inc();
    }

    /// The outbox's own metrics.
    pub fn outbox(&self) -> &OutboxMetrics {
        &self.outbox
    }

    /// A Bot API request is about to be sent again.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// `getUpdates` answered.
    pub fn polled(&self) {
        *lock(&self.last_poll) = Some(Instant::now());
    }

    /// How long ago `getUpdates` last answered, if it ever did.
    pub fn since_last_poll(&self) -> Option<Duration> {
        lock(&self.last_poll).map(|at| at.elapsed())
    }

    /// `getMe` answered at start.
    pub fn met_telegram(&self) {
        *lock(&self.met_telegram) = Some(Instant::now());
    }

    /// How long ago `getMe` answered at start, if it did.
    pub fn since_met_telegram(&self) -> Option<Duration> {
        lock(&self.met_telegram).map(|at| at.elapsed())
    }

    /// Where warm agent processes are counted: `max` slots of `slots`.
    pub fn watch_warm(&self, slots: Arc<Semaphore>, max: usize) {
        *lock(&self.warm) = Some((slots, max));
    }

    /// The text exposition (OpenMetrics), with the live actors counted now
    /// (`chats` supervisors, `turns` turn actors) and the store's failed
    /// statements so far.
    pub fn render(&self, chats: i64, turns: i64, store_errors: u64) -> String {
        self.live_chats.set(chats);
        self.live_turns.set(turns);
        if let Some((slots, max)) = lock(&self.warm).as_ref() {
            let used = max.saturating_sub(slots.available_permits());
            self.warm_agents
                .set(i64::try_from(used).unwrap_or(i64::MAX));
        }
        self.outbox.refresh();
        let seen = self.store_errors.get();
        self.store_errors.inc_by(store_errors.saturating_sub(seen));
        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(cause = %err, "encoding the metrics failed");
        }
        text
    }

    /// One turn's typing stopped `secs` after its end.
    pub(super) fn typing_stopped_after(&self, secs: f64) {
        self.typing_stop.observe(secs);
    }

    /// A session was force-closed.
    pub(super) fn wedged(&self) {
        self.wedges.inc();
    }
}

/// Locks, ignoring poisoning.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_calls_and_cost_reported_by_results_are_counted() {
        let metrics = Metrics::new();
        let done = TurnOutcome::Completed {
            reason: "completed".into(),
        };
        metrics.turn_ended(&done, Duration::from_millis(1200));
        metrics.turn_used(3, 0.25);
        metrics.turn_ended(&done, Duration::from_millis(800));
        metrics.turn_used(2, 0.125);
        // A cost that is not a number (from outside) is not added.
        metrics.turn_ended(&done, Duration::from_millis(10));
        metrics.turn_used(0, f64::NAN);
        // No result: nothing reported, nothing observed.
        metrics.turn_ended(&TurnOutcome::NoProgress, Duration::from_secs(1));
        metrics.turn_used(0, 0.0);
        let text = metrics.render(0, 0, 4);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
                .to_string()
        };
        assert_eq!(
            line("turnstile_cost_usd_total"),
            "turnstile_cost_usd_total 0.0",
            "counted with the tokens, by usage"
        );
        assert_eq!(
            line("turnstile_turn_api_calls_sum"),
            "turnstile_turn_api_calls_sum 5.0"
        );
        assert_eq!(
            line("turnstile_turn_api_calls_count"),
            "turnstile_turn_api_calls_count 2"
        );
        assert_eq!(
            line("turnstile_turn_cost_usd_count"),
            "turnstile_turn_cost_usd_count 2"
        );
        assert_eq!(
            line("turnstile_turn_duration_seconds_count"),
            "turnstile_turn_duration_seconds_count 4"
        );
        assert_eq!(
            line("turnstile_turns_total{outcome=\"completed\"}"),
            "turnstile_turns_total{outcome=\"completed\"} 3"
        );
        assert_eq!(
            line("turnstile_store_errors_total"),
            "turnstile_store_errors_total 4"
        );
        metrics.usage(100, 7, 0.25);
        metrics.usage(1, 0, f64::NAN);
        let text = metrics.render(0, 0, 4);
        for want in [
            "turnstile_tokens_total{direction=\"input\"} 101\n",
            "turnstile_tokens_total{direction=\"output\"} 7\n",
            "turnstile_cost_usd_total 0.25\n",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        // Read again: the store count is not added twice.
        let again = metrics.render(0, 0, 4);
        assert!(
            again.contains("turnstile_store_errors_total 4\n"),
            "{again}"
        );
    }
}

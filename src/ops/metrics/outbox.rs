//! The outbox's metrics: what waits for Telegram (how many, and the age of
//! the oldest, per method), messages sent again after an unknown outcome
//! (and whether they were marked as a resend), and those dropped at
//! `telegram.max_pending_age`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{MethodLabel, lock};

/// `method` and `marked` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResentLabels {
    method: String,
    marked: &'static str,
}

/// The messages waiting, per method: each one's key and first queueing.
type WaitingBook = HashMap<&'static str, BTreeMap<u64, Instant>>;

/// The outbox's metrics.
#[derive(Debug, Default)]
pub struct OutboxMetrics {
    waiting: Family<MethodLabel, Gauge>,
    oldest: Family<MethodLabel, Gauge<f64, AtomicU64>>,
    resent: Family<ResentLabels, Counter>,
    dropped: Family<MethodLabel, Counter>,
    book: Arc<Mutex<WaitingBook>>,
    next: AtomicU64,
}

/// A message counted as waiting until this is dropped.
#[derive(Debug)]
pub struct WaitingMessage {
    book: Arc<Mutex<WaitingBook>>,
    method: &'static str,
    key: u64,
}

impl Drop for WaitingMessage {
    fn drop(&mut self) {
        if let Some(waiting) = lock(&self.book).get_mut(self.method) {
            waiting.remove(&self.key);
        }
    }
}

impl OutboxMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "turnstile_outbox_waiting",
            "Messages, files and questions queued for Telegram and not yet taken, by method",
            self.waiting.clone(),
        );
        registry.register(
            "turnstile_outbox_oldest_waiting_seconds",
            "Age of the oldest message waiting for Telegram, by method (0: none)",
            self.oldest.clone(),
        );
        registry.register(
            "turnstile_outbox_resent",
            "Messages sent again after Telegram did not confirm the first copy, by method; marked=\"true\" when the first copy may have arrived too (the copy was marked as a resend)",
            self.resent.clone(),
        );
        registry.register(
            "turnstile_outbox_dropped",
            "Messages dropped unsent at telegram.max_pending_age, by method",
            self.dropped.clone(),
        );
    }

    /// A message of `method`, first queued at `born`, waits from now until
    /// the guard is dropped.
    pub fn waiting(&self, method: &'static str, born: Instant) -> WaitingMessage {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.book)
            .entry(method)
            .or_default()
            .insert(key, born);
        WaitingMessage {
            book: Arc::clone(&self.book),
            method,
            key,
        }
    }

    /// A message of `method` was sent again; `marked` when it may show
    /// twice.
    pub fn resent(&self, method: &str, marked: bool) {
        self.resent
            .get_or_create(&ResentLabels {
                method: method.to_string(),
                marked: if marked { "true" } else { "false" },
            })
            .inc();
    }

    /// A message of `method` was dropped at its age bound.
    pub fn dropped(&self, method: &str) {
        self.dropped
            .get_or_create(&MethodLabel {
                method: method.to_string(),
            })
            .inc();
    }

    /// Sets the gauges from what waits now.
    pub(super) fn refresh(&self) {
        let now = Instant::now();
        for (method, waiting) in lock(&self.book).iter() {
            let label = MethodLabel {
                method: (*method).to_string(),
            };
            let count = i64::try_from(waiting.len()).unwrap_or(i64::MAX);
            self.waiting.get_or_create(&label).set(count);
            let oldest = waiting.values().min().map_or(0.0, |born| {
                now.saturating_duration_since(*born).as_secs_f64()
            });
            self.oldest.get_or_create(&label).set(oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_message_waits_until_its_guard_is_dropped() {
        let metrics = OutboxMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let old = metrics.waiting("sendMessage", Instant::now() - Duration::from_secs(90));
        let new = metrics.waiting("sendMessage", Instant::now());
        metrics.refresh();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        assert!(
            text.contains("turnstile_outbox_waiting{method=\"sendMessage\"} 2\n"),
            "{text}"
        );
        let oldest = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("turnstile_outbox_oldest_waiting_seconds{method=\"sendMessage\"} ")
            })
            .and_then(|v| v.parse::<f64>().ok())
            .expect("the oldest's age");
        assert!((90.0..100.0).contains(&oldest), "{oldest}");
        drop(old);
        drop(new);
        metrics.refresh();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        assert!(
            text.contains("turnstile_outbox_waiting{method=\"sendMessage\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("turnstile_outbox_oldest_waiting_seconds{method=\"sendMessage\"} 0.0\n"),
            "{text}"
        );
    }
}

//! Shutdown: one small handle passed to whoever must stop.

use tokio::sync::watch;

/// Signals "stop" to every clone; cheap to clone and to check.
///
/// A stop has two phases: *stopping* (no new input; running turns may
/// finish) and *closing* (the drain is over: agent requests are refused and
/// late tool results dropped).
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// Set once the drain is over.
    closing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set when the stop is for `/restart`: the chats are told the bot
    /// comes back, not that it stops.
    restarting: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Shared flag; `true` once stop has begun.
    rx: watch::Receiver<bool>,
    /// Kept so any holder can begin the stop.
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A handle that has not stopped.
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Self {
            closing: Default::default(),
            restarting: Default::default(),
            rx,
            tx: std::sync::Arc::new(tx),
        }
    }

    /// Begins the stop (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Ends the drain: from now on agent requests are refused (implies stop).
    pub fn begin_closing(&self) {
        self.trigger();
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Marks the stop (begun or to come) as one for `/restart`.
    pub fn for_restart(&self) {
        self.restarting
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the stop is for `/restart` (otherwise the bot stops for good,
    /// as far as the chats can know).
    pub fn is_restarting(&self) -> bool {
        self.restarting.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether the drain is over.
    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether stop has begun.
    pub fn is_stopping(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once stop has begun.
    pub async fn stopped(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

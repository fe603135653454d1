//! Shutdown: one small handle passed to whoever must stop.

use tokio::sync::watch;

/// Signals "stop" to every clone; cheap to clone and to check.
#[derive(Debug, Clone)]
pub struct Shutdown {
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
            rx,
            tx: std::sync::Arc::new(tx),
        }
    }

    /// Begins the stop (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
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

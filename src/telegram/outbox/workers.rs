//! Where the lanes' workers and callback answers run: on a thread of their
//! own (`turnstile-http`), so that Telegram's answers are read as they come
//! however busy the actors' thread is. An HTTP connection's idle time
//! starts only once its answer has been read: read late (the actors' thread
//! busy or stalled), a connection the server had been holding idle for its
//! whole keep-alive looked fresh, and the next message written to it
//! crossed the server's close and was lost (its outcome unknown, never sent
//! again).

/// The outbox's own runtime; the actors' thread, should it not start.
pub(super) enum Workers {
    Own(Option<tokio::runtime::Runtime>),
    Here,
}

impl Workers {
    pub(super) fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            // Name lookups (a new connection's) are its only blocking work.
            .max_blocking_threads(2)
            .thread_name("turnstile-http")
            .enable_all()
            .build();
        match runtime {
            Ok(runtime) => Self::Own(Some(runtime)),
            Err(err) => {
                tracing::warn!(cause = %err, "the outbox's thread did not start; its requests run on the actors' thread");
                Self::Here
            }
        }
    }

    pub(super) fn spawn<F: Future<Output = ()> + Send + 'static>(&self, work: F) {
        match self {
            Self::Own(Some(runtime)) => {
                // Logged where the actors log (a test's own subscriber too).
                use tracing::instrument::WithSubscriber as _;
                runtime.spawn(work.with_current_subscriber());
            }
            Self::Own(None) | Self::Here => {
                actix::spawn(work);
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Dropped on the actors' thread: a runtime may not block there.
        if let Self::Own(runtime) = self
            && let Some(runtime) = runtime.take()
        {
            runtime.shutdown_background();
        }
    }
}

//! A shutdown request shared by the stages of one process: on SIGTERM a worker stops taking
//! new messages, finishes (and acknowledges) what it holds, and returns.

use tokio::sync::watch;

/// The receiving side: cheap to clone, one per stage.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// The requesting side.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A new pair.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Asks every holder of the [`Shutdown`] to stop.
    pub fn request(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// One that is never requested.
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive forever: a dropped sender would read as "requested".
        std::mem::forget(tx);
        Self(rx)
    }

    /// Whether it has been requested.
    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once it is requested (or the trigger is gone). Cancel-safe.
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(|r| *r).await;
    }
}

//! The seam: what a bus is ([`Bus`], [`Subscription`], [`Delivery`] and its [`Settle`]), and
//! the pipeline's topics by role ([`Topic`]). Every other file of the bus imports this one;
//! it imports none of them.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::Error;

/// Publishes to and subscribes from topics.
#[async_trait]
pub trait Bus: Send + Sync + std::fmt::Debug {
    /// Returns once the bus has durably accepted the message (or, in process, queued it).
    /// Waits while a bounded topic is full.
    async fn publish(&self, topic: &str, key: &str, payload: Bytes) -> Result<(), Error>;

    /// Joins consumer `group` on `topic`. Consumers in one group share the messages; each
    /// group sees every message published while it existed.
    async fn subscribe(&self, topic: &str, group: &str) -> Result<Box<dyn Subscription>, Error>;

    /// Declares that nothing more will be published to `topic` for now: subscribers get
    /// `None` from `recv` once every message is acknowledged. Publishing reopens the topic.
    async fn close(&self, topic: &str) -> Result<(), Error>;

    /// Creates `topics` where the bus needs them created (Kafka: the admin API; nothing for
    /// the in-process and spool buses). Idempotent; the fetcher calls it at start.
    async fn create_topics(&self, topics: &[&str]) -> Result<(), Error> {
        let _ = topics;
        Ok(())
    }
}

/// A topic of the pipeline, by role. Code names topics by role; [`from_config`] maps each to
/// its configured name (`bus.topic_*`) in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// File events, fetcher → chunk worker.
    Files,
    /// Chunk-part events, chunk worker → embed worker.
    Chunks,
    /// Embedded events, embed worker → whoever waits for vectors.
    Embedded,
    /// Messages no stage could process, with the reason.
    DeadLetters,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 4] = [
        Topic::Files,
        Topic::Chunks,
        Topic::Embedded,
        Topic::DeadLetters,
    ];

    /// The role's name, as code passes it to [`Bus`].
    pub const fn name(self) -> &'static str {
        match self {
            Topic::Files => "files",
            Topic::Chunks => "chunks",
            Topic::Embedded => "embedded",
            Topic::DeadLetters => "dead-letters",
        }
    }

    /// Its configured name.
    pub fn configured(self, cfg: &crate::config::BusConfig) -> &str {
        match self {
            Topic::Files => &cfg.topic_files,
            Topic::Chunks => &cfg.topic_chunks,
            Topic::Embedded => &cfg.topic_embedded,
            Topic::DeadLetters => &cfg.topic_dead_letters,
        }
    }
}

/// Every topic of the pipeline, by role.
pub const TOPICS: [&str; 4] = [
    Topic::Files.name(),
    Topic::Chunks.name(),
    Topic::Embedded.name(),
    Topic::DeadLetters.name(),
];

/// A consumer's end of a topic.
#[async_trait]
pub trait Subscription: Send {
    /// The next message, or `None` once the topic is closed and fully acknowledged.
    ///
    /// Cancel-safe: dropping the future before it completes loses no message, so it can
    /// stand in a `select!`.
    async fn recv(&mut self) -> Result<Option<Delivery>, Error>;
}

/// Settles one delivery; implemented by each bus.
pub trait Settle: Send {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>>;
    fn nack(self: Box<Self>);
}

/// One delivered message. Dropping it without [`Delivery::ack`] is a negative
/// acknowledgement: the message comes back.
pub struct Delivery {
    pub key: String,
    pub payload: Bytes,
    /// 1 on first delivery, then 2, 3, … on redeliveries to the same consumer group. The
    /// spool and Kafka buses keep the count in the store, so it survives a restart of the
    /// consumer (see each bus for what exactly is counted).
    pub attempt: u32,
    settle: Option<Box<dyn Settle>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("key", &self.key)
            .field("bytes", &self.payload.len())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// A delivery that `settle` acknowledges or gives back (for bus implementations).
    pub fn new(key: String, payload: Bytes, attempt: u32, settle: Box<dyn Settle>) -> Self {
        Self {
            key,
            payload,
            attempt,
            settle: Some(settle),
        }
    }

    /// Acknowledges the message: call only once its output is durable.
    pub async fn ack(mut self) -> Result<(), Error> {
        match self.settle.take() {
            Some(s) => s.ack().await,
            None => Ok(()),
        }
    }

    /// Gives the message back for redelivery.
    pub fn nack(mut self) {
        if let Some(s) = self.settle.take() {
            s.nack();
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(s) = self.settle.take() {
            s.nack();
        }
    }
}

/// Locks `m`. A panic while holding one of the buses' locks leaves consistent state (every
/// update is one step), so a poisoned lock is still usable.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Checks a topic or group name: letters, digits, `-`, `_` and `.`, not leading `.`.
pub(super) fn check_name(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        || name.starts_with('.')
    {
        return Err(Error::Bus(format!(
            "{what} {name:?}: use letters, digits, '-', '_' and '.'"
        )));
    }
    Ok(())
}

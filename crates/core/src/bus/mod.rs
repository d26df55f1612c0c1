//! The **bus** seam: topics between stages, with at-least-once delivery.
//!
//! A consumer acknowledges a message only after what it produced from it is durable in the
//! store; a message that is not acknowledged — the consumer crashed, dropped it, or called
//! [`Delivery::nack`] — is delivered again, to the same group. Order is kept per key (stages
//! key by repo id), not across keys.
//!
//! Implementations, chosen by URL:
//! - `inproc://` — [`InProcBus`]: bounded channels inside one process. A topic holds at most
//!   `capacity` messages not yet acknowledged by every group; publishers wait beyond that,
//!   which is how a slow embedder slows the chunker instead of filling memory.
//! - `spool://` — [`SpoolBus`]: each message is an object under `bus/<topic>/` in the store,
//!   durable before `publish` returns. It lets stand-alone stages on one machine hand work to
//!   each other across process restarts (`trawl fetch`, then the in-process pipeline).
//! - `kafka://…` — [`kafka::KafkaBus`] (feature `kafka`): the same contract over rdkafka.
//!
//! Layout, with no import cycle: `seam` (the traits, [`Delivery`], [`Topic`]) is what every
//! other file imports; `inproc`, `spool` and `kafka` implement it; `resolve` picks one by URL
//! and maps topic roles to configured names; `dead_letter` is the workers' shared way to set a
//! message aside. `suite`, the contract every implementation runs, is compiled for tests only.

mod dead_letter;
mod inproc;
#[cfg(feature = "kafka")]
pub mod kafka;
mod resolve;
mod seam;
mod spool;
#[cfg(test)]
mod suite;

pub use dead_letter::dead_letter;
pub use inproc::InProcBus;
pub use resolve::{from_config, from_url};
pub use seam::{Bus, Delivery, Settle, Subscription, TOPICS, Topic};
pub use spool::SpoolBus;

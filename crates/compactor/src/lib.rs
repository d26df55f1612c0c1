//! # trawl-compactor
//!
//! Turns chunks and vectors into what the query service reads: index generations on the store
//! that appear atomically and can be rolled back, rebuilt incrementally. The format itself —
//! segments, manifests, `CURRENT` — is [`trawl_index`]'s; this crate decides what goes in.
//!
//! - [`live`]: the live set with DataFusion.
//! - [`calls`]: the call graph, each call name resolved to the definition it means or to none.
//! - [`spill`]: the whole live set through local files, read back a shard at a time.
//! - [`build`]: a generation from the live set, reusing unchanged shards, with delta segments,
//!   tombstones and size-tiered merges.
//! - [`gc`](mod@gc): garbage collection of generations, under the lease.
//! - [`lease`]: one compactor at a time; generation numbers never reused.
//! - [`retention`]: run reports, superseded manifests, repositories that left the list.
//! - [`parts`]: chunk and embedding parts the live generation does not need.
//! - [`run`]: a compaction as a process runs it, `--wait` (the completion check first), and
//!   `--gc` (every collection above, as one report).

pub mod build;
pub mod calls;
pub mod gc;
pub mod lease;
pub mod live;
pub mod parts;
pub mod retention;
pub mod run;
pub mod spill;
pub mod table;
pub mod touched;

pub use build::{BuildOptions, LiveDoc, LiveDocs, build};
pub use gc::{GcReport, gc};
pub use trawl_index::generation::{live_manifest, rollback};
pub use trawl_index::{IndexError, Manifest, VectorData};

/// Why compaction failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Core(#[from] trawl_core::Error),
    /// Reading or writing the index format failed (a segment, a manifest, `CURRENT`).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A generation is unreadable or of an unknown format.
    #[error("{0}")]
    Format(String),
    /// Another writer changed `CURRENT`, or there is nothing to roll back to.
    #[error("{0}")]
    Conflict(String),
    /// Another compactor holds the lease.
    #[error("{0}")]
    Busy(String),
    #[error("live-set query: {0}")]
    Query(String),
    #[error("local files: {0}")]
    Io(String),
    /// A build given only the changed repositories' docs needs the others' too (a shard to
    /// merge, or no live chunks table to carry over): the caller builds from the whole live
    /// set instead.
    #[error("an incremental build needs the whole live set: {0}")]
    NeedsWholeSet(String),
}

/// Progress callbacks of a build.
pub trait Progress: Send + Sync {
    /// Shard `k` of `n` is being built.
    fn shard(&self, k: u32, n: u32) {
        let _ = (k, n);
    }
    /// Every shard is written; `CURRENT` is about to point at `generation`.
    fn swapping(&self, generation: trawl_core::ids::Generation) {
        let _ = generation;
    }
}

/// Progress that reports nothing.
#[derive(Debug, Default)]
pub struct Quiet;
impl Progress for Quiet {}
#[cfg(test)]
mod tests;

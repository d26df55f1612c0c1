//! # trawl-compactor
//!
//! Turns chunks and vectors into what the query service reads: index generations on the store
//! that appear atomically and can be rolled back, rebuilt incrementally.
//!
//! - [`live`] (feature `live-set`, on by default): the live set with DataFusion.
//! - [`build`]: a generation from the live set, reusing unchanged shards, with delta segments,
//!   tombstones and size-tiered merges.
//! - [`segment`]: one segment — doc store (Parquet), vector index (usearch HNSW), text index
//!   (tantivy with the [`analyzer`]).
//! - [`generation`]: manifests, `CURRENT`, rollback, garbage collection.
//! - [`lease`]: one compactor at a time; generation numbers never reused.
//! - [`retention`]: run reports, superseded manifests, repositories that left the list.
//!
//! The ANN library is usearch: float, int8 and binary vectors in one HNSW implementation,
//! filtered search (for access control inside the search), serialisation to a buffer and
//! memory-mapped views; the benchmark (`cargo bench -p trawl-compactor --no-default-features`)
//! prints its recall, build time, memory and load time.

pub mod analyzer;
pub mod build;
pub mod docs;
pub mod generation;
pub mod lease;
#[cfg(feature = "live-set")]
pub mod live;
pub mod retention;
pub mod segment;
pub mod testing;

pub use build::{BuildOptions, LiveDoc, build};
pub use generation::{GcReport, Manifest, gc, rollback};
pub use segment::{SpaceInfo, VectorData};

/// Why compaction failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Core(#[from] trawl_core::Error),
    /// Building or reading an index failed.
    #[error("{0}")]
    Index(String),
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
}

/// Progress callbacks of a build.
pub trait Progress: Send + Sync {
    /// Shard `k` of `n` is being built.
    fn shard(&self, k: u32, n: u32) {
        let _ = (k, n);
    }
    /// Every shard is written; `CURRENT` is about to point at `generation`.
    fn swapping(&self, generation: u64) {
        let _ = generation;
    }
}

/// Progress that reports nothing.
#[derive(Debug, Default)]
pub struct Quiet;
impl Progress for Quiet {}
#[cfg(test)]
mod tests;

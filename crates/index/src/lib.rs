//! # trawl-index
//!
//! The index format: what the compactor writes and the query service reads, and nothing that
//! decides what goes into it.
//!
//! - [`segment`]: one segment — doc store (Parquet), vector index (usearch HNSW), text index
//!   (tantivy with the [`analyzer`]); [`VectorData`], the vectors of a vector space (whose
//!   type, [`trawl_core::space::Space`], manifests record).
//! - [`docs`]: the doc store's rows ([`DocRow`]) and the key that tells a changed doc
//!   ([`docs::DocKey`]).
//! - [`generation`]: manifests, shards, tombstones, `CURRENT`, the swap and rollback, format
//!   versions.
//! - `testing` (feature `testing`, and this crate's own tests): deterministic vectors and docs
//!   for tests and benchmarks.
//!
//! The ANN library is usearch: float, int8 and binary vectors in one HNSW implementation,
//! filtered search (for access control inside the search), serialisation to a buffer and
//! memory-mapped views; the benchmark (`cargo bench -p trawl-index --bench segment`) prints
//! its recall, build time, memory and load time.

pub mod analyzer;
pub mod docs;
pub mod generation;
pub mod segment;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use docs::DocRow;
pub use generation::Manifest;
pub use segment::VectorData;

/// Why reading or writing the index format failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Core(#[from] trawl_core::Error),
    /// Building or reading a segment's vector or text index failed.
    #[error("{0}")]
    Segment(String),
    /// A generation is unreadable or of an unknown format.
    #[error("{0}")]
    Format(String),
    /// Another writer changed `CURRENT`, or there is nothing to roll back to.
    #[error("{0}")]
    Conflict(String),
}

#[cfg(test)]
mod tests;

//! # trawl-embed-worker
//!
//! Embedding is the slowest and the only paid stage. This crate runs it at the provider's limit
//! without tripping it, loses nothing when the provider misbehaves, and never pays twice for
//! the same text.
//!
//! - [`embedder`]: the seam — [`Embedder`], vector spaces, request limits, batching,
//!   bisection of rejected batches, quantisation, and the suite every embedder passes.
//! - [`voyage`]: the Voyage API under two governor limiters, with retries.
//! - [`local`]: a sentence-transformers model directory run with candle (the default).
//! - [`hash`]: deterministic feature hashing, for tests only.
//! - [`worker`]: chunk-part events in, embedding parts and embedded events out, with the
//!   content-hash cache and the run report.
//! - [`fake`]: a fake Voyage server for the tests and the benchmark.

pub mod embedder;
pub mod fake;
pub mod hash;
pub mod local;
pub mod voyage;
pub mod worker;

pub use embedder::{Dtype, EmbedError, Embedder, InputType, Space, Vector};
pub use worker::{EmbedWorker, Options, RunReport, Until};

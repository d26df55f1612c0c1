//! # trawl-core
//!
//! What every stage shares, and nothing a stage does: identities ([`ids`]) and the hash behind
//! them ([`hash`]), versioned records with their Arrow schemas ([`records`]), layered
//! configuration ([`config`]), language detection ([`language`]), vector spaces ([`space`]),
//! and the two seams every stage talks through — the **store** ([`store`]) for durable output
//! and the **bus** ([`bus`]) between stages.
//!
//! Dependency direction is one way: `core ← stage crates ← cli`. Stage crates never depend
//! on each other; they meet only in these types.

pub mod aws_credentials;
pub mod bus;
pub mod config;
mod error;
pub mod hash;
pub mod ids;
pub mod kind;
pub mod language;
pub mod prose;
pub mod records;
pub mod retry;
pub mod role;
#[cfg(feature = "s3-testing")]
pub mod s3_testing;
pub mod secret;
pub mod shutdown;
pub mod space;
pub mod store;
pub mod words;

pub use error::{Error, StoreOp};
pub use ids::{BlobId, ChunkId, CommitId, ContentHash, Generation, RepoId, RunId};
pub use kind::ChunkKind;

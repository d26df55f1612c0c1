//! # trawl-query
//!
//! Hybrid search over the live index generation.
//!
//! - [`index`]: a generation pulled from the store into a local cache and opened: per segment
//!   the doc store in memory, the usearch HNSW index, the tantivy text index, tombstones.
//! - [`search`]: per segment the ANN and BM25 arms run in parallel, with the request's filters
//!   and the caller's access applied *inside* both (never after top-k); reciprocal rank fusion;
//!   an exact symbol or qualified name ranks its definition first; overlapping hits collapse
//!   into one result with the others as context; graph expansion attaches parent, siblings and
//!   callees as context, never as hits.
//! - [`rank`]: what the query asks (identifier, error line, config key, question) picks the
//!   arms' weights; a pasted message meets its format string; the file's role (code, test,
//!   example, docs) is a prior; prose lends its score to the definitions it names; a file's
//!   table of contents or a class skeleton gives way to the member inside it.
//! - [`access`]: bearer tokens → repository patterns.
//! - [`service`]: the searcher a process keeps — the live generation (swapped atomically when
//!   `CURRENT` moves), the query embedder, the optional reranker.
//! - [`server`]: `trawl serve` — `POST /v1/search`, `/healthz`, `/metrics`, `/openapi.json`.
//! - [`eval`]: Recall@k and MRR@10 of a query set.
//! - [`rerank`]: the Voyage reranker client.

pub mod access;
pub mod eval;
pub mod hyde;
pub mod index;
pub mod learned;
pub mod rank;
pub mod request;
pub mod rerank;
pub mod search;
pub mod server;
pub mod service;
#[cfg(test)]
mod tests;

pub use access::Access;
pub use request::{Hit, Mode, SearchRequest, SearchResponse};
pub use service::Searcher;

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The request is wrong: the message says what to change.
    #[error("{0}")]
    BadRequest(String),
    /// No bearer token, or an unknown one.
    #[error("{0}")]
    Unauthorized(String),
    /// There is no index to search yet.
    #[error(
        "there is no index yet: run `trawl index <path>` (or `trawl compact` after the stages)"
    )]
    NoIndex,
    #[error(transparent)]
    Core(#[from] trawl_core::Error),
    /// The index's format could not be read (a manifest, `CURRENT`, a segment).
    #[error(transparent)]
    Format(#[from] trawl_index::IndexError),
    /// The query could not be embedded.
    #[error("embedding the query: {0}")]
    Embed(#[from] trawl_embed::EmbedError),
    /// The index's vectors cannot be searched by this process (a key or a model is missing).
    #[error(
        "the index's vector space {space} cannot be searched here: {reason}; refusing to serve it lexical-only"
    )]
    Unembeddable { space: String, reason: String },
    /// The service's configuration is wrong: the message says which key.
    #[error("{0}")]
    Config(String),
    /// Reading the index or the cache failed.
    #[error("{0}")]
    Index(String),
}

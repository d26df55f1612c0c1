//! # trawl-embed-worker (not built yet)
//!
//! Will embed chunks not seen before — keyed by `(model, dims, dtype, content_hash)` — with
//! Voyage under a governor rate limiter, or a local model, and write vectors under
//! `embeddings/model=<model>/`. Tracked by the embed-worker issue; nothing here works yet.

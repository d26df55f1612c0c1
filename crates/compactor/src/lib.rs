//! # trawl-compactor (not built yet)
//!
//! Will join the latest manifest per repository with chunks and embeddings (DataFusion),
//! build sharded vector and full-text indexes under `index/gen=<n>/`, and swap `CURRENT`
//! atomically. Tracked by the compactor issue; nothing here works yet.

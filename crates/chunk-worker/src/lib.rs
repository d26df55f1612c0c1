//! # trawl-chunk-worker (not built yet)
//!
//! Will consume file events from the `files` topic, split each file into definition-level
//! chunks with tree-sitter (one definition = one chunk, with a generated header of path,
//! scope chain and imports), write them as Parquet under `chunks/repo=<key>/`, and publish a
//! chunk-part event once the part is durable. Tracked by the chunk-worker issue; nothing
//! here works yet, and nothing pretends to.

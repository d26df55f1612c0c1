//! # trawl-query (not built yet)
//!
//! Will serve hybrid (vector + BM25) search over the current index generation, with
//! filters, access control and graph expansion. Tracked by the query issue; nothing here
//! works yet.

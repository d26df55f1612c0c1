//! The one integration test binary (one link, as ripgrep and DataFusion do it).
//! Regression tests are named after what they reproduce.

mod chunk;
mod cli;
mod cluster;
mod compact;
mod embed;
mod fetch;
mod hostile;
mod pipeline;
mod s3;
mod search;
mod support;

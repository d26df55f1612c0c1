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

use std::sync::Arc;
use std::time::Duration;

use trawl_core::config::EmbedConfig;

/// The environment variable holding the Voyage key. It is read here and never logged.
pub const VOYAGE_API_KEY: &str = "VOYAGE_API_KEY";

/// The vector space the embedder `cfg` names writes, without starting it (the local model is
/// not loaded, only its weights hashed).
pub fn space_of(cfg: &EmbedConfig, embedder: Option<&str>) -> Result<Space, EmbedError> {
    match embedder.unwrap_or(&cfg.embedder) {
        "voyage" => Ok(Space {
            model: cfg.model.clone(),
            dims: cfg.dims,
            dtype: cfg.dtype.parse()?,
        }),
        "local" => local::space_of(&model_dir(cfg)),
        "hash" => Ok(Space {
            model: hash::MODEL.into(),
            dims: cfg.hash_dims,
            dtype: Dtype::Float,
        }),
        other => Err(EmbedError::Config(format!(
            "unknown embedder {other:?}: use local, voyage or hash"
        ))),
    }
}

fn model_dir(cfg: &EmbedConfig) -> std::path::PathBuf {
    if cfg.model_dir.as_os_str().is_empty() {
        local::default_model_dir()
    } else {
        cfg.model_dir.clone()
    }
}

/// The embedder `cfg` names (`embedder` overrides `cfg.embedder` when given), and the
/// worker options that go with it. A dry run never calls the provider, so it needs no key.
pub fn from_config(
    cfg: &EmbedConfig,
    embedder: Option<&str>,
    dry_run: bool,
) -> Result<(Arc<dyn Embedder>, Options), EmbedError> {
    let name = embedder.unwrap_or(&cfg.embedder);
    let e: Arc<dyn Embedder> = match name {
        "voyage" => {
            let mut key = std::env::var(VOYAGE_API_KEY).unwrap_or_default();
            if dry_run && key.is_empty() {
                key = "dry-run: never sent".into();
            }
            Arc::new(voyage::VoyageEmbedder::new(voyage::VoyageConfig {
                base_url: cfg.base_url.clone(),
                api_key: key.into(),
                model: cfg.model.clone(),
                dims: cfg.dims,
                dtype: cfg.dtype.parse()?,
                rpm: cfg.rpm,
                tpm: cfg.tpm,
                max_batch_inputs: cfg.max_batch_inputs,
                max_batch_tokens: cfg.max_batch_tokens,
                max_input_tokens: cfg.max_input_tokens,
                concurrency: cfg.concurrency,
                max_retries: cfg.max_retries,
                timeout: Duration::from_secs(cfg.timeout_secs.max(1)),
            })?)
        }
        "local" => Arc::new(local::LocalEmbedder::load(
            &model_dir(cfg),
            cfg.local_batch,
        )?),
        "hash" => Arc::new(hash::HashEmbedder::new(cfg.hash_dims)?),
        other => {
            return Err(EmbedError::Config(format!(
                "unknown embedder {other:?}: use local, voyage or hash"
            )));
        }
    };
    let opts = Options {
        linger: Duration::from_millis(cfg.linger_ms),
        // Flushes in flight: Voyage overlaps requests; an in-process model runs one at a time
        // anyway, and one flush more keeps it fed while the previous part is written.
        concurrency: if name == "voyage" {
            cfg.concurrency.max(1)
        } else {
            2
        },
        price_per_mtok: if name == "voyage" {
            cfg.price_per_mtok
        } else {
            0.0
        },
        dry_run,
        embedder: name.to_owned(),
    };
    Ok((e, opts))
}

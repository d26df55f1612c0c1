//! # trawl-embed
//!
//! The embedder seam and its implementations: what turns text into vectors, for the embed
//! worker (chunks) and the query service (the query text) alike.
//!
//! - [`embedder`]: the seam — [`Embedder`], vector spaces, request limits, batching,
//!   bisection of rejected batches, quantisation, and (with the `testing` feature) the suite
//!   every embedder passes.
//! - [`client`]: the one Voyage HTTP client (key, request limiter, retries with jitter and
//!   `Retry-After`), for the embedder and the query service's reranker.
//! - [`voyage`]: the Voyage embeddings API over that client, with a token limiter.
//! - [`batch`]: the Voyage Batch API over the same client (files, batches, results by
//!   `custom_id`), for backfills.
//! - [`local`]: a sentence-transformers model directory run with candle (the default).
//! - [`openvino`]: the same model written as an OpenVINO graph and run by OpenVINO's runtime,
//!   fetched on first use (`embed.local_runtime`).
//! - [`hash`]: deterministic feature hashing, for tests only.
//! - [`fake`] (`testing` feature): a fake Voyage server for the tests and the benchmark.

pub mod batch;
pub mod client;
pub mod embedder;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod hash;
pub mod local;
pub mod openvino;
pub mod tuned;
pub mod voyage;

pub use embedder::{Dtype, EmbedError, Embedder, InputType, Space, Vector};

use std::sync::Arc;
use std::time::Duration;

use trawl_core::config::{EmbedConfig, EmbedderKind, LocalModel, LocalRuntime};

/// The environment variable holding the Voyage key. It is read here and never logged.
pub const VOYAGE_API_KEY: &str = "VOYAGE_API_KEY";

/// The vector space the embedder `cfg` names writes, without starting it (the local model is
/// not loaded, only its weights hashed).
pub fn space_of(cfg: &EmbedConfig, embedder: Option<EmbedderKind>) -> Result<Space, EmbedError> {
    match embedder.unwrap_or(cfg.embedder) {
        EmbedderKind::Voyage => Ok(Space {
            model: cfg.model.clone(),
            dims: cfg.dims,
            dtype: cfg.dtype.parse()?,
        }),
        EmbedderKind::Local => local::space_of(&ready_model_dir(cfg)?, reading(cfg)),
        EmbedderKind::Hash => Ok(Space {
            model: hash::MODEL.into(),
            dims: cfg.hash_dims,
            dtype: Dtype::Float,
        }),
    }
}

/// The vector spaces whose queries the embedder `cfg` names can embed as they were embedded,
/// each with the configuration that does it:
/// - its own space;
/// - for the local model, the same reading with the headers' imports read or not
///   (`embed.local_imports`): a query has no header, so the same configuration serves both;
/// - for a local model chosen by `embed.local_model`, the other one's spaces where it is
///   installed (all-MiniLM-L6-v2 as published, or with trawl's delta trained on code,
///   [`tuned`]), each embedding its own queries.
pub fn query_embedders(
    cfg: &EmbedConfig,
    embedder: EmbedderKind,
) -> Result<Vec<(Space, EmbedConfig)>, EmbedError> {
    if embedder != EmbedderKind::Local {
        return Ok(vec![(space_of(cfg, Some(embedder))?, cfg.clone())]);
    }
    // Each model's weights are read and hashed once for both of its readings.
    let both = |dir: &std::path::Path, cfg: &EmbedConfig| {
        let own = reading(cfg);
        let flipped = local::Reading {
            imports: !cfg.local_imports,
            ..own
        };
        local::spaces_of(dir, &[own, flipped]).map(|spaces| {
            spaces
                .into_iter()
                .map(|s| (s, cfg.clone()))
                .collect::<Vec<_>>()
        })
    };
    let mut out = both(&ready_model_dir(cfg)?, cfg)?;
    // The other model of `embed.local_model`, where it is installed: an index embedded with
    // it keeps its vector search after the setting changes.
    if cfg.model_dir.as_os_str().is_empty() {
        let other = match cfg.local_model {
            LocalModel::Base => LocalModel::Code,
            LocalModel::Code => LocalModel::Base,
        };
        let other_dir = local::model_dir_of(other);
        if local::is_installed(&other_dir) {
            let other_cfg = EmbedConfig {
                local_model: other,
                ..cfg.clone()
            };
            out.extend(both(&other_dir, &other_cfg)?);
        }
    }
    Ok(out)
}

fn reading(cfg: &EmbedConfig) -> local::Reading {
    local::Reading {
        max_tokens: cfg.local_max_tokens,
        input: cfg.local_input,
        windows: cfg.local_windows,
        imports: cfg.local_imports,
    }
}

/// The local model's directory of `cfg`: `embed.model_dir`, else the one `embed.local_model`
/// names in trawl's cache. Touches nothing on disk ([`ready_model_dir`] does).
pub fn model_dir(cfg: &EmbedConfig) -> std::path::PathBuf {
    if cfg.model_dir.as_os_str().is_empty() {
        local::model_dir_of(cfg.local_model)
    } else {
        cfg.model_dir.clone()
    }
}

/// [`model_dir`], made ready to read: the code-tuned model is written there from the
/// installed base model and trawl's delta on first use (under a second, no download). A
/// directory that is neither installed nor derivable comes back as it is, and reading it
/// then says how to install the model.
pub fn ready_model_dir(cfg: &EmbedConfig) -> Result<std::path::PathBuf, EmbedError> {
    let dir = model_dir(cfg);
    if cfg.model_dir.as_os_str().is_empty() {
        local::derive_if_missing(&dir)?;
    }
    Ok(dir)
}

/// The embedder `cfg` names (`embedder` overrides `cfg.embedder` when given). A dry run never
/// calls the provider, so it needs no key.
pub fn from_config(
    cfg: &EmbedConfig,
    embedder: Option<EmbedderKind>,
    dry_run: bool,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    Ok(match embedder.unwrap_or(cfg.embedder) {
        EmbedderKind::Voyage => {
            Arc::new(voyage::VoyageEmbedder::new(voyage_config(cfg, dry_run)?)?)
        }
        EmbedderKind::Local => Arc::new(load_local(cfg)?.with_nice(cfg.local_nice)?),
        EmbedderKind::Hash => Arc::new(hash::HashEmbedder::new(cfg.hash_dims)?),
    })
}

/// The local model of `cfg` on the runtime `embed.local_runtime` chooses: with `auto`,
/// OpenVINO where its runtime is installed and loads (a failure is logged, and candle runs
/// the model), candle elsewhere.
pub fn load_local(cfg: &EmbedConfig) -> Result<local::LocalEmbedder, EmbedError> {
    let dir = ready_model_dir(cfg)?;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let load = |runtime: &local::Runtime| {
        local::LocalEmbedder::load_on(&dir, cfg.local_batch, threads, reading(cfg), runtime)
    };
    let libs = openvino::default_runtime_dir();
    match cfg.local_runtime {
        LocalRuntime::OpenVino => {
            if !openvino::is_installed(&libs) {
                return Err(EmbedError::Model(format!(
                    "embed.local_runtime = \"openvino\", but its runtime is not in {} \
                     (`trawl index` fetches it, as does scripts/fetch-model.sh; or set \
                     embed.local_runtime = \"candle\")",
                    libs.display()
                )));
            }
            load(&local::Runtime::OpenVino(libs))
        }
        LocalRuntime::Auto if openvino::SUPPORTED && openvino::is_installed(&libs) => {
            match load(&local::Runtime::OpenVino(libs)) {
                Ok(e) => Ok(e),
                Err(e) => {
                    tracing::warn!(error = %e, "OpenVINO cannot run the local model; candle runs it");
                    load(&local::Runtime::Candle)
                }
            }
        }
        LocalRuntime::Candle | LocalRuntime::Auto => load(&local::Runtime::Candle),
    }
}

/// The Voyage client settings of `cfg`, with the key from [`VOYAGE_API_KEY`] (a placeholder in
/// a dry run, which never calls the provider).
fn voyage_config(cfg: &EmbedConfig, dry_run: bool) -> Result<voyage::VoyageConfig, EmbedError> {
    let mut key = std::env::var(VOYAGE_API_KEY).unwrap_or_default();
    if dry_run && key.is_empty() {
        key = "dry-run: never sent".into();
    }
    Ok(voyage::VoyageConfig {
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
    })
}

/// The Voyage Batch API client `cfg` describes (`trawl embed --all --batch`).
pub fn batches_from_config(cfg: &EmbedConfig) -> Result<batch::VoyageBatches, EmbedError> {
    batch::VoyageBatches::new(
        &voyage_config(cfg, false)?,
        batch::BatchConfig {
            max_inputs: cfg.batch_max_inputs,
            max_file_bytes: cfg.batch_max_file_bytes,
            poll: Duration::from_millis(cfg.batch_poll_ms),
            max_poll: Duration::from_millis(cfg.batch_max_poll_ms.max(cfg.batch_poll_ms)),
        },
    )
}

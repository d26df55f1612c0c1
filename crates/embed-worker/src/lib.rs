//! # trawl-embed-worker
//!
//! Embedding is the slowest and the only paid stage. This crate runs it at the provider's limit
//! without tripping it, loses nothing when the provider misbehaves, and never pays twice for
//! the same text. The embedders themselves (Voyage, the local model, the hash embedder) are
//! `trawl-embed`'s.
//!
//! - [`worker`]: chunk-part events in, embedding parts and embedded events out, with the
//!   content-hash cache and the run report.

pub mod worker;

pub use worker::{EmbedWorker, Options, RunReport, Until};

use std::sync::Arc;
use std::time::Duration;

use trawl_core::config::{EmbedConfig, EmbedderKind};
use trawl_embed::{EmbedError, Embedder};

/// The embedder `cfg` names (`embedder` overrides `cfg.embedder` when given), and the
/// worker options that go with it. A dry run never calls the provider, so it needs no key.
pub fn from_config(
    cfg: &EmbedConfig,
    embedder: Option<EmbedderKind>,
    dry_run: bool,
) -> Result<(Arc<dyn Embedder>, Options), EmbedError> {
    let kind = embedder.unwrap_or(cfg.embedder);
    let e = trawl_embed::from_config(cfg, Some(kind), dry_run)?;
    let opts = Options {
        linger: Duration::from_millis(cfg.linger_ms),
        // Flushes in flight: Voyage overlaps requests; an in-process model runs one at a time
        // anyway, and one flush more keeps it fed while the previous part is written.
        concurrency: if kind == EmbedderKind::Voyage {
            cfg.concurrency.max(1)
        } else {
            2
        },
        price_per_mtok: if kind == EmbedderKind::Voyage {
            cfg.price_per_mtok
        } else {
            0.0
        },
        batch_price_per_mtok: if kind == EmbedderKind::Voyage {
            cfg.batch_price_per_mtok
        } else {
            0.0
        },
        dry_run,
        embedder: kind.to_string(),
        prose_views: cfg.prose_view,
    };
    Ok((e, opts))
}

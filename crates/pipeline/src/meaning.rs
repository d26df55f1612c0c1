//! The sentence model of prose split by meaning (`chunk.meaning`): the chunk worker cuts a
//! long Markdown section or text file where its topic changes, with sentences embedded by
//! the local model.
//!
//! Which model: the run's own embedder when it is the local model (one copy of the weights
//! in memory, through its foreground lane, at normal priority) or the hash test embedder;
//! with a hosted embedder, the local model if it is installed — a hosted API is never billed
//! for cutting prose. Without one, prose is cut by size as before, with a warning. With
//! `chunk.meaning_model = words`, no model: the words neighbouring sentences share.

use std::sync::Arc;

use trawl_chunk_worker::{Meaning, Sentences};
use trawl_core::config::{Config, EmbedderKind, MeaningModel};
use trawl_embed::hash::HashEmbedder;
use trawl_embed::{Embedder, InputType, Vector};

/// An [`Embedder`] as the chunker's sentence model, called from the chunker's blocking
/// threads on the runtime that owns the embedder.
struct EmbedderSentences {
    embedder: Arc<dyn Embedder>,
    runtime: tokio::runtime::Handle,
}

impl Sentences for EmbedderSentences {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let embedded = self
            .runtime
            .block_on(self.embedder.embed(texts, InputType::Document))
            .map_err(|e| e.to_string())?;
        // Quantised vectors (int8, binary) are read as their values: only their distances
        // matter here.
        Ok(embedded
            .vectors
            .into_iter()
            .map(|v| match v {
                Vector::Float(f) => f,
                Vector::Bytes(b) => b.into_iter().map(|x| f32::from(x as i8)).collect(),
            })
            .collect())
    }
}

/// Sentences told apart by the words they share ([`MeaningModel::Words`]).
struct WordSentences(HashEmbedder);

impl Sentences for WordSentences {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|t| self.0.vector(t)).collect())
    }
}

/// Dimensions of [`WordSentences`]' hashed vectors: few collisions among a section's words.
const WORD_DIMS: u32 = 1024;

/// The chunker's [`Meaning`] for a run of `kind`, whose embedder is `run` (when one is
/// loaded). `None` when `chunk.meaning` is off, the strategy is not `ast`, no runtime is
/// current, or no local model can be had.
pub fn for_run(
    cfg: &Config,
    kind: EmbedderKind,
    run: Option<&Arc<dyn Embedder>>,
) -> Option<Meaning> {
    if !cfg.chunk.meaning || cfg.chunk.strategy != "ast" {
        return None;
    }
    if cfg.chunk.meaning_model == MeaningModel::Words {
        let words = HashEmbedder::new(WORD_DIMS).expect("dimensions above zero");
        return Some(Meaning {
            model: Arc::new(WordSentences(words)),
            percentile: cfg.chunk.meaning_percentile,
        });
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    // A copy of its own serves the chunker alone: at normal priority.
    let own = |kind| {
        let mut embed = cfg.embed.clone();
        embed.local_nice = 0;
        trawl_embed::from_config(&embed, Some(kind), false)
    };
    let embedder = match (kind, run) {
        // Its foreground lane: the run's batches are embedded below the chunker's priority,
        // and a chunker thread waiting behind them would hold back the first generation.
        (EmbedderKind::Local | EmbedderKind::Hash, Some(e)) => {
            e.foreground().unwrap_or_else(|| e.clone())
        }
        (EmbedderKind::Local | EmbedderKind::Hash, None) => match own(kind) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("prose over chunk.ceiling is cut by size, not by meaning: {e}");
                return None;
            }
        },
        (EmbedderKind::Voyage, _) => {
            let dir = match trawl_embed::ready_model_dir(&cfg.embed) {
                Ok(dir) => dir,
                Err(e) => {
                    tracing::warn!("prose over chunk.ceiling is cut by size, not by meaning: {e}");
                    return None;
                }
            };
            if !trawl_embed::local::is_installed(&dir) {
                tracing::warn!(
                    "prose over chunk.ceiling is cut by size, not by meaning: the local model is \
                     not installed in {} (scripts/fetch-model.sh installs it; chunk.meaning = \
                     false silences this)",
                    dir.display()
                );
                return None;
            }
            match own(EmbedderKind::Local) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("prose over chunk.ceiling is cut by size, not by meaning: {e}");
                    return None;
                }
            }
        }
    };
    Some(Meaning {
        model: Arc::new(EmbedderSentences { embedder, runtime }),
        percentile: cfg.chunk.meaning_percentile,
    })
}

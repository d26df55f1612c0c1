//! The chunk worker of a configuration (`[chunk]`, `bus.max_attempts`).

use std::sync::Arc;
use std::time::Duration;

use trawl_chunker::{Options, Strategy};
use trawl_core::bus::Bus;
use trawl_core::config::{ChunkConfig, Config};
use trawl_core::store::Store;

use crate::ChunkWorker;

/// A `[chunk]` configuration the worker cannot run with; the message names the key to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The chunker's options of `[chunk]`.
pub fn options(cfg: &ChunkConfig) -> Options {
    Options {
        floor: cfg.floor,
        ceiling: cfg.ceiling,
        parse_timeout: Duration::from_millis(cfg.parse_timeout_ms),
        ..Options::default()
    }
}

/// `chunk.strategy`.
pub fn strategy(cfg: &ChunkConfig) -> Result<Strategy, ConfigError> {
    match cfg.strategy.as_str() {
        "ast" => Ok(Strategy::Ast),
        "windows" => Ok(Strategy::Windows),
        other => Err(ConfigError(format!(
            "chunk.strategy is {other:?}: use ast or windows"
        ))),
    }
}

/// The chunk worker of the configuration, over `store` and `bus`.
pub fn from_config(
    cfg: &Config,
    store: Store,
    bus: Arc<dyn Bus>,
) -> Result<ChunkWorker, ConfigError> {
    if cfg.chunk.ceiling < 64 || cfg.chunk.floor >= cfg.chunk.ceiling {
        return Err(ConfigError(
            "chunk.ceiling must be at least 64 bytes and larger than chunk.floor".into(),
        ));
    }
    let strategy = strategy(&cfg.chunk)?;
    Ok(
        ChunkWorker::new(store, bus, options(&cfg.chunk), cfg.chunk.concurrency)
            .with_strategy(strategy)
            .with_max_attempts(cfg.bus.max_attempts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_chunk_configuration_names_the_key() {
        let mut cfg = Config::default();
        cfg.chunk.strategy = "lines".into();
        let e = strategy(&cfg.chunk).unwrap_err().to_string();
        assert!(
            e.contains("chunk.strategy") && e.contains("ast or windows"),
            "{e}"
        );
        cfg.chunk.strategy = "ast".into();
        cfg.chunk.ceiling = 32;
        let bus = Arc::new(trawl_core::bus::InProcBus::new(1));
        let Err(e) = from_config(&cfg, Store::memory(), bus.clone()) else {
            panic!("a ceiling of 32 bytes is refused");
        };
        let e = e.to_string();
        assert!(e.contains("chunk.ceiling"), "{e}");
        cfg.chunk.ceiling = 2000;
        assert!(from_config(&cfg, Store::memory(), bus).is_ok());
    }
}

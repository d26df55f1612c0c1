//! `trawl chunk-worker`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use trawl_chunk_worker::{ChunkWorker, Until};
use trawl_core::config::Config;
use trawl_core::store::Store;

#[derive(clap::Args)]
pub struct Args {
    /// Stop once no file event has arrived for two seconds (a one-shot run after
    /// `trawl fetch`); without it the worker runs until interrupted.
    #[arg(long)]
    once: bool,
}

pub fn options(cfg: &Config) -> trawl_chunker::Options {
    trawl_chunker::Options {
        floor: cfg.chunk.floor,
        ceiling: cfg.chunk.ceiling,
        parse_timeout: Duration::from_millis(cfg.chunk.parse_timeout_ms),
        ..trawl_chunker::Options::default()
    }
}

/// The chunk worker of the configuration.
pub fn worker(
    cfg: &Config,
    store: Store,
    bus: Arc<dyn trawl_core::bus::Bus>,
) -> anyhow::Result<ChunkWorker> {
    anyhow::ensure!(
        cfg.chunk.ceiling >= 64 && cfg.chunk.floor < cfg.chunk.ceiling,
        "chunk.ceiling must be at least 64 bytes and larger than chunk.floor"
    );
    let strategy = match cfg.chunk.strategy.as_str() {
        "ast" => trawl_chunker::Strategy::Ast,
        "windows" => trawl_chunker::Strategy::Windows,
        other => anyhow::bail!("chunk.strategy is {other:?}: use ast or windows"),
    };
    Ok(ChunkWorker::new(store, bus, options(cfg), cfg.chunk.concurrency).with_strategy(strategy))
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::from_url(&cfg.store.url)?;
    let bus = trawl_core::bus::from_url(&cfg.bus.url, &store, cfg.bus.capacity)?;
    let worker = worker(cfg, store, bus)?;
    let metrics = worker.metrics();
    let live = {
        let metrics = metrics.clone();
        crate::progress::Live::start(move || {
            let m = metrics.snapshot();
            format!(
                "{} files, {} chunks, {} dead letters",
                m.files, m.chunks, m.dead_letters
            )
        })
    };
    let until = if args.once {
        Until::Idle(Duration::from_secs(2))
    } else {
        Until::Closed
    };
    let result = tokio::select! {
        r = worker.run(until) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    live.finish();
    let m = match result {
        Some(r) => r?,
        None => {
            eprintln!("interrupted: unfinished events will be delivered again");
            Arc::clone(&metrics).snapshot()
        }
    };
    println!(
        "chunk-worker: {} files, {} deletes, {} chunks, {:.1} MB in, {:.1} MB of Parquet, {} dead letters, {} retries",
        m.files,
        m.deletes,
        m.chunks,
        m.bytes_in as f64 / 1e6,
        m.parquet_bytes as f64 / 1e6,
        m.dead_letters,
        m.retries
    );
    for (note, n) in &m.notes {
        println!("  {note:<14}{n:>8} files");
    }
    Ok(if m.dead_letters > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

//! `trawl chunk-worker`.

use std::process::ExitCode;
use std::time::Duration;

use trawl_chunk_worker::Until;
use trawl_core::config::Config;
use trawl_core::store::Store;

#[derive(clap::Args)]
pub struct Args {
    /// Stop once no file event has arrived for two seconds (a one-shot run after
    /// `trawl fetch`); without it the worker runs until interrupted.
    #[arg(long)]
    once: bool,
}

/// The chunk worker's Prometheus metrics.
fn render(m: &trawl_chunk_worker::MetricsSnapshot) -> String {
    let mut t = crate::ops::Text::default();
    t.counter("trawl_chunk_files_total", "File versions chunked.", m.files)
        .counter(
            "trawl_chunk_deletes_total",
            "Delete events seen.",
            m.deletes,
        )
        .counter("trawl_chunk_chunks_total", "Chunks written.", m.chunks)
        .counter(
            "trawl_chunk_bytes_in_total",
            "Source bytes chunked.",
            m.bytes_in,
        )
        .counter(
            "trawl_chunk_parquet_bytes_total",
            "Parquet bytes written.",
            m.parquet_bytes,
        )
        .counter(
            "trawl_chunk_dead_letters_total",
            "Events sent to the dead-letter topic.",
            m.dead_letters,
        )
        .counter(
            "trawl_chunk_retries_total",
            "Events given back after a store or bus failure, or a chunker panic.",
            m.retries,
        )
        .counter(
            "trawl_chunk_panics_total",
            "Chunker panics caught (one per file and attempt).",
            m.panics,
        )
        .labelled(
            "trawl_chunk_notes_total",
            "Files by chunker note (syntax errors, parse timeouts, no grammar, ...).",
            "note",
            m.notes.iter().map(|(k, v)| (*k, *v)),
        );
    t.finish()
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::from_url(&cfg.store.url)?;
    let bus = trawl_core::bus::from_config(&cfg.bus, &store)?;
    let (trigger, shutdown) = trawl_core::shutdown::channel();
    let worker = trawl_chunk_worker::from_config(cfg, store, bus)?
        .with_meaning(trawl_pipeline::meaning::for_run(
            cfg,
            cfg.embed.embedder,
            None,
        ))
        .with_shutdown(shutdown);
    let metrics = worker.metrics();
    let ops = {
        let metrics = metrics.clone();
        crate::ops::Ops::start(&cfg.ops.listen, "chunk-worker", move || {
            render(&metrics.snapshot())
        })
        .await?
    };
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
    let result =
        crate::ops::until_finished(worker.run(until), &trigger, &ops, "chunk-worker").await;
    live.finish();
    let m = match result {
        Some(r) => r?,
        None => return Ok(ExitCode::from(130)),
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

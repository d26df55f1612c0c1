//! `trawl embed`: the embed stage.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use trawl_core::config::{Config, EmbedderKind};
use trawl_core::store::Store;
use trawl_embed_worker::worker::{EmbedReport, Metrics};
use trawl_embed_worker::{EmbedWorker, RunReport, Until};

#[derive(clap::Args)]
pub struct Args {
    /// Which embedder: `local` (the default model, no key needed), `voyage` (needs
    /// VOYAGE_API_KEY) or `hash` (deterministic, for tests). Same as `--set embed.embedder=…`.
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,

    /// Stop once no chunk-part event has arrived for two seconds (a one-shot run after
    /// `trawl chunk-worker`); without it the worker runs until interrupted.
    #[arg(long, conflicts_with = "all")]
    once: bool,

    /// Embed every chunk in the store that has no vector in this model's space yet, reading
    /// the store instead of the bus: how a new model (or new dims or dtype) is filled in.
    #[arg(long)]
    all: bool,

    /// With `--all`: go through the Voyage Batch API instead of the embeddings endpoint — a
    /// third cheaper (`embed.batch_price_per_mtok`), finished within 12 hours. The inputs are
    /// uploaded as batch jobs, polled until they end, and their vectors written as the
    /// synchronous path writes them (same cache, same dedupe, same run report). The job ids are
    /// kept in the store: after a crash or Ctrl-C, run the same command again to resume
    /// waiting for them instead of paying twice. For backfills and model changes; needs
    /// `--embedder voyage`.
    #[arg(long, requires = "all")]
    batch: bool,

    /// Report the chunks, tokens and cost that `--all` would send — at the synchronous and at
    /// the Batch API price — and send nothing.
    #[arg(long)]
    dry_run: bool,

    /// Print the run report as JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

fn live(metrics: Arc<Metrics>) -> crate::progress::Live {
    crate::progress::Live::start(move || {
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{} parts, {} chunks: {} cached, {} to embed, {} vectors written, {} tokens sent",
            g(&metrics.parts),
            g(&metrics.chunks),
            g(&metrics.cache_hits),
            g(&metrics.cache_misses),
            g(&metrics.vectors_written),
            g(&metrics.tokens_sent),
        )
    })
}

/// The embed worker's Prometheus metrics.
fn render(m: &Metrics) -> String {
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut t = crate::ops::Text::default();
    t.counter("trawl_embed_parts_total", "Chunk parts taken.", g(&m.parts))
        .counter("trawl_embed_chunks_total", "Chunks seen.", g(&m.chunks))
        .counter(
            "trawl_embed_cache_hits_total",
            "Chunks whose content already had a vector in the space.",
            g(&m.cache_hits),
        )
        .counter(
            "trawl_embed_cache_misses_total",
            "Chunks sent to the embedder.",
            g(&m.cache_misses),
        )
        .counter(
            "trawl_embed_vectors_written_total",
            "Vectors written.",
            g(&m.vectors_written),
        )
        .counter(
            "trawl_embed_tokens_sent_total",
            "Tokens sent to the embedder.",
            g(&m.tokens_sent),
        )
        .counter(
            "trawl_embed_requests_total",
            "Embedding requests.",
            g(&m.requests),
        )
        .counter(
            "trawl_embed_dead_lettered_total",
            "Inputs the provider refused, sent to the dead-letter topic.",
            g(&m.dead_lettered),
        )
        .counter(
            "trawl_embed_truncated_total",
            "Inputs cut to the model's input limit.",
            g(&m.truncated),
        )
        .counter(
            "trawl_embed_redelivered_total",
            "Events taken that had been delivered before.",
            g(&m.redelivered),
        );
    t.finish()
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::from_url(&cfg.store.url)?;
    let (embedder, opts) = trawl_embed_worker::from_config(&cfg.embed, args.embedder, args.dry_run)
        .context("cannot start the embedder")?;
    let name = opts.embedder.clone();
    let backfill = args.all || args.dry_run;
    let batches = if args.batch && !args.dry_run {
        if name != EmbedderKind::Voyage.to_string() {
            anyhow::bail!(
                "--batch uses the Voyage Batch API: add --embedder voyage (the {name} embedder \
                 runs here, there is nothing to batch)"
            );
        }
        Some(Arc::new(
            trawl_embed::batches_from_config(&cfg.embed)
                .context("cannot start the Voyage Batch API client")?,
        ))
    } else {
        None
    };
    let bus = if backfill {
        None
    } else {
        Some(trawl_core::bus::from_config(&cfg.bus, &store)?)
    };
    let (trigger, shutdown) = trawl_core::shutdown::channel();
    let mut worker = EmbedWorker::new(store, bus, embedder, opts).with_shutdown(shutdown);
    if let Some(b) = batches {
        worker = worker.with_batches(b);
    }
    let ops = if backfill {
        crate::ops::Ops::start("", "embed-worker", String::new).await?
    } else {
        let m = worker.metrics();
        crate::ops::Ops::start(&cfg.ops.listen, "embed-worker", move || render(&m)).await?
    };
    eprintln!(
        "embed: {} into {} with the {} embedder",
        if args.batch && !args.dry_run {
            "every chunk in the store, through the Voyage Batch API,"
        } else if backfill {
            "every chunk in the store"
        } else {
            "chunk parts from the bus"
        },
        worker.space(),
        name,
    );
    let live = live(worker.metrics());
    let work = async {
        if backfill {
            let bar = live.bar.clone();
            worker
                .backfill(&move |done, total| bar.set_prefix(format!("{done}/{total} parts")))
                .await
        } else {
            let until = if args.once {
                Until::Idle(Duration::from_secs(2))
            } else {
                Until::Closed
            };
            worker.run(until).await
        }
    };
    let result = crate::ops::until_finished(work, &trigger, &ops, "embed-worker").await;
    live.finish();
    let Some(result) = result else {
        return Ok(ExitCode::from(130));
    };
    let report: RunReport = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report.embed, &report.run.to_string());
    }
    Ok(
        if report.embed.dead_lettered > 0 || report.embed.failed_inputs > 0 {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        },
    )
}

fn print_summary(r: &EmbedReport, run: &str) {
    let verb = if r.dry_run { "would be sent" } else { "sent" };
    println!(
        "embed: {} chunks in {} parts · {} already embedded ({:.0} %) · {} to embed",
        r.chunks,
        r.parts,
        r.cache_hits,
        r.cache_hit_ratio * 100.0,
        r.cache_misses,
    );
    println!(
        "  {} tokens {verb} (estimate {}) in {} requests, {} HTTP requests",
        r.tokens_sent, r.tokens_estimated, r.requests, r.http_requests
    );
    if !r.retries.is_empty() {
        let list: Vec<String> = r.retries.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        println!("  retries: {}", list.join(", "));
    }
    println!(
        "  {} vectors written ({:.1} MB of Parquet), {} truncated, {} dead-lettered, {} redelivered",
        r.vectors_written,
        r.parquet_bytes as f64 / 1e6,
        r.truncated,
        r.dead_lettered,
        r.redelivered
    );
    if r.prose_vectors_written > 0 {
        println!(
            "  {} of them the prose views of chunks of code (embed.prose_view)",
            r.prose_vectors_written
        );
    }
    if r.dry_run {
        println!(
            "  estimated cost ${:.4} at ${}/1M tokens, or ${:.4} through the Batch API (--batch) \
             at ${}/1M · {:.1} s · model {} ({} dims, {})",
            r.estimated_cost_sync_usd,
            r.price_per_mtok,
            r.estimated_cost_batch_usd,
            r.batch_price_per_mtok,
            r.seconds,
            r.model,
            r.dims,
            r.dtype
        );
    } else {
        let price = if r.mode == "batch" {
            r.batch_price_per_mtok
        } else {
            r.price_per_mtok
        };
        println!(
            "  estimated cost ${:.4} at ${price}/1M tokens ({}) · {:.1} s · model {} ({} dims, {})",
            r.estimated_cost_usd, r.mode, r.seconds, r.model, r.dims, r.dtype
        );
    }
    for b in &r.batches {
        println!(
            "  batch {} {}{}: {} inputs, {} embedded, {} left for the next run",
            b.id,
            b.status,
            if b.resumed { " (resumed)" } else { "" },
            b.inputs,
            b.embedded,
            b.failed
        );
    }
    if !r.dry_run {
        println!("  report: runs/{run}.json");
    }
}

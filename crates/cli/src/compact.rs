//! `trawl compact` and `trawl index rollback`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use anyhow::Context;
use trawl_compactor::{BuildOptions, Progress, SpaceInfo};
use trawl_core::config::Config;

#[derive(clap::Args)]
pub struct Args {
    /// Rebuild every shard instead of reusing the live generation's.
    #[arg(long)]
    full: bool,

    /// Collect old generations instead of building one: keep the live one and the
    /// `compact.keep - 1` before it, delete the rest (and what a crashed build left).
    #[arg(long, conflicts_with = "full")]
    gc: bool,

    /// Which embedder's vectors to index (default: `embed.embedder`); chunks without a vector
    /// in that space are indexed for text only.
    #[arg(long, value_parser = ["local", "voyage", "hash"])]
    embedder: Option<String>,

    /// Print the generation's manifest as JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
pub enum IndexCommand {
    /// Point the index back at the generation before the live one.
    Rollback,
}

/// Where a build is, for a live status line.
#[derive(Default)]
pub struct Live {
    shard: AtomicU32,
    shards: AtomicU32,
    swapping: AtomicU64,
}

impl Live {
    /// One line: the live set, shard k/n, or the swap.
    pub fn status(&self) -> String {
        let n = self.shards.load(Ordering::Relaxed);
        let g = self.swapping.load(Ordering::Relaxed);
        if g > 0 {
            format!("making generation {g} live")
        } else if n > 0 {
            format!("shard {}/{n}", self.shard.load(Ordering::Relaxed))
        } else {
            "computing the live set".into()
        }
    }
}

impl Progress for Live {
    fn shard(&self, k: u32, n: u32) {
        self.shard.store(k + 1, Ordering::Relaxed);
        self.shards.store(n, Ordering::Relaxed);
    }
    fn swapping(&self, generation: u64) {
        self.swapping.store(generation, Ordering::Relaxed);
    }
}

pub fn space(cfg: &Config, embedder: Option<&str>) -> Option<SpaceInfo> {
    match trawl_embed_worker::space_of(&cfg.embed, embedder) {
        Ok(s) => Some(SpaceInfo {
            model: s.model,
            dims: s.dims,
            dtype: s.dtype.to_string(),
        }),
        Err(e) => {
            eprintln!("compact: no vectors will be indexed ({e}); text search only");
            None
        }
    }
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = crate::existing_store(cfg)?;
    if args.gc {
        let r = trawl_compactor::gc(&store, cfg.compact.keep).await?;
        println!(
            "gc: kept generations {:?}, collected {:?} ({} objects deleted)",
            r.kept, r.collected, r.objects_deleted
        );
        return Ok(ExitCode::SUCCESS);
    }
    let started = std::time::Instant::now();
    let progress = Arc::new(Live::default());
    let live = {
        let p = progress.clone();
        crate::progress::Live::start(move || p.status())
    };
    let built = build(
        cfg,
        &store,
        args.embedder.as_deref(),
        args.full,
        progress.as_ref(),
    )
    .await;
    live.finish();
    let m = built?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_summary(&m, started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// Builds the next generation from the live set and makes it live.
pub async fn build(
    cfg: &Config,
    store: &trawl_core::store::Store,
    embedder: Option<&str>,
    full: bool,
    progress: &Live,
) -> anyhow::Result<trawl_compactor::Manifest> {
    let space = space(cfg, embedder);
    let set = trawl_compactor::live::live_set(store, space.as_ref())
        .await
        .context("computing the live set")?;
    let opts = BuildOptions {
        shards: cfg.compact.shards,
        full,
        max_segments: cfg.compact.max_segments,
        merge_tombstone_ratio: cfg.compact.merge_tombstone_ratio,
        source_runs: set.runs.clone(),
        ..BuildOptions::default()
    };
    trawl_compactor::build(store, set.docs, space, &opts, progress)
        .await
        .context("building the index generation")
}

fn print_summary(m: &trawl_compactor::Manifest, seconds: f64) {
    let b = &m.build;
    println!(
        "compact: generation {} is live ({}) in {:.1} s",
        m.generation,
        if b.full { "full build" } else { "incremental" },
        seconds
    );
    println!(
        "  {} chunks from {} repositories: {} with vectors, {} text-only",
        m.counts.chunks, m.counts.repos, m.counts.with_vector, m.counts.text_only
    );
    println!(
        "  {} shards: {} reused, {} with a delta segment, {} rebuilt · {} segments, {} docs, {} tombstones written · {:.1} MB written",
        m.shard_count,
        b.shards_reused,
        b.shards_delta,
        b.shards_rebuilt,
        b.segments_written,
        b.docs_written,
        b.tombstones_written,
        b.bytes_written as f64 / 1e6
    );
    match &m.space {
        Some(s) => println!("  vectors: {} ({} dims, {})", s.model, s.dims, s.dtype),
        None => println!("  vectors: none (text search only)"),
    }
    if m.counts.text_only > 0 {
        println!(
            "  {} chunks wait for a vector: searchable by text now; run `trawl embed`, then compact again",
            m.counts.text_only
        );
    }
}

pub async fn index(cfg: &Config, cmd: IndexCommand) -> anyhow::Result<ExitCode> {
    let store = crate::existing_store(cfg)?;
    match cmd {
        IndexCommand::Rollback => {
            let (from, to) = trawl_compactor::rollback(&store).await?;
            println!("index: rolled back from generation {from} to {to}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

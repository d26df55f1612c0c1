//! `trawl compact` and `trawl index rollback`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use trawl_compactor::Progress;
use trawl_compactor::live::Completion;
use trawl_compactor::run::{RunError, WaitObserver, WaitOptions, Waited};
use trawl_core::config::{Config, EmbedderKind};
use trawl_core::ids::Generation;
use trawl_core::space::Space;

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
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,

    /// Print the generation's manifest as JSON instead of a summary.
    #[arg(long)]
    json: bool,

    /// Build only once a fetch run has finished since the live generation was built, and
    /// is done: every indexed file of every repository's last manifest chunked, every live
    /// chunk embedded. Checked in the store, every `--poll`; at `--deadline` the generation
    /// is built anyway and the stragglers are named (exit code 3); with no new fetch run by
    /// then, nothing is built (exit code 3).
    #[arg(long, conflicts_with = "gc")]
    wait: bool,

    /// How long `--wait` waits before building with what is there.
    #[arg(long, default_value = "2h", value_parser = humantime::parse_duration, requires = "wait")]
    deadline: std::time::Duration,

    /// How often `--wait` looks at the store.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    poll: std::time::Duration,

    /// Stay up and build again this long after each build (with `--wait`: wait again
    /// first); without it, build once and exit (for a cron job).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "gc")]
    every: Option<std::time::Duration>,
}

/// The compactor process's counters, for `/metrics`.
#[derive(Default)]
struct Totals {
    builds: AtomicU64,
    generation: AtomicU64,
    chunks: AtomicU64,
    text_only: AtomicU64,
    stragglers: AtomicU64,
    files: AtomicU64,
    files_chunked: AtomicU64,
    chunks_seen: AtomicU64,
    chunks_embedded: AtomicU64,
}

impl Totals {
    fn progress(&self, c: &Completion) {
        self.files.store(c.files, Ordering::Relaxed);
        self.files_chunked.store(c.files_chunked, Ordering::Relaxed);
        self.chunks_seen.store(c.chunks, Ordering::Relaxed);
        self.chunks_embedded
            .store(c.chunks_embedded, Ordering::Relaxed);
        self.stragglers
            .store(c.stragglers.len() as u64, Ordering::Relaxed);
    }

    fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut t = crate::ops::Text::default();
        t.counter(
            "trawl_compact_builds_total",
            "Generations built.",
            self.builds.load(Ordering::Relaxed),
        )
        .gauge(
            "trawl_compact_generation",
            "The last generation made live.",
            g(&self.generation),
        )
        .gauge(
            "trawl_compact_chunks",
            "Chunks in the last generation.",
            g(&self.chunks),
        )
        .gauge(
            "trawl_compact_text_only_chunks",
            "Chunks of the last generation without a vector.",
            g(&self.text_only),
        )
        .gauge(
            "trawl_run_files",
            "Indexed files in the repositories' last manifests.",
            g(&self.files),
        )
        .gauge(
            "trawl_run_files_chunked",
            "Of those, files whose chunk part is written.",
            g(&self.files_chunked),
        )
        .gauge("trawl_run_chunks", "Live chunks.", g(&self.chunks_seen))
        .gauge(
            "trawl_run_chunks_embedded",
            "Live chunks with a vector.",
            g(&self.chunks_embedded),
        )
        .gauge(
            "trawl_run_stragglers",
            "Files not yet chunked or embedded at the last check.",
            g(&self.stragglers),
        );
        t.finish()
    }
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
        build_status(
            self.shard.load(Ordering::Relaxed),
            self.shards.load(Ordering::Relaxed),
            self.swapping.load(Ordering::Relaxed),
        )
    }
}

/// Where a build is: the live set, shard `shard`/`shards`, or the swap to `swapping`.
pub fn build_status(shard: u32, shards: u32, swapping: u64) -> String {
    if swapping > 0 {
        format!("making generation {swapping} live")
    } else if shards > 0 {
        format!("shard {shard}/{shards}")
    } else {
        "computing the live set".into()
    }
}

impl Progress for Live {
    fn shard(&self, k: u32, n: u32) {
        self.shard.store(k + 1, Ordering::Relaxed);
        self.shards.store(n, Ordering::Relaxed);
    }
    fn swapping(&self, generation: Generation) {
        self.swapping.store(generation.0, Ordering::Relaxed);
    }
}

pub fn space(cfg: &Config, embedder: Option<EmbedderKind>) -> Option<Space> {
    match trawl_embed::space_of(&cfg.embed, embedder) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("compact: no vectors will be indexed ({e}); text search only");
            None
        }
    }
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = crate::existing_store(cfg)?;
    if args.gc {
        let space = space(cfg, args.embedder);
        let c = trawl_compactor::run::collect(&store, &cfg.compact, space.as_ref()).await?;
        print_collected(&c);
        return Ok(ExitCode::SUCCESS);
    }
    let totals = Arc::new(Totals::default());
    let ops = {
        let t = totals.clone();
        crate::ops::Ops::start(&cfg.ops.listen, "compactor", move || t.render()).await?
    };
    loop {
        // A build stopped part-way leaves CURRENT as it was (the swap is its last step);
        // what it wrote is collected by `trawl compact --gc`.
        let code = tokio::select! {
            r = once(cfg, &store, &args, &totals) => match r {
                // Another compactor is building: a scheduled compactor tries again at its
                // next turn; a one-shot one says who holds the index and stops.
                Err(e) if args.every.is_some() && is_busy(&e) => {
                    eprintln!("compactor: {e:#}");
                    ExitCode::from(75)
                }
                r => r?,
            },
            () = crate::ops::terminated() => {
                ops.stopping();
                eprintln!("compactor: stopped before the new generation went live; the live one is unchanged");
                return Ok(ExitCode::from(130));
            }
        };
        let Some(every) = args.every else {
            return Ok(code);
        };
        eprintln!(
            "compactor: next build in {}",
            humantime::format_duration(every)
        );
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = crate::ops::terminated() => {
                ops.stopping();
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// Whether `e` is another compactor holding the lease.
fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<trawl_compactor::CompactError>(),
            Some(trawl_compactor::CompactError::Busy(_))
        ) || c.downcast_ref::<RunError>().is_some_and(RunError::is_busy)
    })
}

/// One build, after waiting for the run with `--wait`.
async fn once(
    cfg: &Config,
    store: &trawl_core::store::Store,
    args: &Args,
    totals: &Totals,
) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let space = space(cfg, args.embedder);
    let (set, waited) = if args.wait {
        let (c, set) = match wait(cfg, store, space.as_ref(), args, totals).await? {
            Waited::Ready(c, set) => (c, set.map(|s| *s)),
            Waited::NoRun { since } => {
                match since {
                    Some(g) => eprintln!(
                        "compactor: no fetch run finished since generation {g} was built; nothing to build"
                    ),
                    None => eprintln!("compactor: no fetch run has finished; nothing to build"),
                }
                return Ok(ExitCode::from(3));
            }
            Waited::Unchanged { run, generation } => {
                eprintln!(
                    "compactor: fetch run {run} changed nothing generation {generation} was built from; nothing to build"
                );
                return Ok(ExitCode::SUCCESS);
            }
        };
        (set, Some((c, started.elapsed().as_secs_f64())))
    } else {
        (None, None)
    };
    finish(cfg, store, space, set, args, totals, started, waited).await
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    cfg: &Config,
    store: &trawl_core::store::Store,
    space: Option<Space>,
    set: Option<trawl_compactor::live::LiveSet>,
    args: &Args,
    totals: &Totals,
    started: std::time::Instant,
    waited: Option<(Completion, f64)>,
) -> anyhow::Result<ExitCode> {
    let progress = Arc::new(Live::default());
    let live = {
        let p = progress.clone();
        crate::progress::Live::start(move || p.status())
    };
    let built = build_from(cfg, store, space, set, args.full, progress.as_ref()).await;
    live.finish();
    let m = built?;
    totals.builds.fetch_add(1, Ordering::Relaxed);
    totals.generation.store(m.generation.0, Ordering::Relaxed);
    totals.chunks.store(m.counts.chunks, Ordering::Relaxed);
    totals
        .text_only
        .store(m.counts.text_only, Ordering::Relaxed);
    let mut code = ExitCode::SUCCESS;
    if let Some((completion, seconds)) = waited {
        let complete = completion.is_complete();
        if !complete {
            code = ExitCode::from(3);
        }
        let (key, report) =
            trawl_compactor::run::record_wait(store, completion, seconds, m.generation).await?;
        if !complete {
            eprintln!(
                "compactor: built generation {} at the deadline with {} files unfinished (report: {key}):",
                m.generation,
                report.completion.stragglers.len()
            );
            for s in report.completion.stragglers.iter().take(20) {
                eprintln!("  waiting for {:<9}  {}  {}", s.waiting_for, s.repo, s.path);
                tracing::warn!(repo = %s.repo, path = %s.path, waiting_for = s.waiting_for, "straggler");
            }
            if report.completion.stragglers.len() > 20 {
                eprintln!("  … and {} more", report.completion.stragglers.len() - 20);
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        print_summary(&m, started.elapsed().as_secs_f64());
    }
    Ok(code)
}

/// Shows a wait's progress on the status line, the process's metrics and stderr.
struct WaitRender<'a> {
    status: Arc<std::sync::Mutex<String>>,
    totals: &'a Totals,
    live: std::sync::Mutex<Option<crate::progress::Live>>,
}

impl WaitRender<'_> {
    fn set(&self, line: String) {
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = line;
    }
}

impl WaitObserver for WaitRender<'_> {
    fn built_with_stragglers(&self, generation: Generation) {
        eprintln!(
            "compactor: generation {generation} was built with stragglers; waiting for its run to finish"
        );
    }
    fn waiting_for_run(&self, since: Option<Generation>) {
        self.set(match since {
            Some(g) => format!("waiting for a fetch run newer than generation {g}"),
            None => "waiting for a fetch run".into(),
        });
    }
    fn run_finished(&self, run: &trawl_core::ids::RunId, at: std::time::SystemTime) {
        eprintln!(
            "compactor: fetch run {run} finished at {}; waiting for it to be chunked and embedded",
            humantime::format_rfc3339_seconds(at)
        );
    }
    fn progress(&self, c: &Completion) {
        self.totals.progress(c);
        self.set(format!(
            "waiting for the run: {}/{} files chunked, {}/{} chunks embedded",
            c.files_chunked, c.files, c.chunks_embedded, c.chunks
        ));
        if c.is_complete() {
            self.done();
            eprintln!(
                "compactor: the run is complete ({} files, {} chunks embedded)",
                c.files, c.chunks_embedded
            );
        }
    }
    fn done(&self) {
        if let Some(live) = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            live.finish();
        }
    }
}

/// Polls the store until a fetch run newer than the live generation has finished and is
/// chunked and embedded, or the deadline (`trawl_compactor::run::wait`).
async fn wait(
    cfg: &Config,
    store: &trawl_core::store::Store,
    space: Option<&Space>,
    args: &Args,
    totals: &Totals,
) -> anyhow::Result<Waited> {
    let chunker_version =
        trawl_chunk_worker::part_version(trawl_chunk_worker::strategy(&cfg.chunk)?);
    let status = Arc::new(std::sync::Mutex::new(String::from("looking at the store")));
    let live = {
        let s = status.clone();
        crate::progress::Live::start(move || {
            s.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        })
    };
    let render = WaitRender {
        status,
        totals,
        live: std::sync::Mutex::new(Some(live)),
    };
    let opts = WaitOptions {
        chunker_version,
        deadline: args.deadline,
        poll: args.poll,
        full: args.full,
        spill_memory: trawl_compactor::run::spill_memory(&cfg.compact),
    };
    let waited = trawl_compactor::run::wait(store, space, &opts, &render).await;
    render.done();
    Ok(waited?)
}

/// [`trawl_compactor::run::compact`] from a live set already computed (`None`: compute it).
pub async fn build_from(
    cfg: &Config,
    store: &trawl_core::store::Store,
    space: Option<Space>,
    set: Option<trawl_compactor::live::LiveSet>,
    full: bool,
    progress: &Live,
) -> anyhow::Result<trawl_compactor::Manifest> {
    let c = trawl_compactor::run::compact(store, &cfg.compact, space, set, full, progress).await?;
    if c.unchanged {
        eprintln!(
            "compact: nothing changed since generation {} was built; it stays live",
            c.manifest.generation
        );
    }
    Ok(c.manifest)
}

fn print_collected(c: &trawl_compactor::run::Collected) {
    let (g, r) = (&c.gc, &c.retention);
    // The numbers as a list: `[3, 2]`.
    let numbers = |gs: &[Generation]| format!("{:?}", gs.iter().map(|g| g.0).collect::<Vec<_>>());
    println!(
        "gc: kept generations {}, collected {} ({} objects deleted)",
        numbers(&g.kept),
        numbers(&g.collected),
        g.objects_deleted
    );
    println!(
        "retention: {} run reports, {} large bus payloads, {} superseded manifests, {} repositories no longer listed ({} objects) deleted",
        r.run_reports,
        r.large_payloads,
        r.manifests,
        r.removed_repos.len(),
        r.removed_repo_objects
    );
    match c.parts {
        Some(p) => println!(
            "retention: {} superseded chunk parts, {} embedding parts with no live vector deleted",
            p.chunk_parts, p.embedding_parts
        ),
        None => println!(
            "retention: chunk parts kept (the live generation is not built from the store's current inputs: run `trawl compact`, then `--gc`)"
        ),
    }
}

fn print_summary(m: &trawl_compactor::Manifest, seconds: f64) {
    let b = &m.build;
    let how = match (b.full, b.repos_rebuilt) {
        (true, _) => "full build".to_owned(),
        (false, Some(n)) => format!(
            "incremental: {n} of {} repositories read again",
            m.repo_inputs.len().max(n as usize)
        ),
        (false, None) => "incremental".to_owned(),
    };
    println!(
        "compact: generation {} is live ({how}) in {:.1} s",
        m.generation, seconds
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

//! `trawl index <path|url>...`: fetch → chunk → embed → compact in one process, over the
//! in-process bus, into the local store. Stages overlap: the chunk worker chunks while the
//! fetcher diffs, the embedder embeds while the chunker chunks.
//!
//! Nothing is lost when the process dies: the fetcher records a repository's new state only
//! after every chunk of its files is written (the in-process bus forgets on exit), and a run
//! leaves a marker until its generation is live, so the next run embeds whatever the
//! interrupted one chunked but did not embed.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use trawl_core::bus::{Bus, InProcBus};
use trawl_core::config::{Config, EmbedderKind};
use trawl_core::records::DeadLetter;
use trawl_core::store::Store;
use trawl_embed_worker::worker::{CHUNKS_TOPIC, DEAD_LETTERS_TOPIC, EMBEDDED_TOPIC};
use trawl_fetcher::{Emitted, Fetcher, Observer, RepoReport, RunOptions};

use crate::compact::IndexCommand;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<IndexCommand>,

    /// Repositories to index: local paths (a git work tree or bare repo) or clone URLs.
    #[arg(value_name = "PATH|URL", required_unless_present = "repos")]
    targets: Vec<String>,

    /// A repos file (TOML, `[[repo]]` entries with url, branch, include, exclude), on top of
    /// the targets.
    #[arg(long, short = 'r')]
    repos: Option<std::path::PathBuf>,

    /// Which embedder: `local` (default; the model is downloaded on first use), `voyage`
    /// (needs VOYAGE_API_KEY) or `hash` (tests).
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,

    /// Rebuild every index shard instead of reusing unchanged ones.
    #[arg(long)]
    full: bool,
    /// Add these repositories and keep every other one indexed. Without it the repositories
    /// given are the whole list: any indexed before and not given leaves the index at the
    /// next compaction.
    #[arg(long)]
    keep_others: bool,
    /// Read every file again, unchanged ones too, and publish what the secret rules now judge
    /// otherwise than when it was indexed (run once after an upgrade of trawl changed them).
    #[arg(long)]
    rescan_secrets: bool,
}

/// Records the repositories' states and builds a generation from what is chunked so far.
async fn publish_early(
    cfg: &Config,
    store: &Store,
    fetcher: &Fetcher,
    report: &trawl_fetcher::RunReport,
    embedder: EmbedderKind,
) -> anyhow::Result<trawl_compactor::Manifest> {
    // Every event is chunked and durable: the states may be recorded now.
    fetcher.commit_states(report).await?;
    crate::compact::build(
        cfg,
        store,
        Some(embedder),
        false,
        &crate::compact::Live::default(),
    )
    .await
}

/// Marker of a run in progress: present at start means the last run was interrupted.
const IN_PROGRESS: &str = "pipeline/index-in-progress.json";

#[derive(Default)]
struct FetchProgress {
    repos_done: AtomicU64,
    events: AtomicU64,
}

impl Observer for FetchProgress {
    fn emitted(&self, item: &Emitted) {
        if !matches!(item, Emitted::Skip { .. }) {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn repo_finished(&self, _report: &RepoReport) {
        self.repos_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Acknowledges everything on `topic` until it closes; returns the payloads when `keep`.
async fn drain(bus: Arc<dyn Bus>, topic: &str, group: &str, keep: bool) -> Vec<bytes::Bytes> {
    let mut kept = Vec::new();
    let Ok(mut sub) = bus.subscribe(topic, group).await else {
        return kept;
    };
    while let Ok(Some(d)) = sub.recv().await {
        if keep {
            kept.push(d.payload.clone());
        }
        let _ = d.ack().await;
    }
    kept
}

/// Installs the default local model when it is the one to use and is missing.
async fn ensure_model(cfg: &Config, embedder: EmbedderKind) -> anyhow::Result<()> {
    use trawl_embed::local;
    if embedder != EmbedderKind::Local || !cfg.embed.model_dir.as_os_str().is_empty() {
        return Ok(());
    }
    let dir = local::default_model_dir();
    if local::is_installed(&dir) {
        return Ok(());
    }
    eprintln!(
        "index: the local embedding model is not installed; downloading all-MiniLM-L6-v2 (84 MB) into {}",
        dir.display()
    );
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} model {bytes}/{total_bytes} {bar:30} {bytes_per_sec}",
        )
        .expect("a valid template"),
    );
    let b = bar.clone();
    let r = local::install(&dir, &move |done, total| {
        b.set_length(total);
        b.set_position(done);
    })
    .await;
    bar.finish_and_clear();
    r.context("the local model is needed to embed without an API key")?;
    eprintln!("index: model installed");
    Ok(())
}

#[allow(clippy::too_many_lines)] // one pipeline, read top to bottom
pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    if let Some(cmd) = args.command {
        return crate::compact::index(cfg, cmd).await;
    }
    let started = Instant::now();
    let specs = crate::fetch::specs(args.repos.as_deref(), &args.targets)?;
    anyhow::ensure!(!specs.is_empty(), "nothing to index: give paths or URLs");
    let embedder_kind = args.embedder.unwrap_or(cfg.embed.embedder);
    ensure_model(cfg, embedder_kind).await?;
    let (embedder, opts) = trawl_embed_worker::from_config(&cfg.embed, Some(embedder_kind), false)
        .context("cannot start the embedder")?;

    let store = Store::from_url(&cfg.store.url)?;
    let resume = store.exists_key(IN_PROGRESS).await?;
    store
        .put_json(
            IN_PROGRESS,
            &serde_json::json!({"started_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()}),
        )
        .await?;
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(cfg.bus.capacity));
    let fetcher = Fetcher::new(cfg.fetch.clone(), store.clone(), bus.clone());
    let chunker = crate::chunk_worker::worker(cfg, store.clone(), bus.clone())?;
    let embed =
        trawl_embed_worker::EmbedWorker::new(store.clone(), Some(bus.clone()), embedder, opts);
    let space = embed.space().clone();

    let fetch_progress = Arc::new(FetchProgress::default());
    let compact_progress = Arc::new(crate::compact::Live::default());
    let stage = Arc::new(std::sync::Mutex::new("fetch"));
    let live = {
        let (fp, cm, em, cp, stage) = (
            fetch_progress.clone(),
            chunker.metrics(),
            embed.metrics(),
            compact_progress.clone(),
            stage.clone(),
        );
        let n = specs.len();
        crate::progress::Live::start(move || {
            let stage = *stage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if stage == "compact" {
                return format!("index: {}", cp.status());
            }
            let c = cm.snapshot();
            let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
            format!(
                "{stage}: repos {}/{n} · {} files changed · chunked {} files → {} chunks · embedded {} ({} cached, {} new)",
                fp.repos_done.load(Ordering::Relaxed),
                fp.events.load(Ordering::Relaxed),
                c.files + c.deletes,
                c.chunks,
                g(&em.cache_hits) + g(&em.vectors_written),
                g(&em.cache_hits),
                g(&em.vectors_written),
            )
        })
    };

    let fetch_opts = RunOptions {
        defer_state: true,
        keep_others: args.keep_others,
        rescan_secrets: args.rescan_secrets,
        ..RunOptions::default()
    };
    let fetch = async {
        let report = fetcher
            .run(&specs, &fetch_opts, fetch_progress.clone())
            .await;
        let _ = bus.close(trawl_fetcher::FILES_TOPIC).await;
        report
    };
    let chunk = async {
        let r = chunker.run(trawl_chunk_worker::Until::Closed).await;
        let _ = bus.close(CHUNKS_TOPIC).await;
        r
    };
    let embed_run = async {
        let r = embed.run(trawl_embed_worker::Until::Closed).await;
        // If the embedder stopped early (a bad key), keep the chunker from blocking on a full
        // topic: the chunks are durable and the next run embeds them (the marker stays).
        if r.is_err() {
            drain(
                bus.clone(),
                CHUNKS_TOPIC,
                trawl_embed_worker::worker::GROUP,
                false,
            )
            .await;
        }
        // The chunker finished before the embedder could: no dead letter comes after this.
        let _ = bus.close(EMBEDDED_TOPIC).await;
        let _ = bus.close(DEAD_LETTERS_TOPIC).await;
        r
    };
    // Progressive availability: once everything is fetched and chunked, and the embedder is
    // still at work, a first generation goes live with the chunks not embedded yet indexed
    // for words only; the full one follows when the vectors are in (incrementally: only the
    // text-only docs are replaced). The hash embedder (tests) is never slow enough to need it.
    let early = Arc::new(std::sync::Mutex::new(None::<(u64, u64, f64)>));
    let fetch_and_chunk = async {
        let (report, chunked) = tokio::join!(fetch, chunk);
        let em = embed.metrics();
        let done = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let waiting = chunked.as_ref().map_or(0, |c| c.chunks).saturating_sub(
            done(&em.cache_hits) + done(&em.vectors_written) + done(&em.dead_lettered),
        );
        if chunked.is_ok()
            && waiting > 0
            && embedder_kind != EmbedderKind::Hash
            && report.failed() < report.repos.len()
        {
            match publish_early(cfg, &store, &fetcher, &report, embedder_kind).await {
                Ok(m) => {
                    let line = format!(
                        "index: generation {} is searchable now (words only for the {} chunks still being embedded): trawl search \"…\"",
                        m.generation, m.counts.text_only
                    );
                    if live.bar.is_hidden() {
                        eprintln!("{line}");
                    } else {
                        live.bar.println(line);
                    }
                    *early
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((
                        m.generation,
                        m.counts.text_only,
                        started.elapsed().as_secs_f64(),
                    ));
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the early generation was not built; the full one follows");
                }
            }
        }
        (report, chunked)
    };
    let ((report, chunked), embedded_report, _, dead) = tokio::join!(
        fetch_and_chunk,
        embed_run,
        drain(bus.clone(), EMBEDDED_TOPIC, "index", false),
        drain(bus.clone(), DEAD_LETTERS_TOPIC, "index", true),
    );
    // The in-process bus forgets on exit: dead letters are kept on the store's spool bus,
    // where `trawl dlq` finds them.
    let spool = trawl_core::bus::SpoolBus::new(store.clone());
    for d in &dead {
        let key = DeadLetter::from_json(d).map(|l| l.key).unwrap_or_default();
        spool
            .publish(crate::dlq::TOPIC, &key, d.clone())
            .await
            .context("keeping the dead letters")?;
    }
    let chunked = match chunked {
        Ok(m) => m,
        Err(e) => {
            live.finish();
            return Err(e).context("chunking failed; run `trawl index` again to resume");
        }
    };
    // Every event of the run is chunked and durable: record the repositories' new state.
    fetcher.commit_states(&report).await?;
    let mut embedded_report = match embedded_report {
        Ok(r) => r,
        Err(e) => {
            live.finish();
            return Err(e).context(
                "embedding failed; fix it and run `trawl index` again: what is chunked is kept",
            );
        }
    };
    if resume {
        *stage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = "resume";
        let r = embed
            .backfill(&|_, _| {})
            .await
            .context("embedding what an interrupted run left")?;
        embedded_report.embed.vectors_written += r.embed.vectors_written;
        embedded_report.embed.chunks += r.embed.chunks;
    }
    if report.failed() == report.repos.len() {
        live.finish();
        store.delete(IN_PROGRESS).await?;
        for r in &report.repos {
            print_failure(r);
        }
        anyhow::bail!("no repository could be fetched: nothing to index");
    }
    *stage
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = "compact";
    let built = crate::compact::build(
        cfg,
        &store,
        Some(embedder_kind),
        args.full,
        compact_progress.as_ref(),
    )
    .await;
    live.finish();
    let m = built?;
    store.delete(IN_PROGRESS).await?;

    // The summary.
    let e = &embedded_report.embed;
    let sum = |f: fn(&RepoReport) -> u64| report.repos.iter().map(f).sum::<u64>();
    let count = |s: &str| report.repos.iter().filter(|x| x.status == s).count();
    println!(
        "index: {} repositories ({} updated, {} unchanged, {} failed) in {:.1} s{}",
        report.repos.len(),
        count("updated"),
        count("unchanged"),
        count("failed"),
        started.elapsed().as_secs_f64(),
        if resume {
            " (resumed an interrupted run)"
        } else {
            ""
        }
    );
    let skipped: u64 = report.repos.iter().flat_map(|r| r.skips.values()).sum();
    println!(
        "  fetch    {} changed files ({} upserts, {} deletes), {} skipped, {}",
        sum(|x| x.upserts + x.deletes),
        sum(|x| x.upserts),
        sum(|x| x.deletes),
        skipped,
        crate::fetch::human_bytes(sum(|x| x.bytes))
    );
    if let Some(line) = crate::secrets::summary_line(&report) {
        println!("  {line}");
    }
    println!(
        "  chunk    {} files → {} chunks, {} dead letters",
        chunked.files, chunked.chunks, chunked.dead_letters
    );
    println!(
        "  embed    {} chunks: {} already embedded, {} embedded now · {space}",
        e.chunks, e.cache_hits, e.vectors_written
    );
    println!(
        "  index    generation {} live: {} chunks from {} repositories ({} with vectors), {} shards ({} reused)",
        m.generation,
        m.counts.chunks,
        m.counts.repos,
        m.counts.with_vector,
        m.shard_count,
        m.build.shards_reused
    );
    if let Some((g, text_only, at)) = *early
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        println!(
            "  early    generation {g} was searchable after {at:.1} s, by words only for {text_only} chunks then waiting for vectors"
        );
    }
    for r in &report.repos {
        print_failure(r);
    }
    for d in dead.iter().take(5) {
        if let Ok(d) = DeadLetter::from_json(d) {
            println!("  dead letter  {} {}: {}", d.topic, d.key, d.error);
        }
    }
    if !dead.is_empty() {
        println!(
            "  {} dead letters kept: `trawl dlq list` shows them, `trawl dlq replay` retries them",
            dead.len()
        );
    }
    if m.counts.chunks > 0 {
        println!("search it:  trawl search \"<what you are looking for>\"");
    }
    Ok(
        if report.failed() > 0 || chunked.dead_letters > 0 || e.dead_lettered > 0 {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        },
    )
}

fn print_failure(r: &RepoReport) {
    let Some(f) = &r.failure else {
        return;
    };
    let hint = if std::path::Path::new(&r.url).is_dir() && f.reason.as_str() == "not-found" {
        " (not a git repository: trawl indexes what is committed; `git init && git add -A && git commit` first)"
    } else {
        ""
    };
    println!(
        "  FAILED   {}  {}: {}{hint}",
        r.url,
        f.reason.as_str(),
        f.message
    );
}

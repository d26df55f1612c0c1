//! # trawl-pipeline
//!
//! The one-process pipeline behind `trawl index`: fetch → chunk → embed → compact over the
//! in-process bus, into the configured store. Stages overlap: the chunk worker chunks while
//! the fetcher diffs, the embedder embeds while the chunker chunks. It is the only crate that
//! depends on several stage crates; the stages still never depend on each other.
//!
//! Its rules, which the stages alone do not know:
//! - **Close order**: `files` closes when the fetcher is done, `chunks` when the chunk worker
//!   is, `embedded` and `dead-letters` when the embed worker is (no dead letter comes after).
//! - **Draining**: an embedder that stops early (a bad key) leaves the chunks topic drained so
//!   the chunk worker never blocks on a full topic; the chunks are durable and the next run
//!   embeds them.
//! - **Dead letters** outlive the process: the in-process bus forgets on exit, so they are
//!   kept on the store's spool bus, where `trawl dlq` finds them.
//! - **The deferred state commit**: a repository's new state is recorded only once every
//!   chunk of its files is written.
//! - **The resume marker**: a run leaves [`IN_PROGRESS`] until its generation is live; a run
//!   that finds it embeds whatever the interrupted one chunked but did not embed.
//! - **A new vector space** (another model, or another reading of the local one): when the
//!   live generation's vectors are in another space, or it has none at all, the run embeds
//!   every chunk that has none in its space, not only the files that changed; otherwise the
//!   unchanged repositories would go live with no vectors at all.
//! - **Early words-only generation**: once everything is fetched and chunked while the
//!   embedder is still at work, a first generation goes live with the chunks not embedded yet
//!   indexed for words only; the full one follows.
//! - **Prose last**: with the local model as the sentence model (`chunk.meaning`), the files
//!   it would read are chunked after every other file, and the early generation goes live
//!   without them; their repositories are recorded as unfinished until they are chunked, so
//!   that a run that stops in between leaves them to the next one.
//!
//! Progress is read from a [`Status`] and told to an [`Observer`]; nothing here prints.

pub mod meaning;

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use trawl_chunk_worker::{ChunkWorker, Deferred, FirstPass, MetricsSnapshot};
use trawl_compactor::Manifest;
use trawl_compactor::run::{Compacted, RunError};
use trawl_core::bus::{Bus, InProcBus, SpoolBus, Topic};
use trawl_core::config::{Config, EmbedderKind, MeaningModel};
use trawl_core::ids::Generation;
use trawl_core::records::DeadLetter;
use trawl_core::space::Space;
use trawl_core::store::Store;
use trawl_embed_worker::EmbedWorker;
use trawl_embed_worker::worker::WorkerError;
use trawl_fetcher::{Emitted, Fetcher, RepoReport, RepoSpec, RunOptions, RunReport};

/// Marker of a run in progress: present at start means the last run was interrupted.
pub const IN_PROGRESS: &str = "pipeline/index-in-progress.json";
/// The topic dead letters are kept on, on the store's spool bus (`trawl dlq` reads it).
pub const DEAD_LETTERS_KEPT: &str = Topic::DeadLetters.name();
/// The consumer group the pipeline drains `embedded` and `dead-letters` with.
const GROUP: &str = "index";

/// What to index, and how.
#[derive(Clone, Debug)]
pub struct IndexOptions {
    /// The repositories: the whole list unless `keep_others`.
    pub specs: Vec<RepoSpec>,
    pub embedder: EmbedderKind,
    /// Rebuild every index shard instead of reusing unchanged ones.
    pub full: bool,
    /// Keep every repository indexed before and not in `specs`.
    pub keep_others: bool,
    /// Publish what the secret rules now judge otherwise, unchanged files too.
    pub rescan_secrets: bool,
}

/// Why the pipeline stopped. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("nothing to index: give paths or URLs")]
    NothingToIndex,
    #[error("cannot start the embedder")]
    Embedder(#[source] trawl_embed::EmbedError),
    #[error(transparent)]
    ChunkConfig(#[from] trawl_chunk_worker::ConfigError),
    #[error(transparent)]
    Store(#[from] trawl_core::Error),
    #[error("keeping the dead letters")]
    DeadLetters(#[source] trawl_core::Error),
    #[error("chunking failed; run `trawl index` again to resume")]
    Chunk(#[source] trawl_core::Error),
    #[error("embedding failed; fix it and run `trawl index` again: what is chunked is kept")]
    Embed(#[source] WorkerError),
    #[error("embedding what an interrupted run left")]
    Resume(#[source] WorkerError),
    /// Every repository failed; the report says why each did.
    #[error("no repository could be fetched: nothing to index")]
    NothingFetched(Box<RunReport>),
    #[error(transparent)]
    Compact(#[from] RunError),
}

/// The phase a run is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Fetching, chunking and embedding, overlapped.
    Fetch = 0,
    /// Embedding what an interrupted run left, or every chunk again in a new vector space.
    Resume = 1,
    /// Building the generation.
    Compact = 2,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Fetch => "fetch",
            Phase::Resume => "resume",
            Phase::Compact => "compact",
        }
    }
}

/// Where a run is: what [`Status::snapshot`] reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub phase: Phase,
    pub repos: usize,
    pub repos_done: u64,
    /// Changed files published by the fetcher.
    pub files_changed: u64,
    /// The chunk worker's counters.
    pub chunked: MetricsSnapshot,
    /// Chunks whose vector was in the cache, and chunks' vectors written (prose views'
    /// left out).
    pub cache_hits: u64,
    pub vectors_written: u64,
    /// The build: shard `shard` of `shards` (0 of 0 while the live set is computed), and the
    /// generation being made live (0 until then).
    pub shard: u32,
    pub shards: u32,
    pub swapping: u64,
}

/// A live view of a run's counters; cheap to clone, readable from another task.
#[derive(Clone)]
pub struct Status {
    repos: usize,
    counters: Arc<Counters>,
    chunk: Arc<trawl_chunk_worker::Metrics>,
    embed: Arc<trawl_embed_worker::worker::Metrics>,
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Status").finish_non_exhaustive()
    }
}

impl Status {
    pub fn snapshot(&self) -> Snapshot {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            phase: match c.phase.load(Ordering::Relaxed) {
                0 => Phase::Fetch,
                1 => Phase::Resume,
                _ => Phase::Compact,
            },
            repos: self.repos,
            repos_done: get(&c.repos_done),
            files_changed: get(&c.events),
            chunked: self.chunk.snapshot(),
            cache_hits: get(&self.embed.cache_hits),
            vectors_written: self.embed.chunk_vectors_written(),
            shard: c.shard.load(Ordering::Relaxed),
            shards: c.shards.load(Ordering::Relaxed),
            swapping: get(&c.swapping),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    phase: AtomicU8,
    repos_done: AtomicU64,
    events: AtomicU64,
    shard: AtomicU32,
    shards: AtomicU32,
    swapping: AtomicU64,
}

impl Counters {
    fn enter(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }
}

impl trawl_fetcher::Observer for Counters {
    fn emitted(&self, item: &Emitted) {
        if !matches!(item, Emitted::Skip { .. }) {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn repo_finished(&self, _report: &RepoReport) {
        self.repos_done.fetch_add(1, Ordering::Relaxed);
    }
}

impl trawl_compactor::Progress for Counters {
    fn shard(&self, k: u32, n: u32) {
        self.shard.store(k + 1, Ordering::Relaxed);
        self.shards.store(n, Ordering::Relaxed);
    }
    fn swapping(&self, generation: Generation) {
        self.swapping.store(generation.0, Ordering::Relaxed);
    }
}

/// What a run tells as it goes; every method has a default that ignores it.
pub trait Observer: Send + Sync {
    /// The early words-only generation is live.
    fn early_generation(&self, manifest: &Manifest, early: &Early) {
        let _ = (manifest, early);
    }
    /// A compaction found nothing changed since `generation` was built: it stays live.
    fn unchanged(&self, generation: Generation) {
        let _ = generation;
    }
    /// The embedder's vector space cannot be known (`reason`): the generation is built for
    /// text search only.
    fn no_vectors(&self, reason: &str) {
        let _ = reason;
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;
impl Observer for Quiet {}

/// The early generation of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Early {
    pub generation: Generation,
    /// Chunks indexed for words only, waiting for vectors.
    pub text_only: u64,
    /// Seconds after the start it went live.
    pub after: f64,
    /// Prose files it went live without, still to be cut by meaning (they join the full one).
    pub deferred_files: u64,
}

/// What a run did.
#[derive(Debug)]
pub struct IndexReport {
    pub fetch: RunReport,
    pub chunk: MetricsSnapshot,
    pub embed: trawl_embed_worker::RunReport,
    /// The vector space the chunks were embedded in.
    pub space: Space,
    /// The live generation at the end.
    pub manifest: Manifest,
    pub early: Option<Early>,
    /// The dead letters of the run (JSON [`DeadLetter`]s), kept on the spool bus.
    pub dead_letters: Vec<Bytes>,
    /// The run resumed an interrupted one.
    pub resumed: bool,
    pub seconds: f64,
}

impl IndexReport {
    /// Something was set aside: a repository failed, or a file or chunk was dead-lettered.
    pub fn incomplete(&self) -> bool {
        self.fetch.failed() > 0 || self.chunk.dead_letters > 0 || self.embed.embed.dead_lettered > 0
    }
}

/// A pipeline set up and ready to run: the embedder started, the stages built.
pub struct Pipeline {
    cfg: Config,
    opts: IndexOptions,
    store: Store,
    bus: Arc<dyn Bus>,
    fetcher: Fetcher,
    chunker: ChunkWorker,
    embed: EmbedWorker,
    status: Status,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("repos", &self.opts.specs.len())
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Starts the embedder and builds the stages of `cfg` over a fresh in-process bus. The
    /// local model must be installed already when it is the one to use.
    pub fn new(cfg: &Config, opts: IndexOptions) -> Result<Self, PipelineError> {
        if opts.specs.is_empty() {
            return Err(PipelineError::NothingToIndex);
        }
        let (embedder, embed_opts) =
            trawl_embed_worker::from_config(&cfg.embed, Some(opts.embedder), false)
                .map_err(PipelineError::Embedder)?;
        let store = Store::from_url(&cfg.store.url)?;
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(cfg.bus.capacity));
        let fetcher = Fetcher::new(cfg.fetch.clone(), store.clone(), bus.clone());
        let meaning = meaning::for_run(cfg, opts.embedder, Some(&embedder));
        // The local model reads every sentence of long prose: a first generation need not
        // wait for it (the hash embedder and shared words are fast, and tests see no early
        // generation with the hash embedder).
        let defer = meaning.is_some()
            && cfg.chunk.meaning_model == MeaningModel::Local
            && opts.embedder != EmbedderKind::Hash;
        let mut chunker =
            trawl_chunk_worker::from_config(cfg, store.clone(), bus.clone())?.with_meaning(meaning);
        if defer {
            chunker = chunker.deferring_prose();
        }
        let embed = EmbedWorker::new(store.clone(), Some(bus.clone()), embedder, embed_opts);
        let status = Status {
            repos: opts.specs.len(),
            counters: Arc::default(),
            chunk: chunker.metrics(),
            embed: embed.metrics(),
        };
        Ok(Self {
            cfg: cfg.clone(),
            opts,
            store,
            bus,
            fetcher,
            chunker,
            embed,
            status,
        })
    }

    /// The run's counters, to show while it runs.
    pub fn status(&self) -> Status {
        self.status.clone()
    }

    /// Runs the pipeline to a live generation.
    #[allow(clippy::too_many_lines)] // one pipeline, read top to bottom
    pub async fn run(self, observer: &dyn Observer) -> Result<IndexReport, PipelineError> {
        let started = Instant::now();
        let Self {
            cfg,
            opts,
            store,
            bus,
            fetcher,
            chunker,
            embed,
            status,
        } = self;
        let counters = status.counters.clone();
        let resume = store.exists_key(IN_PROGRESS).await?;
        store
            .put_json(
                IN_PROGRESS,
                &serde_json::json!({"started_at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()}),
            )
            .await?;
        let space = embed.space().clone();
        let backfill = resume || needs_backfill(&store, &space).await;
        let fetch_opts = RunOptions {
            defer_state: true,
            keep_others: opts.keep_others,
            rescan_secrets: opts.rescan_secrets,
            chunker_version: Some(chunker.part_version()),
            ..RunOptions::default()
        };
        let fetch = async {
            let report = fetcher
                .run(&opts.specs, &fetch_opts, counters.clone())
                .await;
            let _ = bus.close(Topic::Files.name()).await;
            report
        };
        // Some(ok) once the chunker is done.
        let (chunk_end_tx, mut chunk_end) = tokio::sync::watch::channel(None::<bool>);
        let chunk = async {
            let r = chunker.run(trawl_chunk_worker::Until::Closed).await;
            let _ = bus.close(Topic::Chunks.name()).await;
            chunk_end_tx.send_replace(Some(r.is_ok()));
            r
        };
        let first_pass = chunker.first_pass();
        let embed_run = async {
            let r = embed.run(trawl_embed_worker::Until::Closed).await;
            // If the embedder stopped early (a bad key), keep the chunker from blocking on a
            // full topic: the chunks are durable and the next run embeds them (the marker
            // stays).
            if r.is_err() {
                drain(
                    bus.clone(),
                    Topic::Chunks.name(),
                    trawl_embed_worker::worker::GROUP,
                    false,
                )
                .await;
            }
            // The chunker finished before the embedder could: no dead letter comes after this.
            let _ = bus.close(Topic::Embedded.name()).await;
            let _ = bus.close(Topic::DeadLetters.name()).await;
            r
        };
        // The hash embedder (tests) is never slow enough to need an early generation.
        let early = Mutex::new(None::<Early>);
        let fetch_then_early = async {
            let report = fetch.await;
            // Every file chunked but the prose held back for the sentence model (all of
            // them when none is held back); None when the chunker stopped.
            let deferred = match first_pass {
                Some(mut rx) => match rx.wait_for(|p| *p != FirstPass::Running).await {
                    Ok(p) => match &*p {
                        FirstPass::Done(d) => Some(d.clone()),
                        _ => None,
                    },
                    Err(_) => None,
                },
                None => match chunk_end.wait_for(Option::is_some).await {
                    Ok(ok) if *ok == Some(true) => Some(Deferred::default()),
                    _ => None,
                },
            };
            let Some(deferred) = deferred else {
                return report;
            };
            let em = embed.metrics();
            let done = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let waiting = done(&status.chunk.chunks).saturating_sub(
                done(&em.cache_hits) + em.chunk_vectors_written() + done(&em.dead_lettered),
            );
            if (waiting > 0 || deferred.files > 0)
                && opts.embedder != EmbedderKind::Hash
                && report.failed() < report.repos.len()
            {
                match publish_early(
                    &cfg,
                    &store,
                    &fetcher,
                    &report,
                    &deferred,
                    opts.embedder,
                    observer,
                )
                .await
                {
                    Ok(m) => {
                        let e = Early {
                            generation: m.generation,
                            text_only: m.counts.text_only,
                            after: started.elapsed().as_secs_f64(),
                            deferred_files: deferred.files,
                        };
                        observer.early_generation(&m, &e);
                        *lock(&early) = Some(e);
                    }
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "the early generation was not built; the full one follows");
                    }
                }
            }
            report
        };
        let (report, chunked, embedded_report, _, dead) = tokio::join!(
            fetch_then_early,
            chunk,
            embed_run,
            drain(bus.clone(), Topic::Embedded.name(), GROUP, false),
            drain(bus.clone(), Topic::DeadLetters.name(), GROUP, true),
        );
        // The in-process bus forgets on exit: dead letters are kept on the store's spool
        // bus, where `trawl dlq` finds them.
        let spool = SpoolBus::new(store.clone());
        for d in &dead {
            let key = DeadLetter::from_json(d).map(|l| l.key).unwrap_or_default();
            spool
                .publish(DEAD_LETTERS_KEPT, &key, d.clone())
                .await
                .map_err(PipelineError::DeadLetters)?;
        }
        let chunked = chunked.map_err(PipelineError::Chunk)?;
        // Every event of the run is chunked and durable: record the repositories' new state.
        fetcher.commit_states(&report).await?;
        let mut embedded_report = embedded_report.map_err(PipelineError::Embed)?;
        if backfill {
            counters.enter(Phase::Resume);
            let r = embed
                .backfill(&|_, _| {})
                .await
                .map_err(PipelineError::Resume)?;
            embedded_report.embed.vectors_written += r.embed.vectors_written;
            embedded_report.embed.prose_views += r.embed.prose_views;
            embedded_report.embed.prose_vectors_written += r.embed.prose_vectors_written;
            embedded_report.embed.chunks += r.embed.chunks;
        }
        if report.failed() == report.repos.len() {
            store.delete(IN_PROGRESS).await?;
            return Err(PipelineError::NothingFetched(Box::new(report)));
        }
        counters.enter(Phase::Compact);
        let m = compact(
            &cfg,
            &store,
            opts.embedder,
            opts.full,
            counters.as_ref(),
            observer,
        )
        .await?;
        store.delete(IN_PROGRESS).await?;
        let early = *lock(&early);
        Ok(IndexReport {
            fetch: report,
            chunk: chunked,
            embed: embedded_report,
            space,
            manifest: m,
            early,
            dead_letters: dead,
            resumed: resume,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Whether the live generation lacks vectors this run's embedder would give it: its vectors
/// are in another space, or none of its chunks has one (a generation left by a run in
/// another space before this check existed). A few chunks without vectors (dead letters) are
/// not a reason: reading every chunk part of the store each night to retry them would cost
/// an unchanged night the whole corpus. An unreadable generation is left to the compactor to
/// report.
async fn needs_backfill(store: &Store, space: &trawl_core::space::Space) -> bool {
    match trawl_compactor::live_manifest(store).await {
        Ok(Some(m)) => {
            let other = m.space.as_ref().is_some_and(|s| s != space)
                || (m.counts.with_vector == 0 && m.counts.text_only > 0);
            if other {
                tracing::info!(
                    live = ?m.space.as_ref().map(|s| &s.model),
                    run = %space.model,
                    waiting = m.counts.text_only,
                    "the live generation lacks vectors in this space: every chunk without one is embedded"
                );
            }
            other
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(error = %e, "the live generation's manifest is not readable");
            false
        }
    }
}

/// Records the repositories' states and builds a generation from what is chunked so far.
async fn publish_early(
    cfg: &Config,
    store: &Store,
    fetcher: &Fetcher,
    report: &RunReport,
    deferred: &Deferred,
    embedder: EmbedderKind,
    observer: &dyn Observer,
) -> Result<Manifest, PipelineError> {
    // Every event but the held prose is chunked and durable: the states may be recorded
    // now, those of repositories with held prose as unfinished.
    fetcher
        .commit_states_unfinished(report, &deferred.repos)
        .await?;
    compact(
        cfg,
        store,
        embedder,
        false,
        &trawl_compactor::Quiet,
        observer,
    )
    .await
}

/// Builds the next generation with `embedder`'s vectors (text only when its space cannot be
/// known) and makes it live, or keeps the live one when nothing changed.
async fn compact(
    cfg: &Config,
    store: &Store,
    embedder: EmbedderKind,
    full: bool,
    progress: &dyn trawl_compactor::Progress,
    observer: &dyn Observer,
) -> Result<Manifest, PipelineError> {
    let space = match trawl_embed::space_of(&cfg.embed, Some(embedder)) {
        Ok(s) => Some(s),
        Err(e) => {
            observer.no_vectors(&e.to_string());
            None
        }
    };
    let Compacted {
        manifest,
        unchanged,
    } = trawl_compactor::run::compact(store, &cfg.compact, space, None, full, progress).await?;
    if unchanged {
        observer.unchanged(manifest.generation);
    }
    Ok(manifest)
}

/// Acknowledges everything on `topic` until it closes; returns the payloads when `keep`.
async fn drain(bus: Arc<dyn Bus>, topic: &str, group: &str, keep: bool) -> Vec<Bytes> {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `e` and its sources, joined by `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use trawl_query::{Access, SearchRequest, Searcher};

    use super::*;

    /// A git repository at `dir` with one commit of `files`.
    fn repo(dir: &Path, files: &[(&str, &str)]) {
        let repo = git2::Repository::init(dir).unwrap();
        let mut index = repo.index().unwrap();
        for (path, text) in files {
            std::fs::write(dir.join(path), text).unwrap();
            index.add_path(Path::new(path)).unwrap();
        }
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let me = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(Some("HEAD"), &me, &me, "one", &tree, &[])
            .unwrap();
    }

    /// One repository with `pool.py` under `work`, and the configuration and options that
    /// index it with the hash embedder.
    fn pool_repo(work: &Path) -> (Config, IndexOptions) {
        let src = work.join("src");
        std::fs::create_dir(&src).unwrap();
        repo(
            &src,
            &[(
                "pool.py",
                "def borrow_connection(pool):\n    \"\"\"Borrows a connection from the pool, waiting while every connection is busy.\"\"\"\n    return pool.take()\n",
            )],
        );
        let mut cfg = Config::default();
        cfg.store.url = work.join("store").to_string_lossy().into_owned();
        cfg.fetch.cache_dir = work.join("mirrors");
        cfg.query.cache_dir = work.join("cache");
        cfg.embed.embedder = EmbedderKind::Hash;
        let spec = trawl_fetcher::repos::resolve(src.to_str().unwrap(), work).unwrap();
        let opts = IndexOptions {
            specs: vec![spec],
            embedder: EmbedderKind::Hash,
            full: false,
            keep_others: false,
            rescan_secrets: false,
        };
        (cfg, opts)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upgraded_chunker_rechunks_unchanged_files_and_keeps_their_vectors() {
        use trawl_core::records::{ChunkRecord, RepoState};
        use trawl_core::store::keys;
        let work = tempfile::tempdir().unwrap();
        let (cfg, opts) = pool_repo(work.path());
        let first = Box::pin(Pipeline::new(&cfg, opts.clone()).unwrap().run(&Quiet))
            .await
            .unwrap();
        let chunks = first.manifest.counts.chunks;
        assert!(chunks > 0, "{first:?}");
        let store = Store::from_url(&cfg.store.url).unwrap();
        let repo_id = opts.specs[0].id.clone();

        // What an older chunker left: the repository's state says version 2, and its part of
        // pool.py holds chunks that rules cut otherwise (other ids).
        let mut state: RepoState = store
            .get_json(&keys::repo_state(&repo_id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            state.chunker_version.as_deref(),
            Some(
                trawl_chunk_worker::part_version(trawl_chunk_worker::strategy(&cfg.chunk).unwrap())
                    .as_str()
            )
        );
        state.chunker_version = Some("2".into());
        store
            .put_json(&keys::repo_state(&repo_id), &state)
            .await
            .unwrap();
        let parts = store
            .list(&format!("chunks/repo={}/", repo_id.key()))
            .await
            .unwrap();
        assert_eq!(parts.len(), 1, "{parts:?}");
        let mut old: Vec<ChunkRecord> =
            trawl_core::records::from_parquet(store.get(&parts[0]).await.unwrap().unwrap())
                .unwrap();
        for (i, c) in old.iter_mut().enumerate() {
            c.chunker_version = "2".into();
            c.chunk_id =
                trawl_core::hash::chunk_id(&repo_id, &c.path, "module_code", "old", i as u32);
        }
        let old_ids: Vec<String> = old.iter().map(|c| c.chunk_id.to_string()).collect();
        let old_key = keys::chunk_part(&repo_id, "pool.py", &old[0].blob, "2");
        store
            .put(&old_key, trawl_core::records::to_parquet(&old).unwrap())
            .await
            .unwrap();

        // The head did not move, yet the file is chunked again, and only the new chunks
        // are live; their text did not change, so no vector is computed again.
        let again = Box::pin(Pipeline::new(&cfg, opts.clone()).unwrap().run(&Quiet))
            .await
            .unwrap();
        let fetched = &again.fetch.repos[0];
        assert!(fetched.rechunked && fetched.upserts == 1, "{fetched:?}");
        assert_eq!(again.chunk.files, 1);
        assert_eq!(again.embed.embed.vectors_written, 0, "{:?}", again.embed);
        assert_eq!(again.manifest.counts.chunks, chunks, "{:?}", again.manifest);
        let searcher = Searcher::open(store.clone(), &cfg, Some(EmbedderKind::Hash))
            .await
            .unwrap();
        let res = searcher
            .search(&SearchRequest::new("borrow connection pool"), Access::all())
            .await
            .unwrap();
        assert!(!res.results.is_empty());
        assert!(
            res.results.iter().all(|h| !old_ids.contains(&h.chunk_id)),
            "an old chunker's chunk is live: {:?}",
            res.results
        );
        let state: RepoState = store
            .get_json(&keys::repo_state(&repo_id))
            .await
            .unwrap()
            .unwrap();
        assert_ne!(state.chunker_version.as_deref(), Some("2"));

        // And once is enough: the next run finds nothing to do.
        let third = Box::pin(Pipeline::new(&cfg, opts).unwrap().run(&Quiet))
            .await
            .unwrap();
        assert_eq!(third.fetch.repos[0].status, "unchanged");
        assert_eq!(third.manifest.generation, again.manifest.generation);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_vector_space_embeds_the_unchanged_repositories_again() {
        let work = tempfile::tempdir().unwrap();
        let (mut cfg, opts) = pool_repo(work.path());
        let first = Box::pin(Pipeline::new(&cfg, opts.clone()).unwrap().run(&Quiet))
            .await
            .unwrap();
        let chunks = first.manifest.counts.chunks;
        assert!(chunks > 0 && first.manifest.counts.with_vector == chunks);

        // Another space (here the hash embedder's width; in use, another model or another
        // reading of the local one) while nothing in the repository changed.
        cfg.embed.hash_dims = 128;
        let again = Box::pin(Pipeline::new(&cfg, opts.clone()).unwrap().run(&Quiet))
            .await
            .unwrap();
        assert_eq!(again.fetch.repos[0].status, "unchanged");
        assert_ne!(again.manifest.space, first.manifest.space);
        assert_eq!(again.manifest.space.as_ref().unwrap().dims, 128);
        assert_eq!(
            again.manifest.counts.with_vector, chunks,
            "the unchanged chunks went live without vectors: {:?}",
            again.manifest.counts
        );
        let store = Store::from_url(&cfg.store.url).unwrap();
        let searcher = Searcher::open(store, &cfg, Some(EmbedderKind::Hash))
            .await
            .unwrap();
        let mut req = SearchRequest::new("borrow a connection from the pool");
        req.mode = trawl_query::Mode::Vector;
        let res = searcher.search(&req, Access::all()).await.unwrap();
        assert!(!res.results.is_empty(), "no vector answers: {res:?}");

        // Once every chunk has its vector, the next run embeds nothing.
        let third = Box::pin(Pipeline::new(&cfg, opts).unwrap().run(&Quiet))
            .await
            .unwrap();
        assert_eq!(third.embed.embed.vectors_written, 0, "{:?}", third.embed);
        assert_eq!(third.manifest.counts.with_vector, chunks);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_stopped_with_prose_held_back_leaves_its_repository_to_the_next_run() {
        use trawl_core::records::RepoState;
        use trawl_core::store::keys;
        let work = tempfile::tempdir().unwrap();
        let (cfg, opts) = pool_repo(work.path());
        let first = Box::pin(Pipeline::new(&cfg, opts.clone()).unwrap().run(&Quiet))
            .await
            .unwrap();
        let store = Store::from_url(&cfg.store.url).unwrap();
        let repo_id = opts.specs[0].id.clone();
        // What the early generation records for a repository whose prose is still held back,
        // when the process then stops: its head, unfinished.
        let fetcher = Fetcher::new(
            cfg.fetch.clone(),
            store.clone(),
            Arc::new(InProcBus::new(4)),
        );
        let mut report = first.fetch.clone();
        let state: RepoState = store
            .get_json(&keys::repo_state(&repo_id))
            .await
            .unwrap()
            .unwrap();
        report.repos[0].pending_state = Some(state);
        let unfinished = [repo_id.clone()].into_iter().collect();
        fetcher
            .commit_states_unfinished(&report, &unfinished)
            .await
            .unwrap();
        let state: RepoState = store
            .get_json(&keys::repo_state(&repo_id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state.chunker_version, None);
        // The next run sends the repository whole again though its head did not move, and
        // records it finished.
        let again = Box::pin(Pipeline::new(&cfg, opts).unwrap().run(&Quiet))
            .await
            .unwrap();
        let fetched = &again.fetch.repos[0];
        assert!(fetched.rechunked && fetched.upserts == 1, "{fetched:?}");
        assert_eq!(again.embed.embed.vectors_written, 0, "{:?}", again.embed);
        let state: RepoState = store
            .get_json(&keys::repo_state(&repo_id))
            .await
            .unwrap()
            .unwrap();
        assert!(state.chunker_version.is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_library_user_indexes_a_repository_and_searches_the_generation() {
        let work = tempfile::tempdir().unwrap();
        let (cfg, opts) = pool_repo(work.path());
        let pipeline = Pipeline::new(&cfg, opts.clone()).unwrap();
        let status = pipeline.status();
        let r = Box::pin(pipeline.run(&Quiet)).await.unwrap();
        assert!(!r.incomplete() && !r.resumed, "{r:?}");
        assert!(r.chunk.chunks > 0 && r.manifest.counts.with_vector == r.manifest.counts.chunks);
        let s = status.snapshot();
        assert_eq!((s.phase, s.repos_done, s.repos), (Phase::Compact, 1, 1));
        let store = Store::from_url(&cfg.store.url).unwrap();
        assert!(
            !store.exists_key(IN_PROGRESS).await.unwrap(),
            "a finished run leaves no marker"
        );

        let searcher = Searcher::open(store.clone(), &cfg, Some(EmbedderKind::Hash))
            .await
            .unwrap();
        let res = searcher
            .search(&SearchRequest::new("borrow connection"), Access::all())
            .await
            .unwrap();
        assert_eq!(res.generation, r.manifest.generation);
        assert!(
            res.results
                .first()
                .is_some_and(|h| h.text.contains("Borrows a connection")),
            "{:?}",
            res.results
        );

        // Run again: nothing changed, so nothing is embedded and the generation stays.
        #[derive(Default)]
        struct Unchanged(Mutex<Vec<Generation>>);
        impl Observer for Unchanged {
            fn unchanged(&self, generation: Generation) {
                lock(&self.0).push(generation);
            }
        }
        let seen = Unchanged::default();
        let again = Box::pin(Pipeline::new(&cfg, opts).unwrap().run(&seen))
            .await
            .unwrap();
        assert_eq!(again.manifest.generation, r.manifest.generation);
        assert_eq!(again.embed.embed.vectors_written, 0);
        assert_eq!(*lock(&seen.0), [r.manifest.generation]);
    }
}

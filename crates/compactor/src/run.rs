//! A compaction as a process runs it: build the next generation from the live set unless the
//! live one was built from exactly the store's current inputs ([`compact`]), and, for
//! `compactor --wait`, wait until the last fetch run is chunked and embedded first ([`wait`]);
//! `compact --gc`: every collection and retention step in turn ([`collect`]).
//! What happens is told to a [`WaitObserver`] or returned as a report; the caller decides how
//! to show it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use trawl_core::config::CompactConfig;
use trawl_core::ids::{Generation, RepoId, RunId};
use trawl_core::records::{Stage, rfc3339};
use trawl_core::space::Space;
use trawl_core::store::Store;

use crate::build::LiveDocs;
use crate::gc::GcReport;
use crate::live::{Completion, FetchRun, LiveSet};
use crate::retention::{RetentionOptions, RetentionReport};
use crate::{BuildOptions, CompactError, Manifest, Progress};

/// Why a compaction or a wait failed: the step, and the compactor's error beneath.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("listing the live set's inputs")]
    Inputs(#[source] CompactError),
    #[error("computing the live set")]
    LiveSet(#[source] CompactError),
    #[error("building the index generation")]
    Build(#[source] CompactError),
    #[error("checking how far the run is")]
    Completion(#[source] CompactError),
    #[error("applying retention")]
    Retention(#[source] CompactError),
    /// The live generation's `chunks` table (its key) is not in the store.
    #[error("{0} is missing: run `trawl compact --full`")]
    ChunksTableMissing(String),
    /// Reading the live generation or the run reports, or writing the wait report.
    #[error(transparent)]
    Store(#[from] CompactError),
}

impl From<trawl_core::Error> for RunError {
    fn from(e: trawl_core::Error) -> Self {
        RunError::Store(e.into())
    }
}

impl From<trawl_index::IndexError> for RunError {
    fn from(e: trawl_index::IndexError) -> Self {
        RunError::Store(e.into())
    }
}

impl RunError {
    /// Whether another compactor holds the lease (a scheduled compactor tries again later).
    pub fn is_busy(&self) -> bool {
        let inner = match self {
            RunError::Inputs(e)
            | RunError::LiveSet(e)
            | RunError::Build(e)
            | RunError::Completion(e)
            | RunError::Retention(e)
            | RunError::Store(e) => e,
            RunError::ChunksTableMissing(_) => return false,
        };
        matches!(inner, CompactError::Busy(_))
    }
}

/// What [`compact`] did.
#[derive(Debug)]
pub struct Compacted {
    /// The live generation now.
    pub manifest: Manifest,
    /// Nothing changed since it was built: it stays live, nothing was built.
    pub unchanged: bool,
}

/// The fingerprint of the live set's inputs now, and the live generation when it was built
/// from exactly those.
pub async fn unchanged_since(
    store: &Store,
    space: Option<&Space>,
) -> Result<(String, Option<Manifest>), RunError> {
    let now = crate::live::inputs_fingerprint(store, space)
        .await
        .map_err(RunError::Inputs)?;
    let live = trawl_index::generation::live(store)
        .await?
        .filter(|m| m.inputs.as_deref() == Some(now.as_str()));
    Ok((now, live))
}

/// Builds the next generation from the live set (`set`, or computed now) and makes it live —
/// unless, without `full` and without a set, the live generation was built from the store's
/// current inputs: then it stays live.
pub async fn compact(
    store: &Store,
    cfg: &CompactConfig,
    space: Option<Space>,
    set: Option<LiveSet>,
    full: bool,
    progress: &dyn Progress,
) -> Result<Compacted, RunError> {
    // Fingerprinted before the live set is read: inputs that change meanwhile make the next
    // compaction differ, never the other way round.
    let (inputs, unchanged) = unchanged_since(store, space.as_ref()).await?;
    if !full
        && set.is_none()
        && let Some(manifest) = unchanged
    {
        return Ok(Compacted {
            manifest,
            unchanged: true,
        });
    }
    // Taken before the live set is read (by whoever reads it); a set given without them
    // records none, so the next compaction reads the whole live set again.
    let fingerprints = match &set {
        Some(s) => s.fingerprints.clone().unwrap_or_default(),
        None => crate::live::repo_fingerprints(store, space.as_ref())
            .await
            .map_err(RunError::Inputs)?,
    };
    let night = Night {
        store,
        cfg,
        space: space.as_ref(),
        inputs: &inputs,
        fingerprints: &fingerprints,
        progress,
    };
    let set = match set {
        // Read incrementally (by `--wait`'s completion check): built on the generation it was
        // read against, or else read again whole.
        Some(s) if s.only.is_some() => {
            let live = match s.base {
                Some(g) if !full => Some(trawl_index::generation::manifest(store, g).await?),
                _ => None,
            };
            if let Some(live) = live
                && let Some(manifest) = build_incremental(&night, s, &live).await?
            {
                return Ok(Compacted {
                    manifest,
                    unchanged: false,
                });
            }
            None
        }
        other => other,
    };
    if !full
        && set.is_none()
        && let Some(manifest) = incremental(&night).await?
    {
        return Ok(Compacted {
            manifest,
            unchanged: false,
        });
    }
    // The whole live set: the one given, or read now through local files (the build then
    // holds a few shards at a time, not the corpus).
    let (docs, source_runs, table) = match set {
        Some(LiveSet {
            spilled: Some(spilled),
            runs,
            ..
        }) => (LiveDocs::Spilled(*spilled), runs, None),
        Some(s) => (LiveDocs::Memory(s.docs), s.runs, s.table),
        None => {
            let spilled = crate::spill::spill_live_set(store, space.as_ref(), spill_memory(cfg))
                .await
                .map_err(RunError::LiveSet)?;
            let runs = spilled.runs.clone();
            (LiveDocs::Spilled(spilled), runs, None)
        }
    };
    let mut repo_inputs = BTreeMap::new();
    record_inputs(&mut repo_inputs, None, &fingerprints);
    let opts = BuildOptions {
        shards: cfg.shards,
        shard_chunks: cfg.shard_chunks,
        full,
        max_segments: cfg.max_segments,
        merge_tombstone_ratio: cfg.merge_tombstone_ratio,
        source_runs,
        inputs: Some(inputs),
        table,
        lease_ttl: Duration::from_secs(cfg.lease_ttl_secs),
        repo_inputs,
        fingerprinted: !fingerprints.is_empty(),
        ..BuildOptions::default()
    };
    let manifest = crate::build(store, docs, space, &opts, progress)
        .await
        .map_err(RunError::Build)?;
    Ok(Compacted {
        manifest,
        unchanged: false,
    })
}

/// `compact.spill_memory_mb` in bytes.
pub fn spill_memory(cfg: &CompactConfig) -> usize {
    usize::try_from(cfg.spill_memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
}

/// Records in `into` the fingerprint of each repository (of `only`, when given); the build
/// empties those of repositories whose docs wait for vectors ([`BuildOptions::repo_inputs`]).
fn record_inputs(
    into: &mut BTreeMap<RepoId, String>,
    only: Option<&BTreeSet<RepoId>>,
    fingerprints: &BTreeMap<RepoId, String>,
) {
    for (repo, f) in fingerprints {
        if only.is_none_or(|o| o.contains(repo)) {
            into.insert(repo.clone(), f.clone());
        }
    }
}

/// What a compaction builds from: the store, the settings, the vector space and the inputs'
/// fingerprints taken before anything was read.
struct Night<'a> {
    store: &'a Store,
    cfg: &'a CompactConfig,
    space: Option<&'a Space>,
    /// The fingerprint of every input ([`unchanged_since`]).
    inputs: &'a str,
    /// Each repository's.
    fingerprints: &'a BTreeMap<RepoId, String>,
    progress: &'a dyn Progress,
}

/// Builds the next generation from the live generation and the live docs of only the
/// repositories whose inputs changed since it was built (or that left the list), when it
/// can: `None` when the whole live set must be read (no per-repository fingerprints yet,
/// another space or format, too many repositories changed, another generation live since).
async fn incremental(night: &Night<'_>) -> Result<Option<Manifest>, RunError> {
    let Some(live) = trawl_index::generation::live(night.store).await? else {
        return Ok(None);
    };
    let Some(changed) = crate::live::changed_since(&live, night.space, night.fingerprints) else {
        return Ok(None);
    };
    tracing::debug!(repos = changed.len(), "incremental build");
    let set = crate::live::live_set_of(night.store, night.space, Some(&changed))
        .await
        .map_err(RunError::LiveSet)?;
    build_incremental(night, set, &live).await
}

/// Builds on `live` from `set`, the live docs of only some repositories (`set.only`).
async fn build_incremental(
    night: &Night<'_>,
    set: LiveSet,
    live: &Manifest,
) -> Result<Option<Manifest>, RunError> {
    let Some(changed) = set.only.clone() else {
        return Ok(None);
    };
    let (store, cfg) = (night.store, night.cfg);
    let mut repo_inputs = live.repo_inputs.clone();
    repo_inputs.retain(|r, _| !changed.contains(r));
    record_inputs(&mut repo_inputs, Some(&changed), night.fingerprints);
    let mut source_runs: Vec<RunId> = crate::live::listed_states(store)
        .await
        .map_err(RunError::LiveSet)?
        .into_iter()
        .map(|s| s.last_run)
        .collect();
    source_runs.sort();
    source_runs.dedup();
    let opts = BuildOptions {
        shards: cfg.shards,
        shard_chunks: cfg.shard_chunks,
        max_segments: cfg.max_segments,
        merge_tombstone_ratio: cfg.merge_tombstone_ratio,
        source_runs,
        inputs: Some(night.inputs.to_owned()),
        table: set.table.clone(),
        lease_ttl: Duration::from_secs(cfg.lease_ttl_secs),
        only: Some(changed),
        repo_inputs,
        fingerprinted: !night.fingerprints.is_empty(),
        base: Some(live.generation),
        ..BuildOptions::default()
    };
    match crate::build(store, set.docs, night.space.cloned(), &opts, night.progress).await {
        Ok(m) => Ok(Some(m)),
        Err(CompactError::NeedsWholeSet(why)) => {
            tracing::debug!(
                why,
                "incremental build not possible: building from the whole live set"
            );
            Ok(None)
        }
        Err(e) => Err(RunError::Build(e)),
    }
}

/// What `--wait` found when it stopped waiting (`runs/<run>.json`, stage `compact`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct WaitReport {
    pub stage: Stage,
    pub run: RunId,
    pub waited_seconds: f64,
    pub complete: bool,
    pub generation: Generation,
    #[serde(skip_deserializing)]
    pub completion: Completion,
}

/// Writes the report of a wait that ended in `generation`; returns its key and the report.
pub async fn record_wait(
    store: &Store,
    completion: Completion,
    waited_seconds: f64,
    generation: Generation,
) -> Result<(String, WaitReport), RunError> {
    let report = WaitReport {
        stage: Stage::Compact,
        run: RunId::new(),
        waited_seconds,
        complete: completion.is_complete(),
        generation,
        completion,
    };
    let key = format!("runs/{}.json", report.run);
    store.put_json(&key, &report).await?;
    Ok((key, report))
}

/// How a wait is bounded.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    /// The chunk parts' version (the chunk worker's `part_version`): which parts count.
    pub chunker_version: String,
    /// When to stop waiting and build with what is there.
    pub deadline: Duration,
    /// How often to look at the store.
    pub poll: Duration,
    /// A full rebuild is asked for: an unchanged run still builds.
    pub full: bool,
    /// The memory the completion check reads the whole live set in (bytes;
    /// `compact.spill_memory_mb`).
    pub spill_memory: usize,
}

/// How [`wait`] ended.
#[derive(Debug)]
pub enum Waited {
    /// The run is complete, or the deadline came: build from this live set (`None`: files
    /// still wait for chunking, so none was read — the build reads what there is).
    Ready(Completion, Option<Box<LiveSet>>),
    /// No fetch run finished before the deadline (`since`: the live generation it would have
    /// had to be newer than).
    NoRun { since: Option<Generation> },
    /// The run changed nothing the live generation (`generation`) was built from.
    Unchanged { run: RunId, generation: Generation },
}

/// What a wait reports as it goes; every method has a default that ignores it.
pub trait WaitObserver: Send + Sync {
    /// The live generation was built at a deadline with stragglers: its run is waited for.
    fn built_with_stragglers(&self, generation: Generation) {
        let _ = generation;
    }
    /// No fetch run newer than `since` (a generation; `None`: none live) has finished yet.
    fn waiting_for_run(&self, since: Option<Generation>) {
        let _ = since;
    }
    /// A fetch run finished: now waiting for it to be chunked and embedded.
    fn run_finished(&self, run: &RunId, at: SystemTime) {
        let _ = (run, at);
    }
    /// How far the run is, at each look.
    fn progress(&self, completion: &Completion) {
        let _ = completion;
    }
    /// A look that read only the embedding parts written since the last one (the whole
    /// live set was read before, and only vectors were missing); [`Self::progress`] follows.
    fn vectors_rechecked(&self) {}
    /// The wait is over (every outcome, before [`wait`] returns it).
    fn done(&self) {}
}

/// Polls the store until a fetch run newer than the live generation has finished and is
/// chunked and embedded, or the deadline.
pub async fn wait(
    store: &Store,
    space: Option<&Space>,
    opts: &WaitOptions,
    observer: &dyn WaitObserver,
) -> Result<Waited, RunError> {
    let deadline = tokio::time::Instant::now() + opts.deadline;
    let next_look = || deadline.min(tokio::time::Instant::now() + opts.poll);
    // First the run: a fetch run that finished since the live generation was built — or
    // any, when the live generation was built at a deadline with stragglers (its run is not
    // done yet).
    let mut built = trawl_index::generation::live(store)
        .await?
        .map(|m| (m.generation, rfc3339::parse(&m.created_at)));
    if let (Some((generation, _)), Some(report)) = (
        &built,
        crate::live::latest_report::<WaitReport>(store, Stage::Compact).await?,
    ) && report.generation == *generation
        && !report.complete
    {
        observer.built_with_stragglers(*generation);
        built = None;
    }
    let run: FetchRun = loop {
        let since = built.as_ref().and_then(|(_, at)| *at);
        if let Some(run) = crate::live::fetch_run_since(store, since).await? {
            break run;
        }
        if tokio::time::Instant::now() >= deadline {
            observer.done();
            return Ok(Waited::NoRun {
                since: built.map(|(g, _)| g),
            });
        }
        observer.waiting_for_run(built.as_ref().map(|(g, _)| *g));
        tokio::time::sleep_until(next_look()).await;
    };
    observer.run_finished(&run.run, run.finished_at);
    // An unchanged night: the inputs are those of a live generation that waits for nothing.
    if !opts.full
        && let (_, Some(m)) = unchanged_since(store, space).await?
        && m.counts.text_only == 0
    {
        observer.done();
        return Ok(Waited::Unchanged {
            run: run.run,
            generation: m.generation,
        });
    }
    // The last whole-set check still waiting for vectors: looked at again cheaply.
    let mut last: Option<crate::live::Completion> = None;
    loop {
        if let Some(c) = last.as_mut() {
            if c.recheck(store, space)
                .await
                .map_err(RunError::Completion)?
                && tokio::time::Instant::now() < deadline
            {
                tracing::info!(
                    chunks = c.chunks,
                    chunks_embedded = c.chunks_embedded,
                    "run progress (the new embedding parts only)"
                );
                observer.vectors_rechecked();
                observer.progress(c);
                tokio::time::sleep_until(next_look()).await;
                continue;
            }
            last = None;
        }
        let (c, set) =
            crate::live::completion(store, space, &opts.chunker_version, opts.spill_memory)
                .await
                .map_err(RunError::Completion)?;
        tracing::info!(
            files = c.files,
            files_chunked = c.files_chunked,
            chunks = c.chunks,
            chunks_embedded = c.chunks_embedded,
            "run progress"
        );
        observer.progress(&c);
        if c.is_complete() || tokio::time::Instant::now() >= deadline {
            observer.done();
            return Ok(Waited::Ready(c, set.map(Box::new)));
        }
        if c.waiting.is_some() {
            last = Some(c);
        }
        tokio::time::sleep_until(next_look()).await;
    }
}

/// What [`collect`] deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Collected {
    /// Index generations.
    pub gc: GcReport,
    /// Run reports, large bus payloads, superseded manifests, unlisted repositories.
    pub retention: RetentionReport,
    /// Chunk and embedding parts; `None` when they were kept because the live generation is
    /// not built from the store's current inputs (after a rollback, or with runs since: the
    /// next build decides).
    pub parts: Option<PartsCollected>,
}

/// The parts [`collect`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartsCollected {
    /// Chunk parts no live file version needs.
    pub chunk_parts: u64,
    /// Embedding parts of the live vector space holding no live chunk's vector.
    pub embedding_parts: u64,
}

/// `days` as a duration; 0 means "keep forever".
fn days_or_none(days: u64) -> Option<Duration> {
    (days > 0).then(|| Duration::from_secs(days * 86_400))
}

/// `compact --gc`: collects old generations ([`crate::gc()`], keeping `cfg.keep`), applies
/// retention ([`crate::retention::retain`]) and, when the live generation was built from the
/// store's current inputs in `space`, deletes the chunk and embedding parts it does not need
/// ([`crate::parts`]). Nothing younger than `cfg.gc_grace_secs` is deleted.
pub async fn collect(
    store: &Store,
    cfg: &CompactConfig,
    space: Option<&Space>,
) -> Result<Collected, RunError> {
    let grace = Duration::from_secs(cfg.gc_grace_secs);
    let gc = crate::gc(store, cfg.keep, grace).await?;
    // Chunk parts: only a live generation built from the store's current inputs may say
    // which are needed. Asked before retention deletes superseded manifests (which changes
    // no live set).
    let (_, current_live) = unchanged_since(store, space).await?;
    let retention = crate::retention::retain(
        store,
        &RetentionOptions {
            run_reports: days_or_none(cfg.retain_runs_days),
            large_payloads: days_or_none(cfg.retain_bus_large_days),
            grace,
        },
    )
    .await
    .map_err(RunError::Retention)?;
    let parts = match current_live {
        Some(Manifest {
            chunks_table: Some(key),
            space: live_space,
            ..
        }) => {
            let table = store
                .get(&key)
                .await?
                .ok_or(RunError::ChunksTableMissing(key))?;
            let needed = crate::parts::needed_parts(table)?;
            let chunk_parts =
                crate::parts::collect_chunk_parts(store, &needed.parts, grace).await?;
            let mut embedding_parts = 0;
            if let Some(s) = &live_space {
                let dir = trawl_core::store::keys::embedding_space(&s.key());
                embedding_parts =
                    crate::parts::collect_embedding_parts(store, &dir, &needed.hashes, grace)
                        .await?;
            }
            Some(PartsCollected {
                chunk_parts,
                embedding_parts,
            })
        }
        _ => None,
    };
    Ok(Collected {
        gc,
        retention,
        parts,
    })
}

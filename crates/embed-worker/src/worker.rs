//! The embed stage: chunk-part events in, embedding parts and embedded events out.
//!
//! - Each event's part is read from the store; every chunk whose content hash already has a
//!   vector in this space (the [`Cache`]), or appears earlier in the same flush, is a hit.
//!   Only misses are sent.
//! - Misses from many events gather into one flush until a request is full (the embedder's
//!   [`Limits`]) or `linger` passes; up to `concurrency` flushes run at once. A hash already
//!   being embedded by a running flush is not sent again: the later event waits for it.
//! - A flush writes one embedding part (`embeddings/space=<space>/<hash>.parquet`, named by its
//!   content hashes, so a replay rewrites the same object), records the hashes in the cache,
//!   dead-letters inputs the provider refused one by one, publishes one [`EmbeddedEvent`] per
//!   chunk part, and only then acknowledges the events.
//! - Exhausted retries give the events back (redelivered later); a rejected key stops the
//!   worker with the provider's message.
//! - [`EmbedWorker::backfill`] runs the same machinery over every chunk part in the store,
//!   without the bus: the way to fill a new vector space after a model change (the old space
//!   keeps serving until the compactor builds from the new one). With `dry_run` it sends
//!   nothing and reports the tokens and cost it would take.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Serialize;
use trawl_core::bus::{Bus, Delivery};
use trawl_core::ids::{ContentHash, RunId};
use trawl_core::records::{
    self, ChunkPartEvent, ChunkRecord, DEAD_LETTER_VERSION, DeadLetter, EMBEDDED_VERSION,
    EMBEDDING_VERSION, EmbeddedEvent, EmbeddingRecord,
};
use trawl_core::shutdown::Shutdown;
use trawl_core::store::{Store, keys};

mod batch;

use trawl_embed::embedder::{
    EmbedError, Embedder, InputType, Outcome, Vector, batches, document_batches, embed_isolating,
    embed_isolating_documents, fit,
};

/// The topic chunk-part events arrive on.
pub const CHUNKS_TOPIC: &str = trawl_core::bus::Topic::Chunks.name();
/// The topic embedded events leave on.
pub const EMBEDDED_TOPIC: &str = trawl_core::bus::Topic::Embedded.name();
/// Where inputs the provider refused go.
pub const DEAD_LETTERS_TOPIC: &str = trawl_core::bus::Topic::DeadLetters.name();
/// The consumer group of embed workers.
pub const GROUP: &str = "embed-worker";
/// Version of the run report.
pub const REPORT_VERSION: u32 = 1;

/// When the worker stops.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// When the topic is closed and drained (the in-process pipeline).
    Closed,
    /// When no message arrived for this long (`trawl embed --once`).
    Idle(Duration),
}

/// How the worker runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a partly filled flush waits for more chunks.
    pub linger: Duration,
    /// Flushes in flight.
    pub concurrency: usize,
    /// US dollars per million tokens, for the report.
    pub price_per_mtok: f64,
    /// US dollars per million tokens through the Batch API, for the report.
    pub batch_price_per_mtok: f64,
    /// Count, do not call (backfill only).
    pub dry_run: bool,
    /// The embedder's name in the report (`voyage`, `local`, `hash`).
    pub embedder: String,
    /// Also embed each chunk's prose view (`embed.prose_view`; never for a contextual model).
    pub prose_views: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            linger: Duration::from_millis(200),
            concurrency: 4,
            price_per_mtok: 0.0,
            batch_price_per_mtok: 0.0,
            dry_run: false,
            embedder: String::new(),
            prose_views: false,
        }
    }
}

/// Why the worker stopped early.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The provider refused the key, or every input of a request (a wrong model, dims or
    /// dtype): fix it and run again. Nothing was acknowledged.
    #[error(transparent)]
    Auth(EmbedError),
    /// A Batch API call failed after its retries, or batches ended without results (failed,
    /// expired, cancelled): the message names each batch and what to do.
    #[error("{0}")]
    Batch(String),
    #[error(transparent)]
    Core(#[from] trawl_core::Error),
}

/// Which content hashes already have a vector in one space. Loaded from the space's parts
/// (their `content_hash` column only) and refreshed when new parts appear.
pub struct Cache {
    store: Store,
    prefix: String,
    known: Mutex<HashSet<ContentHash>>,
    parts: Mutex<HashSet<String>>,
}

impl Cache {
    pub fn new(store: Store, space_key: &str) -> Self {
        Self {
            store,
            prefix: keys::embedding_space(space_key),
            known: Mutex::default(),
            parts: Mutex::default(),
        }
    }

    /// Reads the parts not read yet. Returns how many hashes are known.
    pub async fn refresh(&self) -> Result<usize, trawl_core::Error> {
        let listed = self.store.list(&self.prefix).await?;
        for key in listed {
            if !key.ends_with(".parquet") || lock(&self.parts).contains(&key) {
                continue;
            }
            let Some(bytes) = self.store.get(&key).await? else {
                continue;
            };
            let hashes = records::read_string_column(bytes, "content_hash")?;
            let mut known = lock(&self.known);
            for h in hashes {
                if let Ok(h) = ContentHash::try_from(h) {
                    known.insert(h);
                }
            }
            drop(known);
            lock(&self.parts).insert(key);
        }
        Ok(lock(&self.known).len())
    }

    pub fn contains(&self, h: &ContentHash) -> bool {
        lock(&self.known).contains(h)
    }

    fn add(&self, part: Option<&str>, hashes: impl IntoIterator<Item = ContentHash>) {
        lock(&self.known).extend(hashes);
        if let Some(p) = part {
            lock(&self.parts).insert(p.to_owned());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counters a worker keeps; exported as metrics and in the run report.
#[derive(Debug, Default)]
pub struct Metrics {
    pub parts: AtomicU64,
    pub chunks: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub tokens_sent: AtomicU64,
    pub tokens_estimated: AtomicU64,
    pub requests: AtomicU64,
    pub vectors_written: AtomicU64,
    pub parquet_bytes: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub truncated: AtomicU64,
    pub redelivered: AtomicU64,
    /// Inputs a batch returned an error for: left for the next run.
    pub failed_inputs: AtomicU64,
    /// Prose views sent to be embedded (beside `cache_misses`, which counts chunks).
    pub prose_views: AtomicU64,
    /// Of `vectors_written`, the prose views' vectors.
    pub prose_vectors_written: AtomicU64,
}

impl Metrics {
    /// Vectors written for chunks, the prose views' left out.
    pub fn chunk_vectors_written(&self) -> u64 {
        self.vectors_written
            .load(Ordering::Relaxed)
            .saturating_sub(self.prose_vectors_written.load(Ordering::Relaxed))
    }
}

/// The `embed` object of the run report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EmbedReport {
    pub embedder: String,
    pub model: String,
    pub dims: u32,
    pub dtype: String,
    pub dry_run: bool,
    pub parts: u64,
    pub chunks: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_hit_ratio: f64,
    /// Tokens the provider billed (in a dry run: the estimate).
    pub tokens_sent: u64,
    /// The client-side estimate of the same inputs.
    pub tokens_estimated: u64,
    /// Embedding calls that succeeded or were split.
    pub requests: u64,
    /// HTTP requests, retries included (0 for in-process embedders).
    pub http_requests: u64,
    pub retries: BTreeMap<String, u64>,
    pub vectors_written: u64,
    /// Prose views embedded beside the chunks (`embed.prose_view`); their vectors are among
    /// `vectors_written`.
    pub prose_views: u64,
    /// Of `vectors_written`, the prose views' vectors.
    pub prose_vectors_written: u64,
    pub parquet_bytes: u64,
    pub dead_lettered: u64,
    /// Inputs cut to fit the model's context.
    pub truncated: u64,
    /// Events given back after a failure, to be redelivered.
    pub redelivered: u64,
    pub price_per_mtok: f64,
    pub estimated_cost_usd: f64,
    pub seconds: f64,
    /// `sync` (the embeddings endpoint) or `batch` (the Batch API, `--batch`).
    pub mode: String,
    pub batch_price_per_mtok: f64,
    /// The same tokens at the synchronous and at the Batch API price.
    pub estimated_cost_sync_usd: f64,
    pub estimated_cost_batch_usd: f64,
    /// Inputs a batch returned an error for, left for the next run (batch mode).
    pub failed_inputs: u64,
    /// The batches this run waited for (batch mode).
    pub batches: Vec<BatchReport>,
}

/// One Batch API job in the run report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BatchReport {
    pub id: String,
    /// Its terminal status: `completed`, `failed`, `expired` or `cancelled`.
    pub status: String,
    pub inputs: u64,
    pub embedded: u64,
    pub failed: u64,
    /// Submitted by an earlier run that stopped before it ended.
    pub resumed: bool,
}

/// `runs/<run_id>.json` of an embed run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub run: RunId,
    pub stage: trawl_core::records::Stage,
    pub embed: EmbedReport,
}

/// One chunk part waiting for its misses.
struct Job {
    /// In a mutex only so that a flush can be shared across threads while it awaits.
    delivery: Mutex<Option<Delivery>>,
    event: Option<ChunkPartEvent>,
    chunks: u32,
    hits: u32,
    /// Its misses, by position in the flush's inputs.
    own: Vec<usize>,
    /// Running flushes it waits for.
    deps: Vec<Flushed>,
}

/// How a flush ended, shareable with the events that wait for it.
#[derive(Clone, Debug)]
enum FlushFailure {
    /// The worker must stop (a rejected key, or requests the provider refuses outright).
    Fatal(String),
    Other(String),
}

type Flushed = Shared<BoxFuture<'static, Result<(), FlushFailure>>>;

/// A running flush: the hashes it embeds, and how it ended.
type Running = BoxFuture<'static, (Vec<ContentHash>, Result<(), FlushFailure>)>;

/// Jobs and their unique misses, gathering until a request is full.
#[derive(Default)]
struct Pending {
    jobs: Vec<Job>,
    hashes: Vec<ContentHash>,
    texts: Vec<String>,
    tokens: Vec<u64>,
    index: HashMap<ContentHash, usize>,
    since: Option<tokio::time::Instant>,
    /// For a contextual embedder: the inputs as consecutive documents (their sizes), and
    /// which inputs are sent only as context (already embedded: their vectors are dropped).
    documents: Vec<usize>,
    context: Vec<bool>,
    /// Which inputs are prose views ([`trawl_core::prose`]): a refused one is left out, not
    /// dead-lettered (its chunk has its own vector).
    prose: Vec<bool>,
}

impl Pending {
    fn token_sum(&self) -> u64 {
        self.tokens.iter().sum()
    }
}

struct Inner {
    store: Store,
    bus: Option<Arc<dyn Bus>>,
    embedder: Arc<dyn Embedder>,
    cache: Cache,
    opts: Options,
    metrics: Arc<Metrics>,
    run: RunId,
}

/// The embed stage.
pub struct EmbedWorker {
    inner: Arc<Inner>,
    shutdown: Shutdown,
    /// The Batch API, when backfills go through it (`--batch`).
    batches: Option<Arc<trawl_embed::batch::VoyageBatches>>,
    batch_log: Mutex<Vec<BatchReport>>,
}

impl EmbedWorker {
    pub fn new(
        store: Store,
        bus: Option<Arc<dyn Bus>>,
        embedder: Arc<dyn Embedder>,
        opts: Options,
    ) -> Self {
        let cache = Cache::new(store.clone(), &embedder.space().key());
        Self {
            inner: Arc::new(Inner {
                store,
                bus,
                embedder,
                cache,
                opts,
                metrics: Arc::default(),
                run: RunId::new(),
            }),
            shutdown: Shutdown::never(),
            batches: None,
            batch_log: Mutex::default(),
        }
    }

    /// Backfills go through the Voyage Batch API (see [`batch`]): a third cheaper, finished
    /// within 12 hours. The embedder still names the space and cuts the inputs.
    #[must_use]
    pub fn with_batches(mut self, batches: Arc<trawl_embed::batch::VoyageBatches>) -> Self {
        self.batches = Some(batches);
        self
    }

    /// Stops when `shutdown` is requested: no new event is taken, the chunks gathered are
    /// embedded, written and acknowledged, then [`EmbedWorker::run`] returns its report.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    pub fn run_id(&self) -> &RunId {
        &self.inner.run
    }

    /// Live counters, for progress displays and metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// The embedder's vector space.
    pub fn space(&self) -> &trawl_embed::Space {
        self.inner.embedder.space()
    }

    /// Consumes chunk-part events until `until`, then writes the run report and returns it.
    pub async fn run(&self, until: Until) -> Result<RunReport, WorkerError> {
        let started = Instant::now();
        let bus = self.inner.bus.clone().ok_or_else(|| {
            trawl_core::Error::Config("the embed worker needs a bus to consume events".into())
        })?;
        self.inner.cache.refresh().await?;
        let mut sub = bus.subscribe(CHUNKS_TOPIC, GROUP).await?;
        let idle = match until {
            Until::Idle(d) => Some(d),
            Until::Closed => None,
        };
        let far = Duration::from_secs(365 * 24 * 3600);
        let mut deadline = tokio::time::Instant::now() + idle.unwrap_or(far);
        let mut flows = Flows::new(self.inner.clone());
        let mut shutdown = self.shutdown.clone();
        loop {
            if flows.saturated() {
                flows.next().await?;
                continue;
            }
            let linger_at = flows.linger_deadline();
            tokio::select! {
                biased;
                () = shutdown.requested() => {
                    tracing::info!("shutting down: embedding and acknowledging what was taken");
                    break;
                }
                done = flows.next(), if flows.running() => done?,
                next = sub.recv() => match next? {
                    Some(d) => {
                        deadline = tokio::time::Instant::now() + idle.unwrap_or(far);
                        flows.event(d).await?;
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(linger_at.unwrap_or(deadline)), if linger_at.is_some() => {
                    flows.flush();
                }
                () = tokio::time::sleep_until(deadline), if idle.is_some() && flows.idle() => break,
            }
        }
        flows.finish().await?;
        self.report(started).await
    }

    /// Embeds every chunk of the files the indexed repositories hold now that has no vector
    /// in this space yet, without the bus
    /// (after a model change, or to price one with `dry_run`).
    pub async fn backfill(
        &self,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<RunReport, WorkerError> {
        if let Some(batches) = &self.batches
            && !self.inner.opts.dry_run
        {
            return self.backfill_batch(batches.clone(), progress).await;
        }
        let started = Instant::now();
        self.inner.cache.refresh().await?;
        let parts = self.inner.chunk_parts().await?;
        let mut flows = Flows::new(self.inner.clone());
        for (i, key) in parts.iter().enumerate() {
            progress(i as u64, parts.len() as u64);
            let Some(bytes) = self.inner.store.get(key).await? else {
                continue;
            };
            let rows: Vec<ChunkRecord> = records::from_parquet(bytes)?;
            if self.inner.opts.dry_run {
                flows.count_dry(&rows);
                continue;
            }
            flows.add(None, None, &rows);
            if flows.full() {
                while flows.saturated() {
                    flows.next().await?;
                }
                flows.flush();
            }
        }
        progress(parts.len() as u64, parts.len() as u64);
        flows.finish().await?;
        self.report(started).await
    }

    async fn report(&self, started: Instant) -> Result<RunReport, WorkerError> {
        let i = &self.inner;
        let m = &i.metrics;
        let mut c = i.embedder.counters();
        if let Some(b) = &self.batches {
            let bc = b.counters();
            c.http_requests += bc.http_requests;
            for (k, v) in bc.retries {
                *c.retries.entry(k).or_default() += v;
            }
        }
        let batch_mode = self.batches.is_some() && !i.opts.dry_run;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (hits, misses) = (get(&m.cache_hits), get(&m.cache_misses));
        let tokens = get(&m.tokens_sent);
        let space = i.embedder.space();
        let report = RunReport {
            schema_version: REPORT_VERSION,
            run: i.run.clone(),
            stage: trawl_core::records::Stage::Embed,
            embed: EmbedReport {
                embedder: i.opts.embedder.clone(),
                model: space.model.clone(),
                dims: space.dims,
                dtype: space.dtype.to_string(),
                dry_run: i.opts.dry_run,
                parts: get(&m.parts),
                chunks: get(&m.chunks),
                cache_hits: hits,
                cache_misses: misses,
                cache_hit_ratio: if hits + misses == 0 {
                    0.0
                } else {
                    hits as f64 / (hits + misses) as f64
                },
                tokens_sent: tokens,
                tokens_estimated: get(&m.tokens_estimated),
                requests: get(&m.requests),
                http_requests: c.http_requests,
                retries: c
                    .retries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
                vectors_written: get(&m.vectors_written),
                prose_views: get(&m.prose_views),
                prose_vectors_written: get(&m.prose_vectors_written),
                parquet_bytes: get(&m.parquet_bytes),
                dead_lettered: get(&m.dead_lettered),
                truncated: get(&m.truncated) + c.truncated,
                redelivered: get(&m.redelivered),
                price_per_mtok: i.opts.price_per_mtok,
                estimated_cost_usd: tokens as f64 / 1e6
                    * if batch_mode {
                        i.opts.batch_price_per_mtok
                    } else {
                        i.opts.price_per_mtok
                    },
                seconds: started.elapsed().as_secs_f64(),
                mode: if batch_mode { "batch" } else { "sync" }.into(),
                batch_price_per_mtok: i.opts.batch_price_per_mtok,
                estimated_cost_sync_usd: tokens as f64 / 1e6 * i.opts.price_per_mtok,
                estimated_cost_batch_usd: tokens as f64 / 1e6 * i.opts.batch_price_per_mtok,
                failed_inputs: get(&m.failed_inputs),
                batches: lock(&self.batch_log).clone(),
            },
        };
        if !i.opts.dry_run {
            i.store.put_json(&keys::run(&i.run), &report).await?;
        }
        Ok(report)
    }
}

/// The flush machinery shared by [`EmbedWorker::run`] and [`EmbedWorker::backfill`].
struct Flows {
    inner: Arc<Inner>,
    pending: Pending,
    running: FuturesUnordered<Running>,
    in_flight: HashMap<ContentHash, Flushed>,
}

impl Flows {
    fn new(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            pending: Pending::default(),
            running: FuturesUnordered::new(),
            in_flight: HashMap::new(),
        }
    }

    fn running(&self) -> bool {
        !self.running.is_empty()
    }

    fn idle(&self) -> bool {
        self.running.is_empty() && self.pending.jobs.is_empty()
    }

    fn full(&self) -> bool {
        let l = self.inner.embedder.limits();
        self.pending.texts.len() >= l.max_inputs || self.pending.token_sum() >= l.max_tokens
    }

    /// Full and no room to flush: wait for a running flush first.
    fn saturated(&self) -> bool {
        self.full() && self.running.len() >= self.inner.opts.concurrency.max(1)
    }

    fn linger_deadline(&self) -> Option<tokio::time::Instant> {
        self.pending.since.map(|t| t + self.inner.opts.linger)
    }

    /// Waits for one running flush; a rejected key ends the run.
    async fn next(&mut self) -> Result<(), WorkerError> {
        let Some((hashes, result)) = self.running.next().await else {
            return Ok(());
        };
        for h in hashes {
            self.in_flight.remove(&h);
        }
        match result {
            Err(FlushFailure::Fatal(msg)) => Err(WorkerError::Auth(EmbedError::Auth(msg))),
            _ => Ok(()),
        }
    }

    async fn finish(&mut self) -> Result<(), WorkerError> {
        self.flush();
        let mut first = Ok(());
        while self.running() {
            let r = self.next().await;
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Reads one event's part and adds its chunks.
    async fn event(&mut self, d: Delivery) -> Result<(), WorkerError> {
        let inner = self.inner.clone();
        let ev = match ChunkPartEvent::from_json(&d.payload) {
            Ok(ev) => ev,
            Err(e) => {
                inner.dead_letter(d, e.to_string()).await;
                return Ok(());
            }
        };
        let rows: Vec<ChunkRecord> = match inner.store.get(&ev.key).await {
            Ok(Some(bytes)) => match records::from_parquet(bytes) {
                Ok(rows) => rows,
                Err(e) => {
                    inner
                        .dead_letter(d, format!("chunk part {}: {e}", ev.key))
                        .await;
                    return Ok(());
                }
            },
            Ok(None) => {
                inner
                    .dead_letter(d, format!("chunk part {} is not in the store", ev.key))
                    .await;
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, key = %ev.key, "reading a chunk part failed; the event goes back");
                inner.metrics.redelivered.fetch_add(1, Ordering::Relaxed);
                d.nack();
                return Ok(());
            }
        };
        self.add(Some(d), Some(ev), &rows);
        if self.full() {
            while self.saturated() {
                self.next().await?;
            }
            self.flush();
        }
        Ok(())
    }

    fn count_dry(&mut self, rows: &[ChunkRecord]) {
        let m = &self.inner.metrics;
        m.parts.fetch_add(1, Ordering::Relaxed);
        let known =
            |h: &ContentHash, p: &Pending| self.inner.cache.contains(h) || p.index.contains_key(h);
        // A contextual model is sent a file whole when any of its chunks is new.
        let whole_file = self.inner.embedder.contextual()
            && rows.iter().any(|r| !known(&r.content_hash, &self.pending));
        for r in rows {
            m.chunks.fetch_add(1, Ordering::Relaxed);
            for (h, input) in self.inner.inputs(r) {
                let prose = input == Input::Prose;
                if known(&h, &self.pending) {
                    if prose {
                        continue;
                    }
                    m.cache_hits.fetch_add(1, Ordering::Relaxed);
                    if whole_file {
                        let t = self.inner.embedder.count_tokens(&r.indexed_text());
                        m.tokens_estimated.fetch_add(t, Ordering::Relaxed);
                        m.tokens_sent.fetch_add(t, Ordering::Relaxed);
                    }
                    continue;
                }
                let text = self.inner.input_text(r, input);
                let t = self.inner.embedder.count_tokens(&text);
                self.pending.index.insert(h, 0);
                if prose {
                    m.prose_views.fetch_add(1, Ordering::Relaxed);
                } else {
                    m.cache_misses.fetch_add(1, Ordering::Relaxed);
                }
                m.tokens_estimated.fetch_add(t, Ordering::Relaxed);
                m.tokens_sent.fetch_add(t, Ordering::Relaxed);
            }
        }
    }

    fn add(
        &mut self,
        delivery: Option<Delivery>,
        event: Option<ChunkPartEvent>,
        rows: &[ChunkRecord],
    ) {
        let inner = &self.inner;
        let m = &inner.metrics;
        let mut job = Job {
            delivery: Mutex::new(delivery),
            event,
            chunks: rows.len() as u32,
            hits: 0,
            own: Vec::new(),
            deps: Vec::new(),
        };
        m.parts.fetch_add(1, Ordering::Relaxed);
        m.chunks.fetch_add(rows.len() as u64, Ordering::Relaxed);
        if inner.embedder.contextual() {
            self.add_document(job, rows);
            return;
        }
        for r in rows {
            for (h, input) in inner.inputs(r) {
                let prose = input == Input::Prose;
                let count_hit = |job: &mut Job| {
                    if !prose {
                        job.hits += 1;
                        m.cache_hits.fetch_add(1, Ordering::Relaxed);
                    }
                };
                if inner.cache.contains(&h) || self.pending.index.contains_key(&h) {
                    count_hit(&mut job);
                    continue;
                }
                if let Some(f) = self.in_flight.get(&h) {
                    count_hit(&mut job);
                    job.deps.push(f.clone());
                    continue;
                }
                let text = inner.input_text(r, input);
                let p = &mut self.pending;
                p.index.insert(h, p.texts.len());
                job.own.push(p.texts.len());
                p.hashes.push(h);
                p.tokens.push(inner.embedder.count_tokens(&text));
                p.texts.push(text);
                p.prose.push(prose);
                if prose {
                    m.prose_views.fetch_add(1, Ordering::Relaxed);
                } else {
                    m.cache_misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.pending.jobs.push(job);
        self.pending
            .since
            .get_or_insert_with(tokio::time::Instant::now);
    }

    /// [`Flows::add`] for a contextual embedder: a file with any chunk to embed is sent
    /// whole, in line order, as documents of at most the embedder's size, so that each new
    /// chunk's vector sees its file; the chunks already embedded go as context only.
    fn add_document(&mut self, mut job: Job, rows: &[ChunkRecord]) {
        let inner = &self.inner;
        let m = &inner.metrics;
        let limits = inner.embedder.limits();
        let embedded = |h: &ContentHash, p: &Pending| {
            inner.cache.contains(h) || p.index.contains_key(h) || self.in_flight.contains_key(h)
        };
        let mut order: Vec<&ChunkRecord> = rows.iter().collect();
        order.sort_by_key(|r| (r.start_line, r.end_line));
        let misses = order
            .iter()
            .filter(|r| !embedded(&r.content_hash, &self.pending))
            .count();
        job.hits = (rows.len() - misses) as u32;
        m.cache_hits
            .fetch_add(u64::from(job.hits), Ordering::Relaxed);
        for r in &order {
            if let Some(f) = self.in_flight.get(&r.content_hash)
                && !inner.cache.contains(&r.content_hash)
            {
                job.deps.push(f.clone());
            }
        }
        if misses > 0 {
            let max_doc = inner.embedder.max_document_tokens();
            let mut doc_tokens = 0u64;
            let mut doc_len = 0usize;
            for r in order {
                let h = r.content_hash;
                let context = embedded(&h, &self.pending);
                let mut text = r.indexed_text();
                if fit(&mut text, limits.max_input_tokens, |t| {
                    inner.embedder.count_tokens(t)
                }) && !context
                {
                    m.truncated.fetch_add(1, Ordering::Relaxed);
                }
                let t = inner.embedder.count_tokens(&text);
                // A file longer than one document goes as several, in order.
                if doc_len > 0 && doc_tokens + t > max_doc {
                    self.pending.documents.push(doc_len);
                    (doc_len, doc_tokens) = (0, 0);
                }
                let p = &mut self.pending;
                if !context {
                    p.index.insert(h, p.texts.len());
                    job.own.push(p.texts.len());
                    m.cache_misses.fetch_add(1, Ordering::Relaxed);
                }
                p.hashes.push(h);
                p.tokens.push(t);
                p.texts.push(text);
                p.context.push(context);
                p.prose.push(false);
                doc_len += 1;
                doc_tokens += t;
            }
            self.pending.documents.push(doc_len);
        }
        self.pending.jobs.push(job);
        self.pending
            .since
            .get_or_insert_with(tokio::time::Instant::now);
    }

    /// Starts a flush of everything pending.
    fn flush(&mut self) {
        let p = std::mem::take(&mut self.pending);
        if p.jobs.is_empty() {
            return;
        }
        // The hashes this flush embeds (not those it sends as context only).
        let hashes: Vec<ContentHash> = p
            .hashes
            .iter()
            .enumerate()
            .filter(|(i, _)| !p.context.get(*i).copied().unwrap_or(false))
            .map(|(_, h)| *h)
            .collect();
        let inner = self.inner.clone();
        let task = tokio::spawn(async move { inner.flush(p).await });
        let shared: Flushed = async move {
            match task.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e @ (EmbedError::Auth(_) | EmbedError::Rejected(_)))) => {
                    Err(FlushFailure::Fatal(e.to_string()))
                }
                Ok(Err(e)) => Err(FlushFailure::Other(e.to_string())),
                Err(e) => Err(FlushFailure::Other(format!("flush task: {e}"))),
            }
        }
        .boxed()
        .shared();
        for h in &hashes {
            self.in_flight.insert(*h, shared.clone());
        }
        self.running
            .push(async move { (hashes, shared.await) }.boxed());
    }
}

/// One of the inputs a chunk asks to be embedded ([`Inner::inputs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Input {
    /// The chunk itself: its [`ChunkRecord::indexed_text`].
    Own,
    /// Its prose view ([`trawl_core::prose`]).
    Prose,
}

impl Inner {
    /// What `r` asks to be embedded, under which key: the chunk itself, then its prose view
    /// when the worker embeds those ([`trawl_core::prose`]). Only keys: a text is made by
    /// [`Inner::input_text`] once the key is known to be missing from the cache.
    fn inputs(&self, r: &ChunkRecord) -> impl Iterator<Item = (ContentHash, Input)> {
        let prose = (self.opts.prose_views && !self.embedder.contextual())
            .then(|| r.prose_key())
            .flatten();
        std::iter::once((r.content_hash, Input::Own)).chain(prose.map(|k| (k, Input::Prose)))
    }

    /// The text sent for one of [`Inner::inputs`], cut to the embedder's limit; a chunk cut
    /// is counted as `truncated`.
    fn input_text(&self, r: &ChunkRecord, input: Input) -> String {
        let mut text = match input {
            Input::Own => r.indexed_text(),
            // `inputs` names a view only for a chunk that has one.
            Input::Prose => r.prose_view().unwrap_or_else(|| r.indexed_text()),
        };
        let limit = self.embedder.limits().max_input_tokens;
        if fit(&mut text, limit, |t| self.embedder.count_tokens(t)) && input == Input::Own {
            self.metrics.truncated.fetch_add(1, Ordering::Relaxed);
        }
        text
    }

    async fn dead_letter(&self, d: Delivery, error: String) {
        let Some(bus) = &self.bus else { return };
        if trawl_core::bus::dead_letter(bus.as_ref(), trawl_core::bus::Topic::Chunks, d, error)
            .await
        {
            self.metrics.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Embeds a flush's misses, writes them, dead-letters refused inputs, publishes and
    /// acknowledges its events. On failure gives every event back.
    async fn flush(self: Arc<Self>, p: Pending) -> Result<(), EmbedError> {
        let result = self.try_flush(&p).await;
        if result.is_ok() {
            for job in p.jobs {
                let delivery = job
                    .delivery
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(d) = delivery
                    && let Err(e) = d.ack().await
                {
                    tracing::warn!(error = %e, "acknowledgement failed; the event will be redelivered");
                }
            }
            return result;
        }
        if let Err(e) = &result {
            match e {
                EmbedError::Auth(_) | EmbedError::Rejected(_) => {
                    tracing::error!(error = %e, "stopping: the provider refuses these requests");
                }
                _ => {
                    tracing::warn!(error = %e, events = p.jobs.len(), "embedding failed; the events go back");
                }
            }
            for job in p.jobs {
                let delivery = job
                    .delivery
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(d) = delivery {
                    self.metrics.redelivered.fetch_add(1, Ordering::Relaxed);
                    d.nack();
                }
            }
        }
        result
    }

    /// The chunk parts of the files the listed repositories hold now (every part in a store
    /// that records no repository): what a backfill embeds.
    async fn chunk_parts(&self) -> Result<Vec<String>, trawl_core::Error> {
        let current = trawl_core::store::current_chunk_parts(&self.store).await?;
        let mut left_out = 0u64;
        let parts: Vec<String> = self
            .store
            .list("chunks/")
            .await?
            .into_iter()
            .filter(|k| k.ends_with(".parquet"))
            .filter(|k| {
                let keep = current.as_ref().is_none_or(|c| c.contains(k));
                left_out += u64::from(!keep);
                keep
            })
            .collect();
        if left_out > 0 {
            tracing::info!(
                parts = parts.len(),
                left_out,
                "chunk parts of superseded file versions, older chunkers and repositories no longer listed are not embedded"
            );
        }
        Ok(parts)
    }

    /// Writes `rows` as one embedding part of `space` (sorted, named by its content hashes)
    /// and adds them to the cache; `None` when there are none. `prose` of them are prose
    /// views' vectors, counted apart.
    async fn write_part(
        &self,
        space: &trawl_embed::Space,
        mut rows: Vec<EmbeddingRecord>,
        prose: u64,
    ) -> Result<Option<String>, EmbedError> {
        let store_err = |e: trawl_core::Error| EmbedError::Exhausted {
            attempts: 1,
            last: e.to_string(),
        };
        if rows.is_empty() {
            return Ok(None);
        }
        rows.sort_by_key(|r| r.content_hash);
        let hashes: Vec<ContentHash> = rows.iter().map(|r| r.content_hash).collect();
        let key = keys::embedding_part(&space.key(), &hashes);
        let parquet = records::to_parquet(&rows).map_err(store_err)?;
        self.metrics
            .parquet_bytes
            .fetch_add(parquet.len() as u64, Ordering::Relaxed);
        self.store.put(&key, parquet).await.map_err(store_err)?;
        self.metrics
            .vectors_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        self.metrics
            .prose_vectors_written
            .fetch_add(prose, Ordering::Relaxed);
        self.cache.add(Some(&key), hashes);
        Ok(Some(key))
    }

    async fn try_flush(&self, p: &Pending) -> Result<(), EmbedError> {
        let store_err = |e: trawl_core::Error| EmbedError::Exhausted {
            attempts: 1,
            last: e.to_string(),
        };
        // Hashes another flush is embedding must be durable before these events are acked.
        for job in &p.jobs {
            for dep in &job.deps {
                if let Err(FlushFailure::Fatal(m) | FlushFailure::Other(m)) = dep.clone().await {
                    return Err(EmbedError::Exhausted {
                        attempts: 1,
                        last: format!("a flush this one depends on failed: {m}"),
                    });
                }
            }
        }
        let space = self.embedder.space().clone();
        let mut outcomes: Vec<Option<Outcome>> = vec![None; p.texts.len()];
        let limits = self.embedder.limits();
        // Flat inputs, or (contextual) whole documents in each request.
        let requests: Vec<(std::ops::Range<usize>, Vec<usize>)> = if p.documents.is_empty() {
            batches(&p.tokens, limits)
                .into_iter()
                .map(|r| {
                    let n = r.len();
                    (r, vec![n])
                })
                .collect()
        } else {
            document_batches(&p.tokens, &p.documents, limits)
        };
        for (range, documents) in requests {
            let (out, billed) = if p.documents.is_empty() {
                embed_isolating(
                    self.embedder.as_ref(),
                    &p.texts[range.clone()],
                    InputType::Document,
                )
                .await?
            } else {
                embed_isolating_documents(
                    self.embedder.as_ref(),
                    &p.texts[range.clone()],
                    &documents,
                    InputType::Document,
                )
                .await?
            };
            self.metrics.requests.fetch_add(1, Ordering::Relaxed);
            self.metrics
                .tokens_sent
                .fetch_add(billed, Ordering::Relaxed);
            self.metrics
                .tokens_estimated
                .fetch_add(p.tokens[range.clone()].iter().sum(), Ordering::Relaxed);
            for (slot, o) in outcomes[range].iter_mut().zip(out) {
                *slot = Some(o);
            }
        }
        let mut rows = Vec::new();
        let mut prose = 0;
        let mut refused = Vec::new();
        for (i, o) in outcomes.into_iter().enumerate() {
            if p.context.get(i).copied().unwrap_or(false) {
                // Sent for its neighbours' sake: its own vector is already stored.
                continue;
            }
            match o.expect("every input has an outcome") {
                Ok(v) => {
                    prose += u64::from(p.prose.get(i).copied().unwrap_or(false));
                    rows.push(record(&space, p.hashes[i], v, p.tokens[i]));
                }
                Err(why) => refused.push((i, why)),
            }
        }
        let key = self.write_part(&space, rows, prose).await?;

        // Refused inputs: one dead letter each, counted against the job that owns them.
        let mut owner = HashMap::new();
        for (j, job) in p.jobs.iter().enumerate() {
            for &i in &job.own {
                owner.insert(i, j);
            }
        }
        let mut dead_per_job = vec![0u32; p.jobs.len()];
        for (i, why) in refused {
            if p.prose.get(i).copied().unwrap_or(false) {
                tracing::warn!(key = %p.hashes[i], error = %why, "the provider refused a chunk's prose view; the chunk keeps its own vector");
                continue;
            }
            let j = owner[&i];
            dead_per_job[j] += 1;
            let job = &p.jobs[j];
            let payload = serde_json::json!({
                "content_hash": p.hashes[i],
                "chunk_part": job.event.as_ref().map(|e| e.key.clone()),
            });
            let letter = DeadLetter {
                schema_version: DEAD_LETTER_VERSION,
                topic: CHUNKS_TOPIC.into(),
                key: job
                    .event
                    .as_ref()
                    .map_or_else(String::new, |e| e.repo.to_string()),
                error: format!("the provider refused this chunk: {why}"),
                attempts: 1,
                payload: payload.to_string(),
            };
            tracing::warn!(content_hash = %p.hashes[i], error = %why, "dead-lettering a chunk");
            if let Some(bus) = &self.bus {
                bus.publish(DEAD_LETTERS_TOPIC, &letter.key, letter.to_json())
                    .await
                    .map_err(store_err)?;
            }
            self.metrics.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }

        for (j, job) in p.jobs.iter().enumerate() {
            let (Some(ev), Some(bus)) = (&job.event, &self.bus) else {
                continue;
            };
            let out = EmbeddedEvent {
                schema_version: EMBEDDED_VERSION,
                repo: ev.repo.clone(),
                commit: ev.commit.clone(),
                path: ev.path.clone(),
                chunks_key: ev.key.clone(),
                embeddings_key: (!job.own.is_empty()).then(|| key.clone()).flatten(),
                model: space.model.clone(),
                dims: space.dims,
                dtype: space.dtype.to_string(),
                chunks: job.chunks,
                cache_hits: job.hits,
                dead_lettered: dead_per_job[j],
                run: ev.run.clone(),
            };
            bus.publish(EMBEDDED_TOPIC, ev.repo.as_str(), out.to_json())
                .await
                .map_err(store_err)?;
        }
        Ok(())
    }
}

/// The row of one vector, as every embedding part holds it.
fn record(
    space: &trawl_embed::Space,
    content_hash: ContentHash,
    v: Vector,
    tokens: u64,
) -> EmbeddingRecord {
    let (vector, vector_bytes) = match v {
        Vector::Float(f) => (Some(f), None),
        Vector::Bytes(b) => (None, Some(b)),
    };
    EmbeddingRecord {
        schema_version: EMBEDDING_VERSION,
        content_hash,
        model: space.model.clone(),
        dims: space.dims,
        dtype: space.dtype.to_string(),
        vector,
        vector_bytes,
        tokens: tokens as u32,
    }
}

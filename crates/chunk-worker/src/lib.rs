//! # trawl-chunk-worker
//!
//! Consumes file events from the `files` topic, chunks each file on the blocking pool with
//! [`trawl_chunker`], writes one Parquet part per file version under
//! `chunks/repo=<key>/<hash>.parquet`, publishes a [`ChunkPartEvent`] on the `chunks` topic,
//! and only then acknowledges the file event.
//!
//! Key design decisions:
//! - **one part per file version**, keyed by a hash of (repo, path, blob, chunker version): a
//!   replayed event rewrites the same object, so at-least-once delivery never duplicates a
//!   chunk. (Many small parts is the price; merging them belongs to the compactor.)
//! - **deletes write nothing**: a deleted file's chunks leave the live set because the next
//!   manifest no longer names the file.
//! - a message that cannot be decoded is sent to the `dead-letters` topic with its error and
//!   acknowledged: it is never retried forever. A store or bus failure is not the message's
//!   fault: the delivery is given back and retried.
//! - **a chunker panic is caught per file** (`catch_unwind` around the chunking of one file):
//!   the file's event is given back, and on its `max_attempts`-th delivery (the bus keeps the
//!   count across restarts) it is dead-lettered with the panic message, so one poison file
//!   never holds up the files behind it. Debug builds read `TRAWL_TEST_PANIC_ON_PATH` (a file
//!   path whose chunking panics) for the hostile tests; release builds do not have it.
//!
//! - **prose deferred, in the one-process pipeline** ([`ChunkWorker::deferring_prose`]): a
//!   file the sentence model would read ([`trawl_chunker::may_use_meaning`]) is held back and
//!   chunked after every other file, and [`ChunkWorker::first_pass`] says when the others are
//!   done, so that a first generation can go live without waiting for the model.
//!
//! Parts are sorted by path then byte offset, zstd-compressed, one row group each.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use trawl_chunker::records::{Source, to_records};
use trawl_chunker::{CHUNKER_VERSION, Options, Strategy};
use trawl_core::RepoId;
use trawl_core::bus::{Bus, Delivery, Settle, Topic};
use trawl_core::records::{self, CHUNK_PART_VERSION, ChunkPartEvent, FileEvent, FileOp};
use trawl_core::shutdown::Shutdown;
use trawl_core::store::{Store, keys};

mod config;

pub use config::{ConfigError, from_config, options, strategy};
pub use trawl_chunker::meaning::{Meaning, Sentences};

/// The topic file events arrive on.
pub const FILES_TOPIC: &str = trawl_core::bus::Topic::Files.name();
/// The topic chunk-part events leave on.
pub const CHUNKS_TOPIC: &str = trawl_core::bus::Topic::Chunks.name();
/// Where messages that cannot be processed go.
pub const DEAD_LETTERS_TOPIC: &str = trawl_core::bus::Topic::DeadLetters.name();
/// The consumer group of chunk workers.
pub const GROUP: &str = "chunk-worker";

/// The chunker version a part is keyed by: parts of each strategy are kept apart.
pub fn part_version(strategy: Strategy) -> String {
    match strategy {
        Strategy::Ast => CHUNKER_VERSION.to_owned(),
        Strategy::Windows => format!("{CHUNKER_VERSION}-windows"),
    }
}

/// Counters a worker keeps; exported as metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    pub files: AtomicU64,
    pub deletes: AtomicU64,
    pub chunks: AtomicU64,
    pub bytes_in: AtomicU64,
    pub parquet_bytes: AtomicU64,
    pub dead_letters: AtomicU64,
    pub retries: AtomicU64,
    /// Files whose chunking panicked (each attempt counts).
    pub panics: AtomicU64,
    /// Files by chunker note (`syntax-errors`, `parse-timeout`, `no-grammar`, …).
    pub notes: std::sync::Mutex<BTreeMap<&'static str, u64>>,
}

/// A point-in-time copy of [`Metrics`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsSnapshot {
    pub files: u64,
    pub deletes: u64,
    pub chunks: u64,
    pub bytes_in: u64,
    pub parquet_bytes: u64,
    pub dead_letters: u64,
    pub retries: u64,
    pub panics: u64,
    pub notes: BTreeMap<&'static str, u64>,
}

impl Metrics {
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            files: self.files.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
            chunks: self.chunks.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            parquet_bytes: self.parquet_bytes.load(Ordering::Relaxed),
            dead_letters: self.dead_letters.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            notes: self
                .notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }
}

/// When the worker stops.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// When the topic is closed and drained (the in-process pipeline).
    Closed,
    /// When no message arrived for this long (`trawl chunk-worker --once`).
    Idle(Duration),
}

/// How far a worker that defers prose ([`ChunkWorker::deferring_prose`]) is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstPass {
    /// Chunking the files that do not need the sentence model.
    Running,
    /// Every other file is chunked and its part published; these follow, cut by meaning.
    Done(Deferred),
    /// The run ended before its first pass did (an error or a shutdown).
    Stopped,
}

/// The files a first pass held back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deferred {
    pub files: u64,
    /// Their repositories.
    pub repos: BTreeSet<RepoId>,
}

/// Events held back for the second pass: (key, payload, attempt).
type Held = Arc<Mutex<VecDeque<(String, Bytes, u32)>>>;

/// The settlement of a held event: given back, it is held again, one attempt more.
struct HeldSettle {
    held: Held,
    key: String,
    payload: Bytes,
    attempt: u32,
}

impl Settle for HeldSettle {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), trawl_core::Error>> {
        Box::pin(async { Ok(()) })
    }
    fn nack(self: Box<Self>) {
        let Self {
            held,
            key,
            payload,
            attempt,
        } = *self;
        held.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back((key, payload, attempt + 1));
    }
}

/// The chunk stage.
pub struct ChunkWorker {
    store: Store,
    bus: Arc<dyn Bus>,
    opts: Options,
    concurrency: usize,
    metrics: Arc<Metrics>,
    strategy: Strategy,
    shutdown: Shutdown,
    max_attempts: u32,
    chunk: ChunkFn,
    /// Set when prose is deferred: where the first pass is.
    first_pass: Option<tokio::sync::watch::Sender<FirstPass>>,
}

/// Chunks one file: [`trawl_chunker::chunk`], or a stand-in in this crate's tests.
type ChunkFn = fn(&str, Option<&str>, &str, Strategy, &Options) -> trawl_chunker::Chunked;

/// Why one event failed.
enum Failure {
    /// The message itself is bad: dead-letter it.
    Poison(String),
    /// The chunker panicked on the file: give it back until `max_attempts`, then
    /// dead-letter it.
    Panic(String),
    /// The store or the bus failed: give the message back.
    Transient(String),
}

/// The message a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Debug builds only: panics on the file `TRAWL_TEST_PANIC_ON_PATH` names, so the hostile
/// tests can drive a poison file through the binary. Release builds compile it out.
#[cfg(debug_assertions)]
fn injected_panic(path: &str) {
    assert!(
        std::env::var_os("TRAWL_TEST_PANIC_ON_PATH").is_none_or(|p| p != path),
        "TRAWL_TEST_PANIC_ON_PATH: injected chunker panic on {path}"
    );
}

#[cfg(not(debug_assertions))]
fn injected_panic(_path: &str) {}

impl ChunkWorker {
    pub fn new(store: Store, bus: Arc<dyn Bus>, opts: Options, concurrency: usize) -> Self {
        Self {
            store,
            bus,
            opts,
            concurrency: concurrency.max(1),
            metrics: Arc::default(),
            strategy: Strategy::Ast,
            shutdown: Shutdown::never(),
            max_attempts: 3,
            chunk: trawl_chunker::chunk,
            first_pass: None,
        }
    }

    /// Holds back the files the sentence model would read until every other file is
    /// chunked, then chunks them; [`ChunkWorker::first_pass`] tells when the others are done.
    /// For the one-process pipeline ([`Until::Closed`] on the in-process bus): a held event
    /// is acknowledged when it is held, so a run that stops before its second pass leaves
    /// those files unchunked, and the caller must record their repositories as unfinished
    /// until [`ChunkWorker::run`] returns. Without a sentence model nothing is held.
    #[must_use]
    pub fn deferring_prose(mut self) -> Self {
        self.first_pass = Some(tokio::sync::watch::channel(FirstPass::Running).0);
        self
    }

    /// Where the first pass is, when prose is deferred.
    pub fn first_pass(&self) -> Option<tokio::sync::watch::Receiver<FirstPass>> {
        self.first_pass
            .as_ref()
            .map(tokio::sync::watch::Sender::subscribe)
    }

    /// Dead-letters a file whose chunking panicked on its `n`-th delivery (`bus.max_attempts`;
    /// at least 1).
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The chunker version this worker's parts are keyed by ([`part_version`]).
    pub fn part_version(&self) -> String {
        part_version(self.strategy)
    }

    /// Chunks with `strategy` (fixed windows are the baseline of retrieval evaluations; their
    /// parts are versioned apart, so a store never mixes them with AST chunks of a file).
    #[must_use]
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Cuts prose over the ceiling where its topic changes, with `meaning`'s sentence model
    /// (`None`: by size).
    #[must_use]
    pub fn with_meaning(mut self, meaning: Option<Meaning>) -> Self {
        self.opts.meaning = meaning;
        self
    }

    /// Stops when `shutdown` is requested: no new event is taken, the ones in flight are
    /// finished and acknowledged, then [`ChunkWorker::run`] returns.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Consumes file events until `until`; returns the metrics. Up to `concurrency` files
    /// are in flight; receiving and finishing work progress together.
    pub async fn run(&self, until: Until) -> Result<MetricsSnapshot, trawl_core::Error> {
        let r = self.passes(until).await;
        if let Some(tx) = &self.first_pass {
            tx.send_if_modified(|p| {
                let running = *p == FirstPass::Running;
                if running {
                    *p = FirstPass::Stopped;
                }
                running
            });
        }
        r
    }

    async fn passes(&self, until: Until) -> Result<MetricsSnapshot, trawl_core::Error> {
        use futures::StreamExt;
        let held: Held = Arc::default();
        let mut deferred = Deferred::default();
        let mut sub = self.bus.subscribe(FILES_TOPIC, GROUP).await?;
        let mut inflight = futures::stream::FuturesUnordered::new();
        let idle = match until {
            Until::Idle(d) => Some(d),
            Until::Closed => None,
        };
        let far = Duration::from_secs(365 * 24 * 3600);
        let mut deadline = tokio::time::Instant::now() + idle.unwrap_or(far);
        let mut shutdown = self.shutdown.clone();
        loop {
            if inflight.len() >= self.concurrency {
                inflight.next().await;
                continue;
            }
            tokio::select! {
                biased;
                () = shutdown.requested() => {
                    tracing::info!(in_flight = inflight.len(), "shutting down: finishing the events in flight");
                    break;
                }
                Some(()) = inflight.next(), if !inflight.is_empty() => {}
                next = sub.recv() => match next? {
                    Some(d) => {
                        if let Some(d) = self.hold(d, &held, &mut deferred).await {
                            inflight.push(self.handle(d));
                        }
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(deadline), if idle.is_some() && inflight.is_empty() => break,
            }
            deadline = tokio::time::Instant::now() + idle.unwrap_or(far);
        }
        while inflight.next().await.is_some() {}
        let Some(tx) = &self.first_pass else {
            return Ok(self.metrics.snapshot());
        };
        if shutdown.is_requested() {
            return Ok(self.metrics.snapshot());
        }
        if deferred.files > 0 {
            tracing::info!(
                files = deferred.files,
                "every other file is chunked: the prose held back is cut by meaning now"
            );
        }
        tx.send_replace(FirstPass::Done(deferred));
        // The second pass: what was held, given back and held again until it is done.
        loop {
            while inflight.len() < self.concurrency {
                let next = held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop_front();
                let Some((key, payload, attempt)) = next else {
                    break;
                };
                let settle = Box::new(HeldSettle {
                    held: held.clone(),
                    key: key.clone(),
                    payload: payload.clone(),
                    attempt,
                });
                inflight.push(self.handle(Delivery::new(key, payload, attempt, settle)));
            }
            tokio::select! {
                biased;
                () = shutdown.requested() => {
                    tracing::info!(in_flight = inflight.len(), "shutting down: finishing the held prose in flight");
                    break;
                }
                next = inflight.next() => if next.is_none() { break },
            }
        }
        while inflight.next().await.is_some() {}
        Ok(self.metrics.snapshot())
    }

    /// Holds `d` back for the second pass when prose is deferred and the sentence model
    /// would read its file (acknowledging it: the held copy is the worker's); otherwise gives
    /// it back to be chunked now.
    async fn hold(&self, d: Delivery, held: &Held, deferred: &mut Deferred) -> Option<Delivery> {
        if self.first_pass.is_none() {
            return Some(d);
        }
        let Ok(ev) = FileEvent::from_json(&d.payload) else {
            return Some(d);
        };
        let len = ev.content.as_ref().map_or(0, String::len);
        if ev.op == FileOp::Delete
            || !trawl_chunker::may_use_meaning(
                &ev.path,
                ev.language.as_deref(),
                len,
                self.strategy,
                &self.opts,
            )
        {
            return Some(d);
        }
        let entry = (d.key.clone(), d.payload.clone(), d.attempt);
        if let Err(e) = d.ack().await {
            tracing::warn!(error = %e, path = %ev.path, "acknowledgement failed; the file is chunked when it comes again");
            return None;
        }
        held.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(entry);
        deferred.files += 1;
        deferred.repos.insert(ev.repo);
        None
    }

    async fn handle(&self, d: Delivery) {
        match self.process(&d).await {
            Ok(()) => {
                if let Err(e) = d.ack().await {
                    tracing::warn!(error = %e, "acknowledgement failed; the event will be redelivered");
                }
            }
            Err(Failure::Poison(error)) => self.dead_letter(d, error).await,
            Err(Failure::Panic(error)) if d.attempt >= self.max_attempts => {
                self.metrics.panics.fetch_add(1, Ordering::Relaxed);
                let error = format!(
                    "the chunker panicked on every one of {} attempts: {error}",
                    d.attempt
                );
                self.dead_letter(d, error).await;
            }
            Err(Failure::Panic(error)) => {
                self.metrics.panics.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = %d.key, %error, attempt = d.attempt, max_attempts = self.max_attempts, "the chunker panicked; the event goes back");
                self.metrics.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(trawl_core::retry::redelivery_delay(d.attempt)).await;
                d.nack();
            }
            Err(Failure::Transient(error)) => {
                tracing::warn!(key = %d.key, %error, attempt = d.attempt, "chunking failed; the event goes back");
                self.metrics.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(trawl_core::retry::redelivery_delay(d.attempt)).await;
                d.nack();
            }
        }
    }

    async fn dead_letter(&self, d: Delivery, error: String) {
        if trawl_core::bus::dead_letter(self.bus.as_ref(), Topic::Files, d, error).await {
            self.metrics.dead_letters.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn process(&self, d: &Delivery) -> Result<(), Failure> {
        let ev = FileEvent::from_json(&d.payload).map_err(|e| Failure::Poison(e.to_string()))?;
        if ev.op == FileOp::Delete {
            self.metrics.deletes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let (Some(blob), Some(content)) = (ev.blob.clone(), ev.content.clone()) else {
            return Err(Failure::Poison("an upsert without blob or content".into()));
        };
        let version = part_version(self.strategy);
        let key = keys::chunk_part(&ev.repo, &ev.path, &blob, &version);
        let strategy = self.strategy;
        let opts = self.opts.clone();
        let (repo, path, language) = (ev.repo.clone(), ev.path.clone(), ev.language.clone());
        let bytes_in = content.len() as u64;
        let blob_for_task = blob.clone();
        let chunk = self.chunk;
        let (parquet, count, notes) = tokio::task::spawn_blocking(move || {
            let lang = language.as_deref();
            // One file's panic is that file's failure, not the worker's.
            let chunked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                injected_panic(&path);
                chunk(&path, lang, &content, strategy, &opts)
            }))
            .map_err(|p| Failure::Panic(format!("{path}: {}", panic_message(p.as_ref()))))?;
            let src = Source {
                repo: &repo,
                path: &path,
                blob: &blob_for_task,
                language: lang.unwrap_or("text"),
            };
            let mut rows = to_records(&src, &chunked, &content);
            rows.sort_by_key(|r| (r.start_byte, r.end_byte));
            let parquet = records::to_parquet(&rows).map_err(|e| Failure::Poison(e.to_string()))?;
            Ok::<_, Failure>((parquet, rows.len(), chunked.notes))
        })
        .await
        .map_err(|e| match e.try_into_panic() {
            // A panic outside the chunker (turning chunks into rows): the file's fault too.
            Ok(p) => Failure::Panic(panic_message(p.as_ref())),
            Err(e) => Failure::Transient(format!("chunking task: {e}")),
        })??;
        let parquet_len = parquet.len() as u64;
        self.store
            .put(&key, parquet)
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        let part = ChunkPartEvent {
            schema_version: CHUNK_PART_VERSION,
            repo: ev.repo.clone(),
            commit: ev.commit.clone(),
            path: ev.path.clone(),
            blob,
            key,
            chunks: count as u32,
            run: ev.run.clone(),
        };
        self.bus
            .publish(CHUNKS_TOPIC, ev.repo.as_str(), part.to_json())
            .await
            .map_err(|e| Failure::Transient(e.to_string()))?;
        let m = &self.metrics;
        m.files.fetch_add(1, Ordering::Relaxed);
        m.chunks.fetch_add(count as u64, Ordering::Relaxed);
        m.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        m.parquet_bytes.fetch_add(parquet_len, Ordering::Relaxed);
        if !notes.is_empty() {
            let mut map = m
                .notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for n in notes {
                *map.entry(n.as_str()).or_default() += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use trawl_core::bus::{InProcBus, SpoolBus};
    use trawl_core::records::DeadLetter;
    use trawl_core::{BlobId, CommitId, RepoId, RunId};

    impl ChunkWorker {
        fn with_chunker(mut self, chunk: ChunkFn) -> Self {
            self.chunk = chunk;
            self
        }
    }

    /// Chunks as the real chunker does, but panics on `poison.py` and `POISON.md`.
    fn poisoned(
        path: &str,
        language: Option<&str>,
        src: &str,
        strategy: Strategy,
        opts: &Options,
    ) -> trawl_chunker::Chunked {
        assert!(
            !matches!(path, "poison.py" | "POISON.md"),
            "a chunker bug this file triggers: {path}"
        );
        trawl_chunker::chunk(path, language, src, strategy, opts)
    }

    fn upsert(path: &str, content: &str) -> Bytes {
        upsert_in(path, "python", content)
    }

    fn upsert_in(path: &str, language: &str, content: &str) -> Bytes {
        FileEvent {
            schema_version: records::FILE_EVENT_VERSION,
            op: FileOp::Upsert,
            repo: RepoId::parse("github.com/a/b").unwrap(),
            commit: "a".repeat(40).parse::<CommitId>().unwrap(),
            path: path.into(),
            renamed_from: None,
            blob: Some("b".repeat(40).parse::<BlobId>().unwrap()),
            language: Some(language.into()),
            size: content.len() as u64,
            encoding: None,
            content: Some(content.into()),
            run: RunId::try_from("r1".to_owned()).unwrap(),
        }
        .to_json()
    }

    async fn letters(bus: &Arc<dyn Bus>) -> Vec<DeadLetter> {
        let mut sub = bus.subscribe(DEAD_LETTERS_TOPIC, "test").await.unwrap();
        bus.close(DEAD_LETTERS_TOPIC).await.unwrap();
        let mut out = Vec::new();
        while let Some(d) = sub.recv().await.unwrap() {
            out.push(DeadLetter::from_json(&d.payload).unwrap());
            d.ack().await.unwrap();
        }
        out
    }

    async fn a_panicking_file_is_dead_lettered_after_max_attempts(bus: Arc<dyn Bus>) {
        let store = Store::memory();
        for (path, text) in [
            ("a.py", "def a():\n    return 1\n"),
            ("poison.py", "def p():\n    return 2\n"),
            ("b.py", "def b():\n    return 3\n"),
        ] {
            bus.publish(FILES_TOPIC, "github.com/a/b", upsert(path, text))
                .await
                .unwrap();
        }
        bus.close(FILES_TOPIC).await.unwrap();
        let worker = ChunkWorker::new(store.clone(), bus.clone(), Options::default(), 2)
            .with_chunker(poisoned)
            .with_max_attempts(3);
        let m = worker.run(Until::Closed).await.unwrap();
        assert_eq!((m.files, m.dead_letters, m.panics, m.retries), (2, 1, 3, 2));
        assert_eq!(store.list("chunks/").await.unwrap().len(), 2);
        let letters = letters(&bus).await;
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].attempts, 3);
        assert_eq!(letters[0].topic, FILES_TOPIC);
        assert!(
            letters[0].error.contains("poison.py") && letters[0].error.contains("a chunker bug"),
            "the letter carries the panic message: {}",
            letters[0].error
        );
    }

    #[tokio::test]
    async fn a_chunker_panic_is_one_files_dead_letter_on_the_in_process_and_spool_buses() {
        a_panicking_file_is_dead_lettered_after_max_attempts(Arc::new(InProcBus::new(64))).await;
        a_panicking_file_is_dead_lettered_after_max_attempts(Arc::new(SpoolBus::new(
            Store::memory(),
        )))
        .await;
    }

    /// A sentence model that tells topics by keyword, and reads nothing until its gate opens.
    #[derive(Default)]
    struct Gated {
        open: std::sync::atomic::AtomicBool,
        read: AtomicU64,
    }
    impl Sentences for Gated {
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            while !self.open.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.read.fetch_add(texts.len() as u64, Ordering::Relaxed);
            Ok(texts
                .iter()
                .map(|t| {
                    let refund = f32::from(u8::from(t.contains("refund")));
                    vec![refund, 1.0 - refund, 0.1]
                })
                .collect())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prose_for_the_sentence_model_waits_until_every_other_file_is_chunked() {
        let store = Store::memory();
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(64));
        let mut guide = String::from("# Guide\n\n");
        for i in 0..30 {
            guide.push_str(&format!("A refund takes five days, case {i}.\n\n"));
        }
        for i in 0..30 {
            guide.push_str(&format!("Shipping goes out on Mondays, case {i}.\n\n"));
        }
        assert!(guide.len() > Options::default().ceiling);
        for (path, language, text) in [
            ("GUIDE.md", "markdown", guide.as_str()),
            ("a.py", "python", "def a():\n    return 1\n"),
            ("POISON.md", "markdown", guide.as_str()),
            (
                "notes.md",
                "markdown",
                "# Notes\n\nShort enough to need no model.\n",
            ),
            ("b.py", "python", "def b():\n    return 2\n"),
        ] {
            bus.publish(
                FILES_TOPIC,
                "github.com/a/b",
                upsert_in(path, language, text),
            )
            .await
            .unwrap();
        }
        bus.close(FILES_TOPIC).await.unwrap();
        let model = Arc::new(Gated::default());
        let worker = ChunkWorker::new(store.clone(), bus.clone(), Options::default(), 2)
            .with_meaning(Some(Meaning {
                model: model.clone(),
                percentile: 95.0,
            }))
            .with_chunker(poisoned)
            .with_max_attempts(3)
            .deferring_prose();
        let mut first = worker.first_pass().unwrap();
        let repo = RepoId::parse("github.com/a/b").unwrap();
        let watch = async {
            let done = tokio::time::timeout(
                Duration::from_secs(60),
                first.wait_for(|p| *p != FirstPass::Running),
            )
            .await
            .map(|p| p.map(|p| p.clone()));
            // The code and the short note are chunked; the model has read nothing.
            let parts = store.list("chunks/").await.unwrap().len();
            let read = model.read.load(Ordering::Relaxed);
            model.open.store(true, Ordering::Relaxed);
            (done, parts, read)
        };
        let (m, (done, parts, read)) = tokio::join!(worker.run(Until::Closed), watch);
        let done = done
            .expect("the first pass ends without the model")
            .unwrap();
        assert_eq!(
            done,
            FirstPass::Done(Deferred {
                files: 2,
                repos: [repo].into_iter().collect()
            })
        );
        assert_eq!((parts, read), (3, 0));
        let m = m.unwrap();
        // The guide follows, cut by meaning; the file the chunker panics on is given back
        // and, on its last attempt, set aside, as in the first pass.
        assert_eq!((m.files, m.dead_letters, m.panics, m.retries), (4, 1, 3, 2));
        assert_eq!(store.list("chunks/").await.unwrap().len(), 4);
        assert!(model.read.load(Ordering::Relaxed) > 0);
        assert_eq!(m.notes.get("split-by-meaning"), Some(&1), "{:?}", m.notes);
        let letters = letters(&bus).await;
        assert_eq!(letters.len(), 1);
        assert!(
            letters[0].error.contains("POISON.md"),
            "{}",
            letters[0].error
        );
    }

    #[tokio::test]
    async fn a_run_that_ends_early_says_its_first_pass_stopped() {
        let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(4));
        let (trigger, shutdown) = trawl_core::shutdown::channel();
        trigger.request();
        let worker = ChunkWorker::new(Store::memory(), bus, Options::default(), 1)
            .with_shutdown(shutdown)
            .deferring_prose();
        let first = worker.first_pass().unwrap();
        worker.run(Until::Closed).await.unwrap();
        assert_eq!(*first.borrow(), FirstPass::Stopped);
    }
}

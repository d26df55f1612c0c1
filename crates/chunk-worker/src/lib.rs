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
//! Parts are sorted by path then byte offset, zstd-compressed, one row group each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use trawl_chunker::records::{Source, to_records};
use trawl_chunker::{CHUNKER_VERSION, Options, Strategy};
use trawl_core::bus::{Bus, Delivery, Topic};
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
        }
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
        use futures::StreamExt;
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
                    Some(d) => inflight.push(self.handle(d)),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline), if idle.is_some() && inflight.is_empty() => break,
            }
            deadline = tokio::time::Instant::now() + idle.unwrap_or(far);
        }
        while inflight.next().await.is_some() {}
        Ok(self.metrics.snapshot())
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

    /// Chunks as the real chunker does, but panics on `poison.py`.
    fn poisoned(
        path: &str,
        language: Option<&str>,
        src: &str,
        strategy: Strategy,
        opts: &Options,
    ) -> trawl_chunker::Chunked {
        assert_ne!(path, "poison.py", "a chunker bug this file triggers");
        trawl_chunker::chunk(path, language, src, strategy, opts)
    }

    fn upsert(path: &str, content: &str) -> Bytes {
        FileEvent {
            schema_version: records::FILE_EVENT_VERSION,
            op: FileOp::Upsert,
            repo: RepoId::parse("github.com/a/b").unwrap(),
            commit: "a".repeat(40).parse::<CommitId>().unwrap(),
            path: path.into(),
            renamed_from: None,
            blob: Some("b".repeat(40).parse::<BlobId>().unwrap()),
            language: Some("python".into()),
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
}

//! The embed stage end to end: fetch → chunk worker → embed worker, with the hash embedder
//! and with the fake Voyage server injecting faults.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use trawl_chunk_worker::ChunkWorker;
use trawl_core::bus::Bus;
use trawl_core::ids::ContentHash;
use trawl_core::records::{self, ChunkRecord, DeadLetter, EmbeddedEvent, EmbeddingRecord};
use trawl_core::store::Store;
use trawl_embed::batch::{BatchConfig, VoyageBatches};
use trawl_embed::embedder::{Dtype, Embedder, Vector};
use trawl_embed::fake::{FakeConfig, FakeVoyage, fake_context_vector, fake_vector};
use trawl_embed::hash::HashEmbedder;
use trawl_embed::voyage::{VoyageConfig, VoyageEmbedder};
use trawl_embed_worker::worker::{DEAD_LETTERS_TOPIC, EMBEDDED_TOPIC, WorkerError};
use trawl_embed_worker::{EmbedWorker, Options, RunReport, Until};
use trawl_fetcher::RunOptions;

use crate::support::{Harness, Node, SourceRepo, file};

/// Real code: the standard library's json package, plus one function every fork shares.
fn stdlib_json() -> Vec<(String, Node)> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import json,os;print(os.path.dirname(json.__file__))"])
        .output()
        .unwrap();
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let mut files = Vec::new();
    for name in [
        "__init__.py",
        "decoder.py",
        "encoder.py",
        "scanner.py",
        "tool.py",
    ] {
        let text = std::fs::read(dir.join(name)).unwrap();
        files.push((format!("json/{name}"), file(text)));
    }
    files
}

fn commit(src: &SourceRepo, files: &[(String, Node)]) {
    let refs: Vec<(&str, Node)> = files.iter().map(|(p, n)| (p.as_str(), n.clone())).collect();
    src.commit(&refs, false);
}

async fn fetch_and_chunk(h: &Harness, srcs: &[&SourceRepo]) {
    fetch_and_chunk_with(h, srcs, RunOptions::default()).await;
}

/// [`fetch_and_chunk`] as `trawl fetch` runs it: the fetcher records the chunker version
/// it sends files to.
async fn fetch_and_chunk_as_the_cli(h: &Harness, srcs: &[&SourceRepo]) {
    let opts = RunOptions {
        chunker_version: Some(trawl_chunk_worker::part_version(
            trawl_chunker::Strategy::Ast,
        )),
        ..RunOptions::default()
    };
    fetch_and_chunk_with(h, srcs, opts).await;
}

async fn fetch_and_chunk_with(h: &Harness, srcs: &[&SourceRepo], opts: RunOptions) {
    let paths: Vec<_> = srcs.iter().map(|s| s.path()).collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(std::path::PathBuf::as_path).collect();
    let (report, _) = h.run(&refs, opts).await;
    assert_eq!(report.failed(), 0);
    let worker = ChunkWorker::new(
        h.store.clone(),
        h.bus.clone(),
        trawl_chunker::Options::default(),
        2,
    );
    worker
        .run(trawl_chunk_worker::Until::Idle(Duration::from_millis(300)))
        .await
        .unwrap();
}

fn options(name: &str) -> Options {
    Options {
        linger: Duration::from_millis(30),
        concurrency: 3,
        price_per_mtok: 0.18,
        batch_price_per_mtok: 0.12,
        dry_run: false,
        embedder: name.into(),
        prose_views: false,
    }
}

async fn embed(h: &Harness, e: Arc<dyn Embedder>) -> Result<RunReport, WorkerError> {
    EmbedWorker::new(h.store.clone(), Some(h.bus.clone()), e, options("test"))
        .run(Until::Idle(Duration::from_millis(500)))
        .await
}

async fn backfill(h: &Harness, e: &Arc<dyn Embedder>, dry_run: bool) -> RunReport {
    EmbedWorker::new(
        h.store.clone(),
        None,
        e.clone(),
        Options {
            dry_run,
            ..options("hash")
        },
    )
    .backfill(&|_, _| {})
    .await
    .unwrap()
}

async fn all_chunks(store: &Store) -> Vec<ChunkRecord> {
    let mut out = Vec::new();
    for key in store.list("chunks/").await.unwrap() {
        out.extend(
            records::from_parquet::<ChunkRecord>(store.get(&key).await.unwrap().unwrap()).unwrap(),
        );
    }
    out
}

/// Every vector in the store, by content hash.
async fn vectors(store: &Store) -> HashMap<ContentHash, Vec<EmbeddingRecord>> {
    let mut out: HashMap<ContentHash, Vec<EmbeddingRecord>> = HashMap::new();
    for key in store.list("embeddings/").await.unwrap() {
        for r in records::from_parquet::<EmbeddingRecord>(store.get(&key).await.unwrap().unwrap())
            .unwrap()
        {
            out.entry(r.content_hash).or_default().push(r);
        }
    }
    out
}

async fn drain(bus: &Arc<dyn Bus>, topic: &str, group: &str) -> Vec<bytes::Bytes> {
    let mut sub = bus.subscribe(topic, group).await.unwrap();
    let mut out = Vec::new();
    while let Ok(Ok(Some(d))) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
        out.push(d.payload.clone());
        d.ack().await.unwrap();
    }
    out
}

#[tokio::test]
async fn every_chunk_is_embedded_once_and_a_fork_or_a_rerun_sends_nothing() {
    let h = Harness::new().with_inproc_bus();
    let files = stdlib_json();
    let (a, fork) = (SourceRepo::new(), SourceRepo::new());
    commit(&a, &files);
    fetch_and_chunk(&h, &[&a]).await;
    let hash = Arc::new(HashEmbedder::new(64).unwrap());
    let first = embed(&h, hash.clone()).await.unwrap();

    let chunks = all_chunks(&h.store).await;
    assert!(chunks.len() > 40, "{} chunks", chunks.len());
    let got = vectors(&h.store).await;
    for c in &chunks {
        let v = &got[&c.content_hash];
        assert_eq!(v.len(), 1, "one vector per content hash");
        assert_eq!(
            v[0].vector.as_deref(),
            Some(&hash.vector(&c.indexed_text())[..])
        );
        assert_eq!((v[0].model.as_str(), v[0].dims), ("trawl-hash-v1", 64));
    }
    let e = &first.embed;
    assert_eq!(e.chunks as usize, chunks.len());
    assert_eq!(e.cache_misses as usize, got.len());
    assert_eq!(e.vectors_written as usize, got.len());
    assert_eq!(e.parts, 5);
    assert!(e.tokens_sent > 0 && e.requests > 0);

    // The run report is in the store, with the keys the issue names.
    let report: serde_json::Value = h
        .store
        .get_json(&trawl_core::store::keys::run(&first.run))
        .await
        .unwrap()
        .unwrap();
    for key in ["tokens_sent", "requests", "cache_hits", "cache_misses"] {
        assert!(report["embed"][key].is_u64(), "embed.{key}: {report}");
    }

    // One embedded event per chunk part, naming the part its vectors are in.
    let events: Vec<EmbeddedEvent> = drain(&h.bus, EMBEDDED_TOPIC, "compactor")
        .await
        .iter()
        .map(|b| EmbeddedEvent::from_json(b).unwrap())
        .collect();
    assert_eq!(events.len(), 5);
    assert!(events.iter().all(|e| e.embeddings_key.is_some()));

    // A fork with the same files: every chunk is a cache hit, nothing is sent.
    commit(&fork, &files);
    fetch_and_chunk(&h, &[&fork]).await;
    let second = embed(&h, hash.clone()).await.unwrap();
    assert_eq!(second.embed.cache_misses, 0);
    assert_eq!(second.embed.cache_hits as usize, chunks.len());
    assert_eq!((second.embed.tokens_sent, second.embed.requests), (0, 0));

    // A new worker (a new process) rebuilds the cache from the store and sends nothing.
    let hash: Arc<dyn Embedder> = hash;
    let rescan = backfill(&h, &hash, false).await;
    assert_eq!(rescan.embed.tokens_sent, 0);
    // It reads the listed repositories' files: the last fetch run listed the fork alone.
    assert_eq!(rescan.embed.chunks as usize, chunks.len());
    assert_eq!(vectors(&h.store).await.len(), got.len());
}

/// With prose views on (`embed.prose_view`), each chunk of code also gets the vector of its
/// prose view, under the key derived from its content hash, in the same space; the report
/// counts them apart from the chunks; a new worker over the same store sends nothing.
#[tokio::test]
async fn each_chunk_of_code_gets_one_vector_of_its_prose_view_beside_its_own() {
    let h = Harness::new().with_inproc_bus();
    let a = SourceRepo::new();
    commit(&a, &stdlib_json());
    fetch_and_chunk(&h, &[&a]).await;
    let hash = Arc::new(HashEmbedder::new(64).unwrap());
    let opts = Options {
        prose_views: true,
        ..options("hash")
    };
    let first = EmbedWorker::new(
        h.store.clone(),
        Some(h.bus.clone()),
        hash.clone(),
        opts.clone(),
    )
    .run(Until::Idle(Duration::from_millis(500)))
    .await
    .unwrap();
    let chunks = all_chunks(&h.store).await;
    let got = vectors(&h.store).await;
    let mut views = std::collections::HashSet::new();
    let mut hashes = std::collections::HashSet::new();
    for c in &chunks {
        hashes.insert(c.content_hash);
        assert_eq!(
            got[&c.content_hash][0].vector.as_deref(),
            Some(&hash.vector(&c.indexed_text())[..])
        );
        let Some(key) = c.prose_key() else {
            assert_eq!(c.prose_view(), None, "no key, no view");
            continue;
        };
        let view = c.prose_view().expect("a key, a view");
        assert_ne!(key, c.content_hash);
        assert_eq!(got[&key].len(), 1, "one vector per prose view");
        assert_eq!(
            got[&key][0].vector.as_deref(),
            Some(&hash.vector(&view)[..])
        );
        assert_eq!(got[&key][0].model, "trawl-hash-v1");
        views.insert(key);
    }
    assert!(views.len() > 20, "{} prose views", views.len());
    let e = &first.embed;
    assert_eq!(
        e.cache_misses as usize,
        hashes.len(),
        "chunks are counted alone"
    );
    assert_eq!(e.prose_views as usize, views.len());
    assert_eq!(e.prose_vectors_written as usize, views.len());
    assert_eq!(e.vectors_written as usize, hashes.len() + views.len());
    assert_eq!(got.len(), hashes.len() + views.len());

    // A new worker rebuilds the cache from the store: the prose views are in it too.
    let rescan = EmbedWorker::new(h.store.clone(), None, hash.clone(), opts)
        .backfill(&|_, _| {})
        .await
        .unwrap();
    assert_eq!((rescan.embed.tokens_sent, rescan.embed.prose_views), (0, 0));
    assert_eq!(vectors(&h.store).await.len(), got.len());
}

/// The chunks of one file version, in line order, and their embedded texts.
fn file_version<'a>(chunks: &'a [ChunkRecord], path: &str, blob: &str) -> Vec<&'a ChunkRecord> {
    let mut doc: Vec<&ChunkRecord> = chunks
        .iter()
        .filter(|c| c.path == path && c.blob.as_str() == blob)
        .collect();
    doc.sort_by_key(|c| (c.start_line, c.end_line));
    doc
}

#[tokio::test]
async fn a_contextual_model_embeds_each_chunk_within_its_file_and_resends_a_changed_file_whole() {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    let mut files = stdlib_json();
    commit(&src, &files);
    fetch_and_chunk(&h, &[&src]).await;
    let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    (cfg.dims, cfg.model) = (256, "voyage-context-3".into());
    let e: Arc<dyn Embedder> = Arc::new(VoyageEmbedder::new(cfg).unwrap());
    let first = embed(&h, e.clone()).await.unwrap();

    // Every vector is its chunk's within its file, as the fake computes it.
    let chunks = all_chunks(&h.store).await;
    let got = vectors(&h.store).await;
    let mut count: HashMap<ContentHash, usize> = HashMap::new();
    for c in &chunks {
        *count.entry(c.content_hash).or_default() += 1;
    }
    let mut checked = 0;
    for c in &chunks {
        let blob = c.blob.as_str().to_owned();
        let doc = file_version(&chunks, &c.path, &blob);
        let texts: Vec<String> = doc.iter().map(|d| d.indexed_text()).collect();
        let i = doc.iter().position(|d| d.chunk_id == c.chunk_id).unwrap();
        let v = &got[&c.content_hash];
        assert_eq!(v.len(), 1, "one vector per content hash");
        assert_eq!(v[0].model, "voyage-context-3");
        // A text that two chunks share was embedded in one of their files.
        if count[&c.content_hash] == 1 {
            let want = fake_context_vector(&texts, i, 256, Dtype::Float);
            assert_eq!(
                Vector::Float(v[0].vector.clone().unwrap()),
                want,
                "{}",
                c.path
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} chunks checked");
    assert_eq!(first.embed.cache_misses as usize, got.len());

    // One function added to tool.py: only its new chunks get vectors, but the whole file
    // is sent again so that they see it; the other files are not sent.
    let tool = files.iter_mut().find(|(p, _)| p == "json/tool.py").unwrap();
    let mut text = std::fs::read_to_string(
        std::process::Command::new("python3")
            .args(["-c", "import json.tool;print(json.tool.__file__)"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap(),
    )
    .unwrap();
    text.push_str("\n\ndef added_for_context(x):\n    return main(x)\n");
    tool.1 = crate::support::file(text.into_bytes());
    commit(&src, &files);
    fetch_and_chunk(&h, &[&src]).await;
    // What a dry run prices: the changed file whole.
    let dry = EmbedWorker::new(
        h.store.clone(),
        None,
        e.clone(),
        Options {
            dry_run: true,
            ..options("voyage")
        },
    )
    .backfill(&|_, _| {})
    .await
    .unwrap();
    let sent_before = fake.stats().embedded;
    let second = embed(&h, e.clone()).await.unwrap();
    let after = all_chunks(&h.store).await;
    let got = vectors(&h.store).await;
    let new: Vec<&ChunkRecord> = after
        .iter()
        .filter(|c| !chunks.iter().any(|o| o.content_hash == c.content_hash))
        .collect();
    assert!(!new.is_empty());
    assert_eq!(second.embed.vectors_written as usize, new.len());
    let blob = new[0].blob.as_str().to_owned();
    let doc = file_version(&after, "json/tool.py", &blob);
    let texts: Vec<String> = doc.iter().map(|d| d.indexed_text()).collect();
    for c in &new {
        let i = doc.iter().position(|d| d.chunk_id == c.chunk_id).unwrap();
        let want = fake_context_vector(&texts, i, 256, Dtype::Float);
        assert_eq!(
            Vector::Float(got[&c.content_hash][0].vector.clone().unwrap()),
            want
        );
    }
    let whole: u64 = texts.iter().map(|t| e.count_tokens(t)).sum();
    assert_eq!(
        dry.embed.tokens_sent, whole,
        "the dry run prices the whole file"
    );
    let sent = fake.stats().embedded;
    let resent =
        |t: &String| sent.get(t).copied().unwrap_or(0) - sent_before.get(t).copied().unwrap_or(0);
    assert!(
        texts.iter().all(|t| resent(t) == 1),
        "the changed file, whole, once"
    );
    let other: Vec<String> = after
        .iter()
        .filter(|c| c.path == "json/decoder.py")
        .map(ChunkRecord::indexed_text)
        .collect();
    assert!(
        other.iter().all(|t| resent(t) == 0),
        "an unchanged file is not sent"
    );
}

#[tokio::test]
async fn a_model_change_fills_a_new_space_and_leaves_the_old_one_serving() {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    commit(&src, &stdlib_json());
    fetch_and_chunk(&h, &[&src]).await;
    embed(&h, Arc::new(HashEmbedder::new(64).unwrap()))
        .await
        .unwrap();
    let old = h
        .store
        .list("embeddings/space=trawl-hash-v1.64.float/")
        .await
        .unwrap();
    assert!(!old.is_empty());

    let new: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(128).unwrap());
    let dry = backfill(&h, &new, true).await;
    let chunks = all_chunks(&h.store)
        .await
        .iter()
        .map(|c| c.content_hash)
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    assert_eq!(dry.embed.cache_misses, chunks);
    assert!(dry.embed.tokens_sent > 0);
    assert!(dry.embed.estimated_cost_usd > 0.0);
    assert!(
        h.store
            .list("embeddings/space=trawl-hash-v1.128.float/")
            .await
            .unwrap()
            .is_empty(),
        "a dry run writes nothing"
    );

    let filled = backfill(&h, &new, false).await;
    assert_eq!(filled.embed.vectors_written, chunks);
    assert_eq!(
        h.store
            .list("embeddings/space=trawl-hash-v1.64.float/")
            .await
            .unwrap(),
        old,
        "the old space is untouched"
    );
    let again = backfill(&h, &new, true).await;
    assert_eq!(again.embed.tokens_sent, 0);
}

#[tokio::test]
async fn a_backfill_embeds_only_the_files_the_repositories_hold_now() {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    let mut files = stdlib_json();
    files.push((
        "gone.py".into(),
        file("def superseded_marker():\n    return 'only in the first commit'\n"),
    ));
    commit(&src, &files);
    fetch_and_chunk_as_the_cli(&h, &[&src]).await;
    embed(&h, Arc::new(HashEmbedder::new(64).unwrap()))
        .await
        .unwrap();
    let gone: std::collections::HashSet<ContentHash> = all_chunks(&h.store)
        .await
        .into_iter()
        .filter(|c| c.path == "gone.py")
        .map(|c| c.content_hash)
        .collect();
    assert!(!gone.is_empty());
    // The file is deleted: its chunk part stays in the store until retention collects it.
    files.pop();
    commit(&src, &files);
    fetch_and_chunk_as_the_cli(&h, &[&src]).await;
    let current: std::collections::HashSet<ContentHash> = all_chunks(&h.store)
        .await
        .into_iter()
        .filter(|c| c.path != "gone.py")
        .map(|c| c.content_hash)
        .collect();
    assert!(current.is_disjoint(&gone));

    let new: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(128).unwrap());
    let dry = backfill(&h, &new, true).await;
    assert_eq!(
        dry.embed.cache_misses,
        current.len() as u64,
        "priced: the files held now"
    );
    let filled = backfill(&h, &new, false).await;
    assert_eq!(filled.embed.vectors_written, current.len() as u64);
    let mut in_new_space = std::collections::HashSet::new();
    for key in h
        .store
        .list("embeddings/space=trawl-hash-v1.128.float/")
        .await
        .unwrap()
    {
        let rows: Vec<EmbeddingRecord> =
            records::from_parquet(h.store.get(&key).await.unwrap().unwrap()).unwrap();
        in_new_space.extend(rows.into_iter().map(|r| r.content_hash));
    }
    assert_eq!(
        in_new_space, current,
        "the deleted file's chunks are not embedded again"
    );
}

#[tokio::test]
async fn through_a_misbehaving_provider_no_chunk_is_lost_or_duplicated() {
    let h = Harness::new().with_inproc_bus();
    let mut files = stdlib_json();
    files.push((
        "bad.py".into(),
        file("def refused():\n    return 'POISON: the provider refuses this text'\n"),
    ));
    let src = SourceRepo::new();
    commit(&src, &files);
    fetch_and_chunk(&h, &[&src]).await;

    let fake = FakeVoyage::start(FakeConfig {
        p429: 0.15,
        p5xx: 0.1,
        p_slow: 0.05,
        slow: Duration::from_millis(1200),
        p_drop: 0.05,
        poison: Some("POISON".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.dims = 256;
    cfg.dtype = Dtype::Int8;
    cfg.timeout = Duration::from_millis(600);
    cfg.max_retries = 40;
    // Small requests, so that the faults hit many of them.
    cfg.max_batch_inputs = 7;
    let voyage = Arc::new(VoyageEmbedder::new(cfg).unwrap());
    let report = embed(&h, voyage.clone()).await.unwrap();

    let chunks = all_chunks(&h.store).await;
    let got = vectors(&h.store).await;
    let mut refused = 0;
    for c in &chunks {
        let text = c.indexed_text();
        if text.contains("POISON") {
            refused += 1;
            assert!(!got.contains_key(&c.content_hash));
            continue;
        }
        let v = got
            .get(&c.content_hash)
            .unwrap_or_else(|| panic!("lost: {}", c.path));
        assert_eq!(v.len(), 1, "duplicated: {}", c.path);
        assert_eq!(
            Vector::Bytes(v[0].vector_bytes.clone().unwrap()),
            fake_vector(&text, 256, Dtype::Int8),
            "the vector of {} {:?} belongs to its text",
            c.path,
            c.symbol
        );
    }
    assert_eq!(refused, 1);
    let e = &report.embed;
    assert_eq!(e.dead_lettered, 1);
    for cause in ["429", "5xx"] {
        assert!(
            e.retries.get(cause).copied().unwrap_or(0) > 0,
            "{:?}",
            e.retries
        );
    }
    let letters: Vec<DeadLetter> = drain(&h.bus, DEAD_LETTERS_TOPIC, "ops")
        .await
        .iter()
        .map(|b| DeadLetter::from_json(b).unwrap())
        .collect();
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].error.contains("invalid content"),
        "{}",
        letters[0].error
    );
    let events: Vec<EmbeddedEvent> = drain(&h.bus, EMBEDDED_TOPIC, "compactor")
        .await
        .iter()
        .map(|b| EmbeddedEvent::from_json(b).unwrap())
        .collect();
    assert_eq!(
        events.len(),
        6,
        "one event per part, the refused chunk's included"
    );
    assert_eq!(events.iter().map(|e| e.dead_lettered).sum::<u32>(), 1);
    // Every event was acknowledged: nothing is left for the group.
    assert!(
        drain(
            &h.bus,
            trawl_embed_worker::worker::CHUNKS_TOPIC,
            "embed-worker"
        )
        .await
        .is_empty()
    );
}

#[tokio::test]
async fn a_rejected_key_or_model_stops_the_worker_and_gives_every_event_back() {
    // The spool bus keeps unacknowledged events across workers, like Kafka.
    let h = Harness::new();
    let src = SourceRepo::new();
    commit(&src, &stdlib_json());
    fetch_and_chunk(&h, &[&src]).await;
    let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
    let mut cfg = VoyageConfig::new(&fake.base_url(), "revoked-key");
    cfg.dims = 256;
    let err = embed(&h, Arc::new(VoyageEmbedder::new(cfg).unwrap()))
        .await
        .unwrap_err();
    assert!(matches!(err, WorkerError::Auth(_)), "{err}");
    assert!(err.to_string().contains("VOYAGE_API_KEY"), "{err}");
    assert!(vectors(&h.store).await.is_empty());

    // A model the provider does not serve: every input is refused, so the request is at
    // fault; nothing is dead-lettered and the worker stops.
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.dims = 256;
    cfg.model = "voyage-code-9".into();
    let err = embed(&h, Arc::new(VoyageEmbedder::new(cfg).unwrap()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("embed.model"), "{err}");
    assert!(
        drain(&h.bus, DEAD_LETTERS_TOPIC, "ops").await.is_empty(),
        "nothing is dead-lettered for a wrong model"
    );
    assert!(vectors(&h.store).await.is_empty());

    // With the right key, a new worker gets every event again and embeds everything.
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.dims = 256;
    let report = embed(&h, Arc::new(VoyageEmbedder::new(cfg).unwrap()))
        .await
        .unwrap();
    assert_eq!(report.embed.parts, 5);
    let distinct: std::collections::HashSet<_> = all_chunks(&h.store)
        .await
        .iter()
        .map(|c| c.content_hash)
        .collect();
    assert_eq!(vectors(&h.store).await.len(), distinct.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_index_makes_the_code_searchable_before_the_slow_embedder_is_done() {
    // Every embedding request takes 3 s: chunking ends long before the vectors are in.
    let fake = FakeVoyage::start(FakeConfig {
        p_slow: 1.0,
        slow: Duration::from_secs(3),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let src = SourceRepo::named("slowly");
    src.commit(
        &[(
            "lib/ledger.py",
            file("def reconcile_ledger(entries):\n    \"\"\"Balance the ledger.\"\"\"\n    return sum(entries)\n"),
        )],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let base = fake.base_url();
    let out = tokio::task::spawn_blocking({
        let (dir, path) = (work.path().to_owned(), src.path());
        move || {
            crate::search::trawl(&dir)
                .env("VOYAGE_API_KEY", "test-key")
                .args(["--set", &format!("embed.base_url={base:?}")])
                .args(["--set", "embed.dims=256"])
                .args(["index", "--embedder", "voyage"])
                .arg(path)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = crate::search::ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("generation 1 is searchable now"),
        "{stderr}\n{stdout}"
    );
    assert!(
        stdout.contains("early    generation 1 was searchable"),
        "{stdout}"
    );
    assert!(stdout.contains("generation 2 live"), "{stdout}");
    // The generation made live first held the chunk for words only; the last has its vector.
    let first: serde_json::Value = serde_json::from_slice(
        &std::fs::read(work.path().join(".trawl/index/gen=1/manifest.json")).unwrap(),
    )
    .unwrap();
    assert!(
        first["counts"]["text_only"].as_u64().unwrap() > 0,
        "{first}"
    );
    let last: serde_json::Value = serde_json::from_slice(
        &std::fs::read(work.path().join(".trawl/index/gen=2/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(last["counts"]["text_only"], 0, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_index_makes_the_code_searchable_before_the_sentence_model_reads_the_prose() {
    // The local model reads every sentence of long prose (`chunk.meaning`): the code goes
    // live first, the guide follows with the vectors.
    assert!(
        trawl_embed::local::is_installed(&trawl_embed::local::default_model_dir()),
        "the local model is not installed: bash scripts/fetch-model.sh"
    );
    let fake = FakeVoyage::start(FakeConfig {
        p_slow: 1.0,
        slow: Duration::from_secs(2),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let mut guide = String::from("# Operations guide\n\n");
    for i in 0..8 {
        guide.push_str(&format!(
            "A customer refund is paid back to the card within five working days, case {i}.\n\n"
        ));
    }
    for i in 0..8 {
        guide.push_str(&format!(
            "Backups of the ledger database are taken every night at two, copy {i}.\n\n"
        ));
    }
    let src = SourceRepo::named("prose-last");
    src.commit(
        &[
            (
                "lib/ledger.py",
                file("def reconcile_ledger(entries):\n    \"\"\"Balance the ledger.\"\"\"\n    return sum(entries)\n"),
            ),
            ("docs/GUIDE.md", file(&guide)),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let base = fake.base_url();
    let run = |args: &'static [&'static str]| {
        let (dir, path, base) = (work.path().to_owned(), src.path(), base.clone());
        tokio::task::spawn_blocking(move || {
            crate::search::trawl(&dir)
                .env("VOYAGE_API_KEY", "test-key")
                .args(["--set", &format!("embed.base_url={base:?}")])
                .args(["--set", "embed.dims=256"])
                .args(args)
                .arg(path)
                .output()
                .unwrap()
        })
    };
    let out = run(&["index", "--embedder", "voyage"]).await.unwrap();
    let stdout = crate::search::ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("generation 1 is searchable now (")
            && stderr.contains("without 1 long prose file still being cut by meaning"),
        "{stderr}\n{stdout}"
    );
    assert!(
        stdout.contains("without 1 prose files then being cut by meaning"),
        "{stdout}"
    );
    assert!(stdout.contains("generation 2 live"), "{stdout}");
    let counts = |g: u32| -> serde_json::Value {
        let m: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                work.path()
                    .join(format!(".trawl/index/gen={g}/manifest.json")),
            )
            .unwrap(),
        )
        .unwrap();
        m["counts"].clone()
    };
    let (first, last) = (counts(1), counts(2));
    // The guide (~1,300 bytes over a 400-byte ceiling) is two pieces or more, none of them
    // in the early generation.
    let (early, full) = (
        first["chunks"].as_u64().unwrap(),
        last["chunks"].as_u64().unwrap(),
    );
    assert!(early >= 1 && full >= early + 2, "{first} {last}");
    assert_eq!(last["text_only"], 0, "{last}");

    // The guide is live, cut where its topic changes; and the run recorded the repository
    // as finished: the next one finds nothing to do.
    let found = tokio::task::spawn_blocking({
        let dir = work.path().to_owned();
        let base = base.clone();
        move || {
            crate::search::trawl(&dir)
                .env("VOYAGE_API_KEY", "test-key")
                .args(["--set", &format!("embed.base_url={base:?}")])
                .args(["--set", "embed.dims=256"])
                .args([
                    "search",
                    "refund to the card",
                    "--mode",
                    "lexical",
                    "-k",
                    "3",
                ])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let found = crate::search::ok(&found);
    assert!(found.contains("docs/GUIDE.md"), "{found}");
    let again = run(&["index", "--embedder", "voyage"]).await.unwrap();
    let again = crate::search::ok(&again);
    assert!(again.contains("unchanged"), "{again}");
    assert!(!work.path().join(".trawl/index/gen=3").exists(), "{again}");
}

/// A store holding the chunks of one repository of real code.
async fn chunked_stdlib() -> Harness {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    commit(&src, &stdlib_json());
    fetch_and_chunk(&h, &[&src]).await;
    h
}

/// Batch API clients against `fake`: `max_inputs` lines per batch, polls milliseconds apart.
fn batch_client(fake: &FakeVoyage, max_inputs: usize) -> Arc<VoyageBatches> {
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.dims = 256;
    cfg.timeout = Duration::from_secs(5);
    Arc::new(
        VoyageBatches::new(
            &cfg,
            BatchConfig {
                max_inputs,
                max_file_bytes: 1 << 30,
                poll: Duration::from_millis(5),
                max_poll: Duration::from_millis(20),
            },
        )
        .unwrap(),
    )
}

fn voyage_embedder(fake: &FakeVoyage) -> Arc<dyn Embedder> {
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.dims = 256;
    Arc::new(VoyageEmbedder::new(cfg).unwrap())
}

/// `trawl embed --all --batch`, as the CLI runs it.
async fn batch_backfill(
    h: &Harness,
    fake: &FakeVoyage,
    max_inputs: usize,
) -> Result<RunReport, WorkerError> {
    EmbedWorker::new(
        h.store.clone(),
        None,
        voyage_embedder(fake),
        options("voyage"),
    )
    .with_batches(batch_client(fake, max_inputs))
    .backfill(&|_, _| {})
    .await
}

/// The batches a run submitted and has not collected yet.
async fn listed_batches(store: &Store) -> Vec<String> {
    store.list("pipeline/embed-batches/").await.unwrap()
}

/// Every vector is the fake's vector of its chunk's text, once per content hash.
async fn assert_every_chunk_has_its_vector(store: &Store) {
    let got = vectors(store).await;
    for c in all_chunks(store).await {
        let v = &got[&c.content_hash];
        assert_eq!(v.len(), 1, "one vector per content hash");
        assert_eq!(
            Vector::Float(v[0].vector.clone().unwrap()),
            fake_vector(&c.indexed_text(), 256, Dtype::Float)
        );
        assert_eq!((v[0].model.as_str(), v[0].dims), ("voyage-code-3", 256));
    }
}

#[tokio::test]
async fn a_batch_backfill_writes_what_the_synchronous_path_writes_at_the_batch_price() {
    let h = chunked_stdlib().await;
    let fake = FakeVoyage::start(FakeConfig {
        batch_polls: 2,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let chunks = all_chunks(&h.store).await;
    let distinct: std::collections::HashSet<ContentHash> =
        chunks.iter().map(|c| c.content_hash).collect();

    // A dry run prices both modes and sends nothing.
    let dry = EmbedWorker::new(
        h.store.clone(),
        None,
        voyage_embedder(&fake),
        Options {
            dry_run: true,
            ..options("voyage")
        },
    )
    .backfill(&|_, _| {})
    .await
    .unwrap()
    .embed;
    assert!(dry.tokens_sent > 0);
    let at = |price: f64| dry.tokens_sent as f64 / 1e6 * price;
    assert!((dry.estimated_cost_sync_usd - at(0.18)).abs() < 1e-12);
    assert!((dry.estimated_cost_batch_usd - at(0.12)).abs() < 1e-12);
    assert_eq!(fake.stats().requests, 0);

    // 40 inputs a batch: several batches.
    let report = batch_backfill(&h, &fake, 40).await.unwrap().embed;
    let s = fake.stats();
    assert!(s.batches_created >= 2, "{} batches", s.batches_created);
    assert_eq!(s.batches_created as usize, distinct.len().div_ceil(40));
    assert_eq!(s.accepted, 0, "the synchronous endpoint is not used");
    assert_every_chunk_has_its_vector(&h.store).await;
    assert_eq!(s.embedded.len(), distinct.len());
    assert!(s.embedded.values().all(|n| *n == 1), "each text once");
    assert_eq!(report.mode, "batch");
    assert_eq!(report.cache_misses as usize, distinct.len());
    assert_eq!(report.vectors_written as usize, distinct.len());
    assert_eq!(report.tokens_sent, s.accepted_tokens);
    assert_eq!(report.requests, s.batches_created);
    assert_eq!(report.batches.len() as u64, s.batches_created);
    assert!(
        report
            .batches
            .iter()
            .all(|b| b.status == "completed" && !b.resumed)
    );
    assert!((report.estimated_cost_usd - report.tokens_sent as f64 / 1e6 * 0.12).abs() < 1e-12);
    assert_eq!(report.failed_inputs, 0);
    assert!(listed_batches(&h.store).await.is_empty());

    // A re-run sends nothing: every chunk is in the cache.
    let again = batch_backfill(&h, &fake, 40).await.unwrap().embed;
    assert_eq!(fake.stats().batches_created, s.batches_created);
    assert_eq!(fake.stats().files_uploaded, s.files_uploaded);
    assert_eq!(again.cache_hits as usize, chunks.len());
    assert_eq!((again.tokens_sent, again.requests), (0, 0));
}

#[tokio::test]
async fn a_batch_run_stopped_while_waiting_resumes_its_batches_instead_of_paying_twice() {
    let h = chunked_stdlib().await;
    // Batches that stay in progress until told otherwise.
    let fake = FakeVoyage::start(FakeConfig {
        batch_polls: u32::MAX / 4,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let run = batch_backfill(&h, &fake, 50);
    // Stopped (as by Ctrl-C: the future is dropped) once every batch is submitted and polled.
    tokio::select! {
        r = run => panic!("the run ended while its batches were in progress: {r:?}"),
        () = async {
            while fake.stats().batch_polls == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } => {}
    }
    let submitted = fake.stats();
    assert!(submitted.batches_created >= 2);
    assert_eq!(listed_batches(&h.store).await.len(), 1);
    assert!(vectors(&h.store).await.is_empty());

    // The batches complete; the next run collects them and submits nothing.
    fake.configure(|c| c.batch_polls = 1);
    let report = batch_backfill(&h, &fake, 50).await.unwrap().embed;
    let s = fake.stats();
    assert_eq!(s.batches_created, submitted.batches_created);
    assert_eq!(s.files_uploaded, submitted.files_uploaded);
    assert_every_chunk_has_its_vector(&h.store).await;
    assert!(s.embedded.values().all(|n| *n == 1), "each text once");
    assert_eq!(report.requests, 0, "nothing submitted again");
    assert_eq!(report.batches.len() as u64, s.batches_created);
    assert!(
        report
            .batches
            .iter()
            .all(|b| b.resumed && b.status == "completed")
    );
    assert_eq!(report.vectors_written, report.cache_misses);
    assert!(listed_batches(&h.store).await.is_empty());
}

#[tokio::test]
async fn batches_that_fail_or_expire_are_named_and_their_inputs_go_in_the_next_run() {
    let h = chunked_stdlib().await;
    let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
    for (n, status) in ["failed", "expired"].into_iter().enumerate() {
        fake.end_next_batch(status);
        let err = batch_backfill(&h, &fake, 100_000).await.unwrap_err();
        let WorkerError::Batch(msg) = &err else {
            panic!("{err}")
        };
        let id = format!("batch-{}", 2 * n + 2);
        assert!(
            msg.contains(&format!("Voyage batch {id} ended {status}")),
            "{msg}"
        );
        assert!(
            msg.contains("run `trawl embed --all --batch` again"),
            "{msg}"
        );
        assert!(vectors(&h.store).await.is_empty());
        assert!(
            listed_batches(&h.store).await.is_empty(),
            "not resumed again"
        );
    }
    let report = batch_backfill(&h, &fake, 100_000).await.unwrap().embed;
    assert_eq!(fake.stats().batches_created, 3);
    assert_eq!(report.failed_inputs, 0);
    assert_every_chunk_has_its_vector(&h.store).await;
}

#[tokio::test]
async fn inputs_a_batch_refuses_are_reported_and_left_for_the_next_run_and_an_upload_5xx_is_retried()
 {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    let mut files = stdlib_json();
    files.push((
        "bad/poisoned.py".into(),
        file("def poisoned_helper():\n    return 'POISON marker'\n"),
    ));
    commit(&src, &files);
    fetch_and_chunk(&h, &[&src]).await;
    let fake = FakeVoyage::start(FakeConfig {
        poison: Some("POISON".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let poisoned: std::collections::HashSet<ContentHash> = all_chunks(&h.store)
        .await
        .iter()
        .filter(|c| c.indexed_text().contains("POISON"))
        .map(|c| c.content_hash)
        .collect();
    assert!(!poisoned.is_empty());
    // The first request, the upload, fails with a 503.
    fake.fail_next(503, None);
    let report = batch_backfill(&h, &fake, 100_000).await.unwrap().embed;
    let s = fake.stats();
    assert_eq!(s.outcomes.get("injected-503"), Some(&1));
    assert_eq!((s.files_uploaded, s.batches_created), (1, 1));
    assert_eq!(report.retries.get("5xx"), Some(&1));
    assert_eq!(report.failed_inputs as usize, poisoned.len());
    assert_eq!(report.batches[0].failed as usize, poisoned.len());
    let got = vectors(&h.store).await;
    assert_eq!(got.len() as u64, report.cache_misses - report.failed_inputs);
    assert!(poisoned.iter().all(|h| !got.contains_key(h)));

    // The next run sends exactly the inputs left over.
    fake.configure(|c| c.poison = None);
    let next = batch_backfill(&h, &fake, 100_000).await.unwrap().embed;
    assert_eq!(next.cache_misses as usize, poisoned.len());
    assert_eq!(next.failed_inputs, 0);
    assert_every_chunk_has_its_vector(&h.store).await;
}

#[test]
fn trawl_embed_dry_run_prices_both_modes_and_batch_needs_voyage() {
    let work = tempfile::tempdir().unwrap();
    let out = crate::search::trawl(work.path())
        .args(["embed", "--all", "--dry-run", "--embedder", "hash"])
        .output()
        .unwrap();
    let stdout = crate::search::ok(&out);
    assert!(
        stdout.contains("through the Batch API (--batch)"),
        "{stdout}"
    );
    let out = crate::search::trawl(work.path())
        .args(["embed", "--all", "--batch", "--embedder", "hash"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("add --embedder voyage"), "{stderr}");
}

//! Stages end to end: fetch → chunk worker → Parquet parts in the store.

use std::sync::Arc;

use bytes::Bytes;
use trawl_chunk_worker::{CHUNKS_TOPIC, ChunkWorker, DEAD_LETTERS_TOPIC, FILES_TOPIC, Until};
use trawl_core::bus::{Bus, InProcBus};
use trawl_core::records::{self, ChunkPartEvent, ChunkRecord, FileEvent};
use trawl_core::store::Store;
use trawl_fetcher::RunOptions;

use crate::support::{FaultyBus, Harness, SourceRepo, file};

fn repo_files() -> Vec<(&'static str, crate::support::Node)> {
    vec![
        (
            "app.py",
            file("import os\n\n\ndef main():\n    return os.getcwd()\n"),
        ),
        (
            "lib/queue.rs",
            file("pub struct Q;\n\nimpl Q {\n    pub fn push(&self) {}\n}\n"),
        ),
        ("README.md", file("# Title\n\nSome text.\n")),
    ]
}

async fn drain(bus: &Arc<dyn Bus>, topic: &str) -> Vec<Bytes> {
    bus.close(topic).await.unwrap();
    let mut sub = bus.subscribe(topic, "test").await.unwrap();
    let mut out = Vec::new();
    while let Some(d) = sub.recv().await.unwrap() {
        out.push(d.payload.clone());
        d.ack().await.unwrap();
    }
    out
}

async fn fetched(bus: Arc<dyn Bus>) -> (Harness, SourceRepo) {
    let src = SourceRepo::new();
    src.commit(&repo_files(), false);
    let mut h = Harness::new();
    h.bus = bus;
    let (report, _) = h.run(&[&src.path()], RunOptions::default()).await;
    assert_eq!(report.failed(), 0);
    (h, src)
}

#[tokio::test]
async fn fetched_files_become_one_parquet_part_each_with_definition_chunks() {
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(1 << 16));
    let mut chunks_sub = bus.subscribe(CHUNKS_TOPIC, "embed").await.unwrap();
    let (h, _src) = fetched(bus.clone()).await;
    bus.close(FILES_TOPIC).await.unwrap();
    let worker = ChunkWorker::new(
        h.store.clone(),
        bus.clone(),
        trawl_chunker::Options::default(),
        2,
    );
    let m = worker.run(Until::Closed).await.unwrap();
    assert_eq!((m.files, m.dead_letters, m.retries), (3, 0, 0));

    let parts = h.store.list("chunks/").await.unwrap();
    assert_eq!(parts.len(), 3, "{parts:?}");
    let mut all: Vec<ChunkRecord> = Vec::new();
    for p in &parts {
        assert!(p.starts_with("chunks/repo=local+"), "{p}");
        all.extend(
            records::from_parquet::<ChunkRecord>(h.store.get(p).await.unwrap().unwrap()).unwrap(),
        );
    }
    assert_eq!(all.len() as u64, m.chunks);
    let main = all
        .iter()
        .find(|c| c.symbol.as_deref() == Some("main"))
        .unwrap();
    assert_eq!(main.kind, trawl_core::ChunkKind::Function);
    assert_eq!((main.start_line, main.end_line), (4, 5));
    assert_eq!(main.calls, ["getcwd"]);
    assert_eq!(main.imports, ["import os"]);
    assert!(main.header.starts_with("app.py · function main"));
    let push = all
        .iter()
        .find(|c| c.symbol.as_deref() == Some("Q"))
        .unwrap();
    assert_eq!(push.kind, trawl_core::ChunkKind::Struct);
    assert!(
        all.iter()
            .any(|c| c.kind == trawl_core::ChunkKind::Section && c.path == "README.md")
    );

    // One chunk-part event per part, each naming its object.
    for _ in 0..3 {
        let d = chunks_sub.recv().await.unwrap().unwrap();
        let ev = ChunkPartEvent::from_json(&d.payload).unwrap();
        assert!(parts.contains(&ev.key));
        d.ack().await.unwrap();
    }
}

#[tokio::test]
async fn a_replayed_event_rewrites_the_same_part() {
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(1 << 16));
    let (h, _src) = fetched(bus.clone()).await;
    // Replay: the fetcher crashed before state.json and sends the commit again.
    let mut h2 = Harness::new();
    h2.store = Store::memory();
    h2.bus = bus.clone();
    let src_events = {
        // Re-publish every file event a second time.
        let all = drain_without_close(&bus).await;
        for e in &all {
            bus.publish(FILES_TOPIC, "k", e.clone()).await.unwrap();
            bus.publish(FILES_TOPIC, "k", e.clone()).await.unwrap();
        }
        all.len()
    };
    assert_eq!(src_events, 3);
    bus.close(FILES_TOPIC).await.unwrap();
    let worker = ChunkWorker::new(
        h.store.clone(),
        bus.clone(),
        trawl_chunker::Options::default(),
        4,
    );
    let m = worker.run(Until::Closed).await.unwrap();
    assert_eq!(m.files, 6, "every delivery is processed");
    assert_eq!(
        h.store.list("chunks/").await.unwrap().len(),
        3,
        "but the parts are the same objects"
    );
    let events = drain(&bus, CHUNKS_TOPIC).await;
    let keys: std::collections::BTreeSet<String> = events
        .iter()
        .map(|e| ChunkPartEvent::from_json(e).unwrap().key)
        .collect();
    assert_eq!(keys.len(), 3);
}

/// Takes the file events off the bus (as another consumer group would see them).
async fn drain_without_close(bus: &Arc<dyn Bus>) -> Vec<Bytes> {
    let mut sub = bus.subscribe(FILES_TOPIC, "copier").await.unwrap();
    let mut out = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(std::time::Duration::from_millis(200), sub.recv())
        .await
        .map(Result::unwrap)
    {
        out.push(d.payload.clone());
        d.ack().await.unwrap();
    }
    out
}

#[tokio::test]
async fn a_poison_message_is_dead_lettered_once_and_a_delete_writes_nothing() {
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(64));
    let store = Store::memory();
    bus.publish(FILES_TOPIC, "repo", Bytes::from_static(b"{not json"))
        .await
        .unwrap();
    let delete = serde_json::json!({
        "schema_version": 1, "op": "delete", "repo": "github.com/a/b",
        "commit": "a".repeat(40), "path": "gone.py", "size": 0, "run": "r1"
    });
    FileEvent::from_json(delete.to_string().as_bytes()).unwrap();
    bus.publish(FILES_TOPIC, "repo", Bytes::from(delete.to_string()))
        .await
        .unwrap();
    bus.close(FILES_TOPIC).await.unwrap();
    let worker = ChunkWorker::new(
        store.clone(),
        bus.clone(),
        trawl_chunker::Options::default(),
        2,
    );
    let m = worker.run(Until::Closed).await.unwrap();
    assert_eq!((m.dead_letters, m.deletes, m.files), (1, 1, 0));
    assert!(store.list("chunks/").await.unwrap().is_empty());
    let letters = drain(&bus, DEAD_LETTERS_TOPIC).await;
    assert_eq!(letters.len(), 1);
    let letter: serde_json::Value = serde_json::from_slice(&letters[0]).unwrap();
    assert_eq!(letter["topic"], "files");
    assert_eq!(letter["payload"], "{not json");
    assert!(letter["error"].as_str().unwrap().contains("file event"));
}

#[tokio::test]
async fn a_transient_failure_gives_the_event_back_and_it_is_retried() {
    let inner: Arc<dyn Bus> = Arc::new(InProcBus::new(1 << 16));
    let (h, _src) = fetched(inner.clone()).await;
    inner.close(FILES_TOPIC).await.unwrap();
    let flaky: Arc<dyn Bus> = Arc::new(FaultyBus::new(inner.clone(), CHUNKS_TOPIC, 0, 2));
    let worker = ChunkWorker::new(h.store.clone(), flaky, trawl_chunker::Options::default(), 1);
    let m = worker.run(Until::Closed).await.unwrap();
    assert_eq!((m.files, m.retries, m.dead_letters), (3, 2, 0));
    assert_eq!(drain(&inner, CHUNKS_TOPIC).await.len(), 3);
}

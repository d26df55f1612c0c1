//! The compactor without the live-set query: segments, recall, generations, incremental
//! builds, crashes and format versions, over synthetic docs in a memory store.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use trawl_core::store::Store;

use crate::build::{BuildOptions, LiveDoc, build};
use crate::docs::DocRow;
use crate::generation::{self, Manifest};
use crate::lease::{Lease, LeaseRecord};
use crate::segment::{self, SpaceInfo, VectorData};
use crate::testing::unit;
use crate::{CompactError, Progress, Quiet};

fn doc(i: u64, text: &str) -> DocRow {
    let lines = (1 + (i % 10) as u32 * 5, 5 + (i % 10) as u32 * 5);
    crate::testing::function_doc(
        "github.com/acme/shop",
        &format!("src/mod{}.py", i / 10),
        &format!("handler_{i}"),
        text,
        lines,
    )
}

fn corpus(n: u64, dims: usize) -> Vec<LiveDoc> {
    (0..n)
        .map(|i| LiveDoc {
            doc: doc(
                i,
                &format!("def handler_{i}(request):\n    return respond({i})\n"),
            ),
            vector: Some(VectorData::F32(unit(i, dims))),
        })
        .collect()
}

fn space(dims: u32) -> SpaceInfo {
    SpaceInfo {
        model: "test".into(),
        dims,
        dtype: "float".into(),
    }
}

fn opts(shards: u32) -> BuildOptions {
    BuildOptions {
        shards,
        threads: 2,
        ..BuildOptions::default()
    }
}

/// The live docs a generation holds, by chunk id → content hash, read back from the store.
async fn contents(store: &Store, m: &Manifest) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for shard in &m.shards {
        let tomb: generation::Tombstones = match &shard.tombstones {
            Some(k) => store.get_json(k).await.unwrap().unwrap(),
            None => generation::Tombstones::default(),
        };
        for seg in &shard.segments {
            let rows: Vec<DocRow> = trawl_core::records::from_parquet(
                store
                    .get(&format!("{}/docs.parquet", seg.dir))
                    .await
                    .unwrap()
                    .unwrap(),
            )
            .unwrap();
            let dead: HashSet<u64> = tomb
                .deleted
                .get(&seg.dir)
                .map(|v| v.iter().copied().collect())
                .unwrap_or_default();
            for r in rows.into_iter().filter(|r| !dead.contains(&r.ord)) {
                assert!(
                    out.insert(r.chunk_id.to_string(), r.content_hash.to_string())
                        .is_none(),
                    "a chunk is live once"
                );
            }
        }
    }
    out
}

fn expected(live: &[LiveDoc]) -> BTreeMap<String, String> {
    live.iter()
        .map(|d| (d.doc.chunk_id.to_string(), d.doc.content_hash.to_string()))
        .collect()
}

#[test]
fn ann_recall_at_10_against_exact_search_is_at_least_095() {
    let dims = 64;
    let n = 4000u64;
    let vectors: Vec<(u64, VectorData)> = (0..n)
        .map(|i| (i, VectorData::F32(unit(i, dims))))
        .collect();
    let index = segment::build_vectors(&space(dims as u32), &vectors, 2).unwrap();
    let mut hits = 0;
    let queries = 100;
    for q in 0..queries {
        let query = unit(1_000_000 + q, dims);
        let mut exact: Vec<(f32, u64)> = vectors
            .iter()
            .map(|(k, v)| {
                let VectorData::F32(v) = v else {
                    unreachable!()
                };
                (v.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>(), *k)
            })
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let truth: HashSet<u64> = exact[..10].iter().map(|(_, k)| *k).collect();
        let found = index.search(&query, 10).unwrap();
        hits += found.keys.iter().filter(|k| truth.contains(k)).count();
    }
    let recall = hits as f64 / (queries * 10) as f64;
    assert!(recall >= 0.95, "recall@10 = {recall}");

    // int8 and binary spaces build and find a vector's own key first.
    for dtype in ["int8", "binary"] {
        let s = SpaceInfo {
            dtype: dtype.into(),
            ..space(dims as u32)
        };
        let vs: Vec<(u64, VectorData)> = (0..500u64)
            .map(|i| {
                let f = unit(i, dims);
                let v = if dtype == "int8" {
                    VectorData::I8(f.iter().map(|x| (x * 127.0) as i8).collect())
                } else {
                    VectorData::Bits(
                        f.chunks(8)
                            .map(|c| c.iter().fold(0u8, |b, x| (b << 1) | u8::from(*x > 0.0)))
                            .collect(),
                    )
                };
                (i, v)
            })
            .collect();
        let index = segment::build_vectors(&s, &vs, 2).unwrap();
        let VectorData::I8(q) = &vs[42].1 else {
            let VectorData::Bits(b) = &vs[42].1 else {
                unreachable!()
            };
            let found = index.search(usearch::b1x8::from_u8s(b), 1).unwrap();
            assert_eq!(found.keys[0], 42);
            continue;
        };
        assert_eq!(index.search(q, 1).unwrap().keys[0], 42);
    }
}

#[test]
fn the_text_index_matches_identifiers_however_they_are_typed() {
    let mut docs: Vec<DocRow> = (0..20)
        .map(|i| doc(i, &format!("def other_{i}():\n    return {i}\n")))
        .collect();
    docs[7].text = "def parseHTTPResponse(raw):\n    return Response(raw)\n".into();
    docs[7].symbol = Some("parseHTTPResponse".into());
    docs[7].qualified_name = Some("client.parseHTTPResponse".into());
    docs[12].text = "def retry_with_backoff(): pass\n".into();
    for (i, d) in docs.iter_mut().enumerate() {
        d.ord = i as u64;
    }
    let tmp = tempfile::tempdir().unwrap();
    let files = segment::build(&docs, &[], None, tmp.path(), 1).unwrap();
    assert!(files.vectors.is_none());
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in &files.text {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let index = segment::open_text(dir.path()).unwrap();
    for q in [
        "parse http response",
        "parsehttpresponse",
        "parseHTTPResponse",
        "ParseHttpResponse",
        "parse_http_response",
    ] {
        let top = segment::search_text(&index, q, 3).unwrap();
        assert_eq!(top.first().map(|t| t.0), Some(7), "{q}: {top:?}");
    }
    let top = segment::search_text(&index, "retry-with-backoff", 3).unwrap();
    assert_eq!(top[0].0, 12);
    assert!(segment::search_text(&index, "((unbalanced", 3).is_ok());
}

#[tokio::test]
async fn a_one_percent_change_rewrites_a_few_percent_and_the_result_equals_a_full_build() {
    let store = Store::memory();
    let mut live = corpus(2000, 32);
    let first = build(&store, live.clone(), Some(space(32)), &opts(8), &Quiet)
        .await
        .unwrap();
    assert!(first.build.full);
    assert_eq!(first.counts.chunks, 2000);
    assert_eq!(contents(&store, &first).await, expected(&live));

    // 1 %: 10 modified, 5 deleted, 5 added.
    for d in live.iter_mut().take(10) {
        d.doc.text.push_str("    # changed\n");
        d.doc.content_hash = trawl_core::hash::content_hash("1", "x", &d.doc.text);
    }
    live.truncate(1995);
    live.extend(corpus(2005, 32).into_iter().skip(2000));
    let second = build(&store, live.clone(), Some(space(32)), &opts(8), &Quiet)
        .await
        .unwrap();
    assert!(!second.build.full);
    assert_eq!(second.previous, Some(first.generation));
    assert_eq!(contents(&store, &second).await, expected(&live));
    let ratio = second.build.bytes_written as f64 / first.build.bytes_written as f64;
    assert!(ratio < 0.2, "incremental wrote {ratio:.3} of a full build");
    assert!(second.build.shards_delta + second.build.shards_reused >= 7);

    // Nothing changed: every shard is reused, nothing is written but the manifest.
    let third = build(&store, live.clone(), Some(space(32)), &opts(8), &Quiet)
        .await
        .unwrap();
    assert_eq!(third.build.shards_reused, 8);
    assert_eq!(third.build.bytes_written, 0);

    // Many deletions in one shard merge it back into one segment.
    let survivors: Vec<LiveDoc> = live
        .iter()
        .filter(|d| crate::build::shard_of(&d.doc, 8) != 3 || d.doc.start_line > 30)
        .cloned()
        .collect();
    let fourth = build(&store, survivors.clone(), Some(space(32)), &opts(8), &Quiet)
        .await
        .unwrap();
    assert_eq!(fourth.shards[3].segments.len(), 1);
    assert!(fourth.shards[3].tombstones.is_none());
    assert_eq!(contents(&store, &fourth).await, expected(&survivors));

    // Rollback points CURRENT at the generation before; gc keeps what it needs.
    let (from, to) = generation::rollback(&store).await.unwrap();
    assert_eq!((from, to), (fourth.generation, third.generation));
    let live_now = generation::live(&store).await.unwrap().unwrap();
    assert_eq!(live_now.generation, third.generation);
    // Within the grace period nothing that was live recently is collected.
    let report = generation::gc(&store, 2, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(report.collected.is_empty(), "{report:?}");
    let report = generation::gc(&store, 2, Duration::ZERO).await.unwrap();
    assert_eq!(report.kept, [third.generation, second.generation]);
    assert!(report.collected.contains(&fourth.generation));
    assert!(report.collected.contains(&first.generation));
    // Generation 3 reuses segments written by generation 1: they survive its collection.
    assert_eq!(contents(&store, &live_now).await, expected(&live));
}

struct CrashBeforeSwap;
impl Progress for CrashBeforeSwap {
    fn swapping(&self, _: u64) {
        panic!("simulated crash between the shard uploads and the CURRENT swap");
    }
}

#[tokio::test]
async fn a_crash_before_the_swap_leaves_current_untouched_and_the_partial_generation_collectable() {
    let store = Store::memory();
    let live = corpus(300, 16);
    let first = build(&store, live.clone(), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    let changed = corpus(310, 16);
    let crashed = {
        let store = store.clone();
        tokio::spawn(async move {
            build(&store, changed, Some(space(16)), &opts(2), &CrashBeforeSwap).await
        })
        .await
    };
    assert!(crashed.is_err(), "the build crashed");
    let (cur, _) = generation::current(&store).await.unwrap().unwrap();
    assert_eq!(cur.generation, first.generation, "CURRENT is untouched");
    assert!(
        !store.list("index/gen=2/").await.unwrap().is_empty(),
        "the partial generation is on the store"
    );
    // The crashed build still holds the lease: gc refuses rather than race it...
    let busy = generation::gc(&store, 3, Duration::ZERO).await.unwrap_err();
    assert!(matches!(busy, CompactError::Busy(_)), "{busy}");
    // ...until it expires.
    expire_leases(&store).await;
    let report = generation::gc(&store, 3, Duration::ZERO).await.unwrap();
    assert_eq!(report.collected, [2]);
    assert!(store.list("index/gen=2/").await.unwrap().is_empty());
    assert_eq!(contents(&store, &first).await, expected(&live));
    // The next build picks up from the live generation.
    let next = build(&store, corpus(310, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    assert_eq!(next.previous, Some(first.generation));
    assert_eq!(
        next.generation, 3,
        "the crashed build's number is not reused"
    );
}

/// What the passing of a lease's expiry does (without waiting for it).
async fn expire_leases(store: &Store) {
    for key in store.list(crate::lease::LEASE_PREFIX).await.unwrap() {
        let mut rec: LeaseRecord = store.get_json(&key).await.unwrap().unwrap();
        rec.expires_unix = 1;
        store.put_json(&key, &rec).await.unwrap();
    }
}

#[tokio::test]
async fn generation_numbers_are_never_reused_after_rollback_and_gc() {
    let store = Store::memory();
    let mut seen = Vec::new();
    for n in 0..2 {
        let m = build(
            &store,
            corpus(100 + n, 16),
            Some(space(16)),
            &opts(2),
            &Quiet,
        )
        .await
        .unwrap();
        seen.push(m.generation);
    }
    generation::rollback(&store).await.unwrap();
    generation::gc(&store, 1, Duration::ZERO).await.unwrap();
    assert!(generation::generations(&store).await.unwrap() == [seen[0]]);
    let again = build(&store, corpus(120, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    assert!(
        !seen.contains(&again.generation),
        "generation {} was handed out twice ({seen:?})",
        again.generation
    );
}

#[tokio::test]
async fn a_second_compactor_is_refused_while_one_builds() {
    let store = Store::memory();
    let holder = Lease::acquire(&store, "the first compactor", Duration::from_secs(60))
        .await
        .unwrap();
    let err = build(&store, corpus(50, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CompactError::Busy(m) if m.contains("the first compactor")),
        "{err}"
    );
    assert!(generation::current(&store).await.unwrap().is_none());
    holder.release().await.unwrap();
    build(&store, corpus(50, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
}

#[tokio::test]
async fn manifests_of_the_known_format_are_read_and_others_refused_with_what_to_do() {
    let store = Store::memory();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/index");
    let v1 = std::fs::read(fixtures.join("manifest-format-1.json")).unwrap();
    store
        .put(&generation::manifest_key(7), bytes::Bytes::from(v1))
        .await
        .unwrap();
    let m = generation::manifest(&store, 7).await.unwrap();
    assert_eq!((m.generation, m.counts.chunks, m.shards.len()), (7, 2, 1));

    let v99 = std::fs::read(fixtures.join("manifest-format-99.json")).unwrap();
    store
        .put(&generation::manifest_key(8), bytes::Bytes::from(v99))
        .await
        .unwrap();
    let err = generation::manifest(&store, 8).await.unwrap_err();
    assert!(matches!(err, CompactError::Format(_)));
    assert!(err.to_string().contains("upgrade trawl"), "{err}");

    store
        .put(
            generation::CURRENT,
            bytes::Bytes::from_static(br#"{"format_version":0,"generation":1,"manifest":"x"}"#),
        )
        .await
        .unwrap();
    let err = generation::current(&store).await.unwrap_err();
    assert!(err.to_string().contains("trawl compact --full"), "{err}");
}

#[tokio::test]
async fn chunks_without_a_vector_are_indexed_for_text_and_counted() {
    let store = Store::memory();
    let mut live = corpus(100, 8);
    for d in live.iter_mut().take(30) {
        d.vector = None;
    }
    let m = build(&store, live, Some(space(8)), &opts(1), &Quiet)
        .await
        .unwrap();
    assert_eq!((m.counts.with_vector, m.counts.text_only), (70, 30));
    assert_eq!(m.shards[0].segments[0].vectors, 70);
    assert_eq!(m.shards[0].segments[0].docs, 100);
    let _ = Arc::new(());
}

#[test]
fn a_call_to_a_member_of_a_one_chunk_container_resolves_to_the_container() {
    let walker = DocRow {
        kind: "impl".into(),
        symbol: Some("Walker".into()),
        qualified_name: Some("Walker".into()),
        members: vec!["Walker.run".into(), "Walker.skip".into()],
        ..doc(1, "impl Walker { fn run(&self) {} fn skip(&self) {} }")
    };
    let main = DocRow {
        calls: vec!["run".into()],
        ..doc(2, "fn main() { Walker.run(); }")
    };
    let mut docs: Vec<LiveDoc> = [walker.clone(), main]
        .into_iter()
        .map(|doc| LiveDoc { doc, vector: None })
        .collect();
    crate::build::resolve_calls(&mut docs);
    assert_eq!(docs[1].doc.call_ids, [walker.chunk_id]);
}

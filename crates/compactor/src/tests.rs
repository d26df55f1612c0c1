//! The compactor without the live-set query: generations, incremental builds, crashes, gc
//! and the lease, over synthetic docs in a memory store (the format alone: `trawl-index`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use trawl_core::ids::Generation;
use trawl_core::space::Space;
use trawl_core::store::Store;
use trawl_index::docs::DocRow;
use trawl_index::generation::{self, Manifest};
use trawl_index::segment::VectorData;
use trawl_index::testing::unit;

use crate::build::{BuildOptions, LiveDoc, build};
use crate::lease::{Lease, LeaseRecord};
use crate::{CompactError, Progress, Quiet};

fn doc(i: u64, text: &str) -> DocRow {
    trawl_index::testing::handler_doc(i, text)
}

fn corpus(n: u64, dims: usize) -> Vec<LiveDoc> {
    (0..n)
        .map(|i| LiveDoc {
            doc: doc(
                i,
                &format!("def handler_{i}(request):\n    return respond({i})\n"),
            ),
            vector: Some(VectorData::F32(unit(i, dims))),
            prose: None,
        })
        .collect()
}

fn space(dims: u32) -> Space {
    trawl_index::testing::float_space(dims)
}

fn opts(shards: u32) -> BuildOptions {
    BuildOptions {
        shards: trawl_core::config::Shards::Fixed(shards),
        threads: 2,
        ..BuildOptions::default()
    }
}

/// The live docs a generation holds, read back from the store.
async fn live_rows(store: &Store, m: &Manifest) -> Vec<DocRow> {
    let mut out = Vec::new();
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
            out.extend(rows.into_iter().filter(|r| !dead.contains(&r.ord)));
        }
    }
    out
}

/// The live docs a generation holds, by chunk id → content hash.
async fn contents(store: &Store, m: &Manifest) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in live_rows(store, m).await {
        assert!(
            out.insert(r.chunk_id.to_string(), r.content_hash.to_string())
                .is_none(),
            "a chunk is live once"
        );
    }
    out
}

fn expected(live: &[LiveDoc]) -> BTreeMap<String, String> {
    live.iter()
        .map(|d| (d.doc.chunk_id.to_string(), d.doc.content_hash.to_string()))
        .collect()
}

#[tokio::test]
async fn auto_shards_grow_with_the_corpus_only_when_it_doubles_and_keep_every_chunk() {
    use trawl_core::config::Shards;
    let store = Store::memory();
    let auto = BuildOptions {
        shards: Shards::Auto,
        shard_chunks: 100,
        threads: 2,
        ..BuildOptions::default()
    };
    let largest = |m: &Manifest| {
        m.shards
            .iter()
            .map(|s| s.segments.iter().map(|g| g.docs).sum::<u64>())
            .max()
            .unwrap()
    };
    // A small corpus: the fewest shards.
    let small = corpus(300, 8);
    let first = build(&store, small.clone(), Some(space(8)), &auto, &Quiet)
        .await
        .unwrap();
    assert_eq!(first.shard_count, Shards::AUTO_MIN);
    assert_eq!(contents(&store, &first).await, expected(&small));

    // 650 chunks need 7 shards of 100, less than twice 4: built on the live generation.
    let grown = corpus(650, 8);
    let second = build(&store, grown.clone(), Some(space(8)), &auto, &Quiet)
        .await
        .unwrap();
    assert!(!second.build.full);
    assert_eq!(second.shard_count, 4);
    assert_eq!(contents(&store, &second).await, expected(&grown));

    // 1,000 need 10, at least twice 4: built whole, and no shard holds much over 100.
    let doubled = corpus(1000, 8);
    let third = build(&store, doubled.clone(), Some(space(8)), &auto, &Quiet)
        .await
        .unwrap();
    assert!(third.build.full, "an outgrown generation is built whole");
    assert_eq!(third.shard_count, 10);
    assert!(largest(&third) < 160, "largest shard {}", largest(&third));
    assert_eq!(contents(&store, &third).await, expected(&doubled));

    // Unchanged: built on, every shard reused.
    let again = build(&store, doubled.clone(), Some(space(8)), &auto, &Quiet)
        .await
        .unwrap();
    assert_eq!(again.shard_count, 10);
    assert_eq!(again.build.shards_reused, 10);

    // A fixed count is what a whole build takes, whatever the corpus.
    let fixed = BuildOptions {
        full: true,
        ..opts(3)
    };
    let m = build(&store, doubled.clone(), Some(space(8)), &fixed, &Quiet)
        .await
        .unwrap();
    assert_eq!(m.shard_count, 3);

    // Some repositories' docs given while the live generation's count is outgrown: the
    // build asks for the whole live set (the run then reads it and builds whole).
    let store = Store::memory();
    let small = BuildOptions {
        shard_chunks: 100,
        ..auto.clone()
    };
    build(&store, corpus(300, 8), Some(space(8)), &small, &Quiet)
        .await
        .unwrap();
    let repo = corpus(1, 8)[0].doc.repo_id.clone();
    let only = BuildOptions {
        shard_chunks: 30,
        only: Some([repo].into_iter().collect()),
        ..auto
    };
    match build(&store, corpus(300, 8), Some(space(8)), &only, &Quiet).await {
        Err(CompactError::NeedsWholeSet(why)) => assert!(why.contains("outgrew"), "{why}"),
        other => panic!("expected a whole build to be asked for, got {other:?}"),
    }
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
    let report = crate::gc(&store, 2, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(report.collected.is_empty(), "{report:?}");
    let report = crate::gc(&store, 2, Duration::ZERO).await.unwrap();
    assert_eq!(report.kept, [third.generation, second.generation]);
    assert!(report.collected.contains(&fourth.generation));
    assert!(report.collected.contains(&first.generation));
    // Generation 3 reuses segments written by generation 1: they survive its collection.
    assert_eq!(contents(&store, &live_now).await, expected(&live));
}

#[tokio::test]
async fn a_doc_whose_members_changed_is_replaced_though_its_content_is_the_same() {
    // A new chunker names a module-code chunk's constants: the text and the content hash stay,
    // the members (the symbol map's input) change, and the next generation must hold them.
    let store = Store::memory();
    let mut live = corpus(40, 8);
    build(&store, live.clone(), Some(space(8)), &opts(2), &Quiet)
        .await
        .unwrap();
    live[7].doc.members = vec!["MAX_RETRIES".into()];
    let second = build(&store, live.clone(), Some(space(8)), &opts(2), &Quiet)
        .await
        .unwrap();
    assert_eq!(
        second.build.shards_reused, 1,
        "only the changed doc's shard is written"
    );
    let members: Vec<Vec<String>> = live_rows(&store, &second)
        .await
        .into_iter()
        .filter(|r| r.chunk_id == live[7].doc.chunk_id)
        .map(|r| r.members)
        .collect();
    assert_eq!(members, [vec!["MAX_RETRIES".to_owned()]]);
}

#[tokio::test]
async fn a_call_resolved_by_a_new_definition_reaches_the_kept_caller() {
    // handler_3 calls `helper`, which no doc defines; then a doc defining `helper` arrives.
    // handler_3 itself is unchanged, but its resolved callees are not.
    let store = Store::memory();
    let mut live = corpus(20, 8);
    live[3].doc.calls = vec!["helper".into()];
    build(&store, live.clone(), Some(space(8)), &opts(2), &Quiet)
        .await
        .unwrap();
    let mut helper = corpus(21, 8).pop().unwrap();
    helper.doc.symbol = Some("helper".into());
    helper.doc.qualified_name = Some("helper".into());
    let helper_id = helper.doc.chunk_id;
    live.push(helper);
    let second = build(&store, live.clone(), Some(space(8)), &opts(2), &Quiet)
        .await
        .unwrap();
    let calls: Vec<Vec<trawl_core::ChunkId>> = live_rows(&store, &second)
        .await
        .into_iter()
        .filter(|r| r.chunk_id == live[3].doc.chunk_id)
        .map(|r| r.call_ids)
        .collect();
    assert_eq!(calls, [vec![helper_id]]);
}

struct CrashBeforeSwap;
impl Progress for CrashBeforeSwap {
    fn swapping(&self, _: Generation) {
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
    let busy = crate::gc(&store, 3, Duration::ZERO).await.unwrap_err();
    assert!(matches!(busy, CompactError::Busy(_)), "{busy}");
    // ...until it expires.
    expire_leases(&store).await;
    let report = crate::gc(&store, 3, Duration::ZERO).await.unwrap();
    assert_eq!(report.collected, [Generation(2)]);
    assert!(store.list("index/gen=2/").await.unwrap().is_empty());
    assert_eq!(contents(&store, &first).await, expected(&live));
    // The next build picks up from the live generation.
    let next = build(&store, corpus(310, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    assert_eq!(next.previous, Some(first.generation));
    assert_eq!(
        next.generation,
        Generation(3),
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
    crate::gc(&store, 1, Duration::ZERO).await.unwrap();
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

#[tokio::test]
async fn collect_keeps_chunk_parts_unless_the_live_generation_is_built_from_the_current_inputs() {
    let store = Store::memory();
    let cfg = trawl_core::config::CompactConfig {
        keep: 1,
        gc_grace_secs: 0,
        ..trawl_core::config::CompactConfig::default()
    };
    let first = build(&store, corpus(40, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    let second = build(&store, corpus(41, 16), Some(space(16)), &opts(2), &Quiet)
        .await
        .unwrap();
    // Built from no recorded inputs: generations are collected, parts are left to the next
    // build.
    let c = crate::run::collect(&store, &cfg, Some(&space(16)))
        .await
        .unwrap();
    assert_eq!(c.gc.kept, [second.generation]);
    assert_eq!(c.gc.collected, [first.generation]);
    assert_eq!(c.parts, None);

    // Built from the current inputs with a chunks table: that table decides, and one that
    // is gone is an error naming it, not an empty set of needed parts.
    let inputs = crate::live::inputs_fingerprint(&store, Some(&space(16)))
        .await
        .unwrap();
    let third = build(
        &store,
        corpus(42, 16),
        Some(space(16)),
        &BuildOptions {
            inputs: Some(inputs),
            table: Some(bytes::Bytes::from_static(b"not read")),
            ..opts(2)
        },
        &Quiet,
    )
    .await
    .unwrap();
    let key = third.chunks_table.clone().unwrap();
    store.delete(&key).await.unwrap();
    let err = crate::run::collect(&store, &cfg, Some(&space(16)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, crate::run::RunError::ChunksTableMissing(k) if *k == key),
        "{err}"
    );
}

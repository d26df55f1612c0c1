//! The compactor end to end: fetch → chunk → embed → live set (DataFusion) → generations.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use trawl_chunk_worker::ChunkWorker;
use trawl_compactor::live::live_set;
use trawl_compactor::{BuildOptions, Quiet};
use trawl_core::space::{Dtype, Space};
use trawl_embed::hash::HashEmbedder;
use trawl_embed_worker::{EmbedWorker, Options, Until};
use trawl_fetcher::RunOptions;

use crate::support::{Harness, SourceRepo, file};

fn space() -> Space {
    Space {
        model: "trawl-hash-v1".into(),
        dims: 32,
        dtype: Dtype::Float,
    }
}

/// Fetches `src`, chunks what changed, and (when `embed`) embeds it with the hash embedder.
async fn index(h: &Harness, src: &SourceRepo, embed: bool) {
    index_all(h, &[src], embed).await;
}

/// The live set as (path, symbol, has vector).
async fn live(h: &Harness) -> BTreeSet<(String, String, bool)> {
    live_set(&h.store, Some(&space()))
        .await
        .unwrap()
        .docs
        .into_iter()
        // The files' chunks: commit messages are docs of their own.
        .filter(|d| d.doc.kind != trawl_compactor::live::COMMIT_KIND)
        .map(|d| {
            (
                d.doc.path,
                d.doc.symbol.unwrap_or_default(),
                d.vector.is_some(),
            )
        })
        .filter(|(_, s, _)| !s.is_empty())
        .collect()
}

fn set(items: &[(&str, &str, bool)]) -> BTreeSet<(String, String, bool)> {
    items
        .iter()
        .map(|(p, s, v)| ((*p).to_owned(), (*s).to_owned(), *v))
        .collect()
}

#[tokio::test]
async fn the_live_set_follows_adds_modifies_deletes_renames_and_force_pushes() {
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    src.commit(
        &[
            ("a.py", file("def alpha():\n    return 1\n")),
            ("b.py", file("def beta():\n    return 2\n")),
            ("c.py", file("def gamma():\n    return 3\n")),
        ],
        false,
    );
    index(&h, &src, true).await;
    assert_eq!(
        live(&h).await,
        set(&[
            ("a.py", "alpha", true),
            ("b.py", "beta", true),
            ("c.py", "gamma", true)
        ])
    );

    // Modify a, delete b, rename c → d, add e; e is chunked but not embedded yet.
    src.commit(
        &[
            (
                "a.py",
                file("def alpha():\n    return 10\n\n\ndef alpha2():\n    return 11\n"),
            ),
            ("d.py", file("def gamma():\n    return 3\n")),
            ("e.py", file("def epsilon():\n    return 5\n")),
        ],
        false,
    );
    index(&h, &src, false).await;
    assert_eq!(
        live(&h).await,
        set(&[
            ("a.py", "alpha", false),
            ("a.py", "alpha2", false),
            ("d.py", "gamma", false),
            ("e.py", "epsilon", false)
        ]),
        "text-only until embedded (a renamed file too: its header names the new path)"
    );
    let m = trawl_compactor::build(
        &h.store,
        live_set(&h.store, Some(&space())).await.unwrap().docs,
        Some(space()),
        &BuildOptions::default(),
        &Quiet,
    )
    .await
    .unwrap();
    assert_eq!(m.counts.text_only, m.counts.chunks - m.counts.with_vector);
    assert!(m.counts.text_only >= 3);

    // A force-push to an unrelated history: only its files are live.
    src.commit(&[("z.py", file("def zeta():\n    return 26\n"))], true);
    index(&h, &src, true).await;
    assert_eq!(live(&h).await, set(&[("z.py", "zeta", true)]));
    let set = live_set(&h.store, Some(&space())).await.unwrap();
    assert_eq!((set.repos, set.runs.len()), (1, 1));
    let m2 = trawl_compactor::build(
        &h.store,
        set.docs,
        Some(space()),
        &BuildOptions {
            source_runs: set.runs.clone(),
            ..BuildOptions::default()
        },
        &Quiet,
    )
    .await
    .unwrap();
    assert_eq!(m2.previous, Some(m.generation));
    assert_eq!(m2.counts.text_only, 0);
    assert_eq!(m2.source_runs.len(), 1);
}

/// Fetches `repos` as the whole list, chunks, and (when `embed`) embeds what changed.
async fn index_all(h: &Harness, repos: &[&SourceRepo], embed: bool) {
    let paths: Vec<std::path::PathBuf> = repos.iter().map(|r| r.path()).collect();
    let paths: Vec<&std::path::Path> = paths.iter().map(std::path::PathBuf::as_path).collect();
    let (report, _) = h.run(&paths, RunOptions::default()).await;
    assert_eq!(report.failed(), 0);
    ChunkWorker::new(
        h.store.clone(),
        h.bus.clone(),
        trawl_chunker::Options::default(),
        2,
    )
    .run(trawl_chunk_worker::Until::Idle(Duration::from_millis(300)))
    .await
    .unwrap();
    if embed {
        embed_all(h, Duration::from_millis(400)).await;
    }
}

/// Embeds every chunk waiting on the bus with the hash embedder, and its prose view, until
/// idle for `idle`.
async fn embed_all(h: &Harness, idle: Duration) {
    EmbedWorker::new(
        h.store.clone(),
        Some(h.bus.clone()),
        Arc::new(HashEmbedder::new(32).unwrap()),
        Options {
            linger: Duration::from_millis(20),
            // Prose views too: every build below carries a chunk's second vector.
            prose_views: true,
            ..Options::default()
        },
    )
    .run(Until::Idle(idle))
    .await
    .unwrap();
}

#[tokio::test]
async fn the_spilled_live_set_is_the_live_set_read_a_shard_at_a_time() {
    use futures::TryStreamExt;
    use trawl_compactor::LiveDoc;

    let h = Harness::new().with_inproc_bus();
    let (a, b) = (SourceRepo::named("spill-a"), SourceRepo::named("spill-b"));
    let cart = "def add_item(cart, item):\n    check(item)\n    cart.append(item)\n\n\n\
                def check(item):\n    return item is not None\n";
    a.commit(
        &[
            ("cart.py", file(cart)),
            ("README.md", file("# Cart\n\nAdds items to carts.\n")),
        ],
        false,
    );
    b.commit(
        &[(
            "pay.py",
            file("def charge(card, amount):\n    return card.debit(amount)\n"),
        )],
        false,
    );
    index_all(&h, &[&a, &b], true).await;
    // a changes again and is chunked, not embedded: its new chunks wait for their vectors.
    a.commit(
        &[(
            "cart.py",
            file(cart.replace("cart.append(item)", "cart.insert(0, item)")),
        )],
        false,
    );
    index_all(&h, &[&a, &b], false).await;

    let whole = live_set(&h.store, Some(&space())).await.unwrap();
    let mut expected = whole.docs;
    trawl_compactor::calls::resolve_calls(&mut expected);
    expected.sort_by_key(|d| d.doc.chunk_id);
    assert!(expected.iter().any(|d| d.vector.is_some()), "some embedded");
    assert!(
        expected.iter().any(|d| d.prose.is_some()),
        "prose views embedded"
    );
    assert!(
        expected
            .iter()
            .any(|d| d.vector.is_none() && d.doc.kind != trawl_compactor::live::COMMIT_KIND),
        "some waiting for a vector"
    );
    assert!(
        expected.iter().any(|d| !d.doc.call_ids.is_empty()),
        "a call resolved"
    );
    assert!(
        expected
            .iter()
            .any(|d| d.doc.kind == trawl_compactor::live::COMMIT_KIND),
        "commit messages"
    );

    let read = |bytes: bytes::Bytes| -> Vec<trawl_core::records::ChunkRecord> {
        trawl_core::records::from_parquet(bytes).unwrap()
    };
    let whole_table = read(whole.table.unwrap());
    assert!(!whole_table.is_empty());
    // A roomy budget (one group of repositories, one bucket of vectors), and a tiny one (a
    // group per repository, the vectors in many buckets).
    for (memory, shards) in [(64 << 20, 1), (64 << 20, 3), (1024, 3)] {
        let spilled = trawl_compactor::spill::spill_live_set(&h.store, Some(&space()), memory)
            .await
            .unwrap();
        assert_eq!(
            (spilled.repos, spilled.runs.len()),
            (whole.repos, whole.runs.len())
        );
        assert_eq!(spilled.buckets() > 1, memory == 1024);
        let got: Vec<(u32, Vec<LiveDoc>)> = spilled
            .shards(shards)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            got.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            (0..shards).collect::<Vec<_>>(),
            "every shard, in order"
        );
        for (k, docs) in &got {
            for d in docs {
                assert_eq!(trawl_compactor::build::shard_of(&d.doc, shards), *k);
            }
        }
        let mut docs: Vec<LiveDoc> = got.into_iter().flat_map(|(_, d)| d).collect();
        docs.sort_by_key(|d| d.doc.chunk_id);
        assert_eq!(
            docs.len(),
            expected.len(),
            "memory {memory}, {shards} shards"
        );
        for (got, want) in docs.iter().zip(&expected) {
            assert_eq!(got.doc, want.doc);
            assert_eq!(got.vector, want.vector, "{}", want.doc.header);
            assert_eq!(got.prose, want.prose, "{}", want.doc.header);
        }
        let table = read(std::fs::read(spilled.table_path()).unwrap().into());
        assert_eq!(table, whole_table, "the same chunks table, row for row");
    }
}

#[tokio::test]
async fn the_inputs_fingerprint_changes_exactly_when_the_live_set_can() {
    use trawl_compactor::live::inputs_fingerprint;
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    src.commit(&[("a.py", file("def alpha():\n    return 1\n"))], false);
    index(&h, &src, false).await;
    let text_only = inputs_fingerprint(&h.store, Some(&space())).await.unwrap();
    // Vectors arriving change it (text-only docs gain their vector).
    index(&h, &src, true).await;
    let embedded = inputs_fingerprint(&h.store, Some(&space())).await.unwrap();
    assert_ne!(text_only, embedded);
    // A run that changed nothing leaves it.
    index(&h, &src, true).await;
    assert_eq!(
        inputs_fingerprint(&h.store, Some(&space())).await.unwrap(),
        embedded
    );
    // Another space, or a changed file, changes it.
    let other = Space {
        dims: 64,
        ..space()
    };
    assert_ne!(
        inputs_fingerprint(&h.store, Some(&other)).await.unwrap(),
        embedded
    );
    src.commit(&[("a.py", file("def alpha():\n    return 2\n"))], false);
    index(&h, &src, true).await;
    assert_ne!(
        inputs_fingerprint(&h.store, Some(&space())).await.unwrap(),
        embedded
    );
}

#[test]
fn an_unchanged_index_run_keeps_the_live_generation_instead_of_building_one() {
    let src = SourceRepo::named("steady");
    src.commit(
        &[("a.py", file("def steady_state():\n    return 1\n"))],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let first = crate::search::index(work.path(), &[&src.path()], "hash");
    assert!(first.contains("generation 1"), "{first}");
    let again = crate::search::index(work.path(), &[&src.path()], "hash");
    assert!(again.contains("generation 1 live"), "{again}");
    src.commit(
        &[("a.py", file("def steady_state():\n    return 2\n"))],
        false,
    );
    let changed = crate::search::index(work.path(), &[&src.path()], "hash");
    assert!(changed.contains("generation 2"), "{changed}");
}

/// The live generation's manifest under the store `root`.
fn manifest(root: &std::path::Path) -> serde_json::Value {
    let cur: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("index/CURRENT")).unwrap()).unwrap();
    let g = cur["generation"].as_u64().unwrap();
    serde_json::from_slice(
        &std::fs::read(root.join(format!("index/gen={g}/manifest.json"))).unwrap(),
    )
    .unwrap()
}

/// The prose views' vectors a manifest's segments hold.
fn prose_vectors(m: &serde_json::Value) -> u64 {
    m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["segments"].as_array().unwrap())
        .map(|seg| {
            seg["prose_vectors"]
                .as_u64()
                .expect("every segment counts them")
        })
        .sum()
}

/// With `embed.prose_view` on, a night that rebuilds one repository's shards reads the kept
/// repositories' docs back from their segments with both their vectors: the generation holds
/// as many prose vectors as the same inputs built whole. Off, the segments say they hold none.
#[test]
fn prose_views_are_kept_by_an_incremental_build_that_reads_other_repositories_back() {
    let a = SourceRepo::named("views-a");
    let b = SourceRepo::named("views-b");
    a.commit(
        &[("cart.py", file("def add_item(cart, item):\n    \"\"\"Put an item in the cart.\"\"\"\n    cart.append(item)\n"))],
        false,
    );
    b.commit(
        &[
            ("pay.py", file("def charge(card, amount):\n    \"\"\"Take the amount from the card.\"\"\"\n    return card.debit(amount)\n")),
            ("refund.py", file("def refund(card, amount):\n    # Give the money back.\n    return card.credit(amount)\n")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join(".trawl");
    let (pa, pb) = (a.path(), b.path());
    let index = |extra: &[&str]| {
        crate::search::ok(
            &crate::search::trawl(work.path())
                .args(["--set", "embed.prose_view=true"])
                .args(extra)
                .arg("index")
                .args([&pa, &pb])
                .args(["--embedder", "hash"])
                .output()
                .unwrap(),
        )
    };
    let first = index(&[]);
    assert!(first.contains("prose views"), "{first}");
    let whole = prose_vectors(&manifest(&root));
    assert!(whole >= 3, "a view beside each function: {whole}");

    // a changes; every changed shard is merged into one segment, so b's docs are read back.
    a.commit(
        &[("cart.py", file("def add_item(cart, item):\n    \"\"\"Put an item in the cart.\"\"\"\n    cart.insert(0, item)\n"))],
        false,
    );
    index(&["--set", "compact.max_segments=1"]);
    let night = manifest(&root);
    assert_eq!(night["build"]["repos_rebuilt"], 1, "{night}");
    assert!(
        night["build"]["shards_rebuilt"].as_u64().unwrap() > 0,
        "{night}"
    );
    let kept = prose_vectors(&night);
    crate::search::ok(
        &crate::search::trawl(work.path())
            .args([
                "--set",
                "embed.prose_view=true",
                "compact",
                "--full",
                "--embedder",
                "hash",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(
        kept,
        prose_vectors(&manifest(&root)),
        "as many as built whole"
    );
    assert_eq!(kept, whole, "one view per function, before and after");

    // Without views, every segment says it holds none: searches need not tell keys apart.
    let plain = tempfile::tempdir().unwrap();
    crate::search::index(plain.path(), &[&pa, &pb], "hash");
    assert_eq!(prose_vectors(&manifest(&plain.path().join(".trawl"))), 0);
}

#[test]
fn a_changed_night_rebuilds_only_the_changed_repositories_and_equals_a_full_build() {
    let cart_repo = SourceRepo::named("night-a");
    let pay_repo = SourceRepo::named("night-b");
    let ship_repo = SourceRepo::named("night-c");
    cart_repo.commit(
        &[
            (
                "cart.py",
                file("def add_item(cart, item):\n    cart.append(item)\n"),
            ),
            ("old.py", file("def retired_helper():\n    return 0\n")),
        ],
        false,
    );
    pay_repo.commit(
        &[(
            "pay.py",
            file("def charge(card, amount):\n    return card.debit(amount)\n"),
        )],
        false,
    );
    ship_repo.commit(
        &[(
            "ship.py",
            file("def dispatch_parcel(parcel):\n    return parcel.send()\n"),
        )],
        false,
    );
    // Two more that do not change: an incremental build is for a minority of repositories.
    let (dee_repo, eee_repo) = (SourceRepo::named("night-d"), SourceRepo::named("night-e"));
    dee_repo.commit(&[("d.py", file("def dee():\n    return 4\n"))], false);
    eee_repo.commit(&[("e.py", file("def eee():\n    return 5\n"))], false);
    let work = tempfile::tempdir().unwrap();
    let (pa, pb, pc, pd, pe) = (
        cart_repo.path(),
        pay_repo.path(),
        ship_repo.path(),
        dee_repo.path(),
        eee_repo.path(),
    );
    crate::search::index(work.path(), &[&pa, &pb, &pc, &pd, &pe], "hash");
    // Night two: a file of a changed, one added, one deleted; c left the list; b as it was.
    cart_repo.commit(
        &[
            (
                "cart.py",
                file("def add_item(cart, item):\n    cart.insert(0, item)\n"),
            ),
            ("new.py", file("def fresh_feature():\n    return 1\n")),
        ],
        false,
    );
    // Tombstones under this share of a shard's docs stay tombstones (these shards are tiny).
    crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["--set", "compact.merge_tombstone_ratio=0.9", "index"])
            .args([&pa, &pb, &pd, &pe])
            .args(["--embedder", "hash"])
            .output()
            .unwrap(),
    );
    let root = work.path().join(".trawl");
    let night = manifest(&root);
    assert_eq!(night["build"]["repos_rebuilt"], 2, "a and c only: {night}");
    let found = |q: &str| {
        crate::search::search_json(work.path(), &[q, "--mode", "lexical", "-k", "3"])
            .iter()
            .any(|h| h["symbol"] == q)
    };
    assert!(found("fresh_feature"));
    assert!(found("charge"), "b's docs were kept");
    assert!(!found("retired_helper"), "a deleted file is gone");
    assert!(
        !found("dispatch_parcel"),
        "a repository that left the list is gone"
    );
    let cart = crate::search::search_json(work.path(), &["add_item", "-k", "1"]);
    assert!(
        cart[0]["text"]
            .as_str()
            .unwrap()
            .contains("insert(0, item)")
    );
    let table = || {
        crate::search::ok(
            &crate::search::trawl(work.path())
                .args([
                    "sql",
                    "--csv",
                    "select repo_id, path, start_line, chunk_id, content_hash from chunks",
                ])
                .output()
                .unwrap(),
        )
    };
    let every_doc = || {
        let mut docs: Vec<String> =
            crate::search::search_json(work.path(), &["def", "--mode", "lexical", "-k", "100"])
                .iter()
                .map(|h| format!("{} {} {}", h["path"], h["start_line"], h["chunk_id"]))
                .collect();
        docs.sort();
        docs
    };
    let (night_table, night_docs) = (table(), every_doc());
    // The same inputs built whole give the same index.
    crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["compact", "--full", "--embedder", "hash"])
            .output()
            .unwrap(),
    );
    let full = manifest(&root);
    assert!(full["build"]["repos_rebuilt"].is_null(), "{full}");
    assert_eq!(night["counts"], full["counts"]);
    assert_eq!(night["repo_inputs"], full["repo_inputs"]);
    assert_eq!(
        night_table,
        table(),
        "the chunks table, row for row and in order"
    );
    assert_eq!(night_docs, every_doc());
    assert!(night_docs.len() >= 3, "{night_docs:?}");

    // Night three, every changed shard merged (one segment a shard at most): the shards an
    // incremental build merges read the kept repositories' docs and vectors back from their
    // segments.
    pay_repo.commit(
        &[(
            "pay.py",
            file("def charge(card, amount):\n    return card.debit(amount * 2)\n"),
        )],
        false,
    );
    crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["--set", "compact.max_segments=1", "index"])
            .args([&pa, &pb, &pd, &pe])
            .args(["--embedder", "hash"])
            .output()
            .unwrap(),
    );
    let night = manifest(&root);
    assert_eq!(night["build"]["repos_rebuilt"], 1, "{night}");
    assert!(
        night["build"]["shards_rebuilt"].as_u64().unwrap() > 0,
        "{night}"
    );
    assert_eq!(night["counts"]["with_vector"], night["counts"]["chunks"]);
    let (night_table, night_docs) = (table(), every_doc());
    let vector_hits = |q: &str| {
        crate::search::search_json(work.path(), &[q, "--mode", "vector", "-k", "1"])[0]["symbol"]
            .clone()
    };
    let night_vector = vector_hits("def dee():\n    return 4\n");
    crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["compact", "--full", "--embedder", "hash"])
            .output()
            .unwrap(),
    );
    let full = manifest(&root);
    assert_eq!(night["counts"], full["counts"]);
    assert_eq!(night_table, table());
    assert_eq!(night_docs, every_doc());
    assert_eq!(night_vector, "dee", "a kept doc keeps its vector");
    assert_eq!(vector_hits("def dee():\n    return 4\n"), night_vector);

    // Night four the cluster's way: fetch, chunk, embed, then `compact --wait`, whose
    // completion check reads only the repository that changed and hands it to an
    // incremental build.
    eee_repo.commit(&[("e.py", file("def eee():\n    return 55\n"))], false);
    let stage = |args: &[&str]| {
        crate::search::ok(
            &crate::search::trawl(work.path())
                .args(args)
                .args(["--set", "embed.embedder=hash"])
                .output()
                .unwrap(),
        )
    };
    let (sa, sb, sd, se) = (
        pa.to_string_lossy(),
        pb.to_string_lossy(),
        pd.to_string_lossy(),
        pe.to_string_lossy(),
    );
    stage(&[
        "fetch", "--repo", &sa, "--repo", &sb, "--repo", &sd, "--repo", &se,
    ]);
    stage(&["chunk-worker", "--once"]);
    stage(&["embed", "--once"]);
    stage(&["compact", "--wait", "--deadline", "60s", "--poll", "200ms"]);
    let night = manifest(&root);
    assert_eq!(night["build"]["repos_rebuilt"], 1, "{night}");
    let (night_table, night_docs) = (table(), every_doc());
    assert!(found("eee"));
    stage(&["compact", "--full"]);
    let full = manifest(&root);
    assert_eq!(night["counts"], full["counts"]);
    assert_eq!(night["repo_inputs"], full["repo_inputs"]);
    assert_eq!(night_table, table());
    assert_eq!(night_docs, every_doc());
}

#[test]
fn gc_deletes_the_chunk_parts_of_superseded_file_versions_and_keeps_the_live_ones() {
    let src = SourceRepo::named("parts");
    let work = tempfile::tempdir().unwrap();
    // Three versions of a.py beside an unchanged b.py.
    for n in [1, 10, 100] {
        src.commit(
            &[
                ("a.py", file(format!("def alpha():\n    return {n}\n"))),
                ("b.py", file("def beta():\n    return 2\n")),
            ],
            false,
        );
        crate::search::index(work.path(), &[&src.path()], "hash");
    }
    let count = |dir: &str| -> usize {
        walk(&work.path().join(".trawl").join(dir))
            .iter()
            .filter(|p| p.ends_with(".parquet"))
            .count()
    };
    assert_eq!(count("chunks"), 4, "a.py three times, b.py once");
    // One embedding part per run: the first holds b.py's vectors too, the second only the
    // alpha of version 2, which nothing live uses any more.
    assert_eq!(count("embeddings"), 3);
    let gc = crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["compact", "--gc", "--embedder", "hash"])
            .args(["--set", "compact.gc_grace_secs=0"])
            .output()
            .unwrap(),
    );
    assert!(gc.contains("2 superseded chunk parts"), "{gc}");
    assert!(gc.contains("1 embedding parts with no live vector"), "{gc}");
    assert_eq!((count("chunks"), count("embeddings")), (2, 2));
    // What is left is everything the index needs: a full rebuild finds the same chunks, each
    // with its vector.
    let full = crate::search::ok(
        &crate::search::trawl(work.path())
            .args(["compact", "--full", "--embedder", "hash", "--json"])
            .output()
            .unwrap(),
    );
    let m: serde_json::Value = serde_json::from_str(&full).unwrap();
    let before: serde_json::Value = serde_json::from_slice(
        &std::fs::read(work.path().join(".trawl/index/gen=3/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(m["counts"]["chunks"], before["counts"]["chunks"], "{m}");
    assert_eq!(m["counts"]["with_vector"], m["counts"]["chunks"], "{m}");
    let hits = crate::search::search_json(work.path(), &["alpha", "--mode", "lexical", "-k", "1"]);
    assert!(hits[0]["text"].as_str().unwrap().contains("return 100"));
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path().to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Counts how `wait` looked at the store.
#[derive(Default)]
struct Looks {
    progress: std::sync::atomic::AtomicUsize,
    rechecked: std::sync::atomic::AtomicUsize,
}

impl trawl_compactor::run::WaitObserver for Looks {
    fn progress(&self, _: &trawl_compactor::live::Completion) {
        self.progress
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn vectors_rechecked(&self) {
        self.rechecked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A first night with a slow embedder: the whole live set is read once, then each look
/// reads only the new embedding parts, and when the last vector arrives the set is read
/// again, complete, for the build.
#[tokio::test]
async fn waiting_for_vectors_reads_the_new_embedding_parts_not_the_whole_live_set() {
    use trawl_compactor::run::{WaitOptions, Waited, wait};
    let h = Harness::new().with_inproc_bus();
    let src = SourceRepo::new();
    src.commit(
        &[
            ("a.py", file("def alpha():\n    return 1\n")),
            ("b.py", file("def beta():\n    return alpha()\n")),
        ],
        false,
    );
    index(&h, &src, false).await;
    let opts = WaitOptions {
        chunker_version: trawl_chunk_worker::part_version(trawl_chunker::Strategy::Ast),
        deadline: Duration::from_secs(60),
        poll: Duration::from_millis(100),
        full: false,
        spill_memory: 1 << 20,
    };
    let looks = Looks::default();
    let embed = async {
        // Vectors arrive while the compactor waits.
        tokio::time::sleep(Duration::from_millis(700)).await;
        embed_all(&h, Duration::from_millis(300)).await;
    };
    let space = space();
    let (waited, ()) = tokio::join!(wait(&h.store, Some(&space), &opts, &looks), embed);
    let Waited::Ready(c, Some(set)) = waited.unwrap() else {
        panic!("the run is ready")
    };
    assert!(c.is_complete(), "{:?}", c.stragglers);
    assert_eq!(c.chunks, c.chunks_embedded);
    assert!(c.chunks >= 2);
    let rechecked = looks.rechecked.load(std::sync::atomic::Ordering::Relaxed);
    let progress = looks.progress.load(std::sync::atomic::Ordering::Relaxed);
    assert!(rechecked >= 2, "{rechecked} cheap looks of {progress}");
    assert_eq!(
        progress - rechecked,
        2,
        "the whole set read twice: first, and with every vector in"
    );
    // The set handed to the build has every vector.
    let spilled = set.spilled.expect("the whole set, through local files");
    assert_eq!(spilled.repos, 1);
}

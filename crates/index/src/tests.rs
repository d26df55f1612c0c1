//! The index format without a builder: vector recall, the text index's analyzer, manifests of
//! known and unknown formats.

use std::collections::HashSet;

use trawl_core::ids::Generation;
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;

use crate::IndexError;
use crate::docs::DocRow;
use crate::generation;
use crate::segment::{self, VectorData};
use crate::testing::unit;

fn doc(i: u64, text: &str) -> DocRow {
    crate::testing::handler_doc(i, text)
}

fn space(dims: u32) -> Space {
    crate::testing::float_space(dims)
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

    // int8 and binary spaces build and find a vector's own key among its nearest.
    for dtype in [Dtype::Int8, Dtype::Binary] {
        let s = Space {
            dtype,
            ..space(dims as u32)
        };
        let vs: Vec<(u64, VectorData)> = (0..500u64)
            .map(|i| {
                let f = unit(i, dims);
                let v = if dtype == Dtype::Int8 {
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
            let found = index.search(usearch::b1x8::from_u8s(b), 10).unwrap();
            assert!(found.keys.contains(&42), "{dtype:?}: {:?}", found.keys);
            continue;
        };
        // The graph is approximate and built by two threads: the vector's own key is among
        // the first few, not always first (a near neighbour can tie or win after quantising).
        let found = index.search(q, 10).unwrap();
        assert!(found.keys.contains(&42), "{dtype:?}: {:?}", found.keys);
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

#[test]
fn a_dotted_name_typed_as_one_word_ranks_its_parts_side_by_side_first() {
    let mut docs: Vec<DocRow> = (0..20)
        .map(|i| doc(i, &format!("def other_{i}():\n    return {i}\n")))
        .collect();
    // Both words, often and apart; then once, written as the name asked for.
    docs[3].text =
        "hooks = []\ninit(hooks)\nfor h in hooks: h.init()\nhooks.clear(); init()\n".into();
    docs[9].text = "for (const hook of options.hooks.init) {\n  hook(request);\n}\n".into();
    for (i, d) in docs.iter_mut().enumerate() {
        d.ord = i as u64;
    }
    let tmp = tempfile::tempdir().unwrap();
    let files = segment::build(&docs, &[], None, tmp.path(), 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in &files.text {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let index = segment::open_text(dir.path()).unwrap();
    let top = segment::search_text(&index, "hooks.init", 3).unwrap();
    assert_eq!(top.first().map(|t| t.0), Some(9), "{top:?}");
    // Two words typed apart are two words: the one that has more of both comes first.
    let top = segment::search_text(&index, "hooks init", 3).unwrap();
    assert_eq!(top.first().map(|t| t.0), Some(3), "{top:?}");
}

#[tokio::test]
async fn manifests_of_the_known_format_are_read_and_others_refused_with_what_to_do() {
    let store = Store::memory();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/index");
    let v1 = std::fs::read(fixtures.join("manifest-format-1.json")).unwrap();
    store
        .put(
            &generation::manifest_key(Generation(7)),
            bytes::Bytes::from(v1),
        )
        .await
        .unwrap();
    let m = generation::manifest(&store, Generation(7)).await.unwrap();
    assert_eq!(
        (m.generation, m.counts.chunks, m.shards.len()),
        (Generation(7), 2, 1)
    );
    // The space as written when its dtype was a string reads as the typed space.
    assert_eq!(
        m.space,
        Some(Space {
            model: "voyage-code-3".into(),
            dims: 1024,
            dtype: Dtype::Float,
        })
    );

    let v99 = std::fs::read(fixtures.join("manifest-format-99.json")).unwrap();
    store
        .put(
            &generation::manifest_key(Generation(8)),
            bytes::Bytes::from(v99),
        )
        .await
        .unwrap();
    let err = generation::manifest(&store, Generation(8))
        .await
        .unwrap_err();
    assert!(matches!(err, IndexError::Format(_)));
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

#[test]
fn current_and_manifests_written_before_the_typed_generation_round_trip_unchanged() {
    // A pointer as written when the generation was a bare number, byte for byte.
    let current = concat!(
        "{\n",
        "  \"format_version\": 1,\n",
        "  \"generation\": 7,\n",
        "  \"manifest\": \"index/gen=7/manifest.json\",\n",
        "  \"manifest_hash\": \"ab12\"\n",
        "}"
    );
    let cur: generation::Current = serde_json::from_str(current).unwrap();
    assert_eq!(cur.generation, Generation(7));
    assert_eq!(cur.manifest, generation::manifest_key(cur.generation));
    assert_eq!(serde_json::to_string_pretty(&cur).unwrap(), current);

    // A manifest: the generation, its predecessor and its source runs read as typed values
    // and are written back as they were.
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/index");
    let v1 = std::fs::read(fixtures.join("manifest-format-1.json")).unwrap();
    let m: generation::Manifest = serde_json::from_slice(&v1).unwrap();
    assert_eq!(
        (m.generation, m.previous),
        (Generation(7), Some(Generation(6)))
    );
    assert_eq!(m.source_runs[0].to_string(), "20261130T030000000Z-00000000");
    let written = serde_json::from_slice::<serde_json::Value>(&v1).unwrap();
    let mut back = serde_json::to_value(&m).unwrap();
    // Counts gain fields read with a default (the test above reads them); the rest is
    // written back as it was.
    back["counts"] = written["counts"].clone();
    assert_eq!(back, written);
    assert_eq!(
        generation::chunks_table_key(m.generation),
        "index/gen=7/chunks.parquet"
    );
}

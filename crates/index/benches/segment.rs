//! Segment benchmark: the index format alone, no generation builder (so neither the
//! compactor nor DataFusion is built in release). Two tables:
//!
//! 1. **Synthetic**: `TRAWL_BENCH_CHUNKS` chunks (default 1,000,000) with 1024-d unit vectors
//!    and short synthetic code: build time and bytes per chunk of each part of a segment, the
//!    usearch index's memory and load time from a file, and its recall@10 against exact search
//!    (the oracle) with the latency of both.
//! 2. **Real corpus**: the Python standard library's chunks (trawl's chunker), with 1024-d
//!    synthetic vectors: the same measures.
//!
//! `cargo bench -p trawl-index --bench segment` (`TRAWL_BENCH_ONLY=synthetic|real` for one
//! table). Incremental builds are the compactor's benchmark
//! (`cargo bench -p trawl-compactor --bench compact`). Prints tables; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::collections::HashSet;
use std::time::Instant;

use trawl_core::space::{Dtype, Space};
use trawl_index::docs::DocRow;
use trawl_index::segment::{self, VectorData};
use trawl_index::testing::{clustered, unit};

const DIMS: usize = 1024;

fn synthetic_doc(i: u64) -> DocRow {
    let path = format!("svc{}/mod{}.py", i % 97, i / 1000);
    let symbol = format!("handler_{i}");
    let text = format!(
        "def {symbol}(request, retries={}):\n    \"\"\"Handle request {i}.\"\"\"\n    return dispatch(request, attempt={})\n",
        i % 5,
        i % 13
    );
    DocRow {
        // Hashed from the symbol alone, as the benchmark has always done.
        content_hash: trawl_core::hash::content_hash("1", &path, &symbol),
        header: format!("{path} · function {symbol} · python"),
        calls: vec!["dispatch".into()],
        ..trawl_index::testing::function_doc("github.com/acme/mono", &path, &symbol, &text, (1, 3))
    }
}

/// The Python standard library's chunks, each with its ord and a clustered vector.
fn real_corpus() -> (Vec<DocRow>, Vec<(u64, VectorData)>) {
    let mut docs = Vec::new();
    let mut vectors = Vec::new();
    for (_, rows) in trawl_chunker::corpus::python_stdlib_chunks() {
        for r in rows {
            let n = docs.len() as u64;
            docs.push(DocRow {
                ord: n,
                ..DocRow::from_chunk(r, "c".repeat(40).parse().expect("commit"), true)
            });
            vectors.push((n, VectorData::F32(clustered(n, DIMS))));
        }
    }
    (docs, vectors)
}

fn space() -> Space {
    Space {
        model: "bench".into(),
        dims: DIMS as u32,
        dtype: Dtype::Float,
    }
}

/// Builds one segment's parts separately and measures them.
fn segment_table(name: &str, docs: &[DocRow], vectors: &[(u64, VectorData)]) {
    let n = docs.len();
    let threads = 2;
    let t = Instant::now();
    let index = segment::build_vectors(&space(), vectors, threads).expect("vectors");
    let vec_build = t.elapsed().as_secs_f64();
    let memory = index.memory_usage();
    let vec_bytes = segment::save_vectors(&index).expect("save");
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("vectors.usearch");
    std::fs::write(&file, &vec_bytes).expect("write");
    let opts = segment::index_options(&space()).expect("options");
    let t = Instant::now();
    let loaded = usearch::Index::new(&opts).expect("index");
    loaded.load(file.to_str().expect("utf-8")).expect("load");
    let load = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let viewed = usearch::Index::new(&opts).expect("index");
    viewed.view(file.to_str().expect("utf-8")).expect("view");
    let view = t.elapsed().as_secs_f64();

    // Recall@10 against exact search, and the latency of both.
    let queries = 50u64;
    let (mut hits, mut ann_s, mut exact_s) = (0, 0.0, 0.0);
    for q in 0..queries {
        let VectorData::F32(query) = &vectors[(q * 7919) as usize % n].1 else {
            unreachable!()
        };
        let query: Vec<f32> = query
            .iter()
            .zip(unit(q + 99, DIMS))
            .map(|(a, b)| a + 0.3 * b)
            .collect();
        let t = Instant::now();
        let exact = loaded.exact_search(&query, 10).expect("exact");
        exact_s += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let found = loaded.search(&query, 10).expect("search");
        ann_s += t.elapsed().as_secs_f64();
        let truth: HashSet<u64> = exact.keys.iter().copied().collect();
        hits += found.keys.iter().filter(|k| truth.contains(k)).count();
    }
    let recall = hits as f64 / (queries * 10) as f64;

    let t = Instant::now();
    let text_dir = tempfile::tempdir().expect("tmp");
    let files = segment::build(docs, &[], None, text_dir.path(), 1).expect("text + docs");
    let text_build = t.elapsed().as_secs_f64();
    let text_bytes: usize = files.text.iter().map(|(_, b)| b.len()).sum();
    let doc_bytes = files.docs.len();
    let per = |b: usize| b as f64 / n as f64;
    println!("\n## {name}: {n} chunks, {DIMS}-d float vectors, 2 threads\n");
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| vector index (usearch HNSW, M=16, ef_add=128) build | {vec_build:.1} s ({:.0} chunks/s) |",
        n as f64 / vec_build
    );
    println!(
        "| text index (tantivy) + doc store build | {text_build:.1} s ({:.0} chunks/s) |",
        n as f64 / text_build
    );
    println!(
        "| bytes per chunk: vectors / text index / doc store | {:.0} / {:.0} / {:.0} |",
        per(vec_bytes.len()),
        per(text_bytes),
        per(doc_bytes)
    );
    println!(
        "| vector index memory | {:.1} MB ({:.0} B/chunk; raw vectors {} B) |",
        memory as f64 / 1e6,
        per(memory),
        DIMS * 4
    );
    println!(
        "| load from a file: read into memory / memory-mapped view | {load:.2} s / {view:.4} s |"
    );
    println!("| recall@10 vs exact search ({queries} queries, ef_search=128) | **{recall:.3}** |");
    println!(
        "| query latency: HNSW / exact (flat) | {:.2} ms / {:.1} ms ({:.0}×) |",
        ann_s * 1e3 / queries as f64,
        exact_s * 1e3 / queries as f64,
        exact_s / ann_s.max(1e-9)
    );
}

fn main() {
    let n: u64 = std::env::var("TRAWL_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let only = std::env::var("TRAWL_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "synthetic" {
        let docs: Vec<DocRow> = (0..n)
            .map(|i| {
                let mut d = synthetic_doc(i);
                d.ord = i;
                d
            })
            .collect();
        let vectors: Vec<(u64, VectorData)> = (0..n)
            .map(|i| (i, VectorData::F32(clustered(i, DIMS))))
            .collect();
        segment_table("Synthetic", &docs, &vectors);
    }
    if only.is_empty() || only == "real" {
        let (docs, vectors) = real_corpus();
        segment_table("Real corpus (Python standard library)", &docs, &vectors);
    }
}

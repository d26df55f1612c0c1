//! Query benchmark: latency (p50/p99) and throughput of vector-only, BM25-only and hybrid
//! search at `TRAWL_BENCH_CHUNKS` chunks (default `100000,1000000`), warm and cold, on the
//! machine's cores; and the local model's query-embedding latency, reported apart.
//!
//! The index: the Python standard library's chunks (trawl's chunker) repeated over as many
//! repositories as needed, with synthetic clustered 1024-d unit vectors (voyage-code-3's
//! default width), built by the compactor into 4 shards and kept under
//! `target/bench-query/` between runs. Queries: 300, each aimed at a random doc — its vector
//! plus noise, and three of its words (a third of them its symbol instead).
//!
//! - **warm**: the generation open, 50 queries run before measuring.
//! - **cold**: the OS page cache dropped (when allowed: root), then the generation opened
//!   (`open s`) and the same queries run at once.
//! - **QPS**: one client per core, each running all queries back to back.
//!
//! `cargo bench -p trawl-query --bench query`. Prints tables; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use trawl_compactor::build::{BuildOptions, LiveDoc, build};
use trawl_core::ids::RepoId;
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_index::docs::DocRow;
use trawl_index::segment::VectorData;
use trawl_index::testing::normalized;
use trawl_query::index::Generation;
use trawl_query::search::{self, Filter};
use trawl_query::{Access, Mode, SearchRequest};

const DIMS: usize = 1024;
const QUERIES: usize = 300;

fn unit(seed: u64) -> Vec<f32> {
    trawl_index::testing::unit(seed, DIMS)
}

fn clustered(i: u64) -> Vec<f32> {
    trawl_index::testing::clustered(i, DIMS)
}

fn corpus() -> Vec<DocRow> {
    let commit: trawl_core::CommitId = "c".repeat(40).parse().expect("commit");
    trawl_chunker::corpus::python_stdlib_chunks()
        .flat_map(|(_, rows)| rows)
        .map(|r| DocRow::from_chunk(r, commit.clone(), true))
        .collect()
}

/// Doc `i` of an index of the corpus repeated: copy `i / corpus.len()` lives in its own repo.
fn doc(base: &[DocRow], i: usize) -> DocRow {
    let mut d = base[i % base.len()].clone();
    let copy = i / base.len();
    d.repo_id = RepoId::parse(&format!("github.com/bench/r{copy}")).expect("repo");
    d.chunk_id =
        trawl_core::hash::chunk_id(&d.repo_id, &d.path, d.kind.as_str(), &format!("{i}"), 0);
    d.content_hash = trawl_core::hash::content_hash("bench", &d.header, &format!("{i}"));
    d.parent_id = None;
    d.children_ids.clear();
    d
}

fn space() -> Space {
    Space {
        model: "bench".into(),
        dims: DIMS as u32,
        dtype: Dtype::Float,
    }
}

async fn ensure_index(n: usize, base: &[DocRow]) -> Store {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/bench-query")
        .join(format!("n={n}"));
    let store = Store::from_url(&dir.to_string_lossy()).expect("store");
    if let Ok(Some(m)) = trawl_index::generation::live(&store).await
        && m.counts.chunks == n as u64
    {
        return store;
    }
    println!(
        "building an index of {n} chunks in {} (kept for the next run)",
        dir.display()
    );
    let t = Instant::now();
    let docs: Vec<LiveDoc> = (0..n)
        .map(|i| LiveDoc {
            doc: doc(base, i),
            vector: Some(VectorData::F32(clustered(i as u64))),
            prose: None,
        })
        .collect();
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(4),
        full: true,
        ..BuildOptions::default()
    };
    build(&store, docs, Some(space()), &opts, &trawl_compactor::Quiet)
        .await
        .expect("build");
    println!("  built in {:.0} s", t.elapsed().as_secs_f64());
    store
}

struct Query {
    text: String,
    vector: VectorData,
}

fn queries(base: &[DocRow], chunks: usize) -> Vec<Query> {
    let mut state: u64 = 0x1234_5678;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..QUERIES)
        .map(|q| {
            let i = (next() % chunks as u64) as usize;
            let d = doc(base, i);
            let text = match (&d.symbol, q % 3) {
                (Some(sym), 0) => sym.clone(),
                _ => {
                    let words: Vec<&str> = d
                        .text
                        .split(|c: char| !c.is_alphanumeric() && c != '_')
                        .filter(|w| w.len() > 3)
                        .collect();
                    let at = (next() % words.len().max(1) as u64) as usize;
                    words
                        .iter()
                        .cycle()
                        .skip(at)
                        .take(3.min(words.len()))
                        .copied()
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            };
            let text = if text.trim().is_empty() {
                "return value".to_owned()
            } else {
                text
            };
            let noise = unit(i as u64 ^ 0xDEAD_BEEF);
            let v = clustered(i as u64);
            let vector = VectorData::F32(normalized(
                v.iter().zip(&noise).map(|(a, b)| a + 0.3 * b).collect(),
            ));
            Query { text, vector }
        })
        .collect()
}

fn run_one(g: &Generation, q: &Query, mode: Mode) -> usize {
    let mut req = SearchRequest::new(q.text.clone());
    req.mode = mode;
    let filter = Filter::new(&req, Access::all()).expect("filter");
    let v = (mode != Mode::Lexical).then_some(&q.vector);
    let ranked = search::candidates(
        g,
        &req,
        10,
        filter,
        v,
        &trawl_core::config::QueryConfig::default(),
    )
    .expect("search");
    search::finish(g, &ranked.candidates, 10, false, &Access::all(), &req.query).len()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// (p50 ms, p99 ms) of running every query once.
fn latencies(g: &Generation, qs: &[Query], mode: Mode) -> (f64, f64) {
    let mut ms: Vec<f64> = qs
        .iter()
        .map(|q| {
            let t = Instant::now();
            run_one(g, q, mode);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

/// Queries per second with one client per core.
fn qps(g: &Generation, qs: &[Query], mode: Mode) -> f64 {
    let clients = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                for q in qs {
                    run_one(g, q, mode);
                }
            });
        }
    });
    (clients * qs.len()) as f64 / t.elapsed().as_secs_f64()
}

fn drop_page_cache() -> bool {
    std::process::Command::new("sync").status().is_ok()
        && std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

async fn open(store: &Store) -> (Generation, f64) {
    let t = Instant::now();
    let g = Generation::open_current(store, &std::env::temp_dir())
        .await
        .expect("open")
        .expect("a generation");
    (g, t.elapsed().as_secs_f64())
}

async fn query_embedding() {
    use trawl_embed::local::{LocalEmbedder, default_model_dir, is_installed};
    use trawl_embed::{Embedder, InputType};
    let dir = default_model_dir();
    if !is_installed(&dir) {
        println!(
            "\nquery embedding: the local model is not installed (scripts/fetch-model.sh); skipped"
        );
        return;
    }
    let e = LocalEmbedder::load(&dir, 8).expect("model");
    let texts = [
        "where are http redirects followed",
        "parse_args",
        "ValueError: Invalid isoformat string",
        "rotate log files when they reach a size limit",
    ];
    let mut ms = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        e.embed(&[texts[i % texts.len()].to_owned()], InputType::Query)
            .await
            .expect("embed");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "\nquery embedding, local model ({}), one query per call, 100 calls: p50 {:.1} ms, p99 {:.1} ms",
        e.space(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    );
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("TRAWL_BENCH_CHUNKS")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect();
    let base = corpus();
    println!(
        "query benchmark: {} stdlib chunks as the text, {DIMS}-d synthetic vectors, 4 shards, {QUERIES} queries, k=10, {} cores",
        base.len(),
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    );
    let mut rows = Vec::new();
    for &n in &sizes {
        let store = ensure_index(n, &base).await;
        let qs = queries(&base, n);
        let dropped = drop_page_cache();
        let (g, open_s) = open(&store).await;
        // Cold: right after opening, from a dropped page cache.
        for mode in [Mode::Vector, Mode::Lexical, Mode::Hybrid] {
            let (p50, p99) = latencies(&g, &qs, mode);
            rows.push((n, "cold", mode, p50, p99, f64::NAN, open_s, dropped));
        }
        for q in qs.iter().take(50) {
            run_one(&g, q, Mode::Hybrid);
        }
        for mode in [Mode::Vector, Mode::Lexical, Mode::Hybrid] {
            let (p50, p99) = latencies(&g, &qs, mode);
            let qps = qps(&g, &qs, mode);
            rows.push((n, "warm", mode, p50, p99, qps, open_s, dropped));
        }
    }
    println!(
        "\n| chunks | cache | mode | p50 ms | p99 ms | QPS | open s |\n|---|---|---|---|---|---|---|"
    );
    for (n, cache, mode, p50, p99, qps, open_s, dropped) in rows {
        let cache = if cache == "cold" && !dropped {
            "cold (page cache not dropped)"
        } else {
            cache
        };
        let qps = if qps.is_nan() {
            "—".to_owned()
        } else {
            format!("{qps:.0}")
        };
        println!(
            "| {n} | {cache} | {} | {p50:.2} | {p99:.2} | {qps} | {open_s:.1} |",
            mode.as_str()
        );
    }
    query_embedding().await;
}

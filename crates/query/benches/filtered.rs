//! Filtered vector search: usearch's filtered HNSW walk against an exact scan of the admitted
//! docs, by the share of docs the filter admits — the measurement behind
//! `query.exact_scan_below`.
//!
//! One index of `TRAWL_BENCH_CHUNKS` (default 20000) clustered 1024-d unit vectors
//! (voyage-code-3's width, inner product as the compactor builds it), ef_search 128, 50
//! candidates per search (the arm's default); 30 queries per row, each a doc's vector plus
//! noise. A filter admits a key when a hash of it falls under the share. The exact column
//! includes collecting the admitted keys. Median microseconds per search.
//!
//! `cargo bench -p trawl-query --bench filtered` (add `--profile dev` to measure the debug
//! build). Prints a table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::time::Instant;

use trawl_core::space::{Dtype, Space};
use trawl_index::segment::{self, VectorData};
use trawl_query::search::exact_scan;

const DIMS: usize = 1024;
const QUERIES: u64 = 30;
const CANDIDATES: usize = 50;

fn admitted(key: u64, share: f64) -> bool {
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    (h as f64 / (1u64 << 53) as f64) < share
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: u64 = std::env::var("TRAWL_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.trim().replace('_', "").parse().ok())
        .unwrap_or(20_000);
    let space = Space {
        model: "bench".into(),
        dims: DIMS as u32,
        dtype: Dtype::Float,
    };
    let index =
        usearch::Index::new(&segment::index_options(&space).expect("options")).expect("index");
    index.reserve(n as usize).expect("reserve");
    let t = Instant::now();
    for i in 0..n {
        index
            .add(i, &trawl_index::testing::clustered(i, DIMS))
            .expect("add");
    }
    index.change_expansion_search(128);
    println!(
        "{n} vectors of {DIMS} dims indexed in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let queries: Vec<Vec<f32>> = (0..QUERIES)
        .map(|i| {
            let base = trawl_index::testing::clustered(i * 7919 % n, DIMS);
            let noise = trawl_index::testing::unit(1_000_000 + i, DIMS);
            trawl_index::testing::normalized(
                base.iter().zip(&noise).map(|(a, b)| a + 0.3 * b).collect(),
            )
        })
        .collect();
    println!(
        "\n| admitted | docs | filtered HNSW µs | exact scan µs | exact / HNSW | same top 10 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for share in [0.0005, 0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2] {
        let (mut ann_t, mut exact_t, mut same) = (Vec::new(), Vec::new(), 0);
        let docs = (0..n).filter(|&k| admitted(k, share)).count();
        for q in &queries {
            let t = Instant::now();
            let ann = index
                .filtered_search(q, CANDIDATES, |k| admitted(k, share))
                .expect("search");
            ann_t.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            let keys: Vec<u64> = (0..n).filter(|&k| admitted(k, share)).collect();
            let exact =
                exact_scan(&index, &VectorData::F32(q.clone()), &keys, CANDIDATES).expect("scan");
            exact_t.push(t.elapsed().as_secs_f64() * 1e6);
            let top = |v: &[u64]| v.iter().take(10).copied().collect::<Vec<_>>();
            let exact_keys: Vec<u64> = exact.iter().map(|p| p.0).collect();
            same += usize::from(top(&ann.keys) == top(&exact_keys));
        }
        let (a, e) = (median(ann_t), median(exact_t));
        println!(
            "| {:.2} % | {docs} | {a:.0} | {e:.0} | {:.2} | {same}/{QUERIES} |",
            share * 100.0,
            e / a
        );
    }
}

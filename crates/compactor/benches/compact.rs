//! Compactor benchmark: incremental compaction. The Python standard library's chunks (trawl's
//! chunker) with 1024-d synthetic vectors; a 1 %-change generation against a full rebuild of
//! the same live set, bytes written and seconds.
//!
//! `cargo bench -p trawl-compactor --bench compact` (builds DataFusion in release: the
//! compactor's live-set query needs it). The segment tables — build time, bytes, memory,
//! recall — are the index format's benchmark (`cargo bench -p trawl-index --bench segment`).
//! Prints a table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::time::Instant;

use trawl_compactor::build::{BuildOptions, LiveDoc, build};
use trawl_compactor::{Quiet, VectorData};
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_index::docs::DocRow;
use trawl_index::testing::clustered;

const DIMS: usize = 1024;

fn real_corpus() -> Vec<LiveDoc> {
    let mut out = Vec::new();
    for (_, rows) in trawl_chunker::corpus::python_stdlib_chunks() {
        for r in rows {
            let n = out.len() as u64;
            out.push(LiveDoc {
                doc: DocRow::from_chunk(r, "c".repeat(40).parse().expect("commit"), true),
                vector: Some(VectorData::F32(clustered(n, DIMS))),
                prose: None,
            });
        }
    }
    out
}

fn space() -> Space {
    Space {
        model: "bench".into(),
        dims: DIMS as u32,
        dtype: Dtype::Float,
    }
}

async fn incremental(live: Vec<LiveDoc>) {
    let opts = BuildOptions {
        shards: trawl_core::config::Shards::Fixed(8),
        threads: 2,
        ..BuildOptions::default()
    };
    let store = Store::memory();
    let t = Instant::now();
    let full = build(&store, live.clone(), Some(space()), &opts, &Quiet)
        .await
        .expect("full build");
    let full_s = t.elapsed().as_secs_f64();
    // 1 %: half modified, a quarter deleted, a quarter added (copies under new paths).
    let n = live.len();
    let k = n / 100;
    let mut changed = live.clone();
    for d in changed.iter_mut().step_by(n / (k / 2).max(1)).take(k / 2) {
        d.doc.text.push_str("\n# edited\n");
        d.doc.content_hash = trawl_core::hash::content_hash("1", "edited", &d.doc.text);
    }
    changed.truncate(n - k / 4);
    for (j, d) in live.iter().take(k / 4).enumerate() {
        let mut d = d.clone();
        d.doc.path = format!("added/{j}.py");
        d.doc.chunk_id =
            trawl_core::hash::chunk_id(&d.doc.repo_id, &d.doc.path, "function", "x", 0);
        changed.push(d);
    }
    let t = Instant::now();
    let inc = build(&store, changed.clone(), Some(space()), &opts, &Quiet)
        .await
        .expect("incremental build");
    let inc_s = t.elapsed().as_secs_f64();
    let fresh = Store::memory();
    let t = Instant::now();
    let rebuilt = build(&fresh, changed, Some(space()), &opts, &Quiet)
        .await
        .expect("full rebuild");
    let rebuilt_s = t.elapsed().as_secs_f64();
    println!(
        "\n## Incremental: 1 % of {n} real chunks changed ({} modified, {} deleted, {} added), 8 shards\n",
        k / 2,
        k / 4,
        k / 4
    );
    println!("| build | seconds | bytes written | vs full rebuild |");
    println!("|---|---|---|---|");
    println!(
        "| first full build | {full_s:.1} | {:.1} MB | |",
        full.build.bytes_written as f64 / 1e6
    );
    println!(
        "| full rebuild of the changed set | {rebuilt_s:.1} | {:.1} MB | 1.00 |",
        rebuilt.build.bytes_written as f64 / 1e6
    );
    println!(
        "| incremental ({} shards delta, {} rebuilt, {} reused) | {inc_s:.1} | {:.2} MB | **{:.3}** bytes, {:.3} time |",
        inc.build.shards_delta,
        inc.build.shards_rebuilt,
        inc.build.shards_reused,
        inc.build.bytes_written as f64 / 1e6,
        inc.build.bytes_written as f64 / rebuilt.build.bytes_written as f64,
        inc_s / rebuilt_s
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(incremental(real_corpus()));
}

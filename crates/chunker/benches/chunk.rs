//! Chunking benchmark over the Python standard library and Rust sources from the cargo
//! registry: MB/s on one core for (a) tree-sitter parse only — the limit; (b) trawl's chunker
//! (parse + chunk), and with records (headers, ids, hashes); (c) the `text-splitter` crate's
//! CodeSplitter at the same ceiling — the peer; (d) fixed windows; and the Parquet write rate.
//!
//! `cargo bench -p trawl-chunker --bench chunk`. Prints a table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use text_splitter::{ChunkConfig, CodeSplitter};
use trawl_chunker::records::{Source, to_records};
use trawl_chunker::{Options, Strategy, chunk, lang};

/// Up to `budget` bytes of UTF-8 files, sampled evenly.
fn corpus(root: &Path, ext: &str, budget: usize) -> Vec<(String, String)> {
    let files = trawl_chunker::corpus::files_under(root, &[ext]);
    let all: Vec<(String, String)> = files
        .into_iter()
        .filter_map(|f| {
            Some((
                f.to_string_lossy().into_owned(),
                std::fs::read_to_string(&f).ok()?,
            ))
        })
        .filter(|(_, s)| s.len() <= 1 << 20)
        .collect();
    let total: usize = all.iter().map(|(_, s)| s.len()).sum();
    let step = (total / budget.max(1)).max(1);
    all.into_iter().step_by(step).collect()
}

fn mbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs
}

fn time<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64())
}

fn bench(name: &str, language: &str, files: &[(String, String)]) {
    let spec = lang::spec(language).expect("a compiled language");
    let ts_lang = (spec.language.expect("a compiled language"))();
    let bytes: usize = files.iter().map(|(_, s)| s.len()).sum();
    let opts = Options::default();
    println!(
        "\n{name}: {} files, {:.1} MB, ceiling {} bytes",
        files.len(),
        bytes as f64 / 1e6,
        opts.ceiling
    );

    // Warm up caches and the allocator.
    for (p, s) in files.iter().take(20) {
        let _ = chunk(p, Some(language), s, Strategy::Ast, &opts);
    }
    let (nodes, parse) = time(|| {
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&ts_lang).unwrap();
        files
            .iter()
            .map(|(_, s)| {
                parser
                    .parse(s, None)
                    .map_or(0, |t| t.root_node().child_count() as usize)
            })
            .sum::<usize>()
    });
    let (_, parse_budgeted) = time(|| {
        files
            .iter()
            .map(|(_, s)| {
                trawl_chunker::ast::parse(&ts_lang, s, &opts)
                    .map_or(0, |t| t.root_node().child_count() as usize)
            })
            .sum::<usize>()
    });
    let (pieces, ours) = time(|| {
        files
            .iter()
            .map(|(p, s)| {
                chunk(p, Some(language), s, Strategy::Ast, &opts)
                    .pieces
                    .len()
            })
            .sum::<usize>()
    });
    let repo = trawl_core::RepoId::parse("github.com/bench/corpus").unwrap();
    let blob: trawl_core::BlobId = "0".repeat(40).parse().unwrap();
    let (rows, ours_records) = time(|| {
        files
            .iter()
            .flat_map(|(p, s)| {
                let c = chunk(p, Some(language), s, Strategy::Ast, &opts);
                let src = Source {
                    repo: &repo,
                    path: p,
                    blob: &blob,
                    language,
                };
                to_records(&src, &c, s)
            })
            .collect::<Vec<_>>()
    });
    let (peer_chunks, peer) = time(|| {
        let splitter = CodeSplitter::new(ts_lang.clone(), ChunkConfig::new(opts.ceiling)).unwrap();
        files
            .iter()
            .map(|(_, s)| splitter.chunks(s).count())
            .sum::<usize>()
    });
    let (windows, win) = time(|| {
        files
            .iter()
            .map(|(p, s)| {
                chunk(p, Some(language), s, Strategy::Windows, &opts)
                    .pieces
                    .len()
            })
            .sum::<usize>()
    });
    let text_bytes: usize = rows.iter().map(|r| r.header.len() + r.text.len()).sum();
    let (parquet_len, write) = time(|| {
        rows.chunks(50_000)
            .map(|part| trawl_core::records::to_parquet(part).unwrap().len())
            .sum::<usize>()
    });
    let _ = nodes;

    println!(
        "{:<46} {:>9} {:>9} {:>10}",
        "stage (one core)", "MB/s", "seconds", "chunks"
    );
    let row = |what: &str, secs: f64, n: usize| {
        println!("{what:<46} {:>9.1} {secs:>9.3} {n:>10}", mbps(bytes, secs));
    };
    row("(a) tree-sitter parse only — the limit", parse, 0);
    row("(a') parse with trawl's time budget", parse_budgeted, 0);
    row("(b) trawl chunker (parse + chunk)", ours, pieces);
    row(
        "(b') trawl chunker + records (headers, ids)",
        ours_records,
        rows.len(),
    );
    row(
        "(c) text-splitter CodeSplitter — the peer",
        peer,
        peer_chunks,
    );
    row("(d) fixed windows (1,000 chars, 100 overlap)", win, windows);
    println!(
        "{:<46} {:>9.1} {write:>9.3} {:>10}   ({} rows, {:.1} MB of header+text → {:.1} MB Parquet)",
        "Parquet write (zstd)",
        mbps(text_bytes, write),
        rows.len(),
        rows.len(),
        text_bytes as f64 / 1e6,
        parquet_len as f64 / 1e6
    );
    let vs_limit = parse / ours;
    let vs_peer = peer / ours;
    println!(
        "(b)/(a) = {vs_limit:.2} (target ≥ 0.80: {}), (b)/(c) = {vs_peer:.2} (target ≥ 2: {})",
        if vs_limit >= 0.8 { "met" } else { "MISSED" },
        if vs_peer >= 2.0 { "met" } else { "MISSED" }
    );
}

fn main() {
    let budget: usize = std::env::var("TRAWL_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
        * 1_000_000;
    if let Some(root) = trawl_chunker::corpus::python_stdlib() {
        bench(
            "Python standard library",
            "python",
            &corpus(&root, "py", budget),
        );
    }
    let home = std::env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    bench(
        "Rust sources in the cargo registry",
        "rust",
        &corpus(&home.join("registry/src"), "rs", budget),
    );
}

//! Cluster mode on one machine vs `trawl index` in one process, on the same corpus, with the
//! hash embedder (so the embedding provider costs nothing and the bus and the store show):
//!
//! - `index`: fetch → chunk → embed → compact in one process, in-process bus, local directory;
//! - `stages · <bus> · <store>`: one process per stage, over the spool bus or tansu (Kafka
//!   protocol), on a local directory or s3s-fs (S3 API), both on loopback.
//!
//! Stage workers are started and have joined their consumer groups before the clock starts;
//! the clock runs from the fetcher's start to the compactor's exit (`--wait`, polling the
//! store every second). It measures the `trawl` binary of the profile it is built with:
//! `cargo bench -p trawl-cli --bench cluster` (release), or `--profile dev` for the debug
//! binary the tests use.
//!
//! `TRAWL_BENCH_FILES` (default 600) Python standard library files in 8 repositories.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../../../tests/support/procs.rs"]
mod procs;

use procs::{Broker, Proc};
use trawl_core::store::Store;

/// Builds 8 git repositories from the first `n` stdlib files (sorted paths, dealt round-robin
/// by top-level entry). Returns their paths and the file count.
fn corpus(root: &Path, n: usize) -> (Vec<PathBuf>, usize) {
    let stdlib = trawl_chunker::corpus::python_stdlib().expect("python3 is on this machine");
    let mut files = Vec::new();
    let mut stack = vec![stdlib.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !matches!(
                    name.as_str(),
                    "test" | "tests" | "site-packages" | "idlelib" | "__pycache__"
                ) {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "py") {
                files.push(p);
            }
        }
    }
    files.sort();
    files.truncate(n);
    let repos: Vec<PathBuf> = (0..8).map(|i| root.join(format!("repo{i}"))).collect();
    for (i, f) in files.iter().enumerate() {
        let rel = f.strip_prefix(&stdlib).unwrap();
        let dest = repos[i % 8].join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(f, dest).unwrap();
    }
    for r in &repos {
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@example.com",
                "commit",
                "-qm",
                "corpus",
            ],
        ] {
            assert!(
                Command::new("git")
                    .current_dir(r)
                    .args(args)
                    .status()
                    .unwrap()
                    .success()
            );
        }
    }
    (repos, files.len())
}

fn chunks_in(store: &Store, cache: &Path, rt: &tokio::runtime::Runtime) -> usize {
    rt.block_on(trawl_query::index::Generation::open_current(store, cache))
        .unwrap()
        .expect("a live generation")
        .live_docs()
}

/// Runs the stage processes with `config`; the seconds from the fetcher's start to the
/// compactor's exit.
fn stages(work: &Path, config: &Path, env: &[(String, String)], repos: &[PathBuf]) -> f64 {
    let stage = |args: &[&str]| procs::stage(work, config, env, args);
    let mut chunker = Proc::spawn("chunk-worker", stage(&["chunk-worker"]));
    let mut embedder = Proc::spawn("embed-worker", stage(&["embed-worker"]));
    chunker.ops();
    embedder.ops();
    // Consumer groups join before any message is published (tansu takes ~3 s).
    std::thread::sleep(Duration::from_secs(5));
    let started = Instant::now();
    let mut args = vec!["fetcher".to_owned()];
    for r in repos {
        args.extend(["--repo".to_owned(), r.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut fetcher = Proc::spawn("fetcher", stage(&args));
    let mut compactor = Proc::spawn(
        "compactor",
        stage(&["compactor", "--wait", "--poll", "1s", "--deadline", "1h"]),
    );
    fetcher.succeeds(Duration::from_secs(3600));
    compactor.succeeds(Duration::from_secs(3600));
    let seconds = started.elapsed().as_secs_f64();
    chunker.signal("TERM");
    embedder.signal("TERM");
    chunker.wait(Duration::from_secs(120));
    embedder.wait(Duration::from_secs(120));
    seconds
}

fn config(path: &Path, store: &str, bus: &str, cache: &Path, run: usize) {
    std::fs::write(
        path,
        format!(
            "[store]\nurl = \"{store}\"\n\n[bus]\nurl = \"{bus}\"\ntopic_files = \"files{run}\"\n\
             topic_chunks = \"chunks{run}\"\ntopic_embedded = \"embedded{run}\"\n\
             topic_dead_letters = \"dead-letters{run}\"\n\n[fetch]\ncache_dir = \"{}\"\n\n\
             [embed]\nembedder = \"hash\"\n\n[ops]\nlisten = \"127.0.0.1:0\"\n",
            cache.display()
        ),
    )
    .unwrap();
}

fn main() {
    let n: usize = std::env::var("TRAWL_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let work = tempfile::tempdir().unwrap();
    let (repos, files) = corpus(&work.path().join("corpus"), n);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rows: Vec<(&str, f64, usize)> = Vec::new();

    // In one process.
    let dir = work.path().join("index-store");
    let started = Instant::now();
    procs::index_in_process(work.path(), &dir, &work.path().join("m0"), repos.clone());
    let seconds = started.elapsed().as_secs_f64();
    let store = Store::from_url(dir.to_str().unwrap()).unwrap();
    rows.push((
        "index (one process)",
        seconds,
        chunks_in(&store, &work.path().join("q0"), &rt),
    ));

    // Stage processes on each bus × store pair.
    let broker = Broker::start();
    let s3 = rt
        .block_on(trawl_core::s3_testing::S3Server::start(&["trawl"]))
        .unwrap();
    let opts = s3.options();
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (i, (mode, bus, on_s3)) in [
        ("stages · spool · dir", "spool://".to_owned(), false),
        ("stages · kafka · dir", broker.bus_url(8), false),
        ("stages · spool · s3", "spool://".to_owned(), true),
        ("stages · kafka · s3", broker.bus_url(8), true),
    ]
    .into_iter()
    .enumerate()
    {
        let url = if on_s3 {
            format!("s3://trawl/bench{i}")
        } else {
            work.path().join(format!("store{i}")).display().to_string()
        };
        let cfg = work.path().join(format!("stages{i}.toml"));
        // Each mode its own topics on the one broker.
        config(
            &cfg,
            &url,
            &bus,
            &work.path().join(format!("m{}", i + 1)),
            i,
        );
        let env = if on_s3 { s3.env() } else { Vec::new() };
        let before = s3
            .faults
            .requests
            .load(std::sync::atomic::Ordering::Relaxed);
        let seconds = stages(work.path(), &cfg, &env, &repos);
        if on_s3 {
            eprintln!(
                "{mode}: {} S3 requests",
                s3.faults
                    .requests
                    .load(std::sync::atomic::Ordering::Relaxed)
                    - before
            );
        }
        let store = if on_s3 {
            Store::from_url_with(&url, &opts).unwrap()
        } else {
            Store::from_url(&url).unwrap()
        };
        let chunks = chunks_in(&store, &work.path().join(format!("q{}", i + 1)), &rt);
        rows.push((mode, seconds, chunks));
    }

    let base = rows[0].1;
    println!("{files} files in 8 repositories, hash embedder, trawl binary of this build profile");
    println!("| mode | seconds | files/s | chunks | chunks/s | time vs index |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (mode, s, chunks) in &rows {
        println!(
            "| {mode} | {s:.1} | {:.1} | {chunks} | {:.0} | {:.2}× |",
            files as f64 / s,
            *chunks as f64 / s,
            s / base
        );
    }
}

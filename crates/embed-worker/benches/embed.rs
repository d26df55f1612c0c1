//! Embedding benchmark. Two tables, each ours beside a reference measured in the same run:
//!
//! 1. **Voyage pacing** against the fake Voyage server with a budget (default 1M tokens and
//!    600 requests per minute, 10 % injected 429s and 5 % 5xx): the embed worker drains chunk
//!    parts holding one budget-minute's worth of tokens (real chunks of the Python standard
//!    library); we report achieved tokens/min as a fraction of the budget (the physical limit),
//!    the most tokens the fake saw in any 60-second window, and lost or duplicated chunks.
//! 2. **Local model**: chunks/s of the all-MiniLM-L6-v2 embedder on 2 threads, run by candle
//!    and by OpenVINO (when its runtime is installed), beside Python sentence-transformers
//!    (torch) on the same inputs and batch size, and how well their vectors agree (cosine);
//!    then the work those inputs hold (FLOPs of the encoder's
//!    matrix products and attention) and the ceiling it sets at the rate candle's matrix
//!    kernel multiplies the model's shapes on every core, with each run's share of that rate.
//!
//! `cargo bench -p trawl-embed-worker --bench embed`. Environment: `TRAWL_BENCH_SECONDS`
//! (budget-seconds of work for table 1, default 60), `TRAWL_BENCH_PYTHON` (a python with
//! sentence-transformers; table 2's peer column is skipped, and says so, without it),
//! `TRAWL_BENCH_ONLY=pacing|local`, `TRAWL_BENCH_BATCH` (table 2's batch size, default 8),
//! `TRAWL_BENCH_INPUTS=path` (table 2's inputs written there as JSON lines, for
//! `benches/openvino_probe.py`), `TRAWL_BENCH_REPEATS` (timed runs per engine, alternated;
//! the median is reported; default 1), `TRAWL_OPENVINO_DIR` (the runtime's libraries, default
//! the directory `trawl index` installs them in). Prints tables; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use trawl_core::bus::{Bus, InProcBus};
use trawl_core::ids::{CommitId, RepoId, RunId};
use trawl_core::records::{self, CHUNK_PART_VERSION, ChunkPartEvent, ChunkRecord, EmbeddingRecord};
use trawl_core::store::Store;
use trawl_embed::embedder::{Embedder, InputType, Vector};
use trawl_embed::fake::{FakeConfig, FakeVoyage, fake_tokens};
use trawl_embed::local::{LocalEmbedder, Reading, Runtime, default_model_dir};
use trawl_embed::voyage::{VoyageConfig, VoyageEmbedder};
use trawl_embed_worker::worker::CHUNKS_TOPIC;
use trawl_embed_worker::{EmbedWorker, Options, Until};

/// Chunk parts of the standard library, one per file, until `tokens` fake tokens.
fn chunk_parts(tokens: u64) -> Vec<(String, Vec<ChunkRecord>)> {
    let mut out = Vec::new();
    let mut total = 0;
    for (path, rows) in trawl_chunker::corpus::python_stdlib_chunks() {
        total += rows
            .iter()
            .map(|r| fake_tokens(&r.indexed_text()))
            .sum::<u64>();
        out.push((path, rows));
        if total >= tokens {
            break;
        }
    }
    out
}

async fn pacing(seconds: u64) {
    let (tpm, rpm) = (1_000_000u64, 600u32);
    let fake = FakeVoyage::start(FakeConfig {
        tpm,
        rpm: u64::from(rpm),
        p429: 0.10,
        p5xx: 0.05,
        ..FakeConfig::default()
    })
    .await
    .expect("the fake starts");
    let budget_tokens = tpm * seconds / 60;
    let parts = chunk_parts(budget_tokens);
    let store = Store::memory();
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(1 << 20));
    let repo = RepoId::parse("github.com/python/cpython").expect("a repo id");
    let mut expected = std::collections::HashSet::new();
    let mut chunks = 0;
    for (i, (path, rows)) in parts.iter().enumerate() {
        let key = format!("chunks/repo=bench/{i}.parquet");
        store
            .put(&key, records::to_parquet(rows).expect("parquet"))
            .await
            .expect("put");
        expected.extend(rows.iter().map(|r| r.content_hash));
        chunks += rows.len();
        let ev = ChunkPartEvent {
            schema_version: CHUNK_PART_VERSION,
            repo: repo.clone(),
            commit: "c".repeat(40).parse::<CommitId>().expect("a commit id"),
            path: path.clone(),
            blob: rows.first().map_or_else(
                || format!("{:040x}", 1).parse().expect("blob"),
                |r| r.blob.clone(),
            ),
            key,
            chunks: rows.len() as u32,
            run: RunId::new(),
        };
        bus.publish(CHUNKS_TOPIC, repo.as_str(), ev.to_json())
            .await
            .expect("publish");
    }
    bus.close(CHUNKS_TOPIC).await.expect("close");
    let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
    cfg.tpm = tpm;
    cfg.rpm = rpm;
    cfg.timeout = Duration::from_secs(10);
    cfg.max_retries = 20;
    let embedder = Arc::new(VoyageEmbedder::new(cfg).expect("client"));
    let worker = EmbedWorker::new(
        store.clone(),
        Some(bus.clone()),
        embedder,
        Options {
            linger: Duration::from_millis(100),
            concurrency: 4,
            price_per_mtok: 0.18,
            batch_price_per_mtok: 0.12,
            dry_run: false,
            embedder: "voyage".into(),
            prose_views: false,
        },
    );
    let t = Instant::now();
    let report = worker.run(Until::Closed).await.expect("the worker runs");
    let elapsed = t.elapsed().as_secs_f64();
    let s = fake.stats();

    // Lost and duplicated chunks: every expected content hash has exactly one vector.
    let mut got = std::collections::HashMap::new();
    for key in store.list("embeddings/").await.expect("list") {
        let rows: Vec<EmbeddingRecord> =
            records::from_parquet(store.get(&key).await.expect("get").expect("part"))
                .expect("rows");
        for r in rows {
            *got.entry(r.content_hash).or_insert(0u32) += 1;
        }
    }
    let lost = expected.iter().filter(|h| !got.contains_key(h)).count();
    let duplicated = got.values().filter(|&&n| n > 1).count();
    let active = s
        .last_accept
        .zip(s.first_accept)
        .map_or(elapsed, |(l, f)| l.duration_since(f).as_secs_f64());
    let achieved = s.accepted_tokens as f64 / elapsed * 60.0;
    println!("\n## Voyage pacing against the fake server ({seconds} budget-seconds of work)\n");
    println!("| measure | value |");
    println!("|---|---|");
    println!("| budget | {tpm} tokens/min, {rpm} requests/min; 10 % 429s and 5 % 5xx injected |");
    println!(
        "| chunks / distinct texts | {chunks} / {} |",
        expected.len()
    );
    println!(
        "| tokens accepted by the fake | {} in {elapsed:.1} s |",
        s.accepted_tokens
    );
    println!(
        "| achieved tokens/min | {achieved:.0} = **{:.1} %** of the budget (first to last accepted request: {:.1} %) |",
        100.0 * achieved / tpm as f64,
        100.0 * s.accepted_tokens as f64 / active.max(1e-9) * 60.0 / tpm as f64
    );
    println!(
        "| most tokens in any 60 s window | {} ({:.1} % of the budget) |",
        s.peak_window_tokens,
        100.0 * s.peak_window_tokens as f64 / tpm as f64
    );
    println!(
        "| requests: accepted / all | {} / {} |",
        s.accepted, s.requests
    );
    println!("| fake's answers | {:?} |", sorted(&s.outcomes));
    println!("| client retries by cause | {:?} |", report.embed.retries);
    println!("| lost chunks / duplicated vectors | **{lost} / {duplicated}** |");
    println!(
        "| estimate ÷ billed tokens | {:.2} |",
        report.embed.tokens_estimated as f64 / report.embed.tokens_sent.max(1) as f64
    );
}

fn sorted(m: &std::collections::HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
    v.sort();
    v
}

/// Cosines of two lists of unit vectors, pairwise.
fn cosines(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<f32> {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>())
        .collect()
}

/// Mean and least of `c`.
fn agreement(c: &[f32]) -> (f32, f32) {
    let min = c.iter().copied().fold(f32::INFINITY, f32::min);
    (c.iter().sum::<f32>() / c.len().max(1) as f32, min)
}

fn floats(e: &trawl_embed::embedder::Embedded) -> Vec<Vec<f32>> {
    e.vectors
        .iter()
        .map(|v| match v {
            Vector::Float(a) => a.clone(),
            Vector::Bytes(_) => panic!("float vectors"),
        })
        .collect()
}

async fn local() {
    let n = 512;
    let batch: usize = std::env::var("TRAWL_BENCH_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let dir =
        std::env::var_os("TRAWL_EMBED_MODEL_DIR").map_or_else(default_model_dir, PathBuf::from);
    let threads = 2;
    let mut engines: Vec<(String, LocalEmbedder)> = Vec::new();
    // A model candle cannot run (NomicBERT) is measured on OpenVINO alone.
    let on_candle = match LocalEmbedder::load_with(&dir, batch, threads, Reading::default()) {
        Ok(m) => {
            engines.push(("candle".into(), m));
            true
        }
        Err(e) => {
            println!("\n(candle not run: {e})");
            false
        }
    };
    let libs = std::env::var_os("TRAWL_OPENVINO_DIR")
        .map_or_else(trawl_embed::openvino::default_runtime_dir, PathBuf::from);
    let openvino = Runtime::OpenVino(libs.clone());
    match LocalEmbedder::load_on(&dir, batch, threads, Reading::default(), &openvino) {
        Ok(m) => engines.push((
            format!("OpenVINO {}", trawl_embed::openvino::RUNTIME_VERSION),
            m,
        )),
        Err(e) => println!("\n(OpenVINO not run: {e})"),
    }
    if engines.is_empty() {
        println!(
            "\nlocal model table skipped: no engine runs the model in {}",
            dir.display()
        );
        return;
    }
    let texts: Vec<String> = chunk_parts(u64::MAX / 4)
        .into_iter()
        .flat_map(|(_, rows)| rows)
        .step_by(7)
        .take(n)
        .map(|r| r.indexed_text())
        .collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    if let Some(path) = std::env::var_os("TRAWL_BENCH_INPUTS") {
        // The same inputs for another runtime's probe (`benches/openvino_probe.py`).
        write_lines(Path::new(&path), &texts);
    }
    // Warm-up, then the timed runs, engines alternated within each repeat; the median counts.
    let repeats: usize = std::env::var("TRAWL_BENCH_REPEATS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut times = vec![Vec::new(); engines.len()];
    let mut vectors = vec![Vec::new(); engines.len()];
    for (_, m) in &engines {
        m.embed(&texts[..8], InputType::Document)
            .await
            .expect("warm-up");
    }
    for _ in 0..repeats {
        for (i, (_, m)) in engines.iter().enumerate() {
            let t = Instant::now();
            let out = m.embed(&texts, InputType::Document).await.expect("embeds");
            times[i].push(t.elapsed().as_secs_f64());
            vectors[i] = floats(&out);
        }
    }
    let median = |t: &[f64]| {
        let mut t = t.to_vec();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let secs: Vec<f64> = times.iter().map(|t| median(t)).collect();
    let truncated = engines[0].1.counters().truncated / repeats as u64;

    // The peer, on the same inputs.
    let peer = std::env::var_os("TRAWL_BENCH_PYTHON").map(|python| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let inputs = tmp.path().join("inputs.jsonl");
        write_lines(&inputs, &texts);
        let out = tmp.path().join("out.json");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/st_peer.py");
        let status = std::process::Command::new(python)
            .arg(script)
            .arg(&dir)
            .arg(&inputs)
            .arg(&out)
            .arg(batch.to_string())
            .arg(threads.to_string())
            .status()
            .expect("python runs");
        assert!(status.success(), "the sentence-transformers peer failed");
        let peer: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("peer output")).expect("json");
        let psecs = peer["seconds"].as_f64().expect("seconds");
        let pv: Vec<Vec<f32>> = peer["vectors"]
            .as_array()
            .expect("vectors")
            .iter()
            .map(|v| {
                v.as_array()
                    .expect("a vector")
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(0.0) as f32)
                    .collect()
            })
            .collect();
        (psecs, pv)
    });

    println!(
        "\n## Local embedder: {n} standard-library chunks ({:.0} KB), batch {batch}, {threads} threads, median of {repeats}\n",
        bytes as f64 / 1e3
    );
    println!("| embedder | seconds | chunks/s | vs sentence-transformers | vs candle |");
    println!("|---|---|---|---|---|");
    // How many times candle's time a run of `s` seconds is (none when candle did not run).
    let vs_candle = |s: f64| {
        if on_candle {
            format!("{:.2}", secs[0] / s)
        } else {
            "—".to_owned()
        }
    };
    for ((name, m), s) in engines.iter().zip(&secs) {
        let vs_peer = peer
            .as_ref()
            .map_or_else(|| "—".to_owned(), |(p, _)| format!("{:.2}", p / s));
        let vs_candle = vs_candle(*s);
        println!(
            "| trawl ({name}, {}) | {s:.2} | {:.1} | {vs_peer} | {vs_candle} |",
            m.space().model,
            n as f64 / s,
        );
    }
    match &peer {
        Some((psecs, _)) => println!(
            "| sentence-transformers (torch, {threads} threads) | {psecs:.2} | {:.1} | 1.00 | {} |",
            n as f64 / psecs,
            vs_candle(*psecs)
        ),
        None => println!(
            "| sentence-transformers | not run: set TRAWL_BENCH_PYTHON to a python with it | | | |"
        ),
    }
    println!();
    for (i, (name, _)) in engines.iter().enumerate() {
        if let Some((_, pv)) = &peer {
            let (mean, min) = agreement(&cosines(&vectors[i], pv));
            println!(
                "Agreement of {name} with sentence-transformers: mean cosine {mean:.6}, min {min:.6}."
            );
        }
        if i > 0 && on_candle {
            let (mean, min) = agreement(&cosines(&vectors[i], &vectors[0]));
            println!("Agreement of {name} with candle: mean cosine {mean:.6}, min {min:.6}.");
        }
    }
    println!("{truncated} of {n} inputs truncated to the model's 256 tokens.");
    let mut runs: Vec<(&str, f64)> = engines
        .iter()
        .zip(&secs)
        .map(|((name, _), s)| (name.as_str(), *s))
        .collect();
    if let Some((p, _)) = &peer {
        runs.push(("sentence-transformers", *p));
    }
    ceiling(&dir, &texts, engines[0].1.max_seq(), &runs);
}

/// `texts` as JSON lines: one JSON string per line, as the probes read them.
fn write_lines(path: &Path, texts: &[String]) {
    let lines: Vec<String> = texts
        .iter()
        .map(|t| serde_json::to_string(t).expect("json"))
        .collect();
    std::fs::write(path, lines.join("\n") + "\n")
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The model's shape, from its `config.json`.
struct Shape {
    hidden: usize,
    intermediate: usize,
    layers: usize,
}

impl Shape {
    fn read(dir: &Path) -> Option<Self> {
        let c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).ok()?).ok()?;
        let get = |k: &str| c[k].as_u64().map(|v| v as usize);
        Some(Self {
            hidden: get("hidden_size")?,
            intermediate: get("intermediate_size")?,
            layers: get("num_hidden_layers")?,
        })
    }

    /// Floating-point operations of one encoder pass over `len` tokens: per layer the four
    /// attention projections and the two feed-forward products (2 × len × weights), and the
    /// attention scores and their weighted sum (2 × 2 × len² × hidden). Element-wise work,
    /// embeddings and pooling are left out: this is a lower bound.
    fn flops(&self, len: usize) -> f64 {
        let (h, f, l) = (self.hidden as f64, self.intermediate as f64, len as f64);
        self.layers as f64 * (2.0 * l * (4.0 * h * h + 2.0 * h * f) + 4.0 * l * l * h)
    }
}

/// The physical side of the local table: the work the inputs hold, and the fastest any
/// implementation could embed them at the rate candle's matrix kernel multiplies the
/// model's own shapes on every core (its ceiling: a runtime with a faster kernel has a
/// higher one, up to the cores' peak).
fn ceiling(dir: &Path, texts: &[String], max_seq: usize, runs: &[(&str, f64)]) {
    use candle_core::{Device, Tensor};
    let (Some(shape), Ok(mut tok)) = (
        Shape::read(dir),
        tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")),
    ) else {
        println!("\n(no ceiling: the model's config.json or tokenizer.json cannot be read)");
        return;
    };
    // The file's own truncation (128 for all-MiniLM-L6-v2) is not the embedder's.
    if tok.with_truncation(None).is_err() {
        println!("\n(no ceiling: the tokenizer's truncation cannot be turned off)");
        return;
    }
    let lens: Vec<usize> = texts
        .iter()
        .map(|t| {
            tok.encode(t.as_str(), true)
                .map_or(0, |e| e.get_ids().len())
                .min(max_seq)
        })
        .collect();
    let flops: f64 = lens.iter().map(|&l| shape.flops(l)).sum();
    let tokens: usize = lens.iter().sum();
    let mean_len = tokens / lens.len().max(1);
    // The products of one batch of 8 mean-length inputs, as the model computes them.
    let rows = 8 * mean_len.max(1);
    let (h, f) = (shape.hidden, shape.intermediate);
    let rand = |r: usize, c: usize| Tensor::randn(0f32, 1.0, (r, c), &Device::Cpu).expect("tensor");
    let (x, wq, wi, inner, wo) = (
        rand(rows, h),
        rand(h, h),
        rand(h, f),
        rand(rows, f),
        rand(f, h),
    );
    let pass = || {
        for _ in 0..4 {
            x.matmul(&wq).expect("matmul");
        }
        x.matmul(&wi).expect("matmul");
        inner.matmul(&wo).expect("matmul");
    };
    pass();
    let reps = 20;
    let started = Instant::now();
    for _ in 0..reps {
        pass();
    }
    let per_pass = 2.0 * rows as f64 * (4.0 * (h * h) as f64 + 2.0 * (h * f) as f64);
    let rate = per_pass * f64::from(reps) / started.elapsed().as_secs_f64();
    println!(
        "\nThe work: {tokens} tokens (mean {mean_len}), {:.0} GFLOP of matrix products and attention. \
         candle's matrix kernel multiplies the model's shapes at {:.1} GFLOP/s on {} cores: \
         no implementation on that kernel embeds these inputs faster than {:.1} chunks/s.\n",
        flops / 1e9,
        rate / 1e9,
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        texts.len() as f64 * rate / flops
    );
    println!("| run | GFLOP/s achieved | share of the kernel's rate |");
    println!("|---|---|---|");
    for (name, secs) in runs {
        let achieved = flops / secs;
        println!(
            "| {name} | {:.1} | {:.2} |",
            achieved / 1e9,
            achieved / rate
        );
    }
}

fn main() {
    let only = std::env::var("TRAWL_BENCH_ONLY").unwrap_or_default();
    let seconds: u64 = std::env::var("TRAWL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        if only.is_empty() || only == "pacing" {
            pacing(seconds).await;
        }
        if only.is_empty() || only == "local" {
            local().await;
        }
    });
}

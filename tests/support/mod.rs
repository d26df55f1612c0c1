//! Git repositories built inside the tests with git2, and helpers to run the fetcher.

#![allow(dead_code)]

pub mod procs;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use git2::{IndexEntry, IndexTime, Oid, Repository, Signature};
use trawl_core::bus::{Bus, InProcBus};
use trawl_core::config::FetchConfig;
use trawl_core::store::Store;
use trawl_fetcher::{Emitted, Fetcher, Observer, RunOptions, RunReport, repos};

/// What a tree entry is.
#[derive(Clone)]
pub enum Node {
    File(Vec<u8>),
    Exec(Vec<u8>),
    Symlink(&'static str),
    Submodule(Oid),
}

pub fn file(s: impl AsRef<[u8]>) -> Node {
    Node::File(s.as_ref().to_vec())
}

/// A bare source repository whose `main` branch the tests move around.
pub struct SourceRepo {
    pub dir: tempfile::TempDir,
    pub repo: Repository,
    name: String,
}

impl SourceRepo {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("src.git")).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        Self {
            dir,
            repo,
            name: "src".into(),
        }
    }

    /// A repository whose id ends in `/<name>` (for access patterns such as `*/name`).
    pub fn named(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join(format!("{name}.git"))).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        Self {
            dir,
            repo,
            name: name.into(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join(format!("{}.git", self.name))
    }

    /// Commits exactly `files` as the whole tree, on top of `main` (or as a new root when
    /// `orphan`), and points `main` at it.
    pub fn commit(&self, files: &[(&str, Node)], orphan: bool) -> Oid {
        self.commit_saying(files, orphan, "change")
    }

    /// [`SourceRepo::commit`] with a commit message.
    pub fn commit_saying(&self, files: &[(&str, Node)], orphan: bool, message: &str) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, node) in files {
            let (mode, data): (u32, &[u8]) = match node {
                Node::File(b) => (0o100_644, b),
                Node::Exec(b) => (0o100_755, b),
                Node::Symlink(t) => (0o120_000, t.as_bytes()),
                Node::Submodule(oid) => {
                    index.add(&entry(path, 0o160_000, *oid, 0)).unwrap();
                    continue;
                }
            };
            let oid = self.repo.blob(data).unwrap();
            index
                .add(&entry(path, mode, oid, data.len() as u32))
                .unwrap();
        }
        let tree_id = index.write_tree_to(&self.repo).unwrap();
        let tree = self.repo.find_tree(tree_id).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parent = if orphan {
            None
        } else {
            self.repo
                .refname_to_id("refs/heads/main")
                .ok()
                .map(|o| self.repo.find_commit(o).unwrap())
        };
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let oid = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &parents)
            .unwrap();
        self.repo
            .reference("refs/heads/main", oid, true, "test")
            .unwrap();
        oid
    }
}

fn entry(path: &str, mode: u32, id: Oid, size: u32) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: size,
        id,
        flags: (path.len().min(0xfff)) as u16,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// Collects everything the fetcher emits.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<Emitted>>);

impl Observer for Recorder {
    fn emitted(&self, item: &Emitted) {
        self.0.lock().unwrap().push(item.clone());
    }
}

impl Recorder {
    pub fn take(&self) -> Vec<Emitted> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// A fetcher over a memory store and a spool bus, with its own mirror cache.
pub struct Harness {
    pub cache: tempfile::TempDir,
    pub store: Store,
    pub bus: Arc<dyn Bus>,
    pub cfg: FetchConfig,
}

impl Harness {
    pub fn new() -> Self {
        let store = Store::memory();
        let cache = tempfile::tempdir().unwrap();
        let cfg = FetchConfig {
            cache_dir: cache.path().to_path_buf(),
            max_file_bytes: 64 * 1024,
            ..FetchConfig::default()
        };
        Self {
            cache,
            bus: Arc::new(trawl_core::bus::SpoolBus::new(store.clone())),
            store,
            cfg,
        }
    }

    pub fn with_inproc_bus(mut self) -> Self {
        self.bus = Arc::new(InProcBus::new(1 << 20));
        self
    }

    pub async fn run(&self, paths: &[&Path], opts: RunOptions) -> (RunReport, Vec<Emitted>) {
        let specs: Vec<_> = paths
            .iter()
            .map(|p| repos::resolve(p.to_str().unwrap(), Path::new("/")).unwrap())
            .collect();
        let rec = Arc::new(Recorder::default());
        let fetcher = Fetcher::new(self.cfg.clone(), self.store.clone(), self.bus.clone());
        let report = fetcher.run(&specs, &opts, rec.clone()).await;
        let items = rec.take();
        (report, items)
    }
}

/// `(op, path)` pairs of what was emitted, sorted, for compact assertions.
pub fn ops(items: &[Emitted]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = items
        .iter()
        .map(|i| {
            let l = i.json_line();
            let op = match l.reason {
                Some(r) => format!("skip:{r}"),
                None => match l.renamed_from {
                    Some(from) => format!("{}<-{from}", l.op),
                    None => l.op.to_owned(),
                },
            };
            (op, l.path.to_owned())
        })
        .collect();
    v.sort();
    v
}

pub fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = v
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    v.sort();
    v
}

/// The JSON lines a successful command printed on stdout.
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The cargo home, whose `registry/src` holds the sources of every dependency.
pub fn cargo_home() -> PathBuf {
    std::env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"),
        PathBuf::from,
    )
}

/// A bus on which publishes to `topic` (`*`: any) succeed `ok_first` times, then fail `fail`
/// times, as a broker that went away would.
#[derive(Debug)]
pub struct FaultyBus {
    pub inner: Arc<dyn Bus>,
    pub topic: &'static str,
    pub ok_first: usize,
    pub fail: usize,
    pub seen: std::sync::atomic::AtomicUsize,
}

impl FaultyBus {
    pub fn new(inner: Arc<dyn Bus>, topic: &'static str, ok_first: usize, fail: usize) -> Self {
        Self {
            inner,
            topic,
            ok_first,
            fail,
            seen: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Bus for FaultyBus {
    async fn publish(
        &self,
        topic: &str,
        key: &str,
        payload: bytes::Bytes,
    ) -> Result<(), trawl_core::Error> {
        use std::sync::atomic::Ordering;
        if self.topic == "*" || topic == self.topic {
            let n = self.seen.fetch_add(1, Ordering::SeqCst);
            if n >= self.ok_first && n - self.ok_first < self.fail {
                return Err(trawl_core::Error::Bus("broker went away".into()));
            }
        }
        self.inner.publish(topic, key, payload).await
    }
    async fn subscribe(
        &self,
        topic: &str,
        group: &str,
    ) -> Result<Box<dyn trawl_core::bus::Subscription>, trawl_core::Error> {
        self.inner.subscribe(topic, group).await
    }
    async fn close(&self, topic: &str) -> Result<(), trawl_core::Error> {
        self.inner.close(topic).await
    }
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

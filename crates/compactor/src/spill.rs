//! The whole live set without holding it in memory: partitioned through local files, and
//! read back one shard at a time.
//!
//! 1. **Repositories, in groups** ([`spill_live_set`]): the repositories, in order, are read
//!    in groups whose chunk parts together stay under a sixty-fourth of the memory budget
//!    (`compact.spill_memory_mb`), each group with one query (its manifests ⋈ its chunk
//!    parts, no vectors). Each repository then: the newest chunker version of each chunk,
//!    its calls resolved, its commit messages made docs, its rows appended to the
//!    generation's `chunks` table (sorted by repository, path, line), its docs appended to
//!    the bucket file of their content hash.
//! 2. **Vectors, by bucket**: the space's embeddings are scanned once (a stream, no sort) and
//!    each appended to the bucket file of its content hash. There are as many buckets as it
//!    takes for one bucket's vectors (counted from the parts' metadata) to fit in half the
//!    budget.
//! 3. **Shards** ([`Spilled::shards`]): bucket by bucket, its vectors are loaded into a map
//!    and its docs, each given its vector, are appended to the file of their shard; then the
//!    shards are read back one after another as the build asks for them.
//!
//! Memory: a group of repositories, one bucket's vectors, a few hundred rows per open file,
//! and the shards being built. The docs are those of [`crate::live::live_set`], as a whole
//! build makes them: equal doc for doc, with the same chunks table (tested).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};
use trawl_core::ids::{ChunkId, CommitId, ContentHash, RepoId, RunId};
use trawl_core::records::{ChunkRecord, Row};
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_index::docs::DocRow;

use crate::CompactError;
use crate::build::{LiveDoc, shard_of};
use crate::calls::CallStats;
use crate::live::{self, DefinitionLines};

/// The live set partitioned into local files ([`spill_live_set`]).
#[derive(Debug)]
pub struct Spilled {
    /// Removed when the set is dropped.
    dir: tempfile::TempDir,
    /// Held locked while the set lives: a directory whose lock is free was left by a
    /// compactor that died ([`reap_stale`]).
    _lock: File,
    /// The repositories' last fetch runs.
    pub runs: Vec<RunId>,
    pub repos: usize,
    /// How the calls were resolved.
    pub calls: CallStats,
    /// Live chunks.
    pub chunks: u64,
    /// Whether the set has a `chunks` table: any listed repository has a manifest.
    pub has_table: bool,
    /// Content-hash buckets.
    buckets: usize,
    dtype: Dtype,
}

/// The name every spill directory starts with.
const SPILL_PREFIX: &str = "trawl-live-";
/// The lock file inside a spill directory.
const LOCK_FILE: &str = "lock";
/// How old a spill directory without a lock file must be to count as left behind (one that
/// young may be being created).
const UNLOCKED_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Creates and locks `dir`'s lock file, held for as long as the returned file is open.
fn hold_lock(dir: &Path) -> Result<File, CompactError> {
    let f = File::create(dir.join(LOCK_FILE)).map_err(io("creating the spill lock"))?;
    f.try_lock()
        .map_err(|e| CompactError::Io(format!("locking {}: {e}", dir.display())))?;
    Ok(f)
}

/// Removes the spill directories under `parent` that a compactor killed mid-build left
/// (their lock is free; one from before locks, when an hour old), so that a crash does not
/// leave gigabytes behind in the temporary directory for good. Returns the bytes removed.
/// A directory another compactor is using is never touched, and nothing here fails a build:
/// what cannot be removed is logged.
pub fn reap_stale(parent: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut freed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let dir = e.path();
        if !name.to_string_lossy().starts_with(SPILL_PREFIX)
            || !e.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        let stale = match File::open(dir.join(LOCK_FILE)) {
            // Free: its holder is gone (the lock dies with the process that held it).
            Ok(f) => f.try_lock().is_ok(),
            Err(_) => e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > UNLOCKED_GRACE)),
        };
        if !stale {
            continue;
        }
        let bytes = dir_bytes(&dir);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                freed += bytes;
                tracing::info!(
                    dir = %dir.display(),
                    bytes,
                    "removed the spilled live set of a compactor that did not finish"
                );
            }
            Err(err) => tracing::warn!(
                dir = %dir.display(),
                error = %err,
                "cannot remove the spilled live set a compactor left: remove it by hand"
            ),
        }
    }
    freed
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> CompactError + '_ {
    move |e| CompactError::Io(format!("{what}: {e}"))
}

fn arrow(e: &dyn std::fmt::Display) -> CompactError {
    CompactError::Io(format!("spilling the live set: {e}"))
}

fn query(e: &datafusion::error::DataFusionError) -> CompactError {
    CompactError::Query(e.to_string())
}

/// The live chunks of a group of repositories, without vectors.
const GROUP_CHUNKS: &str = "SELECT c.*, m.commit AS commit \
     FROM m JOIN c ON c.repo_id = m.repo_id AND c.path = m.path AND c.blob = m.blob \
     WHERE m.skip_reason IS NULL";

/// The column of the join beyond the chunk's own.
#[derive(Deserialize)]
struct Commit {
    commit: CommitId,
}

/// Rows a router buffers across all its open files before the fullest is written as one
/// batch: the buffers hold the same whatever the number of files (shards grow with the
/// corpus at a fixed shard size; a fixed number of rows per file would grow with them).
const BUFFERED_ROWS: usize = 4096;

/// Arrow batches appended to a local file (the IPC stream format: written as they come,
/// nothing held).
struct Sink {
    writer: StreamWriter<BufWriter<File>>,
}

impl Sink {
    fn create(path: &Path, schema: &Schema) -> Result<Self, CompactError> {
        let file = File::create(path).map_err(io("creating a spill file"))?;
        Ok(Self {
            writer: StreamWriter::try_new(BufWriter::new(file), schema).map_err(|e| arrow(&e))?,
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<(), CompactError> {
        self.writer.write(batch).map_err(|e| arrow(&e))
    }

    fn finish(mut self) -> Result<(), CompactError> {
        self.writer.finish().map_err(|e| arrow(&e))
    }
}

/// The batches of a spill file, one at a time.
fn batches(path: &Path) -> Result<StreamReader<BufReader<File>>, CompactError> {
    let file = File::open(path).map_err(io("reading a spill file"))?;
    StreamReader::try_new(BufReader::new(file), None).map_err(|e| arrow(&e))
}

/// The bucket of a content hash among `n`.
fn bucket_of(hash: &ContentHash, n: usize) -> usize {
    let b = hash.as_bytes();
    usize::from(u16::from_be_bytes([b[0], b[1]])) % n.max(1)
}

/// A vector as the embeddings table holds it (one of the two is set).
#[derive(Clone, Default, Serialize, Deserialize)]
struct Vectors {
    #[serde(default)]
    vector: Option<Vec<f32>>,
    #[serde(default)]
    vector_bytes: Option<Vec<u8>>,
    /// Its prose view's ([`trawl_core::prose`]): stored under a key in the same bucket.
    #[serde(default)]
    prose_vector: Option<Vec<f32>>,
    #[serde(default)]
    prose_vector_bytes: Option<Vec<u8>>,
}

/// An embedding as the bucket files hold it.
#[derive(Deserialize)]
struct Embedded {
    content_hash: ContentHash,
    #[serde(default)]
    vector: Option<Vec<f32>>,
    #[serde(default)]
    vector_bytes: Option<Vec<u8>>,
}

/// The columns a shard file adds to a doc's.
fn vector_fields() -> Vec<FieldRef> {
    vec![
        Arc::new(Field::new(
            "vector",
            DataType::List(Arc::new(Field::new("item", DataType::Float32, false))),
            true,
        )),
        Arc::new(Field::new("vector_bytes", DataType::Binary, true)),
        Arc::new(Field::new(
            "prose_vector",
            DataType::List(Arc::new(Field::new("item", DataType::Float32, false))),
            true,
        )),
        Arc::new(Field::new("prose_vector_bytes", DataType::Binary, true)),
    ]
}

fn shard_schema() -> SchemaRef {
    let mut fields: Vec<FieldRef> = DocRow::arrow_schema().fields().iter().cloned().collect();
    fields.extend(vector_fields());
    Arc::new(Schema::new(fields))
}

/// Docs (with their vectors, in a shard file) → one batch.
fn doc_batch(docs: &[(DocRow, Vectors)], with_vectors: bool) -> Result<RecordBatch, CompactError> {
    let rows: Vec<&DocRow> = docs.iter().map(|(d, _)| d).collect();
    let batch = serde_arrow::to_record_batch(
        &DocRow::arrow_schema()
            .fields()
            .iter()
            .cloned()
            .collect::<Vec<_>>(),
        &rows,
    )
    .map_err(|e| arrow(&e))?;
    if !with_vectors {
        return Ok(batch);
    }
    let vectors: Vec<&Vectors> = docs.iter().map(|(_, v)| v).collect();
    let extra = serde_arrow::to_record_batch(&vector_fields(), &vectors).map_err(|e| arrow(&e))?;
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.extend(extra.columns().iter().cloned());
    RecordBatch::try_new(shard_schema(), columns).map_err(|e| arrow(&e))
}

/// Files that take rows by number (bucket or shard), buffering a few hundred rows each.
struct Router {
    sinks: Vec<Sink>,
    pending: Vec<Vec<(DocRow, Vectors)>>,
    /// Rows in `pending`, all files together; at most `limit`.
    buffered: usize,
    limit: usize,
    with_vectors: bool,
}

impl Router {
    fn create(
        dir: &Path,
        prefix: &str,
        n: usize,
        with_vectors: bool,
    ) -> Result<Self, CompactError> {
        let schema = if with_vectors {
            shard_schema()
        } else {
            DocRow::arrow_schema()
        };
        let sinks = (0..n)
            .map(|i| Sink::create(&dir.join(format!("{prefix}-{i}.arrow")), &schema))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            sinks,
            pending: (0..n).map(|_| Vec::new()).collect(),
            buffered: 0,
            limit: BUFFERED_ROWS,
            with_vectors,
        })
    }

    fn push(&mut self, to: usize, doc: DocRow, vectors: Vectors) -> Result<(), CompactError> {
        self.pending[to].push((doc, vectors));
        self.buffered += 1;
        if self.buffered >= self.limit {
            // The fullest file: the batches written stay as large as the budget allows.
            let fullest = (0..self.pending.len())
                .max_by_key(|&i| self.pending[i].len())
                .unwrap_or(to);
            self.flush(fullest)?;
        }
        Ok(())
    }

    fn flush(&mut self, to: usize) -> Result<(), CompactError> {
        if self.pending[to].is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.pending[to]);
        self.buffered -= rows.len();
        let batch = doc_batch(&rows, self.with_vectors)?;
        self.sinks[to].write(&batch)
    }

    fn finish(mut self) -> Result<(), CompactError> {
        for i in 0..self.sinks.len() {
            self.flush(i)?;
        }
        for s in self.sinks {
            s.finish()?;
        }
        Ok(())
    }
}

/// Reads the whole live set of `store` into local files under a new temporary directory,
/// with the vectors of `space`, holding about `memory` bytes at most (see the module).
pub async fn spill_live_set(
    store: &Store,
    space: Option<&Space>,
    memory: usize,
) -> Result<Spilled, CompactError> {
    let parent = std::env::temp_dir();
    reap_stale(&parent);
    let dir = tempfile::Builder::new()
        .prefix(SPILL_PREFIX)
        .tempdir_in(&parent)
        .map_err(io("creating a directory for the spilled live set"))?;
    let lock = hold_lock(dir.path())?;
    let mut states = live::listed_states(store).await?;
    states.sort_by(|a, b| a.repo.cmp(&b.repo));
    let mut runs: Vec<RunId> = states.iter().map(|s| s.last_run.clone()).collect();
    runs.sort();
    runs.dedup();
    let memory = memory.max(1) as u64;
    // Buckets: one bucket's vectors, as a map holds them, in half the memory. Counted from
    // the embedding parts' metadata, not their size in the store: vectors can compress well.
    let vector_bytes: u64 = match space {
        Some(s) => count_vectors(store, s).await? * (vector_width(s) + MAP_ENTRY_OVERHEAD),
        None => 0,
    };
    let buckets =
        usize::try_from((2 * vector_bytes).div_ceil(memory).clamp(1, 4096)).unwrap_or(4096);
    let mut spilled = Spilled {
        runs,
        repos: states.len(),
        calls: CallStats::default(),
        chunks: 0,
        has_table: false,
        buckets,
        dtype: space.map_or(Dtype::Float, |s| s.dtype),
        dir,
        _lock: lock,
    };
    let mut docs = Router::create(spilled.dir.path(), "docs", buckets, false)?;
    let table_file = File::create(spilled.table_path()).map_err(io("creating the chunks table"))?;
    let mut table = ArrowWriter::try_new(
        table_file,
        ChunkRecord::arrow_schema(),
        Some(trawl_core::records::table_properties()),
    )
    .map_err(|e| arrow(&e))?;

    // The chunk parts' sizes by repository, from one listing.
    let mut part_bytes: HashMap<String, u64> = HashMap::new();
    for o in store.list_objects("chunks/").await? {
        if let Some(key) = o
            .key
            .strip_prefix("chunks/repo=")
            .and_then(|k| k.split('/').next())
        {
            *part_bytes.entry(key.to_owned()).or_default() += o.size;
        }
    }
    let mut seen: HashSet<RepoId> = HashSet::new();
    // A group's rows, decoded, take several times its parts (Parquet holds text compressed
    // about 4:1, and each row is many small strings). Groups of a sixty-fourth of the budget:
    // with a sixteenth (32 MB of parts at 512 MB), the resident set climbed group after group
    // through the whole read (353 → 731 MB over 19 groups of a 980k-chunk store: the heap
    // fragments under large short-lived allocations), while groups a quarter that size held
    // it flat (~390 MB) at the same speed.
    let budget = memory / 64;
    let mut group: Vec<trawl_core::records::RepoState> = Vec::new();
    let mut group_bytes = 0;
    let mut states = states.into_iter().peekable();
    while let Some(s) = states.next() {
        group_bytes += part_bytes.get(&s.repo.key()).copied().unwrap_or(0);
        group.push(s);
        let full = states.peek().is_none_or(|next| {
            group_bytes + part_bytes.get(&next.repo.key()).copied().unwrap_or(0) > budget
        });
        if full {
            let repos = std::mem::take(&mut group);
            group_bytes = 0;
            spilled
                .group(store, &repos, &part_bytes, &mut docs, &mut table, &mut seen)
                .await?;
        }
    }
    // Listed repositories without a live chunk still have their commit messages.
    if spilled.has_table {
        for s in live::listed_states(store).await? {
            if seen.contains(&s.repo) {
                continue;
            }
            for d in live::commit_docs(store, &s.repo, &DefinitionLines::new()).await? {
                let b = bucket_of(&d.doc.content_hash, buckets);
                docs.push(b, d.doc, Vectors::default())?;
            }
        }
    }
    docs.finish()?;
    table.close().map_err(|e| arrow(&e))?;
    spilled.spill_vectors(store, space).await?;
    tracing::debug!(calls = ?spilled.calls, chunks = spilled.chunks, buckets, "live set spilled");
    Ok(spilled)
}

/// Bytes a vector map entry takes beyond the vector: its key, the vector's header, the
/// table's slot.
const MAP_ENTRY_OVERHEAD: u64 = 96;

/// Bytes of one vector of `space` in memory.
fn vector_width(space: &Space) -> u64 {
    let dims = u64::from(space.dims);
    match space.dtype {
        Dtype::Float => dims * 4,
        Dtype::Int8 | Dtype::Uint8 => dims,
        Dtype::Binary | Dtype::Ubinary => dims.div_ceil(8),
    }
}

/// The embeddings of `space` in the store, from the parts' metadata.
async fn count_vectors(store: &Store, space: &Space) -> Result<u64, CompactError> {
    let ctx = live::session(store);
    if !live::register_embeddings(&ctx, store, Some(space)).await? {
        return Ok(0);
    }
    let batches = ctx
        .sql("SELECT count(*) AS n FROM e")
        .await
        .map_err(|e| query(&e))?
        .collect()
        .await
        .map_err(|e| query(&e))?;
    let n = batches
        .first()
        .and_then(|b| b.column(0).as_any().downcast_ref::<Int64Array>())
        .filter(|a| !a.is_empty())
        .map_or(0, |a| a.value(0));
    Ok(u64::try_from(n).unwrap_or(0))
}

impl Spilled {
    /// Content-hash buckets the docs and vectors were spread over.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// The generation's `chunks` table: the live chunks sorted by (repository, path, line).
    pub fn table_path(&self) -> PathBuf {
        self.dir.path().join("chunks.parquet")
    }

    /// The live chunks of `repos` (one query), a repository at a time.
    async fn group(
        &mut self,
        store: &Store,
        repos: &[trawl_core::records::RepoState],
        part_bytes: &HashMap<String, u64>,
        docs: &mut Router,
        table: &mut ArrowWriter<File>,
        seen: &mut HashSet<RepoId>,
    ) -> Result<(), CompactError> {
        let ctx = live::session(store);
        if !live::register_manifests(&ctx, store, repos).await? {
            return Ok(());
        }
        self.has_table = true;
        let mut dirs = Vec::new();
        for s in repos
            .iter()
            .filter(|s| part_bytes.contains_key(&s.repo.key()))
        {
            dirs.push(live::store_url(
                store,
                &format!("chunks/repo={}/", s.repo.key()),
            )?);
        }
        if dirs.is_empty() {
            return Ok(());
        }
        live::table(&ctx, "c", dirs, ChunkRecord::arrow_schema(), None)?;
        let mut stream = ctx
            .sql(GROUP_CHUNKS)
            .await
            .map_err(|e| query(&e))?
            .execute_stream()
            .await
            .map_err(|e| query(&e))?;
        let read =
            |e: serde_arrow::Error| CompactError::Query(format!("reading the live set: {e}"));
        let mut by_repo: BTreeMap<RepoId, Vec<(ChunkRecord, CommitId)>> = BTreeMap::new();
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| query(&e))?;
            let chunks: Vec<ChunkRecord> = serde_arrow::from_record_batch(&batch).map_err(read)?;
            let commits: Vec<Commit> = serde_arrow::from_record_batch(&batch).map_err(read)?;
            for (c, m) in chunks.into_iter().zip(commits) {
                by_repo
                    .entry(c.repo_id.clone())
                    .or_default()
                    .push((c, m.commit));
            }
        }
        for (repo, rows) in by_repo {
            self.repo(store, repo, rows, docs, table, seen).await?;
        }
        Ok(())
    }

    /// One repository's chunks → its table rows and docs (calls resolved, commit messages
    /// added), as [`live::live_set`] derives them.
    async fn repo(
        &mut self,
        store: &Store,
        repo: RepoId,
        rows: Vec<(ChunkRecord, CommitId)>,
        docs: &mut Router,
        table: &mut ArrowWriter<File>,
        seen: &mut HashSet<RepoId>,
    ) -> Result<(), CompactError> {
        // One row per chunk id: the newest chunker version's.
        let mut by_id: HashMap<ChunkId, (ChunkRecord, CommitId)> = HashMap::new();
        for (c, commit) in rows {
            match by_id.get(&c.chunk_id) {
                Some((old, _))
                    if crate::live::version_key(&old.chunker_version)
                        >= crate::live::version_key(&c.chunker_version) => {}
                _ => {
                    by_id.insert(c.chunk_id, (c, commit));
                }
            }
        }
        let mut rows: Vec<(ChunkRecord, CommitId)> = by_id.into_values().collect();
        crate::live::newest_per_file(&mut rows, |(c, _)| c);
        rows.sort_by(|(a, _), (b, _)| {
            (&a.path, a.start_line, a.chunk_id).cmp(&(&b.path, b.start_line, b.chunk_id))
        });
        let (chunks, commits): (Vec<ChunkRecord>, Vec<CommitId>) = rows.into_iter().unzip();
        for part in chunks.chunks(trawl_core::records::PARQUET_ROW_GROUP) {
            table
                .write(&trawl_core::records::to_batch(part)?)
                .map_err(|e| arrow(&e))?;
        }
        self.chunks += chunks.len() as u64;
        let mut live: Vec<LiveDoc> = chunks
            .into_iter()
            .zip(commits)
            .map(|(c, commit)| LiveDoc {
                doc: DocRow::from_chunk(c, commit, false),
                vector: None,
                prose: None,
            })
            .collect();
        self.calls += crate::calls::resolve_calls(&mut live);
        let defs = live::definition_lines(&live);
        live.extend(live::commit_docs(store, &repo, &defs).await?);
        for d in live {
            let b = bucket_of(&d.doc.content_hash, self.buckets);
            docs.push(b, d.doc, Vectors::default())?;
        }
        seen.insert(repo);
        Ok(())
    }

    /// The embeddings of `space`, scanned once, into the bucket files of their hashes.
    async fn spill_vectors(
        &self,
        store: &Store,
        space: Option<&Space>,
    ) -> Result<(), CompactError> {
        let ctx = live::session(store);
        if !live::register_embeddings(&ctx, store, space).await? {
            return Ok(());
        }
        let mut stream = ctx
            .sql("SELECT content_hash, vector, vector_bytes FROM e")
            .await
            .map_err(|e| query(&e))?
            .execute_stream()
            .await
            .map_err(|e| query(&e))?;
        let mut sinks: Vec<Sink> = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| query(&e))?;
            if sinks.is_empty() {
                sinks = (0..self.buckets)
                    .map(|i| Sink::create(&self.vectors_path(i), &batch.schema()))
                    .collect::<Result<_, _>>()?;
            }
            let hashes = batch
                .column_by_name("content_hash")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| arrow(&"embeddings without a content_hash text column"))?;
            let buckets = (0..hashes.len())
                .map(|i| {
                    ContentHash::try_from(hashes.value(i).to_owned())
                        .map(|h| bucket_of(&h, self.buckets))
                        .map_err(|e| arrow(&e))
                })
                .collect::<Result<Vec<usize>, _>>()?;
            for (i, sink) in sinks.iter_mut().enumerate() {
                let mask = BooleanArray::from(buckets.iter().map(|b| *b == i).collect::<Vec<_>>());
                let part = filter_record_batch(&batch, &mask).map_err(|e| arrow(&e))?;
                if part.num_rows() > 0 {
                    sink.write(&part)?;
                }
            }
        }
        for s in sinks {
            s.finish()?;
        }
        Ok(())
    }

    fn vectors_path(&self, bucket: usize) -> PathBuf {
        vectors_path(self.dir.path(), bucket)
    }

    /// The docs of shards `0..shards` in order, each with its vector where the space has one
    /// (one doc per chunk id): the docs are routed to shard files first, bucket by bucket;
    /// then a shard is read when the consumer asks for it.
    pub async fn shards(
        &self,
        shards: u32,
    ) -> Result<
        impl futures::Stream<Item = Result<(u32, Vec<LiveDoc>), CompactError>> + use<>,
        CompactError,
    > {
        let n = shards.max(1);
        let (dir, buckets) = (self.dir.path().to_path_buf(), self.buckets);
        let out = tokio::task::spawn_blocking(move || route(&dir, buckets, n))
            .await
            .map_err(|e| CompactError::Io(format!("shard routing task: {e}")))??;
        let dtype = self.dtype;
        Ok(futures::stream::iter(0..n).map(move |k| {
            let docs = read_shard(&out.path().join(format!("shard-{k}.arrow")), dtype)?;
            Ok((k, docs))
        }))
    }
}

/// The docs of every bucket of `dir`, each given its vector, into a shard file each
/// (`shard-<k>.arrow` in the directory returned).
fn route(dir: &Path, buckets: usize, n: u32) -> Result<tempfile::TempDir, CompactError> {
    let out = tempfile::Builder::new()
        .prefix("shards-")
        .tempdir_in(dir)
        .map_err(io("creating a directory for shard files"))?;
    let mut router = Router::create(out.path(), "shard", n as usize, true)?;
    let read = |e: serde_arrow::Error| CompactError::Query(format!("reading spilled docs: {e}"));
    for b in 0..buckets {
        let mut vectors: HashMap<ContentHash, Vectors> = HashMap::new();
        let path = vectors_path(dir, b);
        if path.exists() {
            for batch in batches(&path)? {
                let rows: Vec<Embedded> =
                    serde_arrow::from_record_batch(&batch.map_err(|e| arrow(&e))?).map_err(read)?;
                for r in rows {
                    vectors.entry(r.content_hash).or_insert(Vectors {
                        vector: r.vector,
                        vector_bytes: r.vector_bytes,
                        ..Vectors::default()
                    });
                }
            }
        }
        for batch in batches(&dir.join(format!("docs-{b}.arrow")))? {
            let rows: Vec<DocRow> =
                serde_arrow::from_record_batch(&batch.map_err(|e| arrow(&e))?).map_err(read)?;
            for doc in rows {
                // Commit messages are words only, as the whole set makes them.
                let v = if doc.kind == live::COMMIT_KIND {
                    Vectors::default()
                } else {
                    let mut v = vectors.get(&doc.content_hash).cloned().unwrap_or_default();
                    // The prose view's key shares the hash's bucket (`prose::key`).
                    if let Some(p) =
                        trawl_core::prose::key(&doc.content_hash).and_then(|k| vectors.get(&k))
                    {
                        v.prose_vector.clone_from(&p.vector);
                        v.prose_vector_bytes.clone_from(&p.vector_bytes);
                    }
                    v
                };
                let k = shard_of(&doc, n) as usize;
                router.push(k, doc, v)?;
            }
        }
    }
    router.finish()?;
    Ok(out)
}

/// The bucket file of the vectors of `bucket`.
fn vectors_path(dir: &Path, bucket: usize) -> PathBuf {
    dir.join(format!("vectors-{bucket}.arrow"))
}

/// A shard file → its docs, vectors attached, one per chunk id.
fn read_shard(path: &Path, dtype: Dtype) -> Result<Vec<LiveDoc>, CompactError> {
    let read = |e: serde_arrow::Error| CompactError::Query(format!("reading a shard file: {e}"));
    let mut by_id: HashMap<ChunkId, LiveDoc> = HashMap::new();
    for batch in batches(path)? {
        let batch = batch.map_err(|e| arrow(&e))?;
        let docs: Vec<DocRow> = serde_arrow::from_record_batch(&batch).map_err(read)?;
        let vectors: Vec<Vectors> = serde_arrow::from_record_batch(&batch).map_err(read)?;
        for (mut doc, v) in docs.into_iter().zip(vectors) {
            let vector = live::vector_data(v.vector, v.vector_bytes, dtype);
            let prose = live::vector_data(v.prose_vector, v.prose_vector_bytes, dtype);
            doc.has_vector = vector.is_some();
            match by_id.get(&doc.chunk_id) {
                Some(old) if old.vector.is_some() || vector.is_none() => {}
                _ => {
                    by_id.insert(doc.chunk_id, LiveDoc { doc, vector, prose });
                }
            }
        }
    }
    Ok(by_id.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compactor killed mid-build leaves its spilled live set (gigabytes at scale) in the
    /// temporary directory; the next one removes it, and never one still in use.
    #[test]
    fn spill_directories_of_dead_compactors_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let d = parent.path().join(name);
            std::fs::create_dir_all(d.join("shards-x")).unwrap();
            std::fs::write(d.join("shards-x/shard-0.arrow"), vec![7u8; 4096]).unwrap();
            std::fs::write(d.join("docs-0.arrow"), vec![7u8; 1000]).unwrap();
            d
        };
        let live = make("trawl-live-live");
        let held = hold_lock(&live).unwrap();
        let dead = make("trawl-live-dead");
        drop(hold_lock(&dead).unwrap());
        let young = make("trawl-live-young");
        let old = make("trawl-live-old");
        let hour_ago = std::time::SystemTime::now() - UNLOCKED_GRACE * 2;
        File::open(&old).unwrap().set_modified(hour_ago).unwrap();
        let other = make("someone-else");
        drop(hold_lock(&other).unwrap());

        let freed = reap_stale(parent.path());
        assert!(!dead.exists(), "a directory whose lock is free is removed");
        assert!(
            !old.exists(),
            "an unlocked directory an hour old is removed"
        );
        assert!(live.exists(), "a directory another compactor holds is kept");
        assert!(young.exists(), "a directory being created is kept");
        assert!(
            other.exists(),
            "what is not a spill directory is not touched"
        );
        assert_eq!(freed, 2 * (4096 + 1000));
        // The one held is freed once its holder is gone.
        drop(held);
        reap_stale(parent.path());
        assert!(!live.exists());
    }

    /// However many files a router writes to, it buffers at most its budget of rows, and
    /// every row reaches its file, in order.
    #[test]
    fn a_router_buffers_a_fixed_number_of_rows_whatever_the_number_of_files() {
        let dir = tempfile::tempdir().unwrap();
        for files in [1usize, 13, 133, 600] {
            let mut router = Router::create(dir.path(), &format!("f{files}"), files, true).unwrap();
            router.limit = 64;
            let mut sent = vec![Vec::new(); files];
            for i in 0..2_000u64 {
                // Skewed: a third of the rows to file 0, the rest spread.
                let to = if i % 3 == 0 {
                    0
                } else {
                    (i as usize * 7) % files
                };
                let doc = trawl_index::testing::handler_doc(i, &format!("def handler_{i}(): pass"));
                sent[to].push(doc.chunk_id);
                let v = Vectors {
                    vector: Some(vec![i as f32; 4]),
                    ..Vectors::default()
                };
                router.push(to, doc, v).unwrap();
                assert!(
                    router.buffered < router.limit,
                    "{files} files: {} rows buffered",
                    router.buffered
                );
                assert_eq!(
                    router.buffered,
                    router.pending.iter().map(Vec::len).sum::<usize>()
                );
            }
            router.finish().unwrap();
            for (k, want) in sent.iter().enumerate() {
                let mut got = Vec::new();
                let mut vectors = 0;
                for batch in batches(&dir.path().join(format!("f{files}-{k}.arrow"))).unwrap() {
                    let batch = batch.unwrap();
                    let docs: Vec<DocRow> = serde_arrow::from_record_batch(&batch).unwrap();
                    let v: Vec<Vectors> = serde_arrow::from_record_batch(&batch).unwrap();
                    vectors += v
                        .iter()
                        .filter(|v| v.vector.as_ref().is_some_and(|x| x.len() == 4))
                        .count();
                    got.extend(docs.into_iter().map(|d| d.chunk_id));
                }
                assert_eq!(&got, want, "{files} files: file {k}");
                assert_eq!(vectors, want.len());
            }
        }
    }
}

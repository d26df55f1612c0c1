//! The whole live set without holding it in memory: streamed through local files, and read
//! back one shard at a time.
//!
//! 1. **By repository** ([`spill_live_set`]): the live chunks (`m` ⋈ `c`, no vectors) sorted
//!    by repository — DataFusion sorts under a memory limit and spills past it — are taken
//!    one repository at a time: the newest chunker version of each chunk, its calls
//!    resolved, its commit messages made docs, its rows appended to the generation's
//!    `chunks` table (sorted by repository, path, line) and its docs to a local doc file.
//!    Memory: the largest repository.
//! 2. **By shard** ([`Spilled::shards`]): the doc file ⟕ the space's embeddings on content
//!    hash, sorted by shard — a sort-merge join and a sort, both spilling — is read one shard
//!    after another; each shard is built and dropped before the next is read. Memory: the
//!    sort's limit and the shards being built.
//!
//! The docs are those of [`crate::live::live_set`], as a whole build makes them: equal doc
//! for doc, with the same chunks table (tested).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use serde::Deserialize;
use trawl_core::ids::{ChunkId, CommitId, RepoId, RunId};
use trawl_core::records::{ChunkRecord, Row};
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_index::docs::DocRow;

use crate::CompactError;
use crate::build::{LiveDoc, shard_of};
use crate::calls::CallStats;
use crate::live::{self, DefinitionLines};

/// The memory DataFusion's sorts and joins use before they spill, by default.
pub const DEFAULT_MEMORY: usize = 512 << 20;

/// The live set spilled to local files ([`spill_live_set`]).
#[derive(Debug)]
pub struct Spilled {
    /// Removed when the set is dropped.
    dir: tempfile::TempDir,
    /// The repositories' last fetch runs.
    pub runs: Vec<RunId>,
    pub repos: usize,
    /// How the calls were resolved.
    pub calls: CallStats,
    /// Live chunks.
    pub chunks: u64,
    /// Whether the set has a `chunks` table: any listed repository has a manifest.
    pub has_table: bool,
    memory: usize,
    store: Store,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> CompactError + '_ {
    move |e| CompactError::Io(format!("{what}: {e}"))
}

#[allow(clippy::needless_pass_by_value)] // for map_err
fn parquet_err(e: parquet::errors::ParquetError) -> CompactError {
    CompactError::Io(format!("writing the spilled live set: {e}"))
}

#[allow(clippy::needless_pass_by_value)] // for map_err
fn query(e: datafusion::error::DataFusionError) -> CompactError {
    CompactError::Query(e.to_string())
}

/// The live chunks without vectors, one repository after another.
const CHUNKS_BY_REPO: &str = "SELECT c.*, m.commit AS commit \
     FROM m JOIN c ON c.repo_id = m.repo_id AND c.path = m.path AND c.blob = m.blob \
     WHERE m.skip_reason IS NULL ORDER BY c.repo_id";

/// The column that carries a doc's shard hash through the spill: the first eight bytes of
/// its chunk id, as [`shard_of`] reads them.
const SHARD_KEY: &str = "shard_key";

fn shard_key(id: &ChunkId) -> u64 {
    u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The column of the join beyond the chunk's own.
#[derive(Deserialize)]
struct Commit {
    commit: CommitId,
}

/// The spilled doc file's schema: a doc and its shard key.
fn spill_schema() -> SchemaRef {
    let mut fields: Vec<Field> = DocRow::arrow_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(SHARD_KEY, DataType::UInt64, false));
    std::sync::Arc::new(Schema::new(fields))
}

/// Docs appended to a local Parquet file with their shard keys.
struct DocSink {
    writer: ArrowWriter<std::fs::File>,
}

impl DocSink {
    fn create(path: &Path) -> Result<Self, CompactError> {
        let file = std::fs::File::create(path).map_err(io("creating the spilled doc file"))?;
        // Uncompressed: read back once, soon, from a local disk.
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(8 * 1024))
            .build();
        let writer =
            ArrowWriter::try_new(file, spill_schema(), Some(props)).map_err(parquet_err)?;
        Ok(Self { writer })
    }

    fn write(&mut self, docs: &[LiveDoc]) -> Result<(), CompactError> {
        for part in docs.chunks(8 * 1024) {
            let rows: Vec<DocRow> = part.iter().map(|d| d.doc.clone()).collect();
            let batch = trawl_core::records::to_batch(&rows)?;
            let keys: ArrayRef = std::sync::Arc::new(UInt64Array::from_iter_values(
                part.iter().map(|d| shard_key(&d.doc.chunk_id)),
            ));
            let mut columns = batch.columns().to_vec();
            columns.push(keys);
            let batch = RecordBatch::try_new(spill_schema(), columns)
                .map_err(|e| CompactError::Io(format!("spilling docs: {e}")))?;
            self.writer.write(&batch).map_err(parquet_err)?;
        }
        Ok(())
    }
}

/// One repository's live chunks (every chunker version's) → its docs and table rows.
struct Repo {
    id: RepoId,
    rows: Vec<(ChunkRecord, CommitId)>,
}

/// Reads the whole live set into local files under a new temporary directory, a repository
/// at a time: `memory` bounds what DataFusion's sort holds before it spills.
pub async fn spill_live_set(store: &Store, memory: usize) -> Result<Spilled, CompactError> {
    let dir = tempfile::Builder::new()
        .prefix("trawl-live-")
        .tempdir()
        .map_err(io("creating a directory for the spilled live set"))?;
    let states = live::listed_states(store).await?;
    let mut runs: Vec<RunId> = states.iter().map(|s| s.last_run.clone()).collect();
    runs.sort();
    runs.dedup();
    let mut spilled = Spilled {
        runs,
        repos: states.len(),
        calls: CallStats::default(),
        chunks: 0,
        has_table: false,
        memory,
        store: store.clone(),
        dir,
    };
    let mut docs = DocSink::create(&spilled.docs_path())?;
    let table_file =
        std::fs::File::create(spilled.table_path()).map_err(io("creating the chunks table"))?;
    let mut table = ArrowWriter::try_new(
        table_file,
        ChunkRecord::arrow_schema(),
        Some(trawl_core::records::parquet_properties()),
    )
    .map_err(parquet_err)?;
    let mut seen: HashSet<RepoId> = HashSet::new();
    let ctx = live::session(store, Some(memory))?;
    spilled.has_table =
        !states.is_empty() && live::register_manifests(&ctx, store, &states).await?;
    if spilled.has_table {
        live::table(
            &ctx,
            "c",
            vec![live::store_url(store, "chunks/")?],
            ChunkRecord::arrow_schema(),
            Some("repo"),
        )?;
        let mut stream = ctx
            .sql(CHUNKS_BY_REPO)
            .await
            .map_err(query)?
            .execute_stream()
            .await
            .map_err(query)?;
        let read =
            |e: serde_arrow::Error| CompactError::Query(format!("reading the live set: {e}"));
        let mut repo: Option<Repo> = None;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(query)?;
            let chunks: Vec<ChunkRecord> = serde_arrow::from_record_batch(&batch).map_err(read)?;
            let commits: Vec<Commit> = serde_arrow::from_record_batch(&batch).map_err(read)?;
            for (c, m) in chunks.into_iter().zip(commits) {
                if repo.as_ref().is_none_or(|r| r.id != c.repo_id) {
                    if let Some(done) = repo.take() {
                        spilled.repo(done, &mut docs, &mut table, &mut seen).await?;
                    }
                    repo = Some(Repo {
                        id: c.repo_id.clone(),
                        rows: Vec::new(),
                    });
                }
                repo.as_mut().expect("set above").rows.push((c, m.commit));
            }
        }
        if let Some(done) = repo.take() {
            spilled.repo(done, &mut docs, &mut table, &mut seen).await?;
        }
    }
    // Listed repositories without a live chunk still have their commit messages.
    if spilled.has_table {
        for s in states.iter().filter(|s| !seen.contains(&s.repo)) {
            let commits = live::commit_docs(store, &s.repo, &DefinitionLines::new()).await?;
            docs.write(&commits)?;
        }
    }
    docs.writer.close().map_err(parquet_err)?;
    table.close().map_err(parquet_err)?;
    tracing::debug!(calls = ?spilled.calls, chunks = spilled.chunks, "live set spilled");
    Ok(spilled)
}

impl Spilled {
    fn docs_path(&self) -> PathBuf {
        self.dir.path().join("docs.parquet")
    }

    /// The generation's `chunks` table: the live chunks sorted by (repository, path, line).
    pub fn table_path(&self) -> PathBuf {
        self.dir.path().join("chunks.parquet")
    }

    /// One repository's chunks → its table rows and docs (calls resolved, commit messages
    /// added), as [`live::live_set`] derives them.
    async fn repo(
        &mut self,
        repo: Repo,
        docs: &mut DocSink,
        table: &mut ArrowWriter<std::fs::File>,
        seen: &mut HashSet<RepoId>,
    ) -> Result<(), CompactError> {
        // One row per chunk id: the newest chunker version's.
        let mut by_id: HashMap<ChunkId, (ChunkRecord, CommitId)> = HashMap::new();
        for (c, commit) in repo.rows {
            match by_id.get(&c.chunk_id) {
                Some((old, _)) if old.chunker_version >= c.chunker_version => {}
                _ => {
                    by_id.insert(c.chunk_id, (c, commit));
                }
            }
        }
        let mut rows: Vec<(ChunkRecord, CommitId)> = by_id.into_values().collect();
        rows.sort_by(|(a, _), (b, _)| {
            (&a.path, a.start_line, a.chunk_id).cmp(&(&b.path, b.start_line, b.chunk_id))
        });
        let (chunks, commits): (Vec<ChunkRecord>, Vec<CommitId>) = rows.into_iter().unzip();
        for part in chunks.chunks(trawl_core::records::PARQUET_ROW_GROUP) {
            table
                .write(&trawl_core::records::to_batch(part)?)
                .map_err(parquet_err)?;
        }
        self.chunks += chunks.len() as u64;
        let mut live: Vec<LiveDoc> = chunks
            .into_iter()
            .zip(commits)
            .map(|(c, commit)| LiveDoc {
                doc: DocRow::from_chunk(c, commit, false),
                vector: None,
            })
            .collect();
        self.calls += crate::calls::resolve_calls(&mut live);
        let defs = live::definition_lines(&live);
        live.extend(live::commit_docs(&self.store, &repo.id, &defs).await?);
        docs.write(&live)?;
        seen.insert(repo.id);
        Ok(())
    }

    /// The docs of shards `0..shards` in order, each with its vector where the space has one
    /// (one doc per chunk id): a shard is read when the consumer asks for it.
    pub async fn shards(
        &self,
        shards: u32,
        space: Option<&Space>,
    ) -> Result<
        impl futures::Stream<Item = Result<(u32, Vec<LiveDoc>), CompactError>> + use<>,
        CompactError,
    > {
        let ctx = live::session(&self.store, Some(self.memory))?;
        let path = self.docs_path();
        let path = path
            .to_str()
            .ok_or_else(|| CompactError::Io(format!("{}: not a UTF-8 path", path.display())))?;
        let url = ListingTableUrl::parse(path).map_err(query)?;
        live::table(&ctx, "d", vec![url], spill_schema(), None)?;
        let n = shards.max(1);
        let sql = if live::register_embeddings(&ctx, &self.store, space).await? {
            format!(
                "SELECT d.*, e.vector AS vector, e.vector_bytes AS vector_bytes, \
                 CAST(d.{SHARD_KEY} % {n} AS BIGINT) AS shard \
                 FROM d LEFT JOIN e ON e.content_hash = d.content_hash ORDER BY shard"
            )
        } else {
            format!(
                "SELECT d.*, CAST(NULL AS FLOAT[]) AS vector, CAST(NULL AS BYTEA) AS vector_bytes, \
                 CAST(d.{SHARD_KEY} % {n} AS BIGINT) AS shard FROM d ORDER BY shard"
            )
        };
        let stream = ctx
            .sql(&sql)
            .await
            .map_err(query)?
            .execute_stream()
            .await
            .map_err(query)?;
        let reader = ShardReader {
            stream,
            pending: VecDeque::new(),
            done: false,
            dtype: space.map_or(Dtype::Float, |s| s.dtype),
            _ctx: ctx,
        };
        Ok(futures::stream::unfold(
            (reader, 0u32),
            move |(mut reader, k)| async move {
                if k >= n {
                    return None;
                }
                let shard = reader.shard(k, n).await.map(|docs| (k, docs));
                Some((shard, (reader, k + 1)))
            },
        ))
    }
}

/// A doc as the shard query returns it.
#[derive(Deserialize)]
struct Joined {
    vector: Option<Vec<f32>>,
    vector_bytes: Option<Vec<u8>>,
    shard: i64,
}

/// The shard query's rows, handed out a shard at a time.
struct ShardReader {
    stream: SendableRecordBatchStream,
    pending: VecDeque<(u32, LiveDoc)>,
    done: bool,
    dtype: Dtype,
    /// The session the stream runs in.
    _ctx: SessionContext,
}

impl ShardReader {
    /// The docs of shard `k` (the rows are sorted by shard): one per chunk id, the one with
    /// a vector when the join found several.
    async fn shard(&mut self, k: u32, n: u32) -> Result<Vec<LiveDoc>, CompactError> {
        let mut by_id: HashMap<ChunkId, LiveDoc> = HashMap::new();
        loop {
            while let Some((s, _)) = self.pending.front() {
                if *s != k {
                    break;
                }
                let (_, d) = self.pending.pop_front().expect("a front");
                match by_id.get(&d.doc.chunk_id) {
                    Some(old) if old.vector.is_some() || d.vector.is_none() => {}
                    _ => {
                        by_id.insert(d.doc.chunk_id, d);
                    }
                }
            }
            if !self.pending.is_empty() || self.done {
                break;
            }
            match self.stream.next().await {
                None => self.done = true,
                Some(batch) => self.read(&batch.map_err(query)?, n)?,
            }
        }
        Ok(by_id.into_values().collect())
    }

    fn read(&mut self, batch: &RecordBatch, n: u32) -> Result<(), CompactError> {
        let read =
            |e: serde_arrow::Error| CompactError::Query(format!("reading spilled docs: {e}"));
        let docs: Vec<DocRow> = serde_arrow::from_record_batch(batch).map_err(read)?;
        let joined: Vec<Joined> = serde_arrow::from_record_batch(batch).map_err(read)?;
        for (mut doc, j) in docs.into_iter().zip(joined) {
            // Commit messages are words only, as the whole set makes them.
            let vector = if doc.kind == live::COMMIT_KIND {
                None
            } else {
                live::vector_data(j.vector, j.vector_bytes, self.dtype)
            };
            doc.has_vector = vector.is_some();
            let shard = j.shard as u32;
            debug_assert_eq!(shard, shard_of(&doc, n));
            self.pending.push_back((shard, LiveDoc { doc, vector }));
        }
        Ok(())
    }
}

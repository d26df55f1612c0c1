//! Builds a generation from the live set, reusing what the live generation already holds.
//!
//! Docs are spread over `shards` by a hash of their chunk id. For each shard the docs the live
//! generation holds (minus its tombstones) are compared with the live set by
//! [`trawl_index::docs::DocKey`] (chunk id, content hash, has-vector):
//! - nothing changed → the shard's segments and tombstones are reused as they are;
//! - docs added or changed → one new delta segment holds them; docs removed or replaced →
//!   tombstones (ords by segment), written as one small file;
//! - size-tiered merge: when the tombstones would exceed `merge_tombstone_ratio` of the shard's
//!   docs, or its segments `max_segments`, the shard is rebuilt into one segment.
//!
//! A format, space or shard-count change rebuilds everything. Nothing of the live generation is
//! touched: the new one is written beside it, then `CURRENT` is swapped.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use futures::StreamExt;

use trawl_core::config::Shards;
use trawl_core::ids::{Generation, RepoId, RunId};
use trawl_core::space::Space;
use trawl_core::store::Store;
use trawl_index::docs::{DocKey, DocRow};
use trawl_index::generation::{
    self, BuildStats, Counts, FORMAT_VERSION, Manifest, SegmentEntry, ShardEntry, Tombstones,
};
use trawl_index::segment::{self, VectorData};

use crate::lease::{self, Lease, claim_generation};
use crate::{CompactError, IndexError, Progress};

/// One chunk of the live set.
#[derive(Clone, Debug)]
pub struct LiveDoc {
    pub doc: DocRow,
    pub vector: Option<VectorData>,
    /// The vector of its prose view ([`trawl_core::prose`]), when it has one.
    pub prose: Option<VectorData>,
}

/// The docs a build is given.
#[derive(Debug)]
pub enum LiveDocs {
    /// Held in memory: an incremental set, or one `--wait` read.
    Memory(Vec<LiveDoc>),
    /// The whole live set in local files, read a shard at a time ([`crate::spill`]): the
    /// build holds only the shards it is writing. Its calls are resolved and its `chunks`
    /// table written already.
    Spilled(crate::spill::Spilled),
}

impl From<Vec<LiveDoc>> for LiveDocs {
    fn from(docs: Vec<LiveDoc>) -> Self {
        Self::Memory(docs)
    }
}

/// The generation's `chunks` table, to be written beside its manifest.
enum Table {
    Bytes(bytes::Bytes),
    File(std::path::PathBuf),
}

/// How a generation is built.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Shards of a full build (an incremental build keeps the live generation's count, but
    /// for `auto` when the corpus has outgrown it).
    pub shards: Shards,
    /// The most chunks an `auto` shard is made for (`compact.shard_chunks`).
    pub shard_chunks: u64,
    /// Rebuild everything even when the live generation could be reused.
    pub full: bool,
    pub max_segments: usize,
    pub merge_tombstone_ratio: f64,
    pub threads: usize,
    /// Run ids recorded in the manifest.
    pub source_runs: Vec<RunId>,
    /// The fingerprint of the live set's inputs, recorded in the manifest.
    pub inputs: Option<String>,
    /// The live chunks table ([`crate::live::LiveSet::table`]), written beside the manifest.
    pub table: Option<bytes::Bytes>,
    /// How long the compactor lease lasts without renewal (it is renewed every third of it
    /// while the build runs): a compactor that dies holds the index for at most this long.
    pub lease_ttl: std::time::Duration,
    /// `Some`: the docs given are those of these repositories only; every other
    /// repository's docs stay as the live generation holds them (an incremental build, which
    /// fails with [`CompactError::NeedsWholeSet`] when it cannot be one). `None`: the docs
    /// given are the whole live set.
    pub only: Option<BTreeSet<RepoId>>,
    /// Recorded in the manifest ([`Manifest::repo_inputs`]), except that a repository
    /// among the docs given that has a doc waiting for its vector is recorded with an empty
    /// fingerprint (never equal to one: the next compaction reads it again).
    pub repo_inputs: BTreeMap<RepoId, String>,
    /// The repositories' fingerprints were taken: a repository among the docs given without
    /// one in `repo_inputs` (listed after they were taken) is recorded with an empty one, so
    /// that it is looked at again, and goes if it left.
    pub fingerprinted: bool,
    /// An incremental build: the live generation its changed repositories were found
    /// against. Another one live by the time the lease is held means another builder came
    /// between: [`CompactError::NeedsWholeSet`].
    pub base: Option<Generation>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            shards: Shards::Auto,
            shard_chunks: Shards::DEFAULT_SHARD_CHUNKS,
            full: false,
            max_segments: 8,
            merge_tombstone_ratio: 0.25,
            threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            source_runs: Vec::new(),
            inputs: None,
            table: None,
            lease_ttl: std::time::Duration::from_secs(120),
            only: None,
            repo_inputs: BTreeMap::new(),
            fingerprinted: false,
            base: None,
        }
    }
}

/// The shard of a chunk.
pub fn shard_of(doc: &DocRow, shards: u32) -> u32 {
    let b = doc.chunk_id.as_bytes();
    (u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) % u64::from(shards.max(1))) as u32
}

/// A live doc of the live generation: where it is, its repository, and whether it is a
/// commit message.
#[derive(Clone, Debug)]
struct Held {
    dir: String,
    ord: u64,
    repo: String,
    commit: bool,
}

/// What the live generation holds in one shard: live docs by key.
async fn shard_contents(
    store: &Store,
    entry: &ShardEntry,
) -> Result<(HashMap<DocKey, Held>, Tombstones, u64), CompactError> {
    let tomb: Tombstones = match &entry.tombstones {
        Some(k) => store.get_json(k).await?.unwrap_or_default(),
        None => Tombstones::default(),
    };
    let mut live = HashMap::new();
    let mut total = 0;
    for seg in &entry.segments {
        let rows = segment_keys(store, &format!("{}/docs.parquet", seg.dir)).await?;
        total += rows.len() as u64;
        let dead: HashSet<u64> = tomb
            .deleted
            .get(&seg.dir)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        for (ord, key, repo, commit) in rows {
            if !dead.contains(&ord) {
                live.insert(
                    key,
                    Held {
                        dir: seg.dir.clone(),
                        ord,
                        repo,
                        commit,
                    },
                );
            }
        }
    }
    Ok((live, tomb, total))
}

/// The (ord, key, repository, is a commit message) of every doc of a segment's doc store.
/// Only the footer and those eight columns are fetched, by range: about an eighth of the file
/// (the text and header are most of it), so a night that changed little does not download
/// the whole corpus's text to learn what each segment holds.
async fn segment_keys(
    store: &Store,
    key: &str,
) -> Result<Vec<(u64, DocKey, String, bool)>, CompactError> {
    use arrow_array::{Array, BooleanArray, StringArray, UInt64Array};
    use futures::TryStreamExt;
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
    let bad = |e: &dyn std::fmt::Display| CompactError::Format(format!("doc store {key}: {e}"));
    use object_store::ObjectStoreExt;
    let (objects, _) = store.object_store();
    let path = store.object_path(key);
    let size = match objects.head(&path).await {
        Ok(meta) => meta.size,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(CompactError::Format(format!(
                "segment file {key} is missing from the store"
            )));
        }
        Err(source) => {
            return Err(trawl_core::Error::Store {
                op: trawl_core::StoreOp::Get,
                key: key.to_owned(),
                source,
            }
            .into());
        }
    };
    let reader = RangeReader {
        objects,
        path,
        size,
    };
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| bad(&e))?;
    // Segments written before members existed have no such column: their docs have none.
    let has_members = builder
        .schema()
        .fields()
        .iter()
        .any(|f| f.name() == "members");
    let mut columns = vec![
        "ord",
        "chunk_id",
        "content_hash",
        "has_vector",
        "repo_id",
        "kind",
        "call_ids",
    ];
    if has_members {
        columns.push("members");
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), columns);
    let mut reader = builder.with_projection(mask).build().map_err(|e| bad(&e))?;
    let mut out = Vec::new();
    while let Some(batch) = reader.try_next().await.map_err(|e| bad(&e))? {
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(&format!("no column {name}")))
        };
        let (ord, id, hash, vec) = (
            col("ord")?,
            col("chunk_id")?,
            col("content_hash")?,
            col("has_vector")?,
        );
        let ord = ord
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| bad(&"ord"))?;
        let id = id
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad(&"chunk_id"))?;
        let hash = hash
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad(&"content_hash"))?;
        let vec = vec
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| bad(&"has_vector"))?;
        let (repo, kind) = (col("repo_id")?, col("kind")?);
        let repo = repo
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad(&"repo_id"))?;
        let kind = kind
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad(&"kind"))?;
        // A list column of strings, as its offsets and its values: row `i` is
        // `values[offsets[i]..offsets[i + 1]]`, read without a copy.
        let lists = |name: &str| -> Result<Option<(Vec<usize>, StringArray)>, CompactError> {
            let Some(c) = batch.column_by_name(name) else {
                return Ok(None);
            };
            let list = c
                .as_any()
                .downcast_ref::<arrow_array::ListArray>()
                .ok_or_else(|| bad(&name))?;
            let values = list
                .values()
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| bad(&name))?
                .clone();
            let offsets = list.value_offsets().iter().map(|&o| o as usize).collect();
            Ok(Some((offsets, values)))
        };
        let (members, call_ids) = (lists("members")?, lists("call_ids")?);
        for i in 0..batch.num_rows() {
            let calls = list_row(call_ids.as_ref(), i)
                .map(|c| trawl_core::ChunkId::try_from(c.to_owned()))
                .collect::<Result<Vec<_>, _>>()?;
            let key = DocKey {
                chunk_id: trawl_core::ChunkId::try_from(id.value(i).to_owned())?,
                content_hash: trawl_core::ContentHash::try_from(hash.value(i).to_owned())?,
                has_vector: vec.value(i),
                links: trawl_index::docs::links_digest(list_row(members.as_ref(), i), calls),
            };
            out.push((
                ord.value(i),
                key,
                repo.value(i).to_owned(),
                kind.value(i) == crate::live::COMMIT_KIND.as_str(),
            ));
        }
    }
    Ok(out)
}

/// Row `i` of a list column of strings read as its offsets and values (none when absent).
fn list_row(
    list: Option<&(Vec<usize>, arrow_array::StringArray)>,
    i: usize,
) -> impl Iterator<Item = &str> {
    list.into_iter()
        .flat_map(move |(o, v)| (o[i]..o[i + 1]).map(move |j| v.value(j)))
}

/// A Parquet file in the object store, read by byte range (the footer, then the columns a
/// projection needs).
struct RangeReader {
    objects: std::sync::Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    size: u64,
}

impl parquet::arrow::async_reader::AsyncFileReader for RangeReader {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        use futures::FutureExt;
        use object_store::ObjectStoreExt;
        async move {
            self.objects
                .get_range(&self.path, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<Vec<bytes::Bytes>>> {
        use futures::FutureExt;
        async move {
            self.objects
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a parquet::arrow::arrow_reader::ArrowReaderOptions>,
    ) -> futures::future::BoxFuture<
        'a,
        parquet::errors::Result<std::sync::Arc<parquet::file::metadata::ParquetMetaData>>,
    > {
        use futures::FutureExt;
        async move {
            let size = self.size;
            let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_and_finish(self, size)
                .await?;
            Ok(std::sync::Arc::new(metadata))
        }
        .boxed()
    }
}

async fn write_segment(
    store: &Store,
    dir: &str,
    docs: Vec<LiveDoc>,
    space: Option<&Space>,
    threads: usize,
) -> Result<SegmentEntry, CompactError> {
    let mut rows = Vec::with_capacity(docs.len());
    let mut vectors = Vec::new();
    let mut prose_vectors = 0;
    for (ord, mut d) in docs.into_iter().enumerate() {
        d.doc.ord = ord as u64;
        d.doc.has_vector = d.vector.is_some();
        if let Some(v) = d.vector {
            vectors.push((ord as u64, v));
            // A prose vector only beside the doc's own: one alone would make it found by
            // meaning while it waits for its vector.
            if let Some(p) = d.prose {
                vectors.push((segment::prose_key(ord as u64), p));
                prose_vectors += 1;
            }
        }
        rows.push(d.doc);
    }
    let space = space.cloned();
    let tmp = tempfile::tempdir().map_err(|e| CompactError::Io(e.to_string()))?;
    let n_vectors = vectors.len() as u64;
    let n_docs = rows.len() as u64;
    let path = tmp.path().to_path_buf();
    let files = tokio::task::spawn_blocking(move || {
        segment::build(&rows, &vectors, space.as_ref(), &path, threads)
    })
    .await
    .map_err(|e| IndexError::Segment(format!("segment build task: {e}")))??;
    let bytes = files.bytes();
    store
        .put(&format!("{dir}/docs.parquet"), files.docs)
        .await?;
    if let Some(v) = files.vectors {
        store.put(&format!("{dir}/vectors.usearch"), v).await?;
    }
    let mut names = Vec::new();
    for (name, b) in files.text {
        store.put(&format!("{dir}/text/{name}"), b).await?;
        names.push(name);
    }
    Ok(SegmentEntry {
        dir: dir.to_owned(),
        docs: n_docs,
        vectors: n_vectors,
        prose_vectors: Some(prose_vectors),
        bytes,
        text_files: names,
    })
}

/// Builds and publishes the next generation from `live`. Returns its manifest.
///
/// Holds the compactor lease throughout ([`Lease`]): a second compactor (or `gc`) on the
/// same store fails with [`CompactError::Busy`] instead of writing beside this one. The
/// generation number is claimed ([`claim_generation`]), so it is never reused.
pub async fn build(
    store: &Store,
    live: impl Into<LiveDocs>,
    space: Option<Space>,
    opts: &BuildOptions,
    progress: &dyn Progress,
) -> Result<Manifest, CompactError> {
    let lease = Lease::acquire(store, &lease::holder("compactor"), opts.lease_ttl).await?;
    let built = build_leased(store, live.into(), space, opts, progress, &lease).await;
    if let Err(e) = lease.release().await {
        tracing::warn!(error = %e, "releasing the compactor lease (it expires by itself)");
    }
    built
}

async fn build_leased(
    store: &Store,
    live: LiveDocs,
    space: Option<Space>,
    opts: &BuildOptions,
    progress: &dyn Progress,
    lease: &Lease,
) -> Result<Manifest, CompactError> {
    let started = Instant::now();
    let current = generation::current(store).await?;
    let previous = match &current {
        Some((cur, _)) => Some(generation::manifest(store, cur.generation).await?),
        None => None,
    };
    let next = claim_generation(
        store,
        current
            .as_ref()
            .map_or(Generation::FIRST, |(c, _)| c.generation.next()),
    )
    .await?;
    // The chunks given: the whole live set's count, unless only some repositories' docs are
    // given (then the live generation's count stands for the corpus).
    let given = match &live {
        LiveDocs::Memory(docs) => docs.len() as u64,
        LiveDocs::Spilled(s) => s.chunks,
    };
    let outgrown = previous.as_ref().is_some_and(|p| {
        let corpus = if opts.only.is_some() {
            p.counts.chunks
        } else {
            given
        };
        opts.shards
            .outgrown(p.shard_count, corpus, opts.shard_chunks)
    });
    if outgrown {
        tracing::info!(
            shards = previous.as_ref().map(|p| p.shard_count),
            "the corpus outgrew the live generation's shards: building it whole with more"
        );
    }
    let reusable = previous.as_ref().filter(|p| {
        !opts.full
            && !outgrown
            && p.format_version == FORMAT_VERSION
            && (p.space.is_none() || space.is_none() || p.space == space)
    });
    if opts.only.is_some() && reusable.is_none() {
        return Err(CompactError::NeedsWholeSet(if outgrown {
            "the corpus outgrew the live generation's shards".into()
        } else {
            "no live generation of this format and vector space to build on".into()
        }));
    }
    if opts.only.is_some() && opts.base != previous.as_ref().map(|p| p.generation) {
        return Err(CompactError::NeedsWholeSet(
            "another generation went live since the changes were found".into(),
        ));
    }
    // The chunks table: the given one (the spill's file), or for an incremental build the
    // live generation's with the rebuilt repositories' rows replaced.
    let mut table_dir: Option<tempfile::TempDir> = None;
    let table = match (&opts.only, &live) {
        (None, LiveDocs::Spilled(s)) => s.has_table.then(|| Table::File(s.table_path())),
        (None, LiveDocs::Memory(_)) => opts.table.clone().map(Table::Bytes),
        (Some(only), _) => {
            let key = previous
                .as_ref()
                .and_then(|p| p.chunks_table.clone())
                .ok_or_else(|| {
                    CompactError::NeedsWholeSet("the live generation has no chunks table".into())
                })?;
            let dir =
                table_dir.insert(tempfile::tempdir().map_err(|e| CompactError::Io(e.to_string()))?);
            let (old, out) = (
                dir.path().join("live.parquet"),
                dir.path().join("next.parquet"),
            );
            if !store.get_file(&key, &old).await? {
                return Err(CompactError::NeedsWholeSet(format!(
                    "the live chunks table {key} is missing"
                )));
            }
            let (new, only, next) = (opts.table.clone(), only.clone(), out.clone());
            let spliced = tokio::task::spawn_blocking(move || {
                let props = trawl_core::records::table_properties();
                crate::table::replace_repos(&old, new, &only, &next, props)
            })
            .await
            .map_err(|e| CompactError::Io(format!("chunks table task: {e}")))?
            // A table this release cannot patch (another schema) is rebuilt whole.
            .map_err(|e| CompactError::NeedsWholeSet(e.to_string()))?;
            tracing::debug!(?spliced, "chunks table spliced");
            Some(Table::File(out))
        }
    };
    let shard_count = reusable.map_or_else(
        || opts.shards.count_for(given, opts.shard_chunks),
        |p| p.shard_count,
    );

    // The docs by shard, in shard order: grouped in memory, or read from the spill one
    // shard at a time (as the builds below ask for them).
    let spilled;
    let inputs: futures::stream::BoxStream<'_, Result<(u32, Vec<LiveDoc>), CompactError>> =
        match live {
            LiveDocs::Memory(mut live) => {
                let calls = crate::calls::resolve_calls(&mut live);
                tracing::debug!(?calls, "calls resolved");
                let mut by_shard: BTreeMap<u32, Vec<LiveDoc>> = BTreeMap::new();
                for d in live {
                    by_shard
                        .entry(shard_of(&d.doc, shard_count))
                        .or_default()
                        .push(d);
                }
                futures::stream::iter(
                    (0..shard_count).map(move |k| Ok((k, by_shard.remove(&k).unwrap_or_default()))),
                )
                .boxed()
            }
            LiveDocs::Spilled(s) => {
                spilled = s;
                spilled.shards(shard_count).await?.boxed()
            }
        };

    let mut stats = BuildStats {
        full: reusable.is_none(),
        repos_rebuilt: opts.only.as_ref().map(|o| o.len() as u64),
        ..BuildStats::default()
    };
    // Shards are independent: build them concurrently, as many as there are cores.
    let space_ref = space.as_ref();
    let vectors = space.is_some();
    let mut counts = Counts::default();
    let mut repos: HashSet<String> = HashSet::new();
    let mut repo_inputs = opts.repo_inputs.clone();
    let mut shards = Vec::with_capacity(shard_count as usize);
    {
        let built = inputs
            .map(|shard| async move {
                let (k, docs) = shard?;
                progress.shard(k, shard_count);
                let mut given = Tally::default();
                for d in &docs {
                    given.add_doc(d, vectors);
                }
                let old = reusable.and_then(|p| p.shards.iter().find(|s| s.shard == k));
                let shard_dir = format!("{}shard={k}", generation::gen_dir(next));
                let (entry, stats, kept) =
                    build_shard(store, k, &shard_dir, docs, old, space_ref, opts).await?;
                Ok::<_, CompactError>((entry, stats, kept, given))
            })
            .buffered(opts.threads.max(1));
        // Each shard's result is folded in as it is yielded (in shard order) and then dropped:
        // what is held across the build is one set of the corpus's repositories, not a set per
        // shard (shards are cut by chunk id, so every shard touches most repositories).
        let mut built = std::pin::pin!(built);
        while let Some(b) = built.next().await {
            let (entry, s, kept, given) = b?;
            stats.add(&s);
            shards.push(entry);
            for t in [&kept, &given] {
                counts.chunks += t.chunks;
                counts.with_vector += t.with_vector;
                counts.text_only += t.text_only;
                counts.commits += t.commits;
            }
            for r in &given.waiting {
                if let Some(f) = repo_inputs.get_mut(r) {
                    f.clear();
                }
            }
            if opts.fingerprinted {
                for r in &given.given {
                    repo_inputs.entry(r.clone()).or_default();
                }
            }
            repos.extend(kept.repos);
            repos.extend(given.repos);
        }
    }
    counts.repos = repos.len() as u64;
    stats.seconds = started.elapsed().as_secs_f64();
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        generation: next,
        created_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        space,
        shard_count,
        shards,
        counts,
        source_runs: opts.source_runs.clone(),
        previous: current.as_ref().map(|(c, _)| c.generation),
        build: stats,
        inputs: opts.inputs.clone(),
        chunks_table: table.as_ref().map(|_| generation::chunks_table_key(next)),
        repo_inputs,
    };
    match (table, &manifest.chunks_table) {
        (Some(Table::Bytes(bytes)), Some(key)) => store.put(key, bytes).await?,
        (Some(Table::File(file)), Some(key)) => store.put_file(key, &file).await?,
        _ => {}
    }
    let hash = generation::put_manifest(store, &manifest).await?;
    progress.swapping(next);
    lease.check().await?;
    generation::swap(store, next, &hash, current.as_ref().map(|(_, v)| v)).await?;
    Ok(manifest)
}

/// Docs counted: those of a shard an incremental build keeps as they are (their
/// repositories were not rebuilt), or those given to the build.
#[derive(Debug, Default)]
struct Tally {
    docs: u64,
    chunks: u64,
    with_vector: u64,
    text_only: u64,
    commits: u64,
    repos: HashSet<String>,
    /// Repositories with a chunk waiting for its vector.
    waiting: HashSet<RepoId>,
    /// The repositories of the docs given.
    given: HashSet<RepoId>,
}

impl Tally {
    fn add(&mut self, key: &DocKey, held: &Held) {
        self.docs += 1;
        if held.commit {
            self.commits += 1;
        } else {
            self.chunks += 1;
            if key.has_vector {
                self.with_vector += 1;
            } else {
                self.text_only += 1;
            }
        }
        if !self.repos.contains(&held.repo) {
            self.repos.insert(held.repo.clone());
        }
    }

    /// Counts a doc given to the build; with `vectors`, a chunk without one is waiting.
    fn add_doc(&mut self, d: &LiveDoc, vectors: bool) {
        self.docs += 1;
        if d.doc.kind == crate::live::COMMIT_KIND {
            self.commits += 1;
        } else if d.vector.is_some() {
            self.chunks += 1;
            self.with_vector += 1;
        } else {
            self.chunks += 1;
            self.text_only += 1;
            if vectors {
                self.waiting.insert(d.doc.repo_id.clone());
            }
        }
        if !self.given.contains(&d.doc.repo_id) {
            self.repos.insert(d.doc.repo_id.to_string());
            self.given.insert(d.doc.repo_id.clone());
        }
    }
}

/// One shard of the next generation: reused, a delta, or rebuilt.
async fn build_shard(
    store: &Store,
    k: u32,
    shard_dir: &str,
    mut docs: Vec<LiveDoc>,
    old: Option<&ShardEntry>,
    space: Option<&Space>,
    opts: &BuildOptions,
) -> Result<(ShardEntry, BuildStats, Tally), CompactError> {
    let mut stats = BuildStats::default();
    docs.sort_by(doc_order);
    let whole = |why: String| CompactError::NeedsWholeSet(format!("shard {k} {why}"));
    let Some(old) = old else {
        if opts.only.is_some() {
            return Err(whole("is new".into()));
        }
        let entry = rebuild(store, k, shard_dir, docs, space, opts, &mut stats).await?;
        return Ok((entry, stats, Tally::default()));
    };
    // On a task of its own: decoding the keys and mapping them is CPU work, and the shards
    // are built concurrently on one task otherwise.
    let (have, mut tomb, total) = {
        let (store, old) = (store.clone(), old.clone());
        tokio::spawn(async move { shard_contents(&store, &old).await })
            .await
            .map_err(|e| CompactError::Io(format!("shard contents task: {e}")))??
    };
    let want: HashSet<DocKey> = docs.iter().map(key_of).collect();
    let rebuilt: Option<HashSet<&str>> = opts
        .only
        .as_ref()
        .map(|o| o.iter().map(RepoId::as_str).collect());
    let is_added = |d: &LiveDoc| !have.contains_key(&key_of(d));
    let added_count = docs.iter().filter(|d| is_added(d)).count();
    let mut kept = Tally::default();
    let mut removed: Vec<(String, u64)> = Vec::new();
    for (key, held) in &have {
        if rebuilt
            .as_ref()
            .is_some_and(|r| !r.contains(held.repo.as_str()))
        {
            // Not rebuilt: stays as the live generation holds it.
            kept.add(key, held);
        } else if !want.contains(key) {
            removed.push((held.dir.clone(), held.ord));
        }
    }
    if added_count == 0 && removed.is_empty() {
        stats.shards_reused += 1;
        return Ok((old.clone(), stats, kept));
    }
    let tombstones_after = tomb.count() + removed.len();
    let docs_after = total as usize + added_count;
    let merge = tombstones_after as f64 > opts.merge_tombstone_ratio * docs_after as f64
        || old.segments.len() + 1 > opts.max_segments;
    if merge {
        let counted = match &rebuilt {
            // Merging rewrites the kept docs too: read back from the segments that hold them.
            Some(rebuilt) => {
                docs.extend(held_docs(store, old, &tomb, rebuilt, space).await?);
                docs.sort_by(doc_order);
                kept
            }
            None => Tally::default(),
        };
        let entry = rebuild(store, k, shard_dir, docs, space, opts, &mut stats).await?;
        return Ok((entry, stats, counted));
    }
    stats.shards_delta += 1;
    let live_docs = docs.len() as u64 + kept.docs;
    // Moved, not copied: a shard's vectors are held once.
    let added: Vec<LiveDoc> = docs.into_iter().filter(|d| is_added(d)).collect();
    let mut segments = old.segments.clone();
    if !added.is_empty() {
        let seg = write_segment(
            store,
            &format!("{shard_dir}/seg={}", old.segments.len()),
            added,
            space,
            opts.threads,
        )
        .await?;
        stats.written(&seg);
        segments.push(seg);
    }
    let mut tomb_key = old.tombstones.clone();
    if !removed.is_empty() {
        for (dir, ord) in removed {
            tomb.deleted.entry(dir).or_default().push(ord);
        }
        for v in tomb.deleted.values_mut() {
            v.sort_unstable();
            v.dedup();
        }
        let key = format!("{shard_dir}/tombstones.json");
        let bytes = serde_json::to_vec(&tomb).expect("serialisable");
        stats.bytes_written += bytes.len() as u64;
        stats.tombstones_written += tomb.count() as u64;
        store.put(&key, bytes::Bytes::from(bytes)).await?;
        tomb_key = Some(key);
    }
    Ok((
        ShardEntry {
            shard: k,
            live_docs,
            segments,
            tombstones: tomb_key,
        },
        stats,
        kept,
    ))
}

/// The live docs of `shard` whose repositories are not `rebuilt`, with their vectors, read
/// back from the segments and vector indexes that hold them.
async fn held_docs(
    store: &Store,
    shard: &ShardEntry,
    tomb: &Tombstones,
    rebuilt: &HashSet<&str>,
    space: Option<&Space>,
) -> Result<Vec<LiveDoc>, CompactError> {
    let mut out = Vec::new();
    for seg in &shard.segments {
        let key = format!("{}/docs.parquet", seg.dir);
        let bytes = store.get(&key).await?.ok_or_else(|| {
            CompactError::Format(format!("segment file {key} is missing from the store"))
        })?;
        let dead: HashSet<u64> = tomb
            .deleted
            .get(&seg.dir)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        let rows: Vec<DocRow> = trawl_core::records::from_parquet(bytes)?;
        let rows: Vec<DocRow> = rows
            .into_iter()
            .filter(|d| !dead.contains(&d.ord) && !rebuilt.contains(d.repo_id.as_str()))
            .collect();
        // Each doc with a vector: its own, then its prose view's (absent when it has none),
        // asked for only where the segment holds any.
        let views = seg.prose_vectors != Some(0);
        let with: Vec<u64> = rows
            .iter()
            .filter(|d| d.has_vector)
            .flat_map(|d| [Some(d.ord), views.then(|| segment::prose_key(d.ord))])
            .flatten()
            .collect();
        let mut vectors = match space {
            Some(space) if !with.is_empty() => {
                let key = format!("{}/vectors.usearch", seg.dir);
                let bytes = store.get(&key).await?.ok_or_else(|| {
                    CompactError::Format(format!("segment file {key} is missing from the store"))
                })?;
                let space = space.clone();
                let read = tokio::task::spawn_blocking(move || {
                    segment::read_vectors(&bytes, &space, &with)
                })
                .await
                .map_err(|e| IndexError::Segment(format!("vector read task: {e}")))??;
                read.into_iter()
            }
            _ => Vec::new().into_iter(),
        };
        for d in rows {
            let (vector, prose) = if d.has_vector {
                let vector = vectors.next().flatten();
                (
                    vector,
                    if views {
                        vectors.next().flatten()
                    } else {
                        None
                    },
                )
            } else {
                (None, None)
            };
            if d.has_vector && vector.is_none() {
                return Err(CompactError::Format(format!(
                    "segment {} lists a vector for doc {} that its vector index does not hold: run `trawl compact --full`",
                    seg.dir, d.ord
                )));
            }
            out.push(LiveDoc {
                doc: d,
                vector,
                prose,
            });
        }
    }
    Ok(out)
}

/// A shard rebuilt into one segment from all its live docs.
async fn rebuild(
    store: &Store,
    shard: u32,
    shard_dir: &str,
    docs: Vec<LiveDoc>,
    space: Option<&Space>,
    opts: &BuildOptions,
    stats: &mut BuildStats,
) -> Result<ShardEntry, CompactError> {
    let seg = write_segment(
        store,
        &format!("{shard_dir}/seg=0"),
        docs,
        space,
        opts.threads,
    )
    .await?;
    stats.written(&seg);
    stats.shards_rebuilt += 1;
    Ok(ShardEntry {
        shard,
        live_docs: seg.docs,
        segments: vec![seg],
        tombstones: None,
    })
}

/// The order of a segment's docs: by repository, path, line, then chunk id (so a shard
/// merged from kept and new docs is laid out as one built from the whole set).
fn doc_order(a: &LiveDoc, b: &LiveDoc) -> std::cmp::Ordering {
    (
        a.doc.repo_id.as_str(),
        &a.doc.path,
        a.doc.start_line,
        a.doc.chunk_id,
    )
        .cmp(&(
            b.doc.repo_id.as_str(),
            &b.doc.path,
            b.doc.start_line,
            b.doc.chunk_id,
        ))
}

fn key_of(d: &LiveDoc) -> DocKey {
    DocKey {
        chunk_id: d.doc.chunk_id,
        content_hash: d.doc.content_hash,
        has_vector: d.vector.is_some(),
        links: trawl_index::docs::links_digest(
            d.doc.members.iter().map(String::as_str),
            d.doc.call_ids.iter().copied(),
        ),
    }
}

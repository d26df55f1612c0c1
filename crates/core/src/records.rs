//! Versioned records and events, with their Arrow schemas.
//!
//! Every record is a plain serde struct; its Arrow schema is written out by hand beside it (so
//! column types and nullability are a decision, not an accident of inference) and the two are
//! converted with `serde_arrow`. A test round-trips each record through its schema, so the
//! struct and the schema cannot drift.
//!
//! Events travel on the bus as JSON; rows are stored as Parquet (zstd). Each carries a
//! `schema_version`: readers refuse versions newer than they know, with a message saying so.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use bytes::Bytes;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::Error;
use crate::ids::{BlobId, ChunkId, CommitId, ContentHash, RepoId, RunId};

/// Version of [`FileEvent`] written by this release.
pub const FILE_EVENT_VERSION: u32 = 1;
/// Version of [`ManifestRow`] written by this release.
pub const MANIFEST_VERSION: u32 = 1;
/// Version of [`ChunkRecord`] written by this release.
pub const CHUNK_VERSION: u32 = 1;
/// Version of [`EmbeddingRecord`] written by this release.
pub const EMBEDDING_VERSION: u32 = 1;
/// Version of [`ChunkPartEvent`] written by this release.
pub const CHUNK_PART_VERSION: u32 = 1;
/// Version of [`EmbeddedEvent`] written by this release.
pub const EMBEDDED_VERSION: u32 = 1;
/// Version of [`DeadLetter`] written by this release.
pub const DEAD_LETTER_VERSION: u32 = 1;
/// Version of [`RepoState`] written by this release.
pub const REPO_STATE_VERSION: u32 = 1;

/// What happened to a file between two commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    /// Added, modified or renamed: (re)chunk it.
    Upsert,
    /// Deleted, or no longer indexable: its chunks leave the live set with the next manifest.
    Delete,
}

/// One changed file, published by the fetcher on the `files` topic (JSON), keyed by repo.
///
/// Content travels inline (it is never larger than the fetcher's size cap). A rename is one
/// `upsert` of the new path with `renamed_from` set: the old path's chunks drop out because
/// the commit's manifest no longer names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEvent {
    pub schema_version: u32,
    pub op: FileOp,
    pub repo: RepoId,
    pub commit: CommitId,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
    /// `None` for deletes.
    #[serde(default)]
    pub blob: Option<BlobId>,
    #[serde(default)]
    pub language: Option<String>,
    /// Size of the file in git, in bytes (before any re-encoding).
    pub size: u64,
    /// The encoding the bytes were decoded from when it was not UTF-8 (`UTF-16LE`, `Shift_JIS`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// The file as UTF-8 text; `None` for deletes.
    #[serde(default)]
    pub content: Option<String>,
    pub run: RunId,
}

impl FileEvent {
    pub fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a FileEvent always serialises"))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let ev: Self = serde_json::from_slice(bytes).map_err(|e| Error::Record {
            what: "file event",
            reason: e.to_string(),
        })?;
        check_version("file event", ev.schema_version, FILE_EVENT_VERSION)?;
        Ok(ev)
    }
}

/// A Parquet part of chunks is durable in the store: published by the chunk worker on the
/// `chunks` topic (JSON), keyed by repo, for the embed worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkPartEvent {
    pub schema_version: u32,
    pub repo: RepoId,
    pub commit: CommitId,
    pub path: String,
    pub blob: BlobId,
    /// The part's object key in the store.
    pub key: String,
    pub chunks: u32,
    pub run: RunId,
}

impl ChunkPartEvent {
    pub fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a ChunkPartEvent always serialises"))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let ev: Self = serde_json::from_slice(bytes).map_err(|e| Error::Record {
            what: "chunk part event",
            reason: e.to_string(),
        })?;
        check_version("chunk part event", ev.schema_version, CHUNK_PART_VERSION)?;
        Ok(ev)
    }
}

/// One chunk part whose chunks all have vectors (or were dead-lettered), published by the
/// embed worker on the `embedded` topic once the vectors are durable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedEvent {
    pub schema_version: u32,
    pub repo: RepoId,
    pub commit: CommitId,
    pub path: String,
    /// The chunk part's key.
    pub chunks_key: String,
    /// The embedding part holding this part's new vectors; `None` when every vector was
    /// already in the store.
    pub embeddings_key: Option<String>,
    pub model: String,
    pub dims: u32,
    pub dtype: String,
    pub chunks: u32,
    /// Chunks whose vector was already in the store (or earlier in the same part).
    pub cache_hits: u32,
    /// Chunks that could not be embedded and went to the dead-letter topic.
    pub dead_lettered: u32,
    pub run: RunId,
}

impl EmbeddedEvent {
    pub fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("an EmbeddedEvent always serialises"))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let ev: Self = serde_json::from_slice(bytes).map_err(|e| Error::Record {
            what: "embedded event",
            reason: e.to_string(),
        })?;
        check_version("embedded event", ev.schema_version, EMBEDDED_VERSION)?;
        Ok(ev)
    }
}

/// A message no stage could process, on the `dead-letters` topic with its error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetter {
    pub schema_version: u32,
    /// The topic it came from.
    pub topic: String,
    pub key: String,
    /// What went wrong, for a person.
    pub error: String,
    pub attempts: u32,
    /// The original payload, as text when it was UTF-8, else lossily.
    pub payload: String,
}

impl DeadLetter {
    pub fn to_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a DeadLetter always serialises"))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let letter: Self = serde_json::from_slice(bytes).map_err(|e| Error::Record {
            what: "dead letter",
            reason: e.to_string(),
        })?;
        check_version("dead letter", letter.schema_version, DEAD_LETTER_VERSION)?;
        Ok(letter)
    }
}

/// Whether a file of a commit is indexed, and if not why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRow {
    pub schema_version: u32,
    pub repo_id: RepoId,
    pub commit: CommitId,
    pub path: String,
    pub blob: Option<BlobId>,
    pub language: Option<String>,
    pub size: u64,
    /// `None` when the file is indexed; otherwise the skip reason (`binary`, `too-large`,
    /// `secret`, `vendored`, …).
    pub skip_reason: Option<String>,
    pub encoding: Option<String>,
}

impl ManifestRow {
    pub fn schema() -> SchemaRef {
        schema(vec![
            Field::new("schema_version", DataType::UInt32, false),
            Field::new("repo_id", DataType::Utf8, false),
            Field::new("commit", DataType::Utf8, false),
            Field::new("path", DataType::Utf8, false),
            Field::new("blob", DataType::Utf8, true),
            Field::new("language", DataType::Utf8, true),
            Field::new("size", DataType::UInt64, false),
            Field::new("skip_reason", DataType::Utf8, true),
            Field::new("encoding", DataType::Utf8, true),
        ])
    }
}

/// One retrievable unit, as ARCHITECTURE.md describes it. Filled in by the chunk worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub schema_version: u32,
    pub chunk_id: ChunkId,
    pub content_hash: ContentHash,
    pub repo_id: RepoId,
    pub path: String,
    pub blob: BlobId,
    pub language: String,
    /// function, method, class, class_skeleton, module, interface, impl, section, window, toc…
    pub kind: crate::kind::ChunkKind,
    pub symbol: Option<String>,
    pub qualified_name: Option<String>,
    /// Generated: path · scope chain · imports · language.
    pub header: String,
    /// The code only, as it is in the file.
    pub text: String,
    pub start_line: u32,
    pub end_line: u32,
    pub start_byte: u64,
    pub end_byte: u64,
    pub parent_id: Option<ChunkId>,
    pub children_ids: Vec<ChunkId>,
    pub calls: Vec<String>,
    pub imports: Vec<String>,
    /// The other names the chunk defines, qualified: the definitions inside a container that
    /// stays one chunk (a small class or impl), the named constants of module code, the other
    /// targets of a JavaScript assignment chain (`req.header` of `req.get = req.header =
    /// function …`). Each finds the chunk as its own name does. Absent from parts written
    /// before it existed.
    #[serde(default)]
    pub members: Vec<String>,
    pub token_estimate: u32,
    pub chunker_version: String,
}

/// The line of a chunk's header that lists its file's imports.
pub const IMPORTS_LINE: &str = "imports: ";
/// The line every chunk header ends with.
pub const LANGUAGE_LINE: &str = "language: ";

/// What a chunk's header says after its place when the chunk is one part of a definition
/// split at statements: ` (part 2/3)`.
pub fn part_label(i: u32, n: u32) -> String {
    format!(" (part {i}/{n})")
}

/// The part of a split definition a chunk is, read from its header's first line
/// ([`part_label`]); `None` for a chunk that is not a part.
pub fn header_part(header: &str) -> Option<(u32, u32)> {
    let first = header.lines().next()?;
    let label = first.strip_suffix(')')?;
    let (_, nums) = label.rsplit_once(" (part ")?;
    let (i, n) = nums.split_once('/')?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

/// Whether a chunk is the second or a later part of a definition split at statements: the
/// same definition as its first part, not a namesake.
pub fn is_later_part(header: &str) -> bool {
    header_part(header).is_some_and(|(i, _)| i > 1)
}

/// `indexed` (a chunk's [`ChunkRecord::indexed_text`]) without its header's imports line: for
/// a small embedding model, a file's imports (up to 400 characters, the same for every chunk
/// of the file) take its window and pull every chunk of the file toward one vector. Only a
/// line of the header is removed (the lines before its `language: ` line); any other text,
/// a query or a sentence, is returned as it is.
pub fn without_imports(indexed: &str) -> std::borrow::Cow<'_, str> {
    let mut at = 0;
    let mut imports = None;
    for (i, line) in indexed.split_inclusive('\n').enumerate().take(5) {
        if line.starts_with(LANGUAGE_LINE) {
            if let Some((a, b)) = imports {
                let mut out = String::with_capacity(indexed.len());
                out.push_str(&indexed[..a]);
                out.push_str(&indexed[b..]);
                return out.into();
            }
            break;
        }
        if i > 0 && line.starts_with(IMPORTS_LINE) {
            imports = Some((at, at + line.len()));
        }
        at += line.len();
    }
    indexed.into()
}

impl ChunkRecord {
    /// What the embedding and BM25 see: the generated header, a newline, then the code.
    pub fn indexed_text(&self) -> String {
        format!("{}\n{}", self.header, self.text)
    }

    /// The key the vector of the chunk's prose view is stored under ([`crate::prose::key`]);
    /// `None` for prose, tables of contents and commits, which have no view. Cheap: a cache
    /// is asked for this key before the view is made.
    pub fn prose_key(&self) -> Option<ContentHash> {
        crate::prose::has_view(self.kind)
            .then(|| crate::prose::key(&self.content_hash))
            .flatten()
    }

    /// The chunk's prose view ([`crate::prose::view`]); `None` for a kind that has none.
    pub fn prose_view(&self) -> Option<String> {
        let name = self.qualified_name.as_deref().or(self.symbol.as_deref());
        crate::prose::view(self.kind, name, &self.path, &self.text)
    }

    pub fn schema() -> SchemaRef {
        let list = |name: &str| {
            Field::new(
                name,
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))),
                false,
            )
        };
        schema(vec![
            Field::new("schema_version", DataType::UInt32, false),
            Field::new("chunk_id", DataType::Utf8, false),
            Field::new("content_hash", DataType::Utf8, false),
            Field::new("repo_id", DataType::Utf8, false),
            Field::new("path", DataType::Utf8, false),
            Field::new("blob", DataType::Utf8, false),
            Field::new("language", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("symbol", DataType::Utf8, true),
            Field::new("qualified_name", DataType::Utf8, true),
            Field::new("header", DataType::Utf8, false),
            Field::new("text", DataType::Utf8, false),
            Field::new("start_line", DataType::UInt32, false),
            Field::new("end_line", DataType::UInt32, false),
            Field::new("start_byte", DataType::UInt64, false),
            Field::new("end_byte", DataType::UInt64, false),
            Field::new("parent_id", DataType::Utf8, true),
            list("children_ids"),
            list("calls"),
            list("imports"),
            list("members"),
            Field::new("token_estimate", DataType::UInt32, false),
            Field::new("chunker_version", DataType::Utf8, false),
        ])
    }
}

/// One vector, keyed by `(model, dims, dtype, content_hash)`. Filled in by the embed worker.
///
/// A part holds one vector space (one model, dims and dtype), so the vector column is a
/// fixed-size list of `dims` floats, or for the integer and bit-packed dtypes a fixed-size
/// binary of `dims` bytes (`int8`, `uint8`) or `dims / 8` bytes (`binary`, `ubinary`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRecord {
    pub schema_version: u32,
    pub content_hash: ContentHash,
    pub model: String,
    pub dims: u32,
    /// `float`, `int8`, `uint8`, `binary`, `ubinary`.
    pub dtype: String,
    /// Set for `float`.
    pub vector: Option<Vec<f32>>,
    /// Set for the integer and bit-packed types.
    pub vector_bytes: Option<Vec<u8>>,
    /// Tokens this input cost when it was embedded (the provider's count where it gives one
    /// per input, else the estimate).
    pub tokens: u32,
}

impl EmbeddingRecord {
    /// The columns every part has, whatever its vector space: what `trawl sql` shows.
    pub fn schema() -> SchemaRef {
        schema(Self::base_fields())
    }

    fn base_fields() -> Vec<Field> {
        vec![
            Field::new("schema_version", DataType::UInt32, false),
            Field::new("content_hash", DataType::Utf8, false),
            Field::new("model", DataType::Utf8, false),
            Field::new("dims", DataType::UInt32, false),
            Field::new("dtype", DataType::Utf8, false),
            Field::new("tokens", DataType::UInt32, false),
        ]
    }

    /// The schema of a part in one vector space.
    pub fn schema_for(dims: u32, dtype: &str) -> SchemaRef {
        let mut fields = Self::base_fields();
        fields.push(Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, false)),
                dims as i32,
            ),
            true,
        ));
        let width = match dtype {
            "binary" | "ubinary" => dims.div_ceil(8),
            _ => dims,
        };
        fields.push(Field::new(
            "vector_bytes",
            DataType::FixedSizeBinary(width as i32),
            true,
        ));
        schema(fields)
    }
}

/// The stage a run report (`runs/<run>.json`) is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Fetch,
    Embed,
    Compact,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Stage {
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Embed => "embed",
            Stage::Compact => "compact",
        }
    }
}

/// What every run report begins with, whatever its stage: read this to find reports, then
/// the stage's own type. Timestamps are RFC 3339 in the file and time values here.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct RunHead {
    pub run: RunId,
    pub stage: Stage,
    #[serde(default, deserialize_with = "rfc3339::option")]
    pub finished_at: Option<std::time::SystemTime>,
}

/// RFC 3339 timestamps as [`std::time::SystemTime`].
pub mod rfc3339 {
    use serde::{Deserialize, Deserializer};

    /// An optional RFC 3339 string; an unreadable one is an error.
    pub fn option<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::SystemTime>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => humantime::parse_rfc3339_weak(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }

    /// Parses one RFC 3339 string.
    pub fn parse(s: &str) -> Option<std::time::SystemTime> {
        humantime::parse_rfc3339_weak(s).ok()
    }
}

/// `repos/list.json`: the repositories the organisation indexes, as the last fetch run over
/// the whole list saw them. The live set is these repositories only: one that leaves the
/// list leaves the index at the next compaction (its objects are collected by retention).
/// Absent in stores written before it existed: then every recorded state counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoList {
    pub schema_version: u32,
    /// The fetch run that wrote it.
    pub run: RunId,
    /// RFC 3339.
    pub written_at: String,
    pub repos: Vec<RepoId>,
}

/// Version of [`RepoList`] written by this release.
pub const REPO_LIST_VERSION: u32 = 1;

/// One commit of a repository's history, recorded by the fetcher
/// (`commits/repo=<key>/<head>.json`, one file of these per fetched head): the message says
/// why code changed; the compactor indexes it as a `commit` doc.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRecord {
    pub repo_id: RepoId,
    pub commit: CommitId,
    /// Author time, RFC 3339.
    pub authored_at: String,
    /// The message, secrets redacted.
    pub message: String,
    /// Paths the commit changed against its first parent (at most 100).
    pub paths: Vec<String>,
    /// The lines it changed in each text file of `paths` (files over 1 MiB, binary ones and
    /// files with more than 200 hunks have none). Absent from records written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hunks: Vec<FileHunks>,
}

/// The hunks of one file in one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHunks {
    pub path: String,
    /// In file order.
    pub hunks: Vec<Hunk>,
}

/// One change to a file, as `git diff -U0` prints it: `old_lines` lines of the file before,
/// from `old_start`, became `new_lines` lines after, from `new_start` (1-based). A count of
/// 0 is a pure insertion (old side: after line `old_start`) or deletion (new side: after
/// line `new_start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    pub old_start: u32,
    pub old_lines: u32,
    pub new_start: u32,
    pub new_lines: u32,
}

/// `repos/<repo_id>/state.json`: what the fetcher last indexed. Written only after every event
/// of that commit was acknowledged by the bus.
///
/// Unlike the bus's events, unknown fields are ignored: a field is only ever added here as
/// optional, so a binary rolled back past one still reads the state a newer one wrote (and
/// writes it back without the field, which the newer binary reads as "not kept", as for a
/// state written before the field existed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoState {
    pub schema_version: u32,
    pub repo: RepoId,
    /// The remote without credentials.
    pub url: String,
    pub branch: String,
    pub last_commit: CommitId,
    pub last_run: RunId,
    /// RFC 3339.
    pub indexed_at: String,
    /// The chunker version (the chunk workers' part version) the repository's files were last
    /// sent to be chunked for. A fetch for another version sends every indexed file again, so
    /// that an upgraded chunker's chunks reach the index. `None`: written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunker_version: Option<String>,
}

fn schema(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// A record type with a fixed Arrow schema.
pub trait Row: Serialize + DeserializeOwned {
    const NAME: &'static str;
    const VERSION: u32;
    fn arrow_schema() -> SchemaRef;
    fn version(&self) -> u32;
    /// The schema these rows are written with; only records whose schema depends on their
    /// contents (the vector width) differ from [`Row::arrow_schema`].
    fn schema_of(rows: &[Self]) -> SchemaRef {
        let _ = rows;
        Self::arrow_schema()
    }
}

macro_rules! row {
    ($t:ty, $name:literal, $v:ident) => {
        impl Row for $t {
            const NAME: &'static str = $name;
            const VERSION: u32 = $v;
            fn arrow_schema() -> SchemaRef {
                <$t>::schema()
            }
            fn version(&self) -> u32 {
                self.schema_version
            }
        }
    };
}
row!(ManifestRow, "manifest", MANIFEST_VERSION);
row!(ChunkRecord, "chunk", CHUNK_VERSION);
impl Row for EmbeddingRecord {
    const NAME: &'static str = "embedding";
    const VERSION: u32 = EMBEDDING_VERSION;
    fn arrow_schema() -> SchemaRef {
        Self::schema()
    }
    fn version(&self) -> u32 {
        self.schema_version
    }
    fn schema_of(rows: &[Self]) -> SchemaRef {
        match rows.first() {
            Some(r) => Self::schema_for(r.dims, &r.dtype),
            None => Self::schema_for(0, "float"),
        }
    }
}

fn fields_of(schema: &SchemaRef) -> Vec<FieldRef> {
    schema.fields().iter().cloned().collect()
}

/// Rows → one Arrow batch in the record's schema.
pub fn to_batch<R: Row>(rows: &[R]) -> Result<RecordBatch, Error> {
    serde_arrow::to_record_batch(&fields_of(&R::schema_of(rows)), &rows).map_err(|e| {
        Error::Record {
            what: R::NAME,
            reason: e.to_string(),
        }
    })
}

/// An Arrow batch → rows, refusing rows written by a newer release.
pub fn from_batch<R: Row>(batch: &RecordBatch) -> Result<Vec<R>, Error> {
    let rows: Vec<R> = serde_arrow::from_record_batch(batch).map_err(|e| Error::Record {
        what: R::NAME,
        reason: e.to_string(),
    })?;
    for r in &rows {
        check_version(R::NAME, r.version(), R::VERSION)?;
    }
    Ok(rows)
}

/// Rows per row group of the Parquet files trawl writes: a scan's unit of work, and the most
/// rows a writer holds in Arrow form at once.
pub const PARQUET_ROW_GROUP: usize = 64 * 1024;

/// How trawl writes Parquet: ZSTD, statistics on, [`PARQUET_ROW_GROUP`] rows per row group.
pub fn parquet_properties() -> parquet::file::properties::WriterProperties {
    writer_properties(PARQUET_ROW_GROUP)
}

/// ZSTD, statistics on, at most `row_group` rows per row group.
fn writer_properties(row_group: usize) -> parquet::file::properties::WriterProperties {
    use parquet::basic::{Compression, ZstdLevel};
    parquet::file::properties::WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(row_group))
        .build()
}

/// Rows per row group of the live `chunks` table: a few megabytes of text, small enough
/// that a night which changed a few repositories re-encodes only the row groups holding
/// them and copies the others as they are (engines scan row groups in parallel either way).
pub const TABLE_ROW_GROUP: usize = 8 * 1024;

/// How the live `chunks` table is written: [`parquet_properties`], with [`TABLE_ROW_GROUP`]
/// rows per row group.
pub fn table_properties() -> parquet::file::properties::WriterProperties {
    writer_properties(TABLE_ROW_GROUP)
}

/// Rows → a Parquet file (zstd, statistics on), ready for the store.
pub fn to_parquet<R: Row>(rows: &[R]) -> Result<Bytes, Error> {
    to_parquet_with(rows, parquet_properties())
}

/// Rows → a Parquet file written with `props`.
pub fn to_parquet_with<R: Row>(
    rows: &[R],
    props: parquet::file::properties::WriterProperties,
) -> Result<Bytes, Error> {
    use parquet::arrow::ArrowWriter;

    let schema = R::schema_of(rows);
    let err = |e: parquet::errors::ParquetError| Error::Record {
        what: R::NAME,
        reason: e.to_string(),
    };
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props)).map_err(err)?;
    for part in rows.chunks(PARQUET_ROW_GROUP) {
        w.write(&to_batch(part)?).map_err(err)?;
    }
    w.close().map_err(err)?;
    Ok(Bytes::from(buf))
}

/// A Parquet file → rows.
pub fn from_parquet<R: Row>(bytes: Bytes) -> Result<Vec<R>, Error> {
    let mut out = Vec::new();
    for batch in parquet_batches(R::NAME, bytes)? {
        out.extend(from_batch::<R>(&batch)?);
    }
    Ok(out)
}

/// The record batches of a Parquet file of `what` (named in errors), as Arrow columns: for a
/// reader that turns rows into values only when it needs them.
pub fn parquet_batches(what: &'static str, bytes: Bytes) -> Result<Vec<RecordBatch>, Error> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let err = |e: &dyn std::fmt::Display| Error::Record {
        what,
        reason: e.to_string(),
    };
    ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| err(&e))?
        .build()
        .map_err(|e| err(&e))?
        .map(|b| b.map_err(|e| err(&e)))
        .collect()
}

/// One UTF-8 column of a Parquet file, without reading the others (e.g. the content hashes
/// of an embedding part, not its vectors).
pub fn read_string_column(bytes: Bytes, column: &str) -> Result<Vec<String>, Error> {
    use arrow_array::{Array, StringArray};
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let err = |e: &dyn std::fmt::Display| Error::Record {
        what: "parquet column",
        reason: format!("{column}: {e}"),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| err(&e))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), [column]);
    let reader = builder.with_projection(mask).build().map_err(|e| err(&e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| err(&e))?;
        let col = batch
            .column_by_name(column)
            .ok_or_else(|| err(&"no such column"))?;
        let strings = col
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| err(&"not a UTF-8 column"))?;
        out.extend(
            (0..strings.len())
                .filter(|&i| strings.is_valid(i))
                .map(|i| strings.value(i).to_owned()),
        );
    }
    Ok(out)
}

fn check_version(what: &'static str, found: u32, known: u32) -> Result<(), Error> {
    if found > known {
        return Err(Error::Record {
            what,
            reason: format!(
                "schema version {found} was written by a newer trawl (this one reads up to \
                 {known}): upgrade trawl"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_headers_imports_line_is_left_out() {
        let with = "src/a.py · function f\nimports: import os; import sys\nlanguage: python\ndef f(): pass";
        assert_eq!(
            without_imports(with),
            "src/a.py · function f\nlanguage: python\ndef f(): pass"
        );
        let signature =
            "a.go · function F (part 2/3)\nsignature: func F()\nimports: fmt\nlanguage: go\nx := 1";
        assert_eq!(
            without_imports(signature),
            "a.go · function F (part 2/3)\nsignature: func F()\nlanguage: go\nx := 1"
        );
        // No imports line, or text that is no chunk: as it is.
        for same in [
            "a.rs · fn f\nlanguage: rust\nfn f() {}",
            "imports: x\nlanguage: y",
            "how are imports: resolved?",
            "a.yml · text\nlanguage: yaml\nimports: kept\n",
        ] {
            assert_eq!(without_imports(same), same);
        }
    }
    use crate::hash;

    fn repo() -> RepoId {
        RepoId::parse("github.com/pallets/flask").unwrap()
    }

    fn commit() -> CommitId {
        "a".repeat(40).parse().unwrap()
    }

    pub(crate) fn sample_chunk() -> ChunkRecord {
        let id = hash::chunk_id(&repo(), "app.py", "function", "run", 0);
        ChunkRecord {
            schema_version: CHUNK_VERSION,
            chunk_id: id,
            content_hash: hash::content_hash("1", "h", "def run(): pass"),
            repo_id: repo(),
            path: "app.py".into(),
            blob: "b".repeat(40).parse().unwrap(),
            language: "python".into(),
            kind: crate::kind::ChunkKind::Function,
            symbol: Some("run".into()),
            qualified_name: Some("app.run".into()),
            header: "app.py · function run · python".into(),
            text: "def run(): pass".into(),
            start_line: 1,
            end_line: 1,
            start_byte: 0,
            end_byte: 15,
            parent_id: None,
            children_ids: vec![id],
            calls: vec!["print".into()],
            imports: vec![],
            members: vec!["app.Runner.run".into()],
            token_estimate: 5,
            chunker_version: "1".into(),
        }
    }

    #[test]
    fn a_parts_number_is_read_back_from_its_header() {
        let h = format!("a.go · function F{}\nsignature: func F()", part_label(2, 3));
        assert_eq!(header_part(&h), Some((2, 3)));
        assert!(is_later_part(&h));
        let first = format!("a.go · function F{}", part_label(1, 3));
        assert!(!is_later_part(&first));
        // A chunk whole, and a name that merely ends like a label, are no part.
        assert_eq!(header_part("a.go · function F\nlanguage: go"), None);
        assert_eq!(header_part("docs/x.md · Setup (part one)"), None);
    }

    #[test]
    fn chunk_parts_written_with_the_kind_as_text_read_as_the_same_kinds() {
        use arrow_array::{Array, StringArray};
        // The kind column is text holding the kind's name, as when the field was a String.
        let mut c = sample_chunk();
        c.kind = crate::kind::ChunkKind::ClassSkeleton;
        let batch = to_batch(std::slice::from_ref(&c)).unwrap();
        let at = batch.schema().index_of("kind").unwrap();
        let kinds = batch
            .column(at)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(kinds.value(0), "class_skeleton");
        // A Parquet file whose kind column was written from a String reads back typed.
        let write = |kind: &str| {
            let mut columns = batch.columns().to_vec();
            columns[at] = Arc::new(StringArray::from(vec![kind.to_owned()]));
            let old = RecordBatch::try_new(batch.schema(), columns).unwrap();
            let mut buf = Vec::new();
            let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, old.schema(), None).unwrap();
            w.write(&old).unwrap();
            w.close().unwrap();
            Bytes::from(buf)
        };
        let back: Vec<ChunkRecord> = from_parquet(write("module_code")).unwrap();
        assert_eq!(back[0].kind, crate::kind::ChunkKind::Code);
        assert_eq!(back[0].text, c.text);
        // A kind this release does not know is refused, naming it.
        let err = from_parquet::<ChunkRecord>(write("lambda")).unwrap_err();
        assert!(err.to_string().contains("lambda"), "{err}");
    }

    #[test]
    fn chunk_parts_written_before_members_existed_still_read() {
        let c = sample_chunk();
        let batch = to_batch(std::slice::from_ref(&c)).unwrap();
        let at = batch.schema().index_of("members").unwrap();
        let mut old = batch.clone();
        old.remove_column(at);
        let back: Vec<ChunkRecord> = from_batch(&old).unwrap();
        assert_eq!(back[0].members, Vec::<String>::new());
        assert_eq!(back[0].qualified_name, c.qualified_name);
    }

    #[test]
    fn every_record_round_trips_through_its_schema_and_parquet() {
        let m = ManifestRow {
            schema_version: MANIFEST_VERSION,
            repo_id: repo(),
            commit: commit(),
            path: "a/b.py".into(),
            blob: None,
            language: Some("python".into()),
            size: 3,
            skip_reason: Some("binary".into()),
            encoding: None,
        };
        assert_eq!(
            from_parquet::<ManifestRow>(to_parquet(std::slice::from_ref(&m)).unwrap()).unwrap(),
            [m]
        );
        let c = sample_chunk();
        assert_eq!(
            from_parquet::<ChunkRecord>(to_parquet(std::slice::from_ref(&c)).unwrap()).unwrap(),
            [c]
        );
        let e = EmbeddingRecord {
            schema_version: EMBEDDING_VERSION,
            content_hash: hash::content_hash("1", "", "x"),
            model: "voyage-code-3".into(),
            dims: 2,
            dtype: "float".into(),
            vector: Some(vec![0.6, 0.8]),
            vector_bytes: None,
            tokens: 1,
        };
        let parquet = to_parquet(std::slice::from_ref(&e)).unwrap();
        assert_eq!(
            read_string_column(parquet.clone(), "content_hash").unwrap(),
            [e.content_hash.to_string()]
        );
        let back = from_parquet::<EmbeddingRecord>(parquet).unwrap();
        assert_eq!(back, [e]);
        let batch = to_batch(&back).unwrap();
        assert_eq!(
            batch
                .schema()
                .field_with_name("vector")
                .unwrap()
                .data_type(),
            &DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, false)), 2),
            "vectors are stored as fixed-size lists"
        );
        let bits = EmbeddingRecord {
            dims: 16,
            dtype: "binary".into(),
            vector: None,
            vector_bytes: Some(vec![0b1010_0000, 0xff]),
            ..back[0].clone()
        };
        let parquet = to_parquet(std::slice::from_ref(&bits)).unwrap();
        assert_eq!(from_parquet::<EmbeddingRecord>(parquet).unwrap(), [bits]);
        assert_eq!(
            to_batch(&[sample_chunk()]).unwrap().schema(),
            ChunkRecord::schema()
        );
    }

    #[test]
    fn newer_versions_are_refused_with_a_clear_message() {
        let mut c = sample_chunk();
        c.schema_version = CHUNK_VERSION + 1;
        let err = from_parquet::<ChunkRecord>(to_parquet(&[c]).unwrap()).unwrap_err();
        assert!(err.to_string().contains("upgrade trawl"), "{err}");
        let ev = serde_json::json!({
            "schema_version": 99, "op": "delete", "repo": "github.com/a/b",
            "commit": "a".repeat(40), "path": "x", "size": 0, "run": "r1"
        });
        let err = FileEvent::from_json(ev.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("newer trawl"), "{err}");
    }

    #[test]
    fn a_repo_state_written_by_a_newer_or_older_binary_still_reads() {
        // A rolled-back binary meets a state.json with a field added after it was built.
        let newer = serde_json::json!({
            "schema_version": REPO_STATE_VERSION, "repo": "github.com/a/b",
            "url": "https://github.com/a/b", "branch": "main", "last_commit": "a".repeat(40),
            "last_run": "r1", "indexed_at": "2026-12-04T00:00:00Z", "chunker_version": "3",
            "field_of_a_later_release": {"any": ["shape"]}
        });
        let s: RepoState = serde_json::from_value(newer.clone()).unwrap();
        assert_eq!(s.chunker_version.as_deref(), Some("3"));
        assert_eq!(s.last_commit, commit());
        // Written back, it keeps what it knows; a state from before chunker_version reads as
        // "not kept".
        let back = serde_json::to_value(&s).unwrap();
        assert!(back.get("field_of_a_later_release").is_none());
        let mut older = newer;
        let o = older.as_object_mut().unwrap();
        o.remove("chunker_version");
        o.remove("field_of_a_later_release");
        let s: RepoState = serde_json::from_value(older).unwrap();
        assert_eq!(s.chunker_version, None);
        // A required field missing is still an error, naming it.
        let err =
            serde_json::from_value::<RepoState>(serde_json::json!({"repo": "github.com/a/b"}))
                .unwrap_err();
        assert!(err.to_string().contains("schema_version"), "{err}");
    }

    #[test]
    fn file_events_are_json_with_lowercase_ops() {
        let ev = FileEvent {
            schema_version: FILE_EVENT_VERSION,
            op: FileOp::Upsert,
            repo: repo(),
            commit: commit(),
            path: "x.py".into(),
            renamed_from: Some("y.py".into()),
            blob: Some("c".repeat(40).parse().unwrap()),
            language: Some("python".into()),
            size: 1,
            encoding: None,
            content: Some("x".into()),
            run: RunId::new(),
        };
        let j = ev.to_json();
        assert!(
            std::str::from_utf8(&j)
                .unwrap()
                .contains("\"op\":\"upsert\"")
        );
        assert_eq!(FileEvent::from_json(&j).unwrap(), ev);
    }
}

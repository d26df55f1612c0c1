//! The doc store: one row per indexed chunk of a segment, with what a result and graph
//! expansion need (metadata, text, and parent/children/callees as chunk ids).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use trawl_core::ids::{ChunkId, CommitId, ContentHash, RepoId};
use trawl_core::kind::ChunkKind;
use trawl_core::records::{ChunkRecord, Row};

/// Version of [`DocRow`] written by this release.
pub const DOC_VERSION: u32 = 1;

/// One indexed chunk. `ord` is its key in the segment's vector and text indexes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocRow {
    pub schema_version: u32,
    pub ord: u64,
    pub chunk_id: ChunkId,
    pub content_hash: ContentHash,
    /// Whether the chunk is in the segment's vector index (else text-only, waiting for a
    /// vector).
    pub has_vector: bool,
    pub repo_id: RepoId,
    /// The commit the chunk was indexed at: its file is unchanged since.
    pub commit: CommitId,
    pub path: String,
    pub language: String,
    pub kind: ChunkKind,
    pub symbol: Option<String>,
    pub qualified_name: Option<String>,
    pub header: String,
    pub text: String,
    pub start_line: u32,
    pub end_line: u32,
    pub parent_id: Option<ChunkId>,
    pub children_ids: Vec<ChunkId>,
    /// Callee names as written.
    pub calls: Vec<String>,
    /// Callees resolved to definitions of the same repository (by name; at most 4 a name).
    pub call_ids: Vec<ChunkId>,
    pub imports: Vec<String>,
    /// The other names the chunk defines ([`trawl_core::records::ChunkRecord::members`]):
    /// the symbol map and the text index's symbol field find the chunk under them.
    /// Absent from segments written before it existed.
    #[serde(default)]
    pub members: Vec<String>,
    /// A commit message's doc: the lines it changed that the live files still hold, as
    /// [`touched_span`]s (`path#Lstart-Lend`). Empty for every other doc, and absent from
    /// segments written before it existed.
    #[serde(default)]
    pub touched: Vec<String>,
}

/// A span of lines a commit changed: `path#Lstart-Lend`.
pub fn touched_span(path: &str, start: u32, end: u32) -> String {
    format!("{path}#L{start}-L{end}")
}

/// The path and lines of a [`touched_span`]; `None` when it is not one.
pub fn parse_touched_span(span: &str) -> Option<(&str, u32, u32)> {
    let (path, lines) = span.rsplit_once("#L")?;
    let (a, b) = lines.split_once("-L")?;
    Some((path, a.parse().ok()?, b.parse().ok()?))
}

/// The line of a commit message's doc that names the definitions whose lines it changed, as
/// the files read now (`touched: fetch, Client.retry`).
const TOUCHED_LINE: &str = "touched: ";

/// The [`touched_names`] line for `names` (empty when there are none).
pub fn touched_line(names: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    format!("{TOUCHED_LINE}{}", names.join(", "))
}

/// The definitions a commit message's doc names on its [`touched_line`].
pub fn touched_names(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .find_map(|l| l.strip_prefix(TOUCHED_LINE))
        .into_iter()
        .flat_map(|l| l.split(", "))
        .filter(|n| !n.is_empty())
}

/// The header of a commit message's doc: `commit <short id> · <author time> · <summary>`.
pub fn commit_header(short: &str, authored_at: &str, summary: &str) -> String {
    format!("commit {short} · {authored_at} · {summary}")
}

/// The author time (RFC 3339) of a [`commit_header`].
pub fn commit_authored_at(header: &str) -> Option<&str> {
    header.strip_prefix("commit ")?.split(" · ").nth(1)
}

impl DocRow {
    pub fn schema() -> SchemaRef {
        let list = |name: &str| {
            Field::new(
                name,
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))),
                false,
            )
        };
        Arc::new(Schema::new(vec![
            Field::new("schema_version", DataType::UInt32, false),
            Field::new("ord", DataType::UInt64, false),
            Field::new("chunk_id", DataType::Utf8, false),
            Field::new("content_hash", DataType::Utf8, false),
            Field::new("has_vector", DataType::Boolean, false),
            Field::new("repo_id", DataType::Utf8, false),
            Field::new("commit", DataType::Utf8, false),
            Field::new("path", DataType::Utf8, false),
            Field::new("language", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("symbol", DataType::Utf8, true),
            Field::new("qualified_name", DataType::Utf8, true),
            Field::new("header", DataType::Utf8, false),
            Field::new("text", DataType::Utf8, false),
            Field::new("start_line", DataType::UInt32, false),
            Field::new("end_line", DataType::UInt32, false),
            Field::new("parent_id", DataType::Utf8, true),
            list("children_ids"),
            list("calls"),
            list("call_ids"),
            list("imports"),
            list("members"),
            list("touched"),
        ]))
    }

    /// The doc of a chunk indexed at `commit` (`ord` and `call_ids` are set by the build).
    pub fn from_chunk(c: ChunkRecord, commit: CommitId, has_vector: bool) -> Self {
        Self {
            schema_version: DOC_VERSION,
            ord: 0,
            chunk_id: c.chunk_id,
            content_hash: c.content_hash,
            has_vector,
            repo_id: c.repo_id,
            commit,
            path: c.path,
            language: c.language,
            kind: c.kind,
            symbol: c.symbol,
            qualified_name: c.qualified_name,
            header: c.header,
            text: c.text,
            start_line: c.start_line,
            end_line: c.end_line,
            parent_id: c.parent_id,
            children_ids: c.children_ids,
            calls: c.calls,
            call_ids: Vec::new(),
            imports: c.imports,
            members: c.members,
            touched: Vec::new(),
        }
    }

    /// What identifies this doc's indexed content: a doc whose key changed is replaced.
    pub fn key(&self) -> DocKey {
        DocKey {
            chunk_id: self.chunk_id,
            content_hash: self.content_hash,
            has_vector: self.has_vector,
            links: links_digest(
                self.members.iter().map(String::as_str),
                self.call_ids.iter().copied(),
            ),
        }
    }
}

/// See [`DocRow::key`]. A doc's members and resolved callees are not part of its content hash
/// (they do not change what is embedded), but the symbol map and the call graph are built from
/// them: a doc whose members changed (a new chunker names more of them) or whose calls now
/// resolve otherwise (a callee was defined or removed elsewhere) is replaced, not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocKey {
    pub chunk_id: ChunkId,
    pub content_hash: ContentHash,
    pub has_vector: bool,
    /// [`links_digest`] of the doc's members and callees.
    pub links: u64,
}

/// A digest of a doc's members and resolved callees, compared within one build only (never
/// stored): 0 for none.
pub fn links_digest<'a>(
    members: impl IntoIterator<Item = &'a str>,
    call_ids: impl IntoIterator<Item = ChunkId>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut any = false;
    for m in members {
        m.hash(&mut h);
        any = true;
    }
    // Apart from the members: `["a"], []` and `[], ["a"]` differ.
    0xffu8.hash(&mut h);
    for c in call_ids {
        c.hash(&mut h);
        any = true;
    }
    if any { h.finish() } else { 0 }
}

impl Row for DocRow {
    const NAME: &'static str = "doc";
    const VERSION: u32 = DOC_VERSION;
    fn arrow_schema() -> SchemaRef {
        Self::schema()
    }
    fn version(&self) -> u32 {
        self.schema_version
    }
}

/// What opening a segment needs of each doc, read without its header and text: the symbol
/// map, the repositories and the call graph.
#[derive(Clone, Debug, Deserialize)]
pub struct DocKeys {
    pub ord: u64,
    pub chunk_id: ChunkId,
    pub repo_id: RepoId,
    pub kind: ChunkKind,
    pub symbol: Option<String>,
    pub qualified_name: Option<String>,
    #[serde(default)]
    pub members: Vec<String>,
    pub call_ids: Vec<ChunkId>,
}

/// The columns [`DocKeys`] reads.
const KEY_COLUMNS: [&str; 8] = [
    "ord",
    "chunk_id",
    "repo_id",
    "kind",
    "symbol",
    "qualified_name",
    "members",
    "call_ids",
];

/// A segment's doc store, open: the Parquet file's Arrow columns as read, each row made a
/// [`DocRow`] the first time it is asked for. Opening a generation then costs the columnar
/// decode and the few columns of [`DocKeys`], not a string for every header and text of the
/// corpus; a search builds the rows of its candidates only.
pub struct DocStore {
    batches: Vec<arrow_array::RecordBatch>,
    /// The first row of each batch, in the file's order.
    starts: Vec<usize>,
    /// By ord: the row in the file.
    row_of: Vec<u32>,
    /// Boxed: a row not read costs a pointer, not a whole row's fields.
    rows: Vec<std::sync::OnceLock<Box<DocRow>>>,
}

impl std::fmt::Debug for DocStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocStore")
            .field("docs", &self.rows.len())
            .finish_non_exhaustive()
    }
}

impl DocStore {
    /// Opens a `docs.parquet` (its bytes); with each doc's [`DocKeys`], by ord. The ords must
    /// be `0..n` (in any order).
    pub fn open(bytes: bytes::Bytes) -> Result<(Self, Vec<DocKeys>), crate::IndexError> {
        let bad = |m: String| crate::IndexError::Format(format!("doc store: {m}"));
        let batches = trawl_core::records::parquet_batches(DocRow::NAME, bytes)?;
        let mut starts = Vec::with_capacity(batches.len());
        let mut keys: Vec<DocKeys> = Vec::new();
        for b in &batches {
            starts.push(keys.len());
            let schema = b.schema();
            let cols: Vec<usize> = KEY_COLUMNS
                .iter()
                .filter_map(|c| schema.index_of(c).ok())
                .collect();
            let projected = b.project(&cols).map_err(|e| bad(e.to_string()))?;
            let rows: Vec<DocKeys> =
                serde_arrow::from_record_batch(&projected).map_err(|e| bad(e.to_string()))?;
            keys.extend(rows);
        }
        let n = keys.len();
        let mut row_of = vec![u32::MAX; n];
        for (row, k) in keys.iter().enumerate() {
            match row_of.get_mut(k.ord as usize) {
                Some(slot) if *slot == u32::MAX => *slot = row as u32,
                _ => {
                    return Err(bad(
                        "doc ords are not 0..n: rebuild with `trawl compact --full`".into(),
                    ));
                }
            }
        }
        // The ords are each of 0..n once: sorted, they are the positions.
        keys.sort_unstable_by_key(|k| k.ord);
        let store = Self {
            batches,
            starts,
            row_of,
            rows: (0..n).map(|_| std::sync::OnceLock::new()).collect(),
        };
        // The first row read now: a store whose rows cannot be read fails here, not in a search.
        if n > 0 {
            let first = store.read(0)?;
            let _ = store.rows[0].set(Box::new(first));
        }
        Ok((store, keys))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The doc of `ord`, built from its columns the first time. Panics when `ord` is out of
    /// range, as indexing a slice does.
    pub fn get(&self, ord: usize) -> &DocRow {
        self.rows[ord].get_or_init(|| {
            // The file's first row was read when it opened, so every row has the same,
            // readable, columns.
            Box::new(
                self.read(ord)
                    .unwrap_or_else(|e| panic!("doc {ord} of a segment is unreadable: {e}")),
            )
        })
    }

    /// Every doc, by ord.
    pub fn iter(&self) -> impl Iterator<Item = &DocRow> {
        (0..self.len()).map(|o| self.get(o))
    }

    fn read(&self, ord: usize) -> Result<DocRow, crate::IndexError> {
        let row = self.row_of[ord] as usize;
        let b = self.starts.partition_point(|&s| s <= row) - 1;
        let batch = self.batches[b].slice(row - self.starts[b], 1);
        let mut rows: Vec<DocRow> = trawl_core::records::from_batch(&batch)?;
        rows.pop()
            .ok_or_else(|| crate::IndexError::Format(format!("doc store: no row {row}")))
    }
}

impl std::ops::Index<usize> for DocStore {
    type Output = DocRow;
    fn index(&self, ord: usize) -> &DocRow {
        self.get(ord)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::records::{from_parquet, to_parquet};

    #[test]
    fn docs_round_trip_through_parquet() {
        let id = trawl_core::hash::chunk_id(
            &RepoId::parse("github.com/a/b").unwrap(),
            "x.py",
            "function",
            "f",
            0,
        );
        let d = DocRow {
            schema_version: DOC_VERSION,
            ord: 3,
            chunk_id: id,
            content_hash: trawl_core::hash::content_hash("1", "h", "t"),
            has_vector: true,
            repo_id: RepoId::parse("github.com/a/b").unwrap(),
            commit: "a".repeat(40).parse().unwrap(),
            path: "x.py".into(),
            language: "python".into(),
            kind: ChunkKind::Function,
            symbol: Some("f".into()),
            qualified_name: None,
            header: "h".into(),
            text: "t".into(),
            start_line: 1,
            end_line: 2,
            parent_id: None,
            children_ids: vec![],
            calls: vec!["g".into()],
            call_ids: vec![id],
            imports: vec![],
            members: vec!["C.f".into()],
            touched: vec![touched_span("x.py", 1, 2)],
        };
        let back: Vec<DocRow> =
            from_parquet(to_parquet(std::slice::from_ref(&d)).unwrap()).unwrap();
        assert_eq!(back, [d]);
    }

    #[test]
    fn a_doc_store_reads_each_doc_by_ord_when_asked_whatever_the_file_order() {
        // More rows than a record batch holds, written with the ords shuffled.
        let mut docs: Vec<DocRow> = (0..2500u64)
            .map(|i| {
                let mut d = crate::testing::handler_doc(i, &format!("fn handler_{i}() {{}}"));
                d.ord = i;
                d.symbol = Some(format!("handler_{i}"));
                d.members = vec![format!("Api.handler_{i}")];
                d
            })
            .collect();
        docs.reverse();
        docs.swap(0, 1700);
        let (store, keys) = DocStore::open(to_parquet(&docs).unwrap()).unwrap();
        assert_eq!(store.len(), 2500);
        for o in [0usize, 1, 799, 1024, 2048, 2499] {
            let want = docs.iter().find(|d| d.ord == o as u64).unwrap();
            assert_eq!(&store[o], want);
            assert_eq!(keys[o].ord, o as u64);
            assert_eq!(keys[o].chunk_id, want.chunk_id);
            assert_eq!(keys[o].symbol, want.symbol);
            assert_eq!(keys[o].members, want.members);
        }
        assert_eq!(store.iter().count(), 2500);
        assert!(store.iter().enumerate().all(|(o, d)| d.ord == o as u64));

        // Ords that are not 0..n are refused when the store opens, not when a search reads it.
        docs[0].ord = 9_999;
        let err = DocStore::open(to_parquet(&docs).unwrap()).unwrap_err();
        assert!(err.to_string().contains("rebuild"), "{err}");
    }

    #[test]
    fn spans_and_commit_headers_read_back() {
        let span = touched_span("src/a#b.rs", 10, 42);
        assert_eq!(parse_touched_span(&span), Some(("src/a#b.rs", 10, 42)));
        assert_eq!(parse_touched_span("src/a.rs"), None);
        assert_eq!(parse_touched_span("src/a.rs#Lx-L2"), None);
        let h = commit_header("61b69e967e52", "2026-08-18T10:00:00Z", "Resolve · once");
        assert_eq!(commit_authored_at(&h), Some("2026-08-18T10:00:00Z"));
        assert_eq!(commit_authored_at("app.py · function run"), None);
    }
}

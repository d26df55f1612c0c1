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
    /// Qualified names of the definitions inside a container that stays one chunk: the
    /// symbol map and the text index's symbol field find the container under them.
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
        }
    }
}

/// See [`DocRow::key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocKey {
    pub chunk_id: ChunkId,
    pub content_hash: ContentHash,
    pub has_vector: bool,
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

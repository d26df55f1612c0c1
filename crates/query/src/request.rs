//! What a search asks for and what it returns: the same shapes for `trawl search --json`,
//! `POST /v1/search` and the library.

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};

use crate::QueryError;

/// Which arms a search runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// ANN and BM25, fused.
    #[default]
    Hybrid,
    /// ANN only.
    Vector,
    /// BM25 only.
    Lexical,
}

impl std::str::FromStr for Mode {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hybrid" => Ok(Self::Hybrid),
            "vector" => Ok(Self::Vector),
            "lexical" | "bm25" => Ok(Self::Lexical),
            other => Err(QueryError::BadRequest(format!(
                "unknown mode {other:?}: use hybrid, vector or lexical"
            ))),
        }
    }
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hybrid => "hybrid",
            Self::Vector => "vector",
            Self::Lexical => "lexical",
        }
    }
}

/// Default number of results.
pub const DEFAULT_K: usize = 10;

/// Values a filter may list.
pub const MAX_FILTER_VALUES: usize = 64;

/// A filter in the OpenAPI document: one string or a list of them.
fn one_or_many_schema() -> RefOr<Schema> {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    OneOfBuilder::new()
        .item(string())
        .item(
            ArrayBuilder::new()
                .items(string())
                .max_items(Some(MAX_FILTER_VALUES)),
        )
        .into()
}

/// A search. Filters take one value or a list; values of one filter are OR'ed, filters are
/// AND'ed. Unknown fields are refused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Words, an identifier, a qualified name or an error message.
    #[schema(min_length = 1)]
    pub query: String,
    /// Results wanted (default 10).
    #[serde(default)]
    #[schema(minimum = 1, default = json!(DEFAULT_K))]
    pub k: Option<usize>,
    /// Repository ids or patterns (`github.com/acme/*`).
    #[serde(default, deserialize_with = "one_or_many")]
    #[schema(schema_with = one_or_many_schema)]
    pub repo: Vec<String>,
    /// Languages (`python`, `rust`, …).
    #[serde(default, deserialize_with = "one_or_many")]
    #[schema(schema_with = one_or_many_schema)]
    pub lang: Vec<String>,
    /// Path globs (`src/**/*.py`, `**/http/*`); a pattern without a `*` matches a path prefix.
    #[serde(default, deserialize_with = "one_or_many")]
    #[schema(schema_with = one_or_many_schema)]
    pub path: Vec<String>,
    /// Chunk kinds (`function`, `method`, `class`, `section`, …).
    #[serde(default, deserialize_with = "one_or_many")]
    #[schema(schema_with = one_or_many_schema)]
    pub kind: Vec<String>,
    /// Attach parent, siblings and callees of each result as context.
    #[serde(default)]
    #[schema(default = false)]
    pub expand: bool,
    /// Which arms run: ANN and BM25 fused (`hybrid`), ANN only or BM25 only.
    #[serde(default)]
    #[schema(inline, default = Mode::default)]
    pub mode: Mode,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl SearchRequest {
    /// A request for `query` with defaults.
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            ..Self::default()
        }
    }

    /// Checks the request against the service's limits; returns `k`.
    pub fn validate(&self, max_k: usize, max_query_bytes: usize) -> Result<usize, QueryError> {
        let bad = |m: String| Err(QueryError::BadRequest(m));
        if self.query.trim().is_empty() {
            return bad("the query is empty: give words, an identifier or an error message".into());
        }
        if self.query.len() > max_query_bytes {
            return bad(format!(
                "the query is {} bytes; at most {max_query_bytes} are accepted: shorten it",
                self.query.len()
            ));
        }
        let k = self.k.unwrap_or(DEFAULT_K);
        if k == 0 || k > max_k {
            return bad(format!("k must be between 1 and {max_k}, got {k}"));
        }
        for (name, values) in [
            ("repo", &self.repo),
            ("lang", &self.lang),
            ("path", &self.path),
            ("kind", &self.kind),
        ] {
            if values.len() > MAX_FILTER_VALUES {
                return bad(format!(
                    "at most {MAX_FILTER_VALUES} values per filter, got {} for {name}",
                    values.len()
                ));
            }
            if values.iter().any(|v| v.trim().is_empty() || v.len() > 512) {
                return bad(format!(
                    "a {name} filter value is empty or longer than 512 bytes"
                ));
            }
        }
        Ok(k)
    }
}

/// A chunk as a result or its context shows it: where it is and what it says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Cited {
    pub repo: String,
    pub commit: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub symbol: Option<String>,
    pub kind: String,
    pub text: String,
}

/// What a context chunk is to its result: `member` / `container` / `overlap` (a hit
/// collapsed into the result) or `parent` / `sibling` / `callee` / `caller` (graph expansion)
/// or `commit` (a recent commit that changed its lines).
pub const RELATIONS: [&str; 8] = [
    "member",
    "container",
    "overlap",
    "parent",
    "sibling",
    "callee",
    "caller",
    "commit",
];

/// [`Context::relation`] in the OpenAPI document: one of [`RELATIONS`].
fn relation_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(RELATIONS))
        .into()
}

/// A chunk shown beside a result, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Context {
    #[schema(schema_with = relation_schema)]
    pub relation: String,
    #[serde(flatten)]
    pub chunk: Cited,
}

impl std::ops::Deref for Context {
    type Target = Cited;
    fn deref(&self) -> &Cited {
        &self.chunk
    }
}

/// One result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Hit {
    #[serde(flatten)]
    pub chunk: Cited,
    pub score: f64,
    pub language: String,
    pub chunk_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<Context>,
}

impl std::ops::Deref for Hit {
    type Target = Cited;
    fn deref(&self) -> &Cited {
        &self.chunk
    }
}

impl Cited {
    /// `repo@commit:path#Lstart-Lend`; a commit message: `repo@commit`.
    pub fn citation(&self) -> String {
        if self.kind == "commit" {
            // A commit message cites the commit itself.
            return format!(
                "{}@{}",
                self.repo,
                &self.commit[..self.commit.len().min(12)]
            );
        }
        format!(
            "{}@{}:{}#L{}-L{}",
            self.repo,
            &self.commit[..self.commit.len().min(12)],
            self.path,
            self.start_line,
            self.end_line
        )
    }
}

/// The answer to a search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    /// The index generation searched.
    #[schema(value_type = u64)]
    pub generation: trawl_core::ids::Generation,
    pub mode: Mode,
    pub results: Vec<Hit>,
    /// What the search could not do as asked (e.g. no vectors: lexical only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Time in the search, excluding the query embedding.
    pub search_ms: f64,
    /// Time embedding the query.
    pub embed_ms: f64,
}

/// The body of every answer that is not a result: what went wrong and what to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_one_value_or_a_list_and_unknown_fields_are_refused() {
        let r: SearchRequest =
            serde_json::from_str(r#"{"query":"q","repo":"a/b","kind":["function","method"]}"#)
                .unwrap();
        assert_eq!(r.repo, ["a/b"]);
        assert_eq!(r.kind, ["function", "method"]);
        let e = serde_json::from_str::<SearchRequest>(r#"{"query":"q","colour":"red"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn validation_names_the_problem() {
        let msg = |r: SearchRequest| r.validate(100, 8192).unwrap_err().to_string();
        assert!(msg(SearchRequest::new("  ")).contains("empty"));
        assert!(msg(SearchRequest::new("x".repeat(9000))).contains("at most 8192"));
        let mut r = SearchRequest::new("q");
        r.k = Some(1_000_000_000);
        assert!(msg(r).contains("between 1 and 100"));
        assert_eq!(SearchRequest::new("q").validate(100, 8192).unwrap(), 10);
    }
}

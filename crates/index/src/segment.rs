//! One segment of a shard: a doc store (`docs.parquet`), a vector index (`vectors.usearch`,
//! usearch HNSW) and a text index (`text/`, tantivy with the code analyzer). Docs are keyed by
//! their `ord` in all three.

use std::path::Path;

use bytes::Bytes;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, TantivyDocument};
use trawl_core::space::{Dtype, Space};
use usearch::{IndexOptions, MetricKind, ScalarKind};

use crate::IndexError;
use crate::analyzer::{CodeTokenizer, NAME as ANALYZER};
use crate::docs::DocRow;

/// A vector as the embedder stored it.
#[derive(Clone, Debug, PartialEq)]
pub enum VectorData {
    F32(Vec<f32>),
    I8(Vec<i8>),
    /// Bit-packed, 8 dimensions a byte.
    Bits(Vec<u8>),
}

/// The usearch scalar and metric of vectors of `space`.
fn scalar(space: &Space) -> Result<(ScalarKind, MetricKind), IndexError> {
    Ok(match space.dtype {
        // Unit vectors: inner product is cosine.
        Dtype::Float => (ScalarKind::F32, MetricKind::IP),
        Dtype::Int8 => (ScalarKind::I8, MetricKind::Cos),
        Dtype::Binary | Dtype::Ubinary => (ScalarKind::B1, MetricKind::Hamming),
        other @ Dtype::Uint8 => {
            return Err(IndexError::Format(format!(
                "vectors of dtype {other} cannot be indexed: use float, int8 or binary"
            )));
        }
    })
}

/// usearch options for vectors of `space`.
/// The bit a vector index key carries when its vector is a doc's prose view
/// ([`trawl_core::prose`]): the key is the doc's ord with this bit set, so a doc has at most
/// two vectors, and [`doc_of_key`] gives the doc of either.
pub const PROSE_KEY_BIT: u64 = 1 << 32;

/// The key of doc `ord`'s prose vector.
pub fn prose_key(ord: u64) -> u64 {
    ord | PROSE_KEY_BIT
}

/// The doc a vector index key belongs to.
pub fn doc_of_key(key: u64) -> u64 {
    key & !PROSE_KEY_BIT
}

pub fn index_options(space: &Space) -> Result<IndexOptions, IndexError> {
    let (quantization, metric) = scalar(space)?;
    Ok(IndexOptions {
        dimensions: space.dims as usize,
        metric,
        quantization,
        connectivity: 16,
        expansion_add: 128,
        expansion_search: 128,
        multi: false,
    })
}

/// The text index's fields.
#[derive(Clone, Copy, Debug)]
pub struct TextFields {
    pub ord: Field,
    pub repo: Field,
    pub language: Field,
    pub kind: Field,
    pub path: Field,
    pub symbol: Field,
    pub header: Field,
    pub body: Field,
}

/// The text index's schema.
pub fn text_schema() -> (Schema, TextFields) {
    let mut b = Schema::builder();
    let code = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = TextFields {
        ord: b.add_u64_field("ord", INDEXED | FAST),
        repo: b.add_text_field("repo", STRING),
        language: b.add_text_field("language", STRING),
        kind: b.add_text_field("kind", STRING),
        path: b.add_text_field("path", code.clone()),
        symbol: b.add_text_field("symbol", code.clone()),
        header: b.add_text_field("header", code.clone()),
        body: b.add_text_field("body", code),
    };
    (b.build(), fields)
}

/// Registers the code analyzer on an index (needed to write and to query it).
pub fn register(index: &Index) {
    index.tokenizers().register(
        ANALYZER,
        tantivy::tokenizer::TextAnalyzer::from(CodeTokenizer),
    );
}

/// A built segment, ready to upload.
#[derive(Debug, Default)]
pub struct SegmentFiles {
    pub docs: Bytes,
    pub vectors: Option<Bytes>,
    /// The text index's files, by name.
    pub text: Vec<(String, Bytes)>,
}

impl SegmentFiles {
    pub fn bytes(&self) -> u64 {
        (self.docs.len()
            + self.vectors.as_ref().map_or(0, Bytes::len)
            + self.text.iter().map(|(_, b)| b.len()).sum::<usize>()) as u64
    }
}

/// Builds the vector index of `vectors` (keyed by ord) with `threads` threads.
pub fn build_vectors(
    space: &Space,
    vectors: &[(u64, VectorData)],
    threads: usize,
) -> Result<usearch::Index, IndexError> {
    let ann = |e: cxx::Exception| IndexError::Segment(format!("vector index: {e}"));
    let index = usearch::Index::new(&index_options(space)?).map_err(ann)?;
    index
        .reserve_capacity_and_threads(vectors.len().max(1), threads.max(1))
        .map_err(ann)?;
    let per = vectors.len().div_ceil(threads.max(1)).max(1);
    let results: Vec<Result<(), IndexError>> = std::thread::scope(|s| {
        let handles: Vec<_> = vectors
            .chunks(per)
            .map(|part| {
                let index = &index;
                s.spawn(move || {
                    for (ord, v) in part {
                        let r = match v {
                            VectorData::F32(f) => index.add(*ord, f),
                            VectorData::I8(i) => index.add(*ord, i),
                            VectorData::Bits(b) => index.add(*ord, usearch::b1x8::from_u8s(b)),
                        };
                        r.map_err(ann)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(IndexError::Segment("a thread panicked".into())))
            })
            .collect()
    });
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(index)
}

/// The vectors stored under `ords` in a serialized vector index of `space` (what
/// [`save_vectors`] wrote), in the order asked; `None` for an ord without one.
pub fn read_vectors(
    bytes: &[u8],
    space: &Space,
    ords: &[u64],
) -> Result<Vec<Option<VectorData>>, IndexError> {
    let ann = |e: cxx::Exception| IndexError::Segment(format!("reading a vector index: {e}"));
    let index = usearch::Index::new(&index_options(space)?).map_err(ann)?;
    index.load_from_buffer(bytes).map_err(ann)?;
    let dims = space.dims as usize;
    ords.iter()
        .map(|&ord| {
            if !index.contains(ord) {
                return Ok(None);
            }
            let v = match space.dtype {
                Dtype::Float => {
                    let mut v = vec![0f32; dims];
                    index.get(ord, &mut v[..]).map_err(ann)?;
                    VectorData::F32(v)
                }
                Dtype::Int8 => {
                    let mut v = vec![0i8; dims];
                    index.get(ord, &mut v[..]).map_err(ann)?;
                    VectorData::I8(v)
                }
                _ => {
                    let mut v = vec![0u8; dims.div_ceil(8)];
                    index
                        .get(ord, usearch::b1x8::from_mut_u8s(&mut v))
                        .map_err(ann)?;
                    VectorData::Bits(v)
                }
            };
            Ok(Some(v))
        })
        .collect()
}

/// The serialized form of a vector index.
pub fn save_vectors(index: &usearch::Index) -> Result<Bytes, IndexError> {
    let mut buf = vec![0u8; index.serialized_length()];
    index
        .save_to_buffer(&mut buf)
        .map_err(|e| IndexError::Segment(format!("saving the vector index: {e}")))?;
    Ok(Bytes::from(buf))
}

/// Builds a segment from its docs (ords 0..n) and their vectors, in `tmp`.
pub fn build(
    docs: &[DocRow],
    vectors: &[(u64, VectorData)],
    space: Option<&Space>,
    tmp: &Path,
    threads: usize,
) -> Result<SegmentFiles, IndexError> {
    let docs_bytes = trawl_core::records::to_parquet(docs)?;
    let vectors = match (space, vectors.is_empty()) {
        (Some(space), false) => Some(save_vectors(&build_vectors(space, vectors, threads)?)?),
        _ => None,
    };
    let text = build_text(docs, tmp)?;
    Ok(SegmentFiles {
        docs: docs_bytes,
        vectors,
        text,
    })
}

/// Builds the text index in memory (no files, no fsyncs) and returns its files.
fn build_text(docs: &[DocRow], _tmp: &Path) -> Result<Vec<(String, Bytes)>, IndexError> {
    use tantivy::directory::Directory;
    let tv = |e: tantivy::TantivyError| IndexError::Segment(format!("text index: {e}"));
    let (schema, f) = text_schema();
    let index = Index::create_in_ram(schema);
    register(&index);
    // tantivy's smallest arena (15 MB) for small segments: allocating the full 64 MB dominated
    // the time of small delta segments.
    let bytes: usize = docs.iter().map(|d| d.text.len() + d.header.len()).sum();
    let heap = (bytes * 4).clamp(15_000_000, 64 * 1024 * 1024);
    let mut writer = index
        .writer_with_num_threads::<TantivyDocument>(1, heap)
        .map_err(tv)?;
    for d in docs {
        let mut doc = TantivyDocument::default();
        doc.add_u64(f.ord, d.ord);
        doc.add_text(f.repo, d.repo_id.as_str());
        doc.add_text(f.language, &d.language);
        doc.add_text(f.kind, d.kind.as_str());
        doc.add_text(f.path, &d.path);
        if let Some(s) = d.qualified_name.as_ref().or(d.symbol.as_ref()) {
            doc.add_text(f.symbol, s);
        }
        for m in &d.members {
            doc.add_text(f.symbol, m);
        }
        doc.add_text(f.header, &d.header);
        doc.add_text(f.body, &d.text);
        writer.add_document(doc).map_err(tv)?;
    }
    writer.commit().map_err(tv)?;
    writer.wait_merging_threads().map_err(tv)?;
    let dir = index.directory();
    let mut names: Vec<std::path::PathBuf> = dir.list_managed_files().into_iter().collect();
    names.push("meta.json".into());
    names.sort();
    names.dedup();
    let mut files = Vec::new();
    for name in names {
        let Ok(data) = dir.atomic_read(&name) else {
            continue; // a file tantivy already garbage-collected
        };
        if name
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("lock"))
        {
            continue;
        }
        let name = name.to_string_lossy().into_owned();
        files.push((name, Bytes::from(data)));
    }
    Ok(files)
}

/// Opens a segment's text index from a local directory.
pub fn open_text(dir: &Path) -> Result<Index, IndexError> {
    let index = Index::open_in_dir(dir)
        .map_err(|e| IndexError::Segment(format!("opening the text index: {e}")))?;
    register(&index);
    Ok(index)
}

/// Field boosts of the text search: a symbol match counts most, then the path.
pub const BOOSTS: [(&str, f32); 4] = [
    ("symbol", 3.0),
    ("path", 1.5),
    ("header", 1.0),
    ("body", 1.0),
];

/// Weight of another inflection of a query word, relative to the word as typed.
pub const INFLECTION_WEIGHT: f32 = 0.5;

/// Adjacent word pairs of a query matched as phrases (at most).
pub const MAX_PHRASE_PAIRS: usize = 12;
/// Default weight of a phrase pair, relative to a body term (`query.phrase_weight`).
pub const PHRASE_BOOST: f32 = 3.0;

/// The BM25 query of `query` over a text index: every analyzed term of the query, in every
/// field with its boost, OR'ed — the query's words need not be adjacent or all present (BM25
/// ranks), and an identifier typed in any convention meets the same terms as the indexed one.
pub fn text_query(
    schema: &Schema,
    query: &str,
    phrase_boost: f32,
) -> Result<tantivy::query::BooleanQuery, IndexError> {
    use tantivy::Term;
    use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
    let mut fields = Vec::new();
    for (name, boost) in BOOSTS {
        let f = schema
            .get_field(name)
            .map_err(|e| IndexError::Segment(format!("text index: {e}")))?;
        fields.push((f, boost));
    }
    let mut terms = crate::analyzer::terms(query);
    terms.sort();
    terms.dedup();
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    for t in &terms {
        for &(f, boost) in &fields {
            let tq = TermQuery::new(Term::from_field_text(f, t), IndexRecordOption::WithFreqs);
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(Box::new(tq), boost)),
            ));
        }
    }
    // Other inflections of the query's words, in the prose fields, at half weight.
    let mut seen: std::collections::HashSet<String> = terms.iter().cloned().collect();
    for t in &terms {
        for v in crate::analyzer::inflections(t) {
            if !seen.insert(v.clone()) {
                continue;
            }
            for &(f, boost) in fields.iter().skip(2) {
                let tq = TermQuery::new(Term::from_field_text(f, &v), IndexRecordOption::WithFreqs);
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(tq), boost * INFLECTION_WEIGHT)),
                ));
            }
        }
    }
    // Word pairs of the query found side by side in a chunk add to its score: a pasted error
    // message or a phrase from a docstring ranks the chunk that says exactly that above one
    // that merely shares its words.
    // A dotted or joined name typed as one word (`hooks.init`, `app.silent`) names one thing:
    // its two parts side by side count as a phrase too.
    let words = crate::analyzer::word_sequence(query);
    let one_name = words.len() == 2 && !query.trim().contains(char::is_whitespace);
    if (words.len() >= 3 || one_name) && phrase_boost > 0.0 {
        let body = schema
            .get_field("body")
            .map_err(|e| IndexError::Segment(format!("text index: {e}")))?;
        let mut pairs: Vec<(&String, &String)> = words.windows(2).map(|w| (&w[0], &w[1])).collect();
        pairs.sort();
        pairs.dedup();
        for (a, b) in pairs.into_iter().take(MAX_PHRASE_PAIRS) {
            let pq = tantivy::query::PhraseQuery::new(vec![
                Term::from_field_text(body, a),
                Term::from_field_text(body, b),
            ]);
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(Box::new(pq), phrase_boost)),
            ));
        }
    }
    Ok(BooleanQuery::new(clauses))
}

/// BM25 search of one segment's text index: the best `k` (ord, score).
pub fn search_text(index: &Index, query: &str, k: usize) -> Result<Vec<(u64, f32)>, IndexError> {
    use tantivy::collector::TopDocs;
    let tv = |e: tantivy::TantivyError| IndexError::Segment(format!("text search: {e}"));
    let q = text_query(&index.schema(), query, PHRASE_BOOST)?;
    let reader = index.reader().map_err(tv)?;
    let searcher = reader.searcher();
    let top = searcher
        .search(&q, &TopDocs::with_limit(k.max(1)).order_by_score())
        .map_err(tv)?;
    ords(&searcher, top)
}

/// The ords of tantivy hits, with their scores.
pub fn ords(
    searcher: &tantivy::Searcher,
    top: Vec<(f32, tantivy::DocAddress)>,
) -> Result<Vec<(u64, f32)>, IndexError> {
    let tv = |e: tantivy::TantivyError| IndexError::Segment(format!("text search: {e}"));
    let mut out = Vec::with_capacity(top.len());
    for (score, addr) in top {
        let col = searcher
            .segment_reader(addr.segment_ord)
            .fast_fields()
            .u64("ord")
            .map_err(tv)?;
        if let Some(ord) = col.first(addr.doc_id) {
            out.push((ord, score));
        }
    }
    Ok(out)
}

//! The live set, with DataFusion: for each repository, the manifest of its last indexed commit
//! ⋈ chunks on (repo, path, blob) ⟕ embeddings of one vector space on content hash.
//!
//! Deleted, changed and renamed files drop out because the latest manifest no longer names
//! their old (path, blob). Chunks whose vector is not in the store yet are kept, text-only:
//! they are searchable by BM25 at once, and gain their vector in a later generation (their
//! doc key changes, so the incremental build replaces them).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::SessionContext;
use serde::Deserialize;
use trawl_core::ids::{ChunkId, CommitId, ContentHash, RepoId, RunId};
use trawl_core::kind::ChunkKind;
use trawl_core::records::{
    ChunkRecord, CommitRecord, EmbeddingRecord, ManifestRow, RepoList, RepoState, RunHead, Stage,
};
use trawl_core::space::{Dtype, Space};
use trawl_core::store::{Store, keys};
use trawl_index::docs::DocRow;
use trawl_index::segment::VectorData;

use crate::CompactError;
use crate::build::LiveDoc;

/// The live set and where it came from.
#[derive(Debug, Default)]
pub struct LiveSet {
    pub docs: Vec<LiveDoc>,
    /// The repositories' last fetch runs.
    pub runs: Vec<RunId>,
    pub repos: usize,
    /// The live chunks as a Parquet file of [`ChunkRecord`]s sorted by (repository, path,
    /// line): the generation's `chunks` table (`index/gen=<n>/chunks.parquet`).
    pub table: Option<bytes::Bytes>,
    /// `Some`: the set holds only these repositories' docs (those whose inputs changed since
    /// the live generation, and those that left); every other repository's stay as the live
    /// generation holds them. `None`: the whole live set.
    pub only: Option<std::collections::BTreeSet<RepoId>>,
    /// The repositories' fingerprints ([`repo_fingerprints`]), taken before the set was read,
    /// when whoever read it took them.
    pub fingerprints: Option<std::collections::BTreeMap<RepoId, String>>,
    /// With `only`: the live generation whose records said which repositories changed.
    pub base: Option<trawl_core::ids::Generation>,
    /// The whole set read through local files instead of `docs` and `table` (they are
    /// empty): what `--wait`'s completion check counted, for the build to read again.
    pub spilled: Option<Box<crate::spill::Spilled>>,
}

/// Repositories rebuilt incrementally at most: past this share of them, the whole live set
/// is cheaper to read than to patch.
const MAX_INCREMENTAL_SHARE: f64 = 0.5;

/// The repositories whose fingerprint differs from the one `live` recorded (or that it holds
/// and are not listed any more): `None` when `live` cannot be built on incrementally (no
/// records, another vector space or format) or more than half of them changed.
pub fn changed_since(
    live: &trawl_index::Manifest,
    space: Option<&Space>,
    fingerprints: &std::collections::BTreeMap<RepoId, String>,
) -> Option<std::collections::BTreeSet<RepoId>> {
    if live.repo_inputs.is_empty()
        || live.space.as_ref() != space
        || live.format_version != trawl_index::generation::FORMAT_VERSION
    {
        return None;
    }
    let changed: std::collections::BTreeSet<RepoId> = fingerprints
        .iter()
        .filter(|(r, f)| live.repo_inputs.get(*r) != Some(*f))
        .map(|(r, _)| r.clone())
        .chain(
            live.repo_inputs
                .keys()
                .filter(|r| !fingerprints.contains_key(*r))
                .cloned(),
        )
        .collect();
    (changed.len() as f64 <= MAX_INCREMENTAL_SHARE * fingerprints.len().max(1) as f64)
        .then_some(changed)
}

/// The columns of the join beyond the chunk's own.
#[derive(Deserialize)]
struct Extra {
    commit: CommitId,
    vector: Option<Vec<f32>>,
    vector_bytes: Option<Vec<u8>>,
    prose_vector: Option<Vec<f32>>,
    prose_vector_bytes: Option<Vec<u8>>,
}

pub(crate) fn table(
    ctx: &SessionContext,
    name: &str,
    urls: Vec<ListingTableUrl>,
    schema: SchemaRef,
    partition: Option<&str>,
) -> Result<(), CompactError> {
    let q = |e: datafusion::error::DataFusionError| CompactError::Query(e.to_string());
    let mut opts =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    if let Some(p) = partition {
        opts = opts.with_table_partition_cols(vec![(p.to_owned(), DataType::Utf8)]);
    }
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(opts)
        .with_schema(schema);
    ctx.register_table(name, Arc::new(ListingTable::try_new(config).map_err(q)?))
        .map_err(q)?;
    Ok(())
}

/// A DataFusion session that reads `store` (as `trawl://store/`).
pub(crate) fn session(store: &Store) -> SessionContext {
    let ctx = SessionContext::new();
    let (object_store, _) = store.object_store();
    let base = url::Url::parse("trawl://store/").expect("a valid URL");
    ctx.register_object_store(&base, object_store);
    ctx
}

/// `key` of `store` as the session's URL.
pub(crate) fn store_url(store: &Store, key: &str) -> Result<ListingTableUrl, CompactError> {
    let (_, prefix) = store.object_store();
    let path = if prefix.as_ref().is_empty() {
        key.to_owned()
    } else {
        format!("{}/{key}", prefix.as_ref())
    };
    ListingTableUrl::parse(format!("trawl://store/{path}"))
        .map_err(|e| CompactError::Query(e.to_string()))
}

/// Registers `m`, the manifests of the repositories' last indexed commits: `false` when
/// none of them has one.
pub(crate) async fn register_manifests(
    ctx: &SessionContext,
    store: &Store,
    states: &[RepoState],
) -> Result<bool, CompactError> {
    let mut manifests = Vec::new();
    for s in states {
        let key = keys::manifest(&s.repo, &s.last_commit);
        if store.exists_key(&key).await? {
            manifests.push(store_url(store, &key)?);
        }
    }
    if manifests.is_empty() {
        return Ok(false);
    }
    table(ctx, "m", manifests, ManifestRow::schema(), None)?;
    Ok(true)
}

/// Registers `e`, the embeddings of `space`: `false` when it has none (or there is no space).
pub(crate) async fn register_embeddings(
    ctx: &SessionContext,
    store: &Store,
    space: Option<&Space>,
) -> Result<bool, CompactError> {
    let Some(space) = space else {
        return Ok(false);
    };
    let dir = keys::embedding_space(&space.key());
    if store.list(&dir).await?.is_empty() {
        return Ok(false);
    }
    table(
        ctx,
        "e",
        vec![store_url(store, &dir)?],
        EmbeddingRecord::schema_for(space.dims, space.dtype.as_str()),
        None,
    )?;
    Ok(true)
}

/// The live chunks with their vectors and their prose views' vectors
/// ([`trawl_core::prose::key`]): `m` ⋈ `c` ⟕ `e` ⟕ `e`.
fn live_sql_with_vectors() -> String {
    format!(
        "SELECT c.*, m.commit AS commit, e.vector AS vector, e.vector_bytes AS vector_bytes, \
         p.vector AS prose_vector, p.vector_bytes AS prose_vector_bytes \
         FROM m JOIN c ON c.repo_id = m.repo_id AND c.path = m.path AND c.blob = m.blob \
         LEFT JOIN e ON e.content_hash = c.content_hash \
         LEFT JOIN e AS p ON p.content_hash = {} WHERE m.skip_reason IS NULL",
        trawl_core::prose::key_sql("c.content_hash")
    )
}

/// The live chunks without vectors (no space, or none embedded yet): `m` ⋈ `c`.
const LIVE_SQL: &str = "SELECT c.*, m.commit AS commit, CAST(NULL AS FLOAT[]) AS vector, \
     CAST(NULL AS BYTEA) AS vector_bytes, CAST(NULL AS FLOAT[]) AS prose_vector, \
     CAST(NULL AS BYTEA) AS prose_vector_bytes \
     FROM m JOIN c ON c.repo_id = m.repo_id AND c.path = m.path AND c.blob = m.blob \
     WHERE m.skip_reason IS NULL";

/// A vector as the join read it: floats, or bytes that are int8 or bits by the space's type.
pub(crate) fn vector_data(
    vector: Option<Vec<f32>>,
    bytes: Option<Vec<u8>>,
    dtype: Dtype,
) -> Option<VectorData> {
    match (vector, bytes) {
        (Some(f), _) => Some(VectorData::F32(f)),
        (None, Some(b)) if dtype == Dtype::Int8 => {
            Some(VectorData::I8(b.into_iter().map(|v| v as i8).collect()))
        }
        (None, Some(b)) => Some(VectorData::Bits(b)),
        (None, None) => None,
    }
}

/// A chunker version's place in time: its leading number, then the rest (`10` after `9`).
pub(crate) fn version_key(v: &str) -> (u64, &str) {
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    (v[..digits].parse().unwrap_or(0), &v[digits..])
}

/// Keeps, of each file's chunks, only those of the newest chunker version among them. A file
/// chunked again by a newer chunker still has its old part until retention collects it, and
/// the chunks the old rules cut otherwise (other ids) must not stay live beside the new ones.
pub(crate) fn newest_per_file<T>(rows: &mut Vec<T>, chunk: impl Fn(&T) -> &ChunkRecord) {
    newest_per_key(rows, |r| {
        let c = chunk(r);
        (
            c.repo_id.as_str(),
            c.path.as_str(),
            c.chunker_version.as_str(),
        )
    });
}

/// [`newest_per_file`] over rows that say their (repository, path, chunker version).
fn newest_per_key<T>(rows: &mut Vec<T>, key: impl Fn(&T) -> (&str, &str, &str)) {
    let mut newest: HashMap<(&str, &str), (u64, &str)> = HashMap::new();
    for r in rows.iter() {
        let (repo, path, version) = key(r);
        let v = version_key(version);
        let e = newest.entry((repo, path)).or_insert(v);
        if v > *e {
            *e = v;
        }
    }
    let keep: Vec<bool> = rows
        .iter()
        .map(|r| {
            let (repo, path, version) = key(r);
            newest[&(repo, path)] == version_key(version)
        })
        .collect();
    if keep.iter().all(|&k| k) {
        return;
    }
    let mut keep = keep.into_iter();
    rows.retain(|_| keep.next().unwrap_or(true));
}

/// The recorded states of the repositories on the list (`repos/list.json`): a repository
/// that left the list is not indexed any more, whatever its state says. Without a list
/// (stores written before it existed) every recorded state counts.
pub async fn listed_states(store: &Store) -> Result<Vec<RepoState>, CompactError> {
    Ok(trawl_core::store::listed_states(store).await?)
}

/// A fingerprint of everything a live set is computed from: the repository list, the listed
/// repositories' states (last commit of each), the manifests, chunk parts and the vector
/// space's embedding parts (by key and version), and the space itself. Equal fingerprints give equal live sets, so
/// a compaction whose inputs match the live generation's has nothing to do — found from
/// listings and small objects, without the join over every part.
pub async fn inputs_fingerprint(
    store: &Store,
    space: Option<&Space>,
) -> Result<String, CompactError> {
    let mut h = blake3::Hasher::new_derive_key("trawl 2026-11-30 live-set inputs v1");
    let mut field = |label: &str, value: &str| {
        h.update(label.as_bytes());
        h.update(&[0]);
        h.update(value.as_bytes());
        h.update(&[0]);
    };
    if let Some(l) = store.get_json::<RepoList>(keys::REPO_LIST).await? {
        let mut repos: Vec<String> = l.repos.iter().map(ToString::to_string).collect();
        repos.sort();
        field("list", &repos.join("\n"));
    }
    let mut states: Vec<(String, String)> = listed_states(store)
        .await?
        .into_iter()
        .map(|s| (s.repo.to_string(), s.last_commit.to_string()))
        .collect();
    states.sort();
    for (repo, commit) in &states {
        field(repo, commit);
    }
    // Objects by version, not only by key: a manifest or chunk part rewritten in place (a
    // rescan under new secret rules) changes the live set without changing any key.
    let mut lists = vec![
        ("manifest", store.list_objects("manifests/").await?),
        ("chunk part", store.list_objects("chunks/").await?),
        ("commits", store.list_objects("commits/").await?),
    ];
    if let Some(s) = space {
        let name = s.key();
        field("space", &name);
        lists.push((
            "embedding part",
            store.list_objects(&keys::embedding_space(&name)).await?,
        ));
    }
    for (label, list) in lists {
        for o in list {
            field(label, &format!("{} {:?} {}", o.key, o.e_tag, o.size));
        }
    }
    Ok(h.finalize().to_hex().to_string())
}

/// Per listed repository, a fingerprint of what its live docs are computed from: its last
/// commit, that commit's manifest, its chunk parts and its commit records (by key and
/// version), the vector space and how this release derives docs ([`LIVE_SET_VERSION`]). A repository whose fingerprint is the one the live
/// generation recorded for it (and whose docs all had vectors then) has the same docs now.
pub async fn repo_fingerprints(
    store: &Store,
    space: Option<&Space>,
) -> Result<std::collections::BTreeMap<RepoId, String>, CompactError> {
    let states = listed_states(store).await?;
    // One listing each, grouped by the repository key in the object keys. Of the manifests
    // only the last commit's counts (retention deletes superseded ones).
    let manifests: HashMap<String, String> = store
        .list_objects("manifests/")
        .await?
        .into_iter()
        .map(|o| (o.key.clone(), format!("{} {:?} {}", o.key, o.e_tag, o.size)))
        .collect();
    let mut objects: HashMap<String, Vec<String>> = HashMap::new();
    for prefix in ["chunks/", "commits/"] {
        for o in store.list_objects(prefix).await? {
            let Some(repo) = o
                .key
                .strip_prefix(prefix)
                .and_then(|k| k.split('/').next())
                .and_then(|d| d.strip_prefix("repo="))
            else {
                continue;
            };
            objects
                .entry(repo.to_owned())
                .or_default()
                .push(format!("{} {:?} {}", o.key, o.e_tag, o.size));
        }
    }
    let space = space.map(Space::key).unwrap_or_default();
    // What turns the inputs into docs: a release that derives them differently rebuilds.
    let derivation = format!("{LIVE_SET_VERSION} {}", trawl_index::docs::DOC_VERSION);
    let mut out = std::collections::BTreeMap::new();
    for s in states {
        let mut h = blake3::Hasher::new_derive_key("trawl 2026-12-01 repository inputs v1");
        for field in [
            s.repo.as_str(),
            &s.last_commit.to_string(),
            &space,
            &derivation,
        ] {
            h.update(field.as_bytes());
            h.update(&[0]);
        }
        let mut listed = objects.remove(&s.repo.key()).unwrap_or_default();
        if let Some(m) = manifests.get(&keys::manifest(&s.repo, &s.last_commit)) {
            listed.push(m.clone());
        }
        listed.sort();
        for o in listed {
            h.update(o.as_bytes());
            h.update(&[0]);
        }
        out.insert(s.repo, h.finalize().to_hex().to_string());
    }
    Ok(out)
}

/// The version of how this release derives a repository's docs from its inputs (the live
/// set's join, commit docs, touched names, calls): raise it when that changes, so that the
/// next compaction rebuilds every repository instead of keeping docs derived the old way.
pub const LIVE_SET_VERSION: u32 = 1;

/// Computes the live set; vectors come from `space` (`None`: text only).
pub async fn live_set(store: &Store, space: Option<&Space>) -> Result<LiveSet, CompactError> {
    live_set_of(store, space, None).await
}

/// The live set of the repositories in `only` (`None`: all of them): a repository of `only`
/// that left the list has no docs, so its old ones go.
pub async fn live_set_of(
    store: &Store,
    space: Option<&Space>,
    only: Option<&std::collections::BTreeSet<RepoId>>,
) -> Result<LiveSet, CompactError> {
    let q = |e: datafusion::error::DataFusionError| CompactError::Query(e.to_string());
    let mut states = listed_states(store).await?;
    if let Some(only) = only {
        states.retain(|s| only.contains(&s.repo));
    }
    let scoped = |set: LiveSet| LiveSet {
        only: only.cloned(),
        ..set
    };
    if states.is_empty() {
        return Ok(scoped(LiveSet::default()));
    }
    let ctx = session(store);
    if !register_manifests(&ctx, store, &states).await? {
        return Ok(scoped(LiveSet::default()));
    }
    // An incremental set: the repositories' commit messages even when none of them has a
    // chunk part (all files skipped, an empty repository), as the whole set would have them.
    let commits_only = |states: &[RepoState]| {
        let states = states.to_vec();
        async move {
            let mut docs = Vec::new();
            for s in &states {
                docs.extend(commit_docs(store, &s.repo, &DefinitionLines::new()).await?);
            }
            docs.sort_by_key(|d: &LiveDoc| d.doc.chunk_id);
            Ok::<_, CompactError>(docs)
        }
    };
    match only {
        None => table(
            &ctx,
            "c",
            vec![store_url(store, "chunks/")?],
            ChunkRecord::schema(),
            Some("repo"),
        )?,
        // Only these repositories' parts are read.
        Some(_) => {
            let mut dirs = Vec::new();
            for s in &states {
                let dir = format!("chunks/repo={}/", s.repo.key());
                if !store.list(&dir).await?.is_empty() {
                    dirs.push(store_url(store, &dir)?);
                }
            }
            if dirs.is_empty() {
                return Ok(scoped(LiveSet {
                    docs: commits_only(&states).await?,
                    repos: states.len(),
                    ..LiveSet::default()
                }));
            }
            table(&ctx, "c", dirs, ChunkRecord::schema(), None)?;
        }
    }
    let sql = if register_embeddings(&ctx, store, space).await? {
        live_sql_with_vectors()
    } else {
        LIVE_SQL.to_string()
    };
    let batches = ctx.sql(&sql).await.map_err(q)?.collect().await.map_err(q)?;
    // One doc per chunk id: the newest chunker version, a vector when any part has one.
    let dtype = space.map_or(Dtype::Float, |s| s.dtype);
    let read = |e: serde_arrow::Error| CompactError::Query(format!("reading the live set: {e}"));
    let mut by_id: HashMap<ChunkId, (ChunkRecord, Extra)> = HashMap::new();
    for batch in &batches {
        let chunks: Vec<ChunkRecord> = serde_arrow::from_record_batch(batch).map_err(read)?;
        let extras: Vec<Extra> = serde_arrow::from_record_batch(batch).map_err(read)?;
        for (c, x) in chunks.into_iter().zip(extras) {
            fn rank<'a>(c: &'a ChunkRecord, x: &Extra) -> ((u64, &'a str), bool) {
                (
                    version_key(&c.chunker_version),
                    x.vector.is_some() || x.vector_bytes.is_some(),
                )
            }
            match by_id.get(&c.chunk_id) {
                Some((oc, ox)) if rank(oc, ox) >= rank(&c, &x) => {}
                _ => {
                    by_id.insert(c.chunk_id, (c, x));
                }
            }
        }
    }
    // The live `chunks` table for data teams: sorted by (repository, path, line), written
    // from the records themselves before they become docs (moved, never copied).
    let mut pairs: Vec<(ChunkRecord, Extra)> = by_id.into_values().collect();
    newest_per_file(&mut pairs, |(c, _)| c);
    pairs.sort_by(|(a, _), (b, _)| {
        (&a.repo_id, &a.path, a.start_line, a.chunk_id).cmp(&(
            &b.repo_id,
            &b.path,
            b.start_line,
            b.chunk_id,
        ))
    });
    let (chunks, extras): (Vec<ChunkRecord>, Vec<Extra>) = pairs.into_iter().unzip();
    let table =
        trawl_core::records::to_parquet_with(&chunks, trawl_core::records::table_properties())?;
    let mut docs: Vec<LiveDoc> = chunks
        .into_iter()
        .zip(extras)
        .map(|(c, x)| {
            let vector = vector_data(x.vector, x.vector_bytes, dtype);
            let prose = vector_data(x.prose_vector, x.prose_vector_bytes, dtype);
            LiveDoc {
                doc: DocRow::from_chunk(c, x.commit, vector.is_some()),
                vector,
                prose,
            }
        })
        .collect();
    let defs = definition_lines(&docs);
    for s in &states {
        docs.extend(commit_docs(store, &s.repo, &defs).await?);
    }
    docs.sort_by_key(|d| d.doc.chunk_id);
    let mut runs: Vec<RunId> = states.iter().map(|s| s.last_run.clone()).collect();
    runs.sort();
    runs.dedup();
    Ok(LiveSet {
        docs,
        runs,
        repos: states.len(),
        table: Some(table),
        only: only.cloned(),
        fingerprints: None,
        base: None,
        spilled: None,
    })
}

/// The kind of a commit message's doc.
pub const COMMIT_KIND: ChunkKind = ChunkKind::Commit;

/// The live definitions of each (repository, path): their lines and names, newest chunker
/// version's, for the symbols a commit touched.
pub type DefinitionLines = HashMap<(RepoId, String), Vec<(u32, u32, String)>>;

/// The definitions among `docs` by file.
pub fn definition_lines(docs: &[LiveDoc]) -> DefinitionLines {
    let mut out: DefinitionLines = HashMap::new();
    for d in docs {
        let defines = d.doc.kind.is_code_definition();
        let name = d.doc.qualified_name.as_ref().or(d.doc.symbol.as_ref());
        if let (true, Some(name)) = (defines, name) {
            out.entry((d.doc.repo_id.clone(), d.doc.path.clone()))
                .or_default()
                .push((d.doc.start_line, d.doc.end_line, name.clone()));
        }
    }
    out
}

/// Later commits a commit's lines are carried through; past this many they are not worth
/// the guess.
const MAX_CARRY: usize = 50;
/// Names a commit doc lists as touched.
const MAX_TOUCHED_NAMES: usize = 20;
/// Line spans a commit doc keeps.
const MAX_TOUCHED_SPANS: usize = 100;

/// The commit messages the fetcher recorded for `repo`, one `commit` doc each (words only:
/// the message, the paths it changed, and the definitions whose lines it changed as the
/// files read now), newest record of a commit kept.
pub async fn commit_docs(
    store: &Store,
    repo: &RepoId,
    defs: &DefinitionLines,
) -> Result<Vec<LiveDoc>, CompactError> {
    let mut by_commit: HashMap<CommitId, CommitRecord> = HashMap::new();
    for key in store.list(&keys::commits_of(repo)).await? {
        let Some(records) = store.get_json::<Vec<CommitRecord>>(&key).await? else {
            continue;
        };
        for r in records.into_iter().filter(|r| &r.repo_id == repo) {
            by_commit.insert(r.commit.clone(), r);
        }
    }
    // Newest first (author time, RFC 3339 in UTC, sorts as text): each commit's lines are
    // carried through the changes of the later ones to where they are now.
    let mut records: Vec<CommitRecord> = by_commit.into_values().collect();
    records.sort_by(|a, b| {
        b.authored_at
            .cmp(&a.authored_at)
            .then_with(|| a.commit.cmp(&b.commit))
    });
    let mut later: HashMap<String, Vec<Option<Vec<trawl_core::records::Hunk>>>> = HashMap::new();
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let mut spans: Vec<(String, u32, u32)> = Vec::new();
        for path in &r.paths {
            let own = r.hunks.iter().find(|f| &f.path == path);
            let after = later.entry(path.clone()).or_default();
            if let Some(own) = own
                && after.len() <= MAX_CARRY
            {
                let chain: Vec<Option<&[trawl_core::records::Hunk]>> =
                    after.iter().rev().map(Option::as_deref).collect();
                for (a, b) in crate::touched::current_lines(&own.hunks, &chain) {
                    spans.push((path.clone(), a, b));
                }
            }
            after.push(own.map(|f| f.hunks.clone()));
        }
        out.push(commit_doc(r, &spans, defs));
    }
    Ok(out)
}

/// The innermost definitions of `repo` whose lines meet `spans`, in span order, each once.
fn touched_names(
    repo: &RepoId,
    spans: &[(String, u32, u32)],
    defs: &DefinitionLines,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (path, a, b) in spans {
        let Some(file) = defs.get(&(repo.clone(), path.clone())) else {
            continue;
        };
        let meets: Vec<&(u32, u32, String)> =
            file.iter().filter(|(s, e, _)| s <= b && a <= e).collect();
        for d in &meets {
            // A container whose member also meets the span is not what changed.
            let holds_another = meets.iter().any(|o| {
                !std::ptr::eq(*o, *d) && d.0 <= o.0 && o.1 <= d.1 && (o.0, o.1) != (d.0, d.1)
            });
            if !holds_another && !names.contains(&d.2) {
                names.push(d.2.clone());
            }
        }
        if names.len() >= MAX_TOUCHED_NAMES {
            names.truncate(MAX_TOUCHED_NAMES);
            break;
        }
    }
    names
}

fn commit_doc(r: CommitRecord, spans: &[(String, u32, u32)], defs: &DefinitionLines) -> LiveDoc {
    let sha = r.commit.to_string();
    let short = &sha[..sha.len().min(12)];
    let summary = r.message.lines().next().unwrap_or_default().to_owned();
    let mut text = r.message.clone();
    if !r.paths.is_empty() {
        text.push_str("\n\nchanged: ");
        text.push_str(&r.paths.join(", "));
    }
    let names = touched_names(&r.repo_id, spans, defs);
    if !names.is_empty() {
        text.push('\n');
        text.push_str(&trawl_index::docs::touched_line(&names));
    }
    let header = trawl_index::docs::commit_header(short, &r.authored_at, &summary);
    let touched: Vec<String> = spans
        .iter()
        .take(MAX_TOUCHED_SPANS)
        .map(|(p, a, b)| trawl_index::docs::touched_span(p, *a, *b))
        .collect();
    // The spans move when later commits change the same files: they are part of the doc's
    // content, so a generation replaces the doc when they move.
    let hashed = format!("{text}\n{}", touched.join("\n"));
    let doc = DocRow {
        schema_version: trawl_index::docs::DOC_VERSION,
        ord: 0,
        chunk_id: trawl_core::hash::chunk_id(&r.repo_id, "", COMMIT_KIND.as_str(), &sha, 0),
        content_hash: trawl_core::hash::content_hash(COMMIT_KIND.as_str(), &header, &hashed),
        has_vector: false,
        repo_id: r.repo_id,
        commit: r.commit,
        path: String::new(),
        language: String::new(),
        kind: COMMIT_KIND,
        symbol: Some(short.to_owned()),
        qualified_name: None,
        header,
        start_line: 1,
        end_line: text.lines().count().max(1) as u32,
        text,
        parent_id: None,
        children_ids: Vec::new(),
        calls: Vec::new(),
        call_ids: Vec::new(),
        imports: Vec::new(),
        members: Vec::new(),
        touched,
    };
    LiveDoc {
        doc,
        vector: None,
        prose: None,
    }
}

/// A file or chunk the run has not finished with.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Straggler {
    pub repo: String,
    pub path: String,
    /// `chunking` (no chunk part for this version of the file yet) or `embedding` (chunks
    /// without a vector in the space).
    pub waiting_for: &'static str,
}

/// How far the pipeline is with what the fetcher last published: every indexed file of
/// every repository's last manifest, chunked? every live chunk, embedded?
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Completion {
    pub files: u64,
    pub files_chunked: u64,
    pub chunks: u64,
    pub chunks_embedded: u64,
    /// Sorted; one entry per file.
    pub stragglers: Vec<Straggler>,
    /// When the whole live set was read and only vectors are missing: what they wait for,
    /// so that the next look checks the new embedding parts instead of reading the live set
    /// again ([`Completion::recheck`]).
    #[serde(skip)]
    pub waiting: Option<Box<WaitingVectors>>,
}

/// The chunks of a whole-set completion check still waiting for their vectors.
#[derive(Clone, Debug, Default)]
pub struct WaitingVectors {
    /// The repositories' fingerprints when the set was read: a change means other inputs
    /// (a new fetch run, new chunk parts), and the set is read again.
    fingerprints: std::collections::BTreeMap<RepoId, String>,
    /// The embedding parts of the space already looked at.
    parts: std::collections::HashSet<String>,
    /// Each straggler's content hashes still without a vector.
    hashes: std::collections::BTreeMap<Straggler, std::collections::HashSet<ContentHash>>,
}

impl Completion {
    /// Nothing left to wait for.
    pub fn is_complete(&self) -> bool {
        self.stragglers.is_empty()
    }

    /// Looks again at a check that read the whole live set and found only vectors missing,
    /// reading only the embedding parts written since (and the repositories' fingerprints):
    /// `Ok(true)` with the counts brought up to date while that holds, `Ok(false)` when the
    /// whole check must run again (the inputs changed, every vector arrived — the build then
    /// needs the set with them — or there was nothing to look at).
    pub async fn recheck(
        &mut self,
        store: &Store,
        space: Option<&Space>,
    ) -> Result<bool, CompactError> {
        let (Some(w), Some(space)) = (self.waiting.as_mut(), space) else {
            return Ok(false);
        };
        if repo_fingerprints(store, Some(space)).await? != w.fingerprints {
            return Ok(false);
        }
        let mut arrived: std::collections::HashSet<ContentHash> = std::collections::HashSet::new();
        for key in store.list(&keys::embedding_space(&space.key())).await? {
            if !key.ends_with(".parquet") || w.parts.contains(&key) {
                continue;
            }
            if let Some(bytes) = store.get(&key).await? {
                let rows: Vec<EmbeddingRecord> = trawl_core::records::from_parquet(bytes)?;
                arrived.extend(rows.into_iter().map(|r| r.content_hash));
            }
            w.parts.insert(key);
        }
        for hashes in w.hashes.values_mut() {
            let before = hashes.len();
            hashes.retain(|h| !arrived.contains(h));
            self.chunks_embedded += (before - hashes.len()) as u64;
        }
        w.hashes.retain(|_, hashes| !hashes.is_empty());
        self.stragglers = w.hashes.keys().cloned().collect();
        Ok(!w.hashes.is_empty())
    }
}

/// Measures [`Completion`] from the store alone — manifests, chunk parts (named by
/// `chunker_version`) and the live set's vectors — so it holds whatever the workers did:
/// restarts and redeliveries neither hide nor double-count work. While files wait for
/// chunking only those are counted (listing parts is cheap; the live set is a join over all
/// of them): `chunks` stays 0 and no live set is returned (a build then reads one itself).
/// Otherwise the live set comes back too, with the fingerprints taken before it, for the
/// build that follows. When the live generation recorded the repositories' fingerprints,
/// only those that changed since are counted and read (the rest are complete as it holds
/// them), and the set is theirs: an incremental build.
pub async fn completion(
    store: &Store,
    space: Option<&Space>,
    chunker_version: &str,
    spill_memory: usize,
) -> Result<(Completion, Option<LiveSet>), CompactError> {
    let mut c = Completion::default();
    let mut stragglers = std::collections::BTreeSet::new();
    // Fingerprinted before anything is read: inputs that change meanwhile make the next
    // compaction rebuild, never the other way round. Repositories whose fingerprint the live
    // generation recorded are complete as it holds them: only the others are looked at.
    let fingerprints = repo_fingerprints(store, space).await?;
    // Listed before the live set is read, so that a part written meanwhile counts as new to
    // a later look ([`Completion::recheck`]), never as seen.
    let parts: std::collections::HashSet<String> = match space {
        Some(space) => store
            .list(&keys::embedding_space(&space.key()))
            .await?
            .into_iter()
            .collect(),
        None => std::collections::HashSet::new(),
    };
    let live = trawl_index::generation::live(store).await?;
    let changed = live
        .as_ref()
        .and_then(|m| changed_since(m, space, &fingerprints));
    let mut states = listed_states(store).await?;
    if let Some(changed) = &changed {
        states.retain(|s| changed.contains(&s.repo));
    }
    for state in states {
        let Some(bytes) = store
            .get(&keys::manifest(&state.repo, &state.last_commit))
            .await?
        else {
            continue;
        };
        let rows: Vec<ManifestRow> = trawl_core::records::from_parquet(bytes)?;
        let parts: std::collections::HashSet<String> = store
            .list(&format!("chunks/repo={}/", state.repo.key()))
            .await?
            .into_iter()
            .collect();
        for row in rows.iter().filter(|r| r.skip_reason.is_none()) {
            let Some(blob) = &row.blob else { continue };
            c.files += 1;
            if parts.contains(&keys::chunk_part(
                &row.repo_id,
                &row.path,
                blob,
                chunker_version,
            )) {
                c.files_chunked += 1;
            } else {
                stragglers.insert(Straggler {
                    repo: row.repo_id.to_string(),
                    path: row.path.clone(),
                    waiting_for: "chunking",
                });
            }
        }
    }
    if !stragglers.is_empty() {
        // Files still to chunk: the live set (a join over every part) can wait.
        c.stragglers = stragglers.into_iter().collect();
        return Ok((c, None));
    }
    // Commit messages are searched by their words only: nothing waits for them.
    let mut waiting: std::collections::BTreeMap<Straggler, std::collections::HashSet<ContentHash>> =
        std::collections::BTreeMap::new();
    let mut count = |docs: &[LiveDoc]| {
        for d in docs.iter().filter(|d| d.doc.kind != COMMIT_KIND) {
            c.chunks += 1;
            if d.vector.is_some() {
                c.chunks_embedded += 1;
            } else if space.is_some() {
                let s = Straggler {
                    repo: d.doc.repo_id.to_string(),
                    path: d.doc.path.clone(),
                    waiting_for: "embedding",
                };
                waiting
                    .entry(s.clone())
                    .or_default()
                    .insert(d.doc.content_hash);
                stragglers.insert(s);
            }
        }
    };
    let set = match changed {
        Some(changed) => {
            let mut set = live_set_of(store, space, Some(&changed)).await?;
            set.base = live.map(|m| m.generation);
            count(&set.docs);
            set
        }
        // The whole set: through local files, counted a shard at a time (the build reads
        // the files again), never held whole.
        None => {
            use futures::TryStreamExt;
            let spilled = crate::spill::spill_live_set(store, space, spill_memory).await?;
            let mut shards = std::pin::pin!(spilled.shards(COUNTED_SHARDS).await?);
            while let Some((_, docs)) = shards.try_next().await? {
                count(&docs);
            }
            LiveSet {
                runs: spilled.runs.clone(),
                repos: spilled.repos,
                spilled: Some(Box::new(spilled)),
                ..LiveSet::default()
            }
        }
    };
    c.stragglers = stragglers.into_iter().collect();
    if set.only.is_none() && !waiting.is_empty() {
        // The whole set was read: the next looks check only the vectors that arrive.
        c.waiting = Some(Box::new(WaitingVectors {
            fingerprints: fingerprints.clone(),
            parts,
            hashes: waiting,
        }));
    }
    Ok((
        c,
        Some(LiveSet {
            fingerprints: Some(fingerprints),
            ..set
        }),
    ))
}

/// Parts the completion check reads the whole live set in, one at a time.
const COUNTED_SHARDS: u32 = 64;

/// A finished fetch run, from its report (`runs/<run>.json`, written when the run ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRun {
    pub run: RunId,
    pub finished_at: SystemTime,
}

/// The newest run report of `stage`, read as `T`. Run ids begin with their start time, so
/// reports are read newest first and the search stops at the first one of the stage that
/// reads as `T`; others are skipped (with a warning when the stage matched).
pub async fn latest_report<T: serde::de::DeserializeOwned>(
    store: &Store,
    stage: Stage,
) -> Result<Option<T>, CompactError> {
    let mut keys = store.list("runs/").await?;
    keys.reverse();
    for key in &keys {
        let Ok(Some(bytes)) = store.get(key).await else {
            continue;
        };
        match serde_json::from_slice::<RunHead>(&bytes) {
            Ok(head) if head.stage == stage => match serde_json::from_slice(&bytes) {
                Ok(r) => return Ok(Some(r)),
                // Written by another release: an older one of the stage may still read.
                Err(e) => tracing::warn!(key, error = %e, "a run report of another form; skipped"),
            },
            _ => {}
        }
    }
    Ok(None)
}

/// The newest fetch run that finished at or after `since` (`None`: any).
pub async fn fetch_run_since(
    store: &Store,
    since: Option<SystemTime>,
) -> Result<Option<FetchRun>, CompactError> {
    let Some(head) = latest_report::<RunHead>(store, Stage::Fetch).await? else {
        return Ok(None);
    };
    let Some(finished_at) = head.finished_at else {
        return Ok(None);
    };
    let fresh = since.is_none_or(|s| finished_at >= s);
    Ok(fresh.then_some(FetchRun {
        run: head.run,
        finished_at,
    }))
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn versions_are_ordered_by_number_not_by_text() {
        assert!(version_key("10") > version_key("9"));
        assert!(version_key("3") > version_key("2"));
        assert!(version_key("2-windows") > version_key("2"));
    }

    #[test]
    fn only_the_newest_chunker_version_of_each_file_stays() {
        let mut rows = vec![
            ("r", "a.py", "2"),
            ("r", "a.py", "3"),
            ("r", "a.py", "2"),
            ("r", "b.py", "2"),
            ("r", "c.py", "10"),
            ("r", "c.py", "9"),
            ("other", "a.py", "2"),
        ];
        newest_per_key(&mut rows, |&(repo, path, version)| (repo, path, version));
        assert_eq!(
            rows,
            [
                ("r", "a.py", "3"),
                ("r", "b.py", "2"),
                ("r", "c.py", "10"),
                ("other", "a.py", "2")
            ]
        );
    }
}

//! Index generations on the store: `index/gen=<n>/manifest.json` and its shards' segments,
//! made live by swapping `index/CURRENT`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use trawl_core::ids::{Generation, RunId};
use trawl_core::store::{Store, Version};

use crate::IndexError;
use trawl_core::space::Space;

/// The generation format written by this release. A reader refuses newer formats, and reads
/// every older one it lists in [`READABLE_FORMATS`].
pub const FORMAT_VERSION: u32 = 1;
/// Formats this release reads.
pub const READABLE_FORMATS: &[u32] = &[1];
/// The pointer to the live generation.
pub const CURRENT: &str = "index/CURRENT";

/// `index/CURRENT`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Current {
    pub format_version: u32,
    pub generation: Generation,
    pub manifest: String,
    /// [`fingerprint`] of the manifest's bytes: a generation is identified by number **and**
    /// content, so a reader never trusts a directory or cache by its name alone. (Absent in
    /// pointers written before it existed.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_hash: Option<String>,
}

/// The identity of an object's bytes: blake3, hex.
pub fn fingerprint(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// One segment of a shard; its directory may belong to an older generation (reused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// `index/gen=<g>/shard=<k>/seg=<s>`
    pub dir: String,
    pub docs: u64,
    pub vectors: u64,
    /// Of `vectors`, the prose views' ([`trawl_core::prose`], keyed by
    /// [`crate::segment::prose_key`]). `None` in a manifest written before they were counted:
    /// read as "may hold some".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prose_vectors: Option<u64>,
    pub bytes: u64,
    /// Names of the text index's files under `<dir>/text/`.
    pub text_files: Vec<String>,
}

/// A shard: its segments, and the ords of their docs that are deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub shard: u32,
    pub segments: Vec<SegmentEntry>,
    /// `index/gen=<n>/shard=<k>/tombstones.json`, when any doc is deleted.
    pub tombstones: Option<String>,
    pub live_docs: u64,
}

/// `<shard>/tombstones.json`: deleted ords by segment directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstones {
    pub deleted: BTreeMap<String, Vec<u64>>,
}

impl Tombstones {
    pub fn count(&self) -> usize {
        self.deleted.values().map(Vec::len).sum()
    }
}

/// What a generation holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub chunks: u64,
    pub with_vector: u64,
    /// Chunks indexed for text only, still waiting for a vector.
    pub text_only: u64,
    pub repos: u64,
    /// Commit messages indexed as `commit` docs (words only), beside the chunks.
    #[serde(default)]
    pub commits: u64,
}

/// How a generation was built.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BuildStats {
    pub full: bool,
    /// An incremental build: how many repositories' docs were rebuilt (every other one's
    /// were kept as the previous generation held them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repos_rebuilt: Option<u64>,
    pub shards_reused: u32,
    pub shards_delta: u32,
    pub shards_rebuilt: u32,
    pub segments_written: u32,
    pub docs_written: u64,
    pub tombstones_written: u64,
    pub bytes_written: u64,
    pub seconds: f64,
}

impl BuildStats {
    /// Adds another shard's counts (not the time).
    pub fn add(&mut self, o: &BuildStats) {
        self.shards_reused += o.shards_reused;
        self.shards_delta += o.shards_delta;
        self.shards_rebuilt += o.shards_rebuilt;
        self.segments_written += o.segments_written;
        self.docs_written += o.docs_written;
        self.tombstones_written += o.tombstones_written;
        self.bytes_written += o.bytes_written;
    }

    /// Counts a segment written.
    pub fn written(&mut self, seg: &SegmentEntry) {
        self.segments_written += 1;
        self.docs_written += seg.docs;
        self.bytes_written += seg.bytes;
    }
}

/// `index/gen=<n>/manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub generation: Generation,
    /// RFC 3339.
    pub created_at: String,
    /// The vector space, when any chunk has a vector.
    pub space: Option<Space>,
    pub shard_count: u32,
    pub shards: Vec<ShardEntry>,
    pub counts: Counts,
    /// The runs whose output this generation indexes (the repos' last fetch runs).
    pub source_runs: Vec<RunId>,
    pub previous: Option<Generation>,
    pub build: BuildStats,
    /// The compactor's fingerprint of the inputs it was built from, when known: a later
    /// compaction with the same inputs has nothing to build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<String>,
    /// `index/gen=<n>/chunks.parquet`: the live chunks, sorted by (repository, path, line),
    /// for `trawl sql`, DuckDB, Spark and Trino.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks_table: Option<String>,
    /// Per repository, the fingerprint of the inputs its docs were built from (only for
    /// repositories whose docs all had their vectors): the next compaction rebuilds only
    /// the repositories whose fingerprint changed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub repo_inputs: std::collections::BTreeMap<trawl_core::ids::RepoId, String>,
}

/// `index/gen=<n>/chunks.parquet`.
pub fn chunks_table_key(generation: Generation) -> String {
    format!("{}chunks.parquet", gen_dir(generation))
}

/// `index/gen=<n>/`.
pub fn gen_dir(generation: Generation) -> String {
    format!("index/gen={generation}/")
}

/// `index/gen=<n>/manifest.json`.
pub fn manifest_key(generation: Generation) -> String {
    format!("{}manifest.json", gen_dir(generation))
}

fn check_format(found: u32, what: &str) -> Result<(), IndexError> {
    if READABLE_FORMATS.contains(&found) {
        return Ok(());
    }
    Err(IndexError::Format(if found > FORMAT_VERSION {
        format!(
            "{what} has index format {found}, written by a newer trawl (this one reads {READABLE_FORMATS:?}): upgrade trawl"
        )
    } else {
        format!(
            "{what} has index format {found}, which this trawl no longer reads: run `trawl compact --full` to rebuild"
        )
    }))
}

/// The live generation and its version (for the swap), if any.
pub async fn current(store: &Store) -> Result<Option<(Current, Version)>, IndexError> {
    let Some((bytes, version)) = store.get_versioned(CURRENT).await? else {
        return Ok(None);
    };
    let cur: Current = serde_json::from_slice(&bytes)
        .map_err(|e| IndexError::Format(format!("{CURRENT} is not readable: {e}")))?;
    check_format(cur.format_version, CURRENT)?;
    Ok(Some((cur, version)))
}

/// The live generation's manifest (the one `CURRENT` names), when one is live.
pub async fn live_manifest(store: &Store) -> Result<Option<Manifest>, IndexError> {
    let Some((cur, _)) = current(store).await? else {
        return Ok(None);
    };
    Ok(Some(manifest(store, cur.generation).await?))
}

/// Reads a generation's manifest.
pub async fn manifest(store: &Store, generation: Generation) -> Result<Manifest, IndexError> {
    Ok(manifest_with_hash(store, generation).await?.0)
}

/// Reads a generation's manifest and the [`fingerprint`] of its bytes.
pub async fn manifest_with_hash(
    store: &Store,
    generation: Generation,
) -> Result<(Manifest, String), IndexError> {
    let key = manifest_key(generation);
    let bytes = store.get(&key).await?.ok_or_else(|| {
        IndexError::Format(format!("generation {generation} has no manifest ({key})"))
    })?;
    let raw: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| IndexError::Format(format!("{key}: {e}")))?;
    let format = raw["format_version"].as_u64().unwrap_or(0) as u32;
    check_format(format, &key)?;
    let m = serde_json::from_value(raw).map_err(|e| IndexError::Format(format!("{key}: {e}")))?;
    Ok((m, fingerprint(&bytes)))
}

/// Writes a generation's manifest; returns the [`fingerprint`] of what was written.
pub async fn put_manifest(store: &Store, m: &Manifest) -> Result<String, IndexError> {
    let bytes = bytes::Bytes::from(serde_json::to_vec_pretty(m).expect("serialisable"));
    let hash = fingerprint(&bytes);
    store.put(&manifest_key(m.generation), bytes).await?;
    Ok(hash)
}

/// The live generation's manifest, if any.
pub async fn live(store: &Store) -> Result<Option<Manifest>, IndexError> {
    match current(store).await? {
        Some((cur, _)) => Ok(Some(manifest(store, cur.generation).await?)),
        None => Ok(None),
    }
}

/// Generations with a manifest, ascending.
pub async fn generations(store: &Store) -> Result<Vec<Generation>, IndexError> {
    let mut out: Vec<Generation> = store
        .list("index/")
        .await?
        .iter()
        .filter_map(|k| {
            let rest = k.strip_prefix("index/gen=")?;
            let (n, tail) = rest.split_once('/')?;
            (tail == "manifest.json")
                .then(|| n.parse().ok().map(Generation))
                .flatten()
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Makes `generation` (whose manifest has `manifest_hash`) live if `CURRENT` is still at
/// `expected`.
pub async fn swap(
    store: &Store,
    generation: Generation,
    manifest_hash: &str,
    expected: Option<&Version>,
) -> Result<(), IndexError> {
    let cur = Current {
        format_version: FORMAT_VERSION,
        generation,
        manifest: manifest_key(generation),
        manifest_hash: Some(manifest_hash.to_owned()),
    };
    let bytes = bytes::Bytes::from(serde_json::to_vec_pretty(&cur).expect("serialisable"));
    if store.swap(CURRENT, bytes, expected).await? {
        Ok(())
    } else {
        Err(IndexError::Conflict(
            "another compaction changed index/CURRENT meanwhile: run `trawl compact` again".into(),
        ))
    }
}

/// Points `CURRENT` back at the generation before the live one. Returns (from, to).
pub async fn rollback(store: &Store) -> Result<(Generation, Generation), IndexError> {
    let (cur, version) = current(store)
        .await?
        .ok_or_else(|| IndexError::Conflict("there is no index to roll back".into()))?;
    let older: Vec<Generation> = generations(store)
        .await?
        .into_iter()
        .filter(|&g| g < cur.generation)
        .collect();
    let Some(&to) = older.last() else {
        return Err(IndexError::Conflict(format!(
            "generation {} is the oldest kept: nothing to roll back to",
            cur.generation
        )));
    };
    let (_, hash) = manifest_with_hash(store, to).await?;
    swap(store, to, &hash, Some(&version)).await?;
    Ok((cur.generation, to))
}

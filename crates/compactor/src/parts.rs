//! Retention of chunk and embedding parts: a chunk part (one file version's chunks, `chunks/repo=<k>/<hash>`) that
//! no live file version needs — a superseded version of a file, a deleted file, an older
//! chunker's output — is deleted once the grace period has passed.
//!
//! What is needed is read from the live generation's `chunks` table: its rows name the
//! (repository, path, blob, chunker version) of every live chunk, and those four make the
//! part's key; their content hashes name the vectors in use (an embedding part of the live
//! vector space goes once none of its vectors is). Only a live generation built from the store's current inputs may decide this
//! (after a rollback, the live generation is older than the manifests, and parts it does not
//! name may be needed by the next build): the caller checks.

use std::collections::HashSet;
use std::time::Duration;

use trawl_core::store::{Store, keys};

use crate::CompactError;

/// What a live `chunks` table (Parquet of chunk records) needs kept.
#[derive(Debug, Default)]
pub struct Needed {
    /// Chunk part keys.
    pub parts: HashSet<String>,
    /// Content hashes of live chunks (their vectors).
    pub hashes: HashSet<String>,
}

/// The part keys and content hashes a live `chunks` table needs.
pub fn needed_parts(table: bytes::Bytes) -> Result<Needed, CompactError> {
    use arrow_array::{Array, StringArray};
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let bad = |e: &dyn std::fmt::Display| CompactError::Format(format!("live chunks table: {e}"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(table).map_err(|e| bad(&e))?;
    let mask = ProjectionMask::columns(
        builder.parquet_schema(),
        ["repo_id", "path", "blob", "chunker_version", "content_hash"],
    );
    let reader = builder.with_projection(mask).build().map_err(|e| bad(&e))?;
    let mut needed = Needed::default();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let col = |name: &str| -> Result<StringArray, CompactError> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| bad(&format!("no text column {name}")))
        };
        let (repo, path, blob, version, hash) = (
            col("repo_id")?,
            col("path")?,
            col("blob")?,
            col("chunker_version")?,
            col("content_hash")?,
        );
        for i in 0..batch.num_rows() {
            needed.hashes.insert(hash.value(i).to_owned());
            if repo.is_null(i) || blob.is_null(i) {
                continue;
            }
            let repo_id = trawl_core::RepoId::try_from(repo.value(i).to_owned())?;
            let blob_id = trawl_core::BlobId::try_from(blob.value(i).to_owned())?;
            needed.parts.insert(keys::chunk_part(
                &repo_id,
                path.value(i),
                &blob_id,
                version.value(i),
            ));
        }
    }
    Ok(needed)
}

/// Deletes the chunk parts `needed` does not name, older than `grace`. Returns how many.
pub async fn collect_chunk_parts<S: std::hash::BuildHasher>(
    store: &Store,
    needed: &HashSet<String, S>,
    grace: Duration,
) -> Result<u64, CompactError> {
    let mut deleted = 0;
    for (key, modified) in store.list_modified("chunks/").await? {
        let old = modified.elapsed().is_ok_and(|age| age >= grace);
        if old && key.ends_with(".parquet") && !needed.contains(&key) {
            store.delete(&key).await?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Deletes the embedding parts under `space_dir` (one vector space) older than `grace` that
/// hold no vector of a live chunk. Returns how many. A part holds many content hashes: it
/// stays while any of them is live (the org-wide cache keeps what is in use).
pub async fn collect_embedding_parts<S: std::hash::BuildHasher>(
    store: &Store,
    space_dir: &str,
    live_hashes: &HashSet<String, S>,
    grace: Duration,
) -> Result<u64, CompactError> {
    use arrow_array::{Array, StringArray};
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let mut deleted = 0;
    for (key, modified) in store.list_modified(space_dir).await? {
        if !key.ends_with(".parquet") || !modified.elapsed().is_ok_and(|age| age >= grace) {
            continue;
        }
        let Some(bytes) = store.get(&key).await? else {
            continue;
        };
        let bad = |e: &dyn std::fmt::Display| CompactError::Format(format!("{key}: {e}"));
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| bad(&e))?;
        let mask = ProjectionMask::columns(builder.parquet_schema(), ["content_hash"]);
        let reader = builder.with_projection(mask).build().map_err(|e| bad(&e))?;
        let mut in_use = false;
        for batch in reader {
            let batch = batch.map_err(|e| bad(&e))?;
            let hashes = batch
                .column_by_name("content_hash")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| bad(&"no content_hash column"))?;
            if (0..hashes.len()).any(|i| live_hashes.contains(hashes.value(i))) {
                in_use = true;
                break;
            }
        }
        if !in_use {
            store.delete(&key).await?;
            deleted += 1;
        }
    }
    Ok(deleted)
}

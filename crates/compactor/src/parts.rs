//! Retention of chunk parts: a part (one file version's chunks, `chunks/repo=<k>/<hash>`) that
//! no live file version needs — a superseded version of a file, a deleted file, an older
//! chunker's output — is deleted once the grace period has passed.
//!
//! What is needed is read from the live generation's `chunks` table: its rows name the
//! (repository, path, blob, chunker version) of every live chunk, and those four make the
//! part's key. Only a live generation built from the store's current inputs may decide this
//! (after a rollback, the live generation is older than the manifests, and parts it does not
//! name may be needed by the next build): the caller checks.

use std::collections::HashSet;
use std::time::Duration;

use trawl_core::store::{Store, keys};

use crate::CompactError;

/// The part keys a live `chunks` table (Parquet of chunk records) needs.
pub fn needed_parts(table: bytes::Bytes) -> Result<HashSet<String>, CompactError> {
    use arrow_array::{Array, StringArray};
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let bad = |e: &dyn std::fmt::Display| CompactError::Format(format!("live chunks table: {e}"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(table).map_err(|e| bad(&e))?;
    let mask = ProjectionMask::columns(
        builder.parquet_schema(),
        ["repo_id", "path", "blob", "chunker_version"],
    );
    let reader = builder.with_projection(mask).build().map_err(|e| bad(&e))?;
    let mut needed = HashSet::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let col = |name: &str| -> Result<StringArray, CompactError> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| bad(&format!("no text column {name}")))
        };
        let (repo, path, blob, version) = (
            col("repo_id")?,
            col("path")?,
            col("blob")?,
            col("chunker_version")?,
        );
        for i in 0..batch.num_rows() {
            if repo.is_null(i) || blob.is_null(i) {
                continue;
            }
            let repo_id = trawl_core::RepoId::try_from(repo.value(i).to_owned())?;
            let blob_id = trawl_core::BlobId::try_from(blob.value(i).to_owned())?;
            needed.insert(keys::chunk_part(
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

//! The live `chunks` table of an incremental build: the live generation's table with the
//! rebuilt repositories' rows replaced by their new ones, still sorted by (repository, path,
//! line) — in Arrow, without turning rows into records, and streamed: the old table is read a
//! batch at a time from a local copy and the result written to a local file, so that what is
//! held is a batch and the rebuilt repositories' rows, not the table.

use std::collections::BTreeSet;
use std::path::Path;

use arrow_array::{Array, RecordBatch, StringArray};
use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use trawl_core::ids::RepoId;

use crate::CompactError;

fn bad(e: &dyn std::fmt::Display) -> CompactError {
    CompactError::Format(format!("chunks table: {e}"))
}

/// The batches of a Parquet table in memory (the rebuilt repositories' rows).
fn batches(bytes: Bytes) -> Result<Vec<RecordBatch>, CompactError> {
    ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?
        .map(|b| b.map_err(|e| bad(&e)))
        .collect()
}

/// The table `old` (a local Parquet file) without the rows of the repositories in `only`,
/// plus `new` (their rows now, if any), written to `out`, sorted by (repository, path, line,
/// chunk id) as both are: the repositories' runs of rows are spliced in order, without
/// sorting again.
pub fn replace_repos(
    old: &Path,
    new: Option<Bytes>,
    only: &BTreeSet<RepoId>,
    out: &Path,
) -> Result<(), CompactError> {
    let file = std::fs::File::open(old).map_err(|e| bad(&e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    // The table's own schema (the same code wrote both).
    let schema: SchemaRef = reader.schema().clone();
    let rebuilt = |repo: &str| only.iter().any(|r| r.as_str() == repo);
    // The rebuilt repositories' runs, in repository order, as slices of their batches.
    let mut fresh: Vec<(String, RecordBatch)> = Vec::new();
    for batch in match new {
        Some(n) => batches(n)?,
        None => Vec::new(),
    } {
        let batch = batch.with_schema(schema.clone()).map_err(|e| bad(&e))?;
        for (repo, at, len) in runs(&batch)? {
            if rebuilt(&repo) {
                fresh.push((repo, batch.slice(at, len)));
            }
        }
    }
    let mut fresh = fresh.into_iter().peekable();
    let sink = std::fs::File::create(out).map_err(|e| bad(&e))?;
    let mut w = ArrowWriter::try_new(
        sink,
        schema.clone(),
        Some(trawl_core::records::parquet_properties()),
    )
    .map_err(|e| bad(&e))?;
    for batch in reader.build().map_err(|e| bad(&e))? {
        let batch = batch.map_err(|e| bad(&e))?;
        for (repo, at, len) in runs(&batch)? {
            // Every rebuilt repository that sorts before this one goes first.
            while let Some((_, b)) = fresh.next_if(|(r, _)| r.as_str() < repo.as_str()) {
                w.write(&b).map_err(|e| bad(&e))?;
            }
            if !rebuilt(&repo) {
                w.write(&batch.slice(at, len)).map_err(|e| bad(&e))?;
            }
        }
    }
    for (_, b) in fresh {
        w.write(&b).map_err(|e| bad(&e))?;
    }
    w.close().map_err(|e| bad(&e))?;
    Ok(())
}

/// The runs of rows of one repository in a batch sorted by repository: (repository, first
/// row, rows).
fn runs(batch: &RecordBatch) -> Result<Vec<(String, usize, usize)>, CompactError> {
    let repo = batch
        .column_by_name("repo_id")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .ok_or_else(|| bad(&"no repo_id column"))?;
    let mut out: Vec<(String, usize, usize)> = Vec::new();
    for i in 0..repo.len() {
        match out.last_mut() {
            Some((r, _, len)) if r == repo.value(i) => *len += 1,
            _ => out.push((repo.value(i).to_owned(), i, 1)),
        }
    }
    Ok(out)
}

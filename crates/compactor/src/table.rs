//! The live `chunks` table of an incremental build: the live generation's table with the
//! rebuilt repositories' rows replaced by their new ones, still sorted by (repository, path,
//! line) — in Arrow, without turning rows into records.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use bytes::Bytes;
use datafusion::arrow::compute::concat_batches;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use trawl_core::ids::RepoId;
use trawl_core::records::ChunkRecord;

use crate::CompactError;

/// Rows a row group of the table holds, as the whole-set build writes it.
const ROW_GROUP: usize = 64 * 1024;

fn bad(e: &dyn std::fmt::Display) -> CompactError {
    CompactError::Format(format!("chunks table: {e}"))
}

fn batches(bytes: Bytes) -> Result<Vec<RecordBatch>, CompactError> {
    ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?
        .map(|b| b.map_err(|e| bad(&e)))
        .collect()
}

/// `old` without the rows of the repositories in `only`, plus `new` (their rows now, if
/// any), sorted by (repository, path, line, chunk id) as both are: the repositories' runs of
/// rows are spliced in order, without sorting again.
pub fn replace_repos(
    old: Bytes,
    new: Option<Bytes>,
    only: &BTreeSet<RepoId>,
) -> Result<Bytes, CompactError> {
    let old = batches(old)?;
    let new = match new {
        Some(n) => batches(n)?,
        None => Vec::new(),
    };
    // The tables' own schema (both are written by the same code), or the record's for none.
    let schema = old
        .first()
        .or(new.first())
        .map_or_else(ChunkRecord::schema, RecordBatch::schema);
    let whole = |parts: Vec<RecordBatch>| -> Result<RecordBatch, CompactError> {
        let parts = parts
            .into_iter()
            .map(|b| b.with_schema(schema.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(&e))?;
        concat_batches(&schema, &parts).map_err(|e| bad(&e))
    };
    let (old, new) = (whole(old)?, whole(new)?);
    let (old_runs, new_runs) = (runs(&old)?, runs(&new)?);
    // Each repository's rows: the new ones for a rebuilt repository, else the old ones; in
    // repository order.
    let mut pieces: Vec<(&str, RecordBatch)> = Vec::new();
    for (repo, at, len) in &old_runs {
        if !only.iter().any(|r| r.as_str() == repo) {
            pieces.push((repo, old.slice(*at, *len)));
        }
    }
    for (repo, at, len) in &new_runs {
        if only.iter().any(|r| r.as_str() == repo) {
            pieces.push((repo, new.slice(*at, *len)));
        }
    }
    pieces.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<RecordBatch> = pieces.into_iter().map(|(_, b)| b).collect();
    let merged = concat_batches(&schema, &parts).map_err(|e| bad(&e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .build();
    let mut buf = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut buf, Arc::clone(&schema), Some(props)).map_err(|e| bad(&e))?;
    w.write(&merged).map_err(|e| bad(&e))?;
    w.close().map_err(|e| bad(&e))?;
    Ok(Bytes::from(buf))
}

/// The runs of rows of one repository in a table sorted by repository: (repository, first
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

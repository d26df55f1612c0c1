//! The live `chunks` table of an incremental build: the live generation's table with the
//! rebuilt repositories' rows replaced by their new ones, sorted by (repository, path, line)
//! again — in Arrow, without turning rows into records.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use bytes::Bytes;
use datafusion::arrow::compute::{
    SortColumn, concat_batches, filter_record_batch, lexsort_to_indices, take_record_batch,
};
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
/// any), sorted by (repository, path, line, chunk id).
pub fn replace_repos(
    old: Bytes,
    new: Option<Bytes>,
    only: &BTreeSet<RepoId>,
) -> Result<Bytes, CompactError> {
    let mut parts = Vec::new();
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
    for b in old {
        let repo = b
            .column_by_name("repo_id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            .ok_or_else(|| bad(&"no repo_id column"))?;
        let keep: BooleanArray = (0..repo.len())
            .map(|i| Some(!only.iter().any(|r| r.as_str() == repo.value(i))))
            .collect();
        let kept = filter_record_batch(&b, &keep).map_err(|e| bad(&e))?;
        parts.push(kept.with_schema(schema.clone()).map_err(|e| bad(&e))?);
    }
    for b in new {
        parts.push(b.with_schema(schema.clone()).map_err(|e| bad(&e))?);
    }
    let all = concat_batches(&schema, &parts).map_err(|e| bad(&e))?;
    let by = ["repo_id", "path", "start_line", "chunk_id"]
        .into_iter()
        .map(|name| {
            all.column_by_name(name)
                .cloned()
                .map(|values| SortColumn {
                    values,
                    options: None,
                })
                .ok_or_else(|| bad(&format!("no {name} column")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let order = lexsort_to_indices(&by, None).map_err(|e| bad(&e))?;
    let sorted = take_record_batch(&all, &order).map_err(|e| bad(&e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .build();
    let mut buf = Vec::new();
    let mut w =
        ArrowWriter::try_new(&mut buf, Arc::clone(&schema), Some(props)).map_err(|e| bad(&e))?;
    w.write(&sorted).map_err(|e| bad(&e))?;
    w.close().map_err(|e| bad(&e))?;
    Ok(Bytes::from(buf))
}

//! The live `chunks` table of an incremental build: the live generation's table with the
//! rebuilt repositories' rows replaced by their new ones, still sorted by (repository, path,
//! line) — in Arrow, without turning rows into records, and streamed from a local copy to a
//! local file, so that what is held is a row group and the rebuilt repositories' rows.
//!
//! A row group whose repository range (its `repo_id` statistics) holds none of the rebuilt
//! repositories is copied as it is, its compressed column chunks byte for byte; only the row
//! groups that hold a rebuilt repository are decoded, spliced and encoded again. A night
//! that changed a few repositories re-encodes a few row groups, not the table.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowSchemaConverter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData,
};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
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

/// What a splice did, for the logs and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spliced {
    /// Row groups copied as they were.
    pub copied: usize,
    /// Row groups decoded and written again.
    pub rewritten: usize,
    /// Rows written in all.
    pub rows: usize,
}

/// The table `old` (a local Parquet file) without the rows of the repositories in `only`,
/// plus `new` (their rows now, if any), written to `out` with `props` (its row group size
/// for the row groups it encodes), sorted by (repository, path, line, chunk id) as both
/// are: the repositories' runs of rows are spliced in order, without sorting again.
pub fn replace_repos(
    old: &Path,
    new: Option<Bytes>,
    only: &BTreeSet<RepoId>,
    out: &Path,
    props: WriterProperties,
) -> Result<Spliced, CompactError> {
    let file = File::open(old).map_err(|e| bad(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file.try_clone().map_err(|e| bad(&e))?)
        .map_err(|e| bad(&e))?;
    // The table's own schema (the same code wrote both).
    let schema: SchemaRef = builder.schema().clone();
    // With the page indexes, so that a copied row group keeps its own.
    let meta = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Optional)
        .parse_and_finish(&file)
        .map_err(|e| bad(&e))?;
    let repo_leaf = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().parts() == ["repo_id"])
        .ok_or_else(|| bad(&"no repo_id column"))?;
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

    let mut w = Writer::new(out, schema.clone(), props)?;
    // Rows to encode, held until a copied row group (or the end) follows them: neighbouring
    // rewritten row groups and new runs become full row groups again.
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut done = Spliced::default();
    for (i, rg) in meta.row_groups().iter().enumerate() {
        let range = repo_range(rg, repo_leaf);
        let holds_rebuilt = range.as_ref().is_none_or(|(lo, hi)| {
            only.iter().any(|r| {
                lo.as_slice() <= r.as_str().as_bytes() && r.as_str().as_bytes() <= hi.as_slice()
            })
        });
        // A few pending rows join the next row group rather than stand as a small one.
        let absorb = pending_rows(&pending) > 0 && pending_rows(&pending) < w.row_group / 4;
        if holds_rebuilt || absorb {
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(file.try_clone().map_err(|e| bad(&e))?)
                    .map_err(|e| bad(&e))?
                    .with_row_groups(vec![i])
                    .build()
                    .map_err(|e| bad(&e))?;
            for batch in reader {
                let batch = batch.map_err(|e| bad(&e))?;
                for (repo, at, len) in runs(&batch)? {
                    // Every rebuilt repository that sorts before this one goes first.
                    while let Some((_, b)) = fresh.next_if(|(r, _)| r.as_str() < repo.as_str()) {
                        pending.push(b);
                    }
                    if !rebuilt(&repo) {
                        pending.push(batch.slice(at, len));
                    }
                }
            }
            done.rewritten += 1;
            continue;
        }
        let (lo, _) = range.expect("a row group without a range holds a rebuilt repository");
        while let Some((_, b)) = fresh.next_if(|(r, _)| r.as_bytes() < lo.as_slice()) {
            pending.push(b);
        }
        done.rows += w.encode(&pending)?;
        pending.clear();
        done.rows += w.copy(&file, &meta, i)?;
        done.copied += 1;
    }
    pending.extend(fresh.map(|(_, b)| b));
    done.rows += w.encode(&pending)?;
    w.close()?;
    Ok(done)
}

fn pending_rows(pending: &[RecordBatch]) -> usize {
    pending.iter().map(RecordBatch::num_rows).sum()
}

/// The (lowest, highest) `repo_id` of a row group, from its statistics: bounds, which may
/// be truncated but never exclude a value of the row group. `None` without statistics.
fn repo_range(rg: &RowGroupMetaData, leaf: usize) -> Option<(Vec<u8>, Vec<u8>)> {
    let stats = rg.column(leaf).statistics()?;
    Some((
        stats.min_bytes_opt()?.to_vec(),
        stats.max_bytes_opt()?.to_vec(),
    ))
}

/// A Parquet writer that takes either Arrow batches (encoded in row groups of its
/// properties' size) or another file's row groups (copied as they are).
struct Writer {
    inner: SerializedFileWriter<File>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    row_group: usize,
    row_groups: usize,
}

impl Writer {
    fn new(
        out: &Path,
        schema: SchemaRef,
        mut props: WriterProperties,
    ) -> Result<Self, CompactError> {
        // As the Arrow writer does: the Arrow schema rides in the file's metadata.
        parquet::arrow::add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let props = Arc::new(props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)
            .map_err(|e| bad(&e))?;
        let row_group = props.max_row_group_row_count().unwrap_or(usize::MAX).max(1);
        let sink = File::create(out).map_err(|e| bad(&e))?;
        let inner = SerializedFileWriter::new(sink, parquet_schema.root_schema_ptr(), props)
            .map_err(|e| bad(&e))?;
        let factory = ArrowRowGroupWriterFactory::new(&inner, schema.clone());
        Ok(Self {
            inner,
            factory,
            schema,
            row_group,
            row_groups: 0,
        })
    }

    /// Encodes `batches` as row groups of at most the writer's size; returns the rows.
    fn encode(&mut self, batches: &[RecordBatch]) -> Result<usize, CompactError> {
        if batches.is_empty() {
            return Ok(0);
        }
        let all = datafusion::arrow::compute::concat_batches(&self.schema, batches)
            .map_err(|e| bad(&e))?;
        let mut at = 0;
        while at < all.num_rows() {
            let len = self.row_group.min(all.num_rows() - at);
            let part = all.slice(at, len);
            let mut writers = self
                .factory
                .create_column_writers(self.row_groups)
                .map_err(|e| bad(&e))?
                .into_iter();
            let mut chunks = Vec::new();
            for (field, column) in self.schema.fields().iter().zip(part.columns()) {
                for leaf in compute_leaves(field, column).map_err(|e| bad(&e))? {
                    let mut writer = writers
                        .next()
                        .ok_or_else(|| bad(&"too few column writers"))?;
                    writer.write(&leaf).map_err(|e| bad(&e))?;
                    chunks.push(writer.close().map_err(|e| bad(&e))?);
                }
            }
            let mut rg = self.inner.next_row_group().map_err(|e| bad(&e))?;
            for chunk in chunks {
                chunk.append_to_row_group(&mut rg).map_err(|e| bad(&e))?;
            }
            rg.close().map_err(|e| bad(&e))?;
            self.row_groups += 1;
            at += len;
        }
        Ok(all.num_rows())
    }

    /// Copies row group `i` of `from` (whose metadata is `meta`) as it is; returns its rows.
    fn copy(
        &mut self,
        from: &File,
        meta: &ParquetMetaData,
        i: usize,
    ) -> Result<usize, CompactError> {
        let rg = meta.row_group(i);
        let mut out = self.inner.next_row_group().map_err(|e| bad(&e))?;
        for (c, column) in rg.columns().iter().enumerate() {
            let close = ColumnCloseResult {
                bytes_written: column.compressed_size() as u64,
                rows_written: rg.num_rows() as u64,
                metadata: column.clone(),
                bloom_filter: None,
                column_index: meta
                    .column_index()
                    .and_then(|x| x.get(i))
                    .and_then(|x| x.get(c))
                    .cloned(),
                offset_index: meta
                    .offset_index()
                    .and_then(|x| x.get(i))
                    .and_then(|x| x.get(c))
                    .cloned(),
            };
            out.append_column(from, close).map_err(|e| bad(&e))?;
        }
        out.close().map_err(|e| bad(&e))?;
        self.row_groups += 1;
        Ok(rg.num_rows() as usize)
    }

    fn close(self) -> Result<(), CompactError> {
        self.inner.close().map_err(|e| bad(&e))?;
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::UInt32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use proptest::prelude::*;

    type Row = (String, String, u32);

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("repo_id", DataType::Utf8, false),
            Field::new("path", DataType::Utf8, false),
            Field::new("start_line", DataType::UInt32, false),
        ]))
    }

    fn batch(rows: &[Row]) -> RecordBatch {
        let col = |f: fn(&Row) -> &str| {
            Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as Arc<dyn Array>
        };
        RecordBatch::try_new(
            schema(),
            vec![
                col(|r| r.0.as_str()),
                col(|r| r.1.as_str()),
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    fn props(row_group: usize) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group))
            .build()
    }

    fn write(rows: &[Row], row_group: usize) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, schema(), Some(props(row_group))).unwrap();
        if !rows.is_empty() {
            w.write(&batch(rows)).unwrap();
        }
        w.close().unwrap();
        buf
    }

    fn read(path: &Path) -> Vec<Row> {
        let file = File::open(path).unwrap();
        let mut out = Vec::new();
        for b in ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
        {
            let b = b.unwrap();
            let s = |i: usize| {
                b.column(i)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap()
                    .clone()
            };
            let (repo, path) = (s(0), s(1));
            let line = b.column(2).as_any().downcast_ref::<UInt32Array>().unwrap();
            for i in 0..b.num_rows() {
                out.push((repo.value(i).into(), path.value(i).into(), line.value(i)));
            }
        }
        out
    }

    /// `repos` repositories `h.test/o/r00`… with `per` rows each, sorted.
    fn table(repos: usize, per: u32, tag: &str) -> Vec<Row> {
        (0..repos)
            .flat_map(|r| {
                (0..per).map(move |l| (format!("h.test/o/r{r:02}"), format!("{tag}.py"), l))
            })
            .collect()
    }

    /// Splices and returns (rows read back, what the splice did).
    fn splice(old: &[Row], new: &[Row], only: &[&str], row_group: usize) -> (Vec<Row>, Spliced) {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            dir.path().join("old.parquet"),
            dir.path().join("new.parquet"),
        );
        std::fs::write(&a, write(old, row_group)).unwrap();
        let only: BTreeSet<RepoId> = only.iter().map(|r| RepoId::parse(r).unwrap()).collect();
        let fresh = Bytes::from(write(new, row_group));
        let done = replace_repos(&a, Some(fresh), &only, &b, props(row_group)).unwrap();
        (read(&b), done)
    }

    fn expected(old: &[Row], new: &[Row], only: &[&str]) -> Vec<Row> {
        let mut want: Vec<Row> = old
            .iter()
            .filter(|r| !only.contains(&r.0.as_str()))
            .chain(new.iter().filter(|r| only.contains(&r.0.as_str())))
            .cloned()
            .collect();
        want.sort();
        want
    }

    #[test]
    fn a_changed_repository_rewrites_its_row_groups_and_copies_the_others() {
        // 20 repositories of 8 rows, 8 rows a row group: one repository each.
        let old = table(20, 8, "old");
        let new: Vec<Row> = table(20, 5, "new")
            .into_iter()
            .filter(|r| r.0 == "h.test/o/r07")
            .collect();
        let (got, done) = splice(&old, &new, &["h.test/o/r07"], 8);
        assert_eq!(got, expected(&old, &new, &["h.test/o/r07"]));
        assert_eq!(done.rows, got.len());
        assert!(done.copied >= 18, "{done:?}");
        assert!(done.rewritten <= 2, "{done:?}");
    }

    #[test]
    fn removed_and_added_repositories_land_in_order() {
        let old = table(10, 6, "old");
        // r03 removed (no new rows), r05 changed, r10 and r035 new.
        let new: Vec<Row> = vec![
            ("h.test/o/r035".into(), "a.py".into(), 1),
            ("h.test/o/r05".into(), "b.py".into(), 2),
            ("h.test/o/r10".into(), "c.py".into(), 3),
        ];
        let only = [
            "h.test/o/r03",
            "h.test/o/r035",
            "h.test/o/r05",
            "h.test/o/r10",
        ];
        let (got, done) = splice(&old, &new, &only, 4);
        assert_eq!(got, expected(&old, &new, &only));
        assert!(done.copied > 0, "{done:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn the_splice_equals_filtering_and_sorting(
            sizes in proptest::collection::vec(0u32..7, 1..12),
            changed in proptest::collection::vec((0usize..14, 0u32..5), 0..6),
            row_group in 1usize..9,
        ) {
            let old: Vec<Row> = sizes
                .iter()
                .enumerate()
                .flat_map(|(r, &n)| (0..n).map(move |l| (format!("h.test/o/r{r:02}"), "o.py".to_owned(), l)))
                .collect();
            let names: Vec<String> = changed.iter().map(|(r, _)| format!("h.test/o/r{r:02}")).collect();
            let only: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut new: Vec<Row> = changed
                .iter()
                .flat_map(|&(r, n)| (0..n).map(move |l| (format!("h.test/o/r{r:02}"), "n.py".to_owned(), l)))
                .collect();
            new.sort();
            new.dedup();
            let (got, done) = splice(&old, &new, &only, row_group);
            prop_assert_eq!(&got, &expected(&old, &new, &only));
            prop_assert_eq!(done.rows, got.len());
        }
    }
}

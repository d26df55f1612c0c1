//! `trawl sql`: DataFusion over the store's tables, registered as hive-partitioned listing
//! tables with their documented schemas.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;
use trawl_core::config::Config;
use trawl_core::records::{ChunkRecord, EmbeddingRecord, ManifestRow};
use trawl_core::store::{Store, keys};

#[derive(clap::Args)]
pub struct Args {
    /// The query, e.g. "SELECT language, count(*) FROM chunks GROUP BY language".
    query: String,

    /// One JSON object per row.
    #[arg(long, conflicts_with = "csv")]
    json: bool,

    /// CSV with a header row.
    #[arg(long)]
    csv: bool,
}

/// The tables read from directories of parts: name, prefix under the store root, partition
/// column, file schema.
fn part_tables() -> Vec<(&'static str, &'static str, &'static str, SchemaRef)> {
    vec![
        ("chunk_versions", "chunks/", "repo", ChunkRecord::schema()),
        ("manifests", "manifests/", "repo", ManifestRow::schema()),
        (
            "embeddings",
            "embeddings/",
            "space",
            EmbeddingRecord::schema(),
        ),
    ]
}

/// A listing table over `key` (a file, or a directory when it ends with `/`) of the store.
fn listing(
    prefix: &object_store::path::Path,
    key: &str,
    schema: SchemaRef,
    partition: Option<&str>,
) -> anyhow::Result<Arc<ListingTable>> {
    let path = if prefix.as_ref().is_empty() {
        key.to_owned()
    } else {
        format!("{}/{key}", prefix.as_ref())
    };
    let url = ListingTableUrl::parse(format!("trawl://store/{path}"))?;
    let mut opts =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    if let Some(p) = partition {
        opts = opts.with_table_partition_cols(vec![(p.to_owned(), DataType::Utf8)]);
    }
    let config = ListingTableConfig::new(url)
        .with_listing_options(opts)
        .with_schema(schema);
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// A session with every table of `store` registered:
///
/// - `chunks`: the live chunks of the live generation (`index/gen=<n>/chunks.parquet`, one
///   sorted file); before any generation has one, every chunked version, with a note;
/// - `chunk_versions`: every chunk of every file version ever chunked (the pipeline's parts);
/// - `manifests`, `embeddings` (vectors left out: their width differs between spaces);
/// - `live_vectors`: `chunks` joined to the live generation's vector space;
/// - `runs`: the run reports (`report` is the whole report as JSON text).
pub async fn session(store: &Store) -> anyhow::Result<SessionContext> {
    let ctx = SessionContext::new();
    let (object_store, prefix) = store.object_store();
    let base = url::Url::parse("trawl://store/").expect("a valid URL");
    ctx.register_object_store(&base, object_store);
    for (name, dir, partition, schema) in part_tables() {
        ctx.register_table(name, listing(&prefix, dir, schema, Some(partition))?)?;
    }
    let live = trawl_index::generation::live(store)
        .await
        .context("reading the live generation")?;
    match live.as_ref().and_then(|m| m.chunks_table.as_deref()) {
        Some(key) => {
            ctx.register_table(
                "chunks",
                listing(&prefix, key, ChunkRecord::schema(), None)?,
            )?;
        }
        None => {
            eprintln!(
                "sql: no index generation has a live chunks table yet (run `trawl compact`): `chunks` is every chunked version, as `chunk_versions`"
            );
            ctx.register_table(
                "chunks",
                listing(&prefix, "chunks/", ChunkRecord::schema(), Some("repo"))?,
            )?;
        }
    }
    if let Some(space) = live.as_ref().and_then(|m| m.space.as_ref()) {
        let dir = keys::embedding_space(&space.key());
        let schema = EmbeddingRecord::schema_for(space.dims, space.dtype.as_str());
        let vector = if schema.field_with_name("vector").is_ok() {
            "e.vector"
        } else {
            "e.vector_bytes"
        };
        ctx.register_table("space_vectors", listing(&prefix, &dir, schema, None)?)?;
        ctx.sql(&format!(
            "CREATE VIEW live_vectors AS SELECT c.chunk_id, c.repo_id, c.path, c.start_line, \
             c.end_line, c.kind, c.symbol, c.content_hash, {vector} AS vector \
             FROM chunks c JOIN space_vectors e ON c.content_hash = e.content_hash"
        ))
        .await?;
    }
    ctx.register_table("runs", Arc::new(runs_table(store).await?))?;
    Ok(ctx)
}

/// The run reports as a table: run, stage, started_at, finished_at, report (JSON text).
async fn runs_table(store: &Store) -> anyhow::Result<datafusion::datasource::MemTable> {
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    let mut cols: [Vec<Option<String>>; 5] = Default::default();
    for key in store.list("runs/").await? {
        let Ok(Some(r)) = store.get_json::<serde_json::Value>(&key).await else {
            continue;
        };
        let field = |k: &str| r[k].as_str().map(str::to_owned);
        for (col, v) in cols.iter_mut().zip([
            field("run"),
            field("stage"),
            field("started_at"),
            field("finished_at").or_else(|| field("finished")),
            Some(r.to_string()),
        ]) {
            col.push(v);
        }
    }
    let names = ["run", "stage", "started_at", "finished_at", "report"];
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = cols
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    Ok(datafusion::datasource::MemTable::try_new(
        schema,
        vec![vec![batch]],
    )?)
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = crate::existing_store(cfg)?;
    let ctx = session(&store).await?;
    // Read-only: no COPY TO (a file written wherever the process may write), no DDL, no
    // DML, no SET.
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let df = ctx.sql_with_options(&args.query, read_only).await.context(
        "planning the query (trawl sql is read-only: SELECT, WITH, EXPLAIN and DESCRIBE)",
    )?;
    let batches = df.collect().await.context("running the query")?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        let mut w = datafusion::arrow::json::LineDelimitedWriter::new(&mut out);
        w.write_batches(&batches.iter().collect::<Vec<_>>())?;
        w.finish()?;
    } else if args.csv {
        let mut w = datafusion::arrow::csv::Writer::new(&mut out);
        for b in &batches {
            w.write(b)?;
        }
    } else {
        let table = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?;
        writeln!(out, "{table}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

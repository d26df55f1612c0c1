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
use trawl_core::store::Store;

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

/// The tables: name, prefix under the store root, partition column, file schema.
fn tables() -> Vec<(&'static str, &'static str, &'static str, SchemaRef)> {
    vec![
        ("chunks", "chunks/", "repo", ChunkRecord::schema()),
        ("manifests", "manifests/", "repo", ManifestRow::schema()),
        (
            "embeddings",
            "embeddings/",
            "space",
            EmbeddingRecord::schema(),
        ),
    ]
}

/// A session with every table of `store` registered.
pub fn session(store: &Store) -> anyhow::Result<SessionContext> {
    let ctx = SessionContext::new();
    let (object_store, prefix) = store.object_store();
    let base = url::Url::parse("trawl://store/").expect("a valid URL");
    ctx.register_object_store(&base, object_store);
    for (name, dir, partition, schema) in tables() {
        let path = if prefix.as_ref().is_empty() {
            dir.to_owned()
        } else {
            format!("{}/{dir}", prefix.as_ref())
        };
        let url = ListingTableUrl::parse(format!("trawl://store/{path}"))?;
        let opts = ListingOptions::new(Arc::new(ParquetFormat::default()))
            .with_file_extension(".parquet")
            .with_table_partition_cols(vec![(partition.to_owned(), DataType::Utf8)]);
        let config = ListingTableConfig::new(url)
            .with_listing_options(opts)
            .with_schema(schema);
        ctx.register_table(name, Arc::new(ListingTable::try_new(config)?))?;
    }
    Ok(ctx)
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let store = crate::existing_store(cfg)?;
    let ctx = session(&store)?;
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

//! The `trawl` binary: every stage alone, the one-process pipeline (`trawl index`), search,
//! the query service and evaluation. `anyhow` lives only at this edge.

// The CLI is where stdout belongs.
#![allow(clippy::print_stdout)]

mod chunk;
mod chunk_worker;
mod compact;
mod dlq;
mod embed;
mod fetch;
mod index;
mod ops;
mod progress;
mod search;
mod secrets;
mod sql;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use trawl_core::config::Config;

/// trawl keeps an organisation-wide code search index fresh.
#[derive(Parser)]
#[command(
    name = "trawl",
    version,
    about = "trawl keeps an organisation-wide code search index fresh",
    long_about = None
)]
struct Cli {
    /// Configuration file (TOML). Keys are listed in the README; a typo is an error.
    #[arg(long, short = 'c', global = true, env = "TRAWL_CONFIG")]
    config: Option<PathBuf>,

    /// Override one configuration key, e.g. `--set fetch.concurrency=8`. Repeatable; wins
    /// over the file and `TRAWL_<SECTION>_<KEY>` environment variables.
    #[arg(long = "set", global = true, value_name = "SECTION.KEY=VALUE", value_parser = parse_set)]
    set: Vec<(String, String)>,

    /// Store URL: a directory (default ./.trawl), file://DIR, memory:// or s3://BUCKET/PREFIX.
    /// Same as `--set store.url=…`.
    #[arg(long, global = true)]
    store: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mirror repositories and publish the files that changed since the last run (the stage
    /// process `trawl fetcher`: one-shot, or every `--every`).
    #[command(visible_alias = "fetcher")]
    Fetch(fetch::Args),
    /// Print the chunks of files or directories, as the chunk worker would make them.
    Chunk(chunk::Args),
    /// Chunk the files that `trawl fetch` published, into Parquet parts in the store.
    ChunkWorker(chunk_worker::Args),
    /// Embed the chunks that `trawl chunk-worker` wrote: only those never embedded in this
    /// model's space; a run report goes to runs/<run>.json (the stage process
    /// `trawl embed-worker`).
    #[command(visible_alias = "embed-worker")]
    Embed(embed::Args),
    /// Build the next index generation (vector + text shards) from the live chunks and their
    /// vectors, reusing what did not change, and make it live (the stage process
    /// `trawl compactor`: `--wait` for the run to be embedded, `--every` to stay up).
    #[command(visible_alias = "compactor")]
    Compact(compact::Args),
    /// Index repositories in one process — fetch, chunk, embed (local model by default, no
    /// key needed), compact — into the local store (./.trawl). Running it again is
    /// incremental. `trawl index rollback` points the index back at the previous generation.
    Index(index::Args),
    /// Search the index: hybrid (vector + BM25) by default, with filters; prints citations
    /// `repo@commit:path#Lstart-Lend · symbol · kind · score` and snippets.
    Search(search::Args),
    /// Serve search over HTTP: POST /v1/search, GET /healthz, /metrics, /openapi.json; bearer
    /// tokens map to the repositories they may see (`[[query.tokens]]`) (the stage process
    /// `trawl query`).
    #[command(visible_alias = "query")]
    Serve(search::ServeArgs),
    /// Measure retrieval on a query set: Recall@1/5/10 (the share of each query's targets
    /// found), Hit@1/10 (the share of queries with a target found) and MRR@10, overall, per
    /// kind, per repository.
    Eval(search::EvalArgs),
    /// The dead-letter topic: list what no stage could process, replay it once fixed.
    #[command(subcommand)]
    Dlq(dlq::Command),
    /// Query the store's tables (chunks, manifests, embeddings) with SQL (DataFusion).
    Sql(sql::Args),
    /// Find secrets as the fetcher does: `trawl secrets scan <dir>` prints what would be
    /// skipped or redacted (rule and line, never the secret) and exits 1 when anything is;
    /// `trawl secrets rules` lists the rules.
    #[command(subcommand)]
    Secrets(secrets::Command),
    /// Print the effective configuration (defaults, file, environment and flags applied).
    Config,
}

/// The configured store, which must exist already (a reading command never creates one).
pub fn existing_store(cfg: &Config) -> anyhow::Result<trawl_core::store::Store> {
    anyhow::ensure!(
        trawl_core::store::Store::exists(&cfg.store.url),
        "no store at {}: run `trawl fetch` first, or pass --store",
        cfg.store.url
    );
    Ok(trawl_core::store::Store::from_url(&cfg.store.url)?)
}

fn parse_set(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected SECTION.KEY=VALUE, got {s:?}"))?;
    Ok((k.trim().to_owned(), v.to_owned()))
}

fn init_logging(cfg: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("TRAWL_LOG")
        .or_else(|_| EnvFilter::try_new(&cfg.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if cfg.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Keys whose values are secrets wherever they appear in the configuration.
const SECRET_KEYS: [&str; 6] = [
    "token",
    "api_key",
    "key",
    "password",
    "secret",
    "access_key",
];

/// `trawl config`'s view: inline secrets (query tokens, keys, passwords, and credentials
/// written into a URL such as `https://user:token@proxy`) shown as `***`.
fn mask_secrets(table: &mut toml::Table) {
    fn value(key: &str, v: &mut toml::Value) {
        match v {
            toml::Value::String(s) if !s.is_empty() => {
                if SECRET_KEYS.contains(&key) {
                    trawl_core::secret::MASK.clone_into(s);
                } else if let Ok(mut u) = url::Url::parse(s) {
                    // `user:token@` or a bare `token@` (how GitHub tokens are often written).
                    let masked = if u.password().is_some() {
                        u.set_password(Some(trawl_core::secret::MASK)).is_ok()
                    } else {
                        !u.username().is_empty() && u.set_username(trawl_core::secret::MASK).is_ok()
                    };
                    if masked {
                        *s = u.to_string();
                    }
                }
            }
            toml::Value::Table(t) => mask_secrets(t),
            toml::Value::Array(a) => a.iter_mut().for_each(|x| value(key, x)),
            _ => {}
        }
    }
    for (k, v) in table.iter_mut() {
        value(k, v);
    }
}

/// The allocator: jemalloc. glibc's gives each thread that allocates an arena of its own (up
/// to eight per core) and keeps what each held at its peak, so the compactor's shard builds,
/// on blocking threads one after another, grew its resident memory with the number of shards
/// (676 MB at 13 shards where two arenas held 409 MB).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut overrides = cli.set.clone();
    if let Some(url) = &cli.store {
        overrides.push(("store.url".into(), url.clone()));
    }
    let cfg = match Config::load(cli.config.as_deref(), std::env::vars(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&cfg);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Fetch(args) => fetch::run(&cfg, args).await,
            Command::Chunk(args) => chunk::run(&args),
            Command::ChunkWorker(args) => chunk_worker::run(&cfg, args).await,
            Command::Embed(args) => embed::run(&cfg, args).await,
            Command::Compact(args) => compact::run(&cfg, args).await,
            Command::Index(args) => index::run(&cfg, args).await,
            Command::Search(args) => search::run(&cfg, args).await,
            Command::Serve(args) => search::serve(&cfg, args).await,
            Command::Eval(args) => search::eval(&cfg, args).await,
            Command::Sql(args) => sql::run(&cfg, args).await,
            Command::Dlq(cmd) => dlq::run(&cfg, cmd).await,
            Command::Secrets(cmd) => Ok(secrets::run(&cfg, cmd)),
            Command::Config => {
                let mut table = toml::Table::try_from(&cfg)?;
                mask_secrets(&mut table);
                print!("{}", toml::to_string_pretty(&table)?);
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

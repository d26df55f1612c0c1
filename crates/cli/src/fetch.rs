//! `trawl fetch`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use trawl_core::config::Config;
use trawl_core::store::Store;
use trawl_fetcher::{Emitted, Fetcher, Observer, RepoReport, RunOptions, RunReport, repos};

#[derive(clap::Args)]
pub struct Args {
    /// Repos file (TOML, `[[repo]]` entries with url, branch, include, exclude).
    #[arg(long, short = 'r')]
    repos: Option<PathBuf>,

    /// A repository URL or local path to fetch, on top of the repos file. Repeatable.
    #[arg(long = "repo", value_name = "URL|PATH")]
    repo: Vec<String>,

    /// Sync and diff, print what would be published, and write nothing to the store.
    #[arg(long)]
    dry_run: bool,

    /// Diff from this commit (any commit-ish the mirror knows) instead of the stored state.
    #[arg(long, value_name = "COMMIT")]
    since: Option<String>,

    /// Print one JSON object per event (`op`: upsert, delete or skip) on stdout; the summary
    /// goes to stderr.
    #[arg(long)]
    json: bool,

    /// Stay up and fetch again this long after each run finishes (`30m`, `24h`); without it,
    /// one run and exit (for a cron job). The repos file is read again before each run.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "dry_run")]
    every: Option<std::time::Duration>,
    /// Add these repositories and keep every other one indexed. Without it the repositories
    /// given are the whole list: any indexed before and not given leaves the index at the
    /// next compaction.
    #[arg(long)]
    keep_others: bool,
    /// Read every file again, unchanged ones too, and publish what the secret rules now judge
    /// otherwise than when it was indexed (run once after an upgrade of trawl changed them).
    #[arg(long)]
    rescan_secrets: bool,
}

/// Totals over the runs of one process, for `/metrics`.
#[derive(Default)]
struct Totals {
    runs: AtomicU64,
    repos_failed_last: AtomicU64,
    files: AtomicU64,
    bytes: AtomicU64,
    last_finished_unix: AtomicU64,
}

impl Totals {
    fn record(&self, r: &RunReport) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.repos_failed_last
            .store(r.failed() as u64, Ordering::Relaxed);
        let files: u64 = r.repos.iter().map(|x| x.upserts + x.deletes).sum();
        self.files.fetch_add(files, Ordering::Relaxed);
        let bytes: u64 = r.repos.iter().map(|x| x.bytes).sum();
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_finished_unix.store(now, Ordering::Relaxed);
    }

    fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut t = crate::ops::Text::default();
        t.counter(
            "trawl_fetch_runs_total",
            "Fetch runs finished.",
            g(&self.runs),
        )
        .gauge(
            "trawl_fetch_repos_failed",
            "Repositories that failed in the last run.",
            g(&self.repos_failed_last) as f64,
        )
        .counter(
            "trawl_fetch_files_published_total",
            "File events published (upserts and deletes).",
            g(&self.files),
        )
        .counter(
            "trawl_fetch_bytes_published_total",
            "Content bytes published.",
            g(&self.bytes),
        )
        .gauge(
            "trawl_fetch_last_run_finished_seconds",
            "When the last run finished (Unix time).",
            g(&self.last_finished_unix) as f64,
        );
        t.finish()
    }
}

struct Progress {
    bar: ProgressBar,
    json: bool,
    out: Mutex<std::io::Stdout>,
}

impl Observer for Progress {
    fn repo_started(&self, url: &str) {
        self.bar.set_message(url.to_owned());
    }

    fn emitted(&self, item: &Emitted) {
        self.bar.tick();
        if self.json {
            let line = serde_json::to_string(&item.json_line()).expect("json lines serialise");
            let mut out = self
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = writeln!(out, "{line}");
        }
    }

    fn repo_finished(&self, r: &RepoReport) {
        self.bar.inc(1);
        if let Some(f) = &r.failure {
            self.bar.println(format!(
                "failed  {}  {}: {}",
                r.url,
                f.reason.as_str(),
                f.message
            ));
        }
    }
}

/// The repositories of a repos file and of addresses given on the command line.
pub fn specs(
    file: Option<&std::path::Path>,
    addresses: &[String],
) -> anyhow::Result<Vec<repos::RepoSpec>> {
    let mut specs = match file {
        Some(path) => repos::load(path)?,
        None => Vec::new(),
    };
    let cwd = std::env::current_dir().context("reading the current directory")?;
    for r in addresses {
        let spec = repos::resolve(r, &cwd)?;
        if !specs.iter().any(|s| s.id == spec.id) {
            specs.push(spec);
        }
    }
    Ok(specs)
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    let first = specs(args.repos.as_deref(), &args.repo)?;
    if first.is_empty() {
        bail!("nothing to fetch: give --repos <file> or --repo <url|path>");
    }
    // A dry run reads the stored state but never creates a store that is not there.
    let store = if args.dry_run && !Store::exists(&cfg.store.url) {
        Store::memory()
    } else {
        Store::from_url(&cfg.store.url)?
    };
    let bus = trawl_core::bus::from_config(&cfg.bus, &store)?;
    if !args.dry_run {
        bus.create_topics(&trawl_core::bus::TOPICS)
            .await
            .context("creating the pipeline's topics")?;
    }
    let fetcher = Fetcher::new(cfg.fetch.clone(), store, bus);
    // What the chunk workers of this configuration write: files chunked by another version
    // are sent again.
    let chunker_version =
        trawl_chunk_worker::part_version(trawl_chunk_worker::strategy(&cfg.chunk)?);
    let totals = Arc::new(Totals::default());
    let ops = if args.dry_run {
        crate::ops::Ops::start("", "fetcher", String::new).await?
    } else {
        let t = totals.clone();
        crate::ops::Ops::start(&cfg.ops.listen, "fetcher", move || t.render()).await?
    };
    let mut specs = first;
    loop {
        let run = run_once(&fetcher, &specs, &args, &chunker_version);
        // A run stopped part-way is safe: a repository's state is recorded only after all
        // of its events were published, so the next run publishes the rest again.
        let report = tokio::select! {
            r = run => r,
            () = crate::ops::terminated() => {
                ops.stopping();
                eprintln!("fetcher: stopped mid-run: repositories not finished keep their old state and are fetched again next run");
                return Ok(ExitCode::from(130));
            }
        };
        totals.record(&report);
        let summary = summary(&report);
        if args.json {
            eprint!("{summary}");
        } else {
            print!("{summary}");
        }
        let Some(every) = args.every else {
            return Ok(if report.failed() > 0 {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            });
        };
        eprintln!("fetcher: next run in {}", humantime::format_duration(every));
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = crate::ops::terminated() => {
                ops.stopping();
                return Ok(ExitCode::SUCCESS);
            }
        }
        match self::specs(args.repos.as_deref(), &args.repo) {
            Ok(s) if !s.is_empty() => specs = s,
            Ok(_) => eprintln!("fetcher: the repos file lists nothing now; keeping the last list"),
            Err(e) => eprintln!("fetcher: cannot read the repos ({e:#}); keeping the last list"),
        }
    }
}

async fn run_once(
    fetcher: &Fetcher,
    specs: &[repos::RepoSpec],
    args: &Args,
    chunker_version: &str,
) -> RunReport {
    let bar = ProgressBar::with_draw_target(
        Some(specs.len() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} repos  {wide_msg}",
        )
        .expect("a valid template"),
    );
    let progress = Arc::new(Progress {
        bar: bar.clone(),
        json: args.json,
        out: Mutex::new(std::io::stdout()),
    });
    let opts = RunOptions {
        dry_run: args.dry_run,
        since: args.since.clone(),
        defer_state: false,
        keep_others: args.keep_others,
        rescan_secrets: args.rescan_secrets,
        chunker_version: Some(chunker_version.to_owned()),
    };
    let report = fetcher.run(specs, &opts, progress).await;
    bar.finish_and_clear();
    report
}

/// The table printed at the end of a run.
pub fn summary(r: &RunReport) -> String {
    use std::fmt::Write as _;
    let count = |s: &str| r.repos.iter().filter(|x| x.status == s).count();
    let sum = |f: fn(&RepoReport) -> u64| r.repos.iter().map(f).sum::<u64>();
    let mut skips: BTreeMap<&str, u64> = BTreeMap::new();
    for repo in &r.repos {
        for (reason, n) in &repo.skips {
            *skips.entry(reason.as_str()).or_default() += n;
        }
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} run {}{}",
        r.stage,
        r.run,
        if r.dry_run {
            " (dry run: nothing written)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  repos          {:>8}  ({} updated, {} unchanged, {} failed)",
        r.repos.len(),
        count("updated"),
        count("unchanged"),
        count("failed")
    );
    let _ = writeln!(
        s,
        "  changed files  {:>8}  ({} upserts, {} deletes, {} renames)",
        sum(|x| x.upserts + x.deletes),
        sum(|x| x.upserts),
        sum(|x| x.deletes),
        sum(|x| x.renames)
    );
    let _ = writeln!(s, "  bytes          {:>8}", human_bytes(sum(|x| x.bytes)));
    let rechunked = r.repos.iter().filter(|x| x.rechunked).count();
    if rechunked > 0 {
        let _ = writeln!(
            s,
            "  rechunked      {rechunked:>8}  (repositories sent whole again for the new chunker; unchanged chunks keep their vectors)"
        );
    }
    let _ = writeln!(s, "  skipped        {:>8}", skips.values().sum::<u64>());
    for (reason, n) in &skips {
        let _ = writeln!(s, "    {reason:<13}{n:>8}");
    }
    if let Some(line) = crate::secrets::summary_line(r) {
        let _ = writeln!(s, "  {line}");
    }
    for repo in r.repos.iter().filter(|x| x.failure.is_some()) {
        let f = repo.failure.as_ref().expect("filtered");
        let _ = writeln!(
            s,
            "  FAILED {}  {}: {}",
            repo.url,
            f.reason.as_str(),
            f.message
        );
    }
    s
}

pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / 1024.0 / 1024.0)
    } else if n >= 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{n} B")
    }
}

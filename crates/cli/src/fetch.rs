//! `trawl fetch`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
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
    let specs = specs(args.repos.as_deref(), &args.repo)?;
    if specs.is_empty() {
        bail!("nothing to fetch: give --repos <file> or --repo <url|path>");
    }
    // A dry run reads the stored state but never creates a store that is not there.
    let store = if args.dry_run && !Store::exists(&cfg.store.url) {
        Store::memory()
    } else {
        Store::from_url(&cfg.store.url)?
    };
    let bus = trawl_core::bus::from_url(&cfg.bus.url, &store, cfg.bus.capacity)?;
    let fetcher = Fetcher::new(cfg.fetch.clone(), store, bus);

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
    };
    let report = fetcher.run(&specs, &opts, progress).await;
    bar.finish_and_clear();

    let summary = summary(&report);
    if args.json {
        eprint!("{summary}");
    } else {
        print!("{summary}");
    }
    Ok(if report.failed() > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
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
    let _ = writeln!(s, "  skipped        {:>8}", skips.values().sum::<u64>());
    for (reason, n) in &skips {
        let _ = writeln!(s, "    {reason:<13}{n:>8}");
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

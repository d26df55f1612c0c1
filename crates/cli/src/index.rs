//! `trawl index <path|url>...`: fetch → chunk → embed → compact in one process, over the
//! in-process bus, into the local store. Stages overlap: the chunk worker chunks while the
//! fetcher diffs, the embedder embeds while the chunker chunks.
//!
//! Nothing is lost when the process dies: the fetcher records a repository's new state only
//! after every chunk of its files is written (the in-process bus forgets on exit), and a run
//! leaves a marker until its generation is live, so the next run embeds whatever the
//! interrupted one chunked but did not embed.

use std::process::ExitCode;

use anyhow::Context;
use trawl_core::config::{Config, EmbedderKind};
use trawl_core::records::DeadLetter;
use trawl_fetcher::{FailureReason, RepoReport};
use trawl_pipeline::{IndexOptions, Phase, Pipeline, PipelineError};

use crate::compact::IndexCommand;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<IndexCommand>,

    /// Repositories to index: local paths (a git work tree or bare repo) or clone URLs.
    #[arg(value_name = "PATH|URL", required_unless_present = "repos")]
    targets: Vec<String>,

    /// A repos file (TOML, `[[repo]]` entries with url, branch, include, exclude), on top of
    /// the targets.
    #[arg(long, short = 'r')]
    repos: Option<std::path::PathBuf>,

    /// Which embedder: `local` (default; the model is downloaded on first use), `voyage`
    /// (needs VOYAGE_API_KEY) or `hash` (tests).
    #[arg(long, value_enum)]
    embedder: Option<EmbedderKind>,

    /// Rebuild every index shard instead of reusing unchanged ones.
    #[arg(long)]
    full: bool,
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

/// Installs the default local model when it is the one to use and is missing, and the
/// OpenVINO runtime that runs it when `embed.local_runtime` may use it (with `auto`, a runtime
/// that cannot be had leaves candle to run the model, with a note).
async fn ensure_model(cfg: &Config, embedder: EmbedderKind) -> anyhow::Result<()> {
    use trawl_core::config::LocalRuntime;
    use trawl_embed::{local, openvino};
    if embedder != EmbedderKind::Local {
        return Ok(());
    }
    // The code-tuned model is derived here, without a download, when its base is installed.
    let dir = trawl_embed::ready_model_dir(&cfg.embed)
        .context("cannot derive the code-tuned model from the installed base model")?;
    if cfg.embed.model_dir.as_os_str().is_empty() && !local::is_installed(&dir) {
        eprintln!(
            "index: the local embedding model is not installed; downloading all-MiniLM-L6-v2 (84 MB) into {}",
            local::default_model_dir().display()
        );
        let (bar, progress) = download_bar("model");
        let r = local::install(&dir, &progress).await;
        bar.finish_and_clear();
        r.context("the local model is needed to embed without an API key")?;
        eprintln!("index: model installed");
    }
    let libs = openvino::default_runtime_dir();
    let runtime = cfg.embed.local_runtime;
    if runtime == LocalRuntime::Candle
        || openvino::is_installed(&libs)
        || (runtime == LocalRuntime::Auto && !openvino::SUPPORTED)
    {
        return Ok(());
    }
    if runtime == LocalRuntime::Auto
        && let Some(why) = openvino::recent_failure(&libs)
    {
        tracing::debug!(%why, "the OpenVINO runtime could not be fetched lately; candle runs the model");
        return Ok(());
    }
    eprintln!(
        "index: downloading the OpenVINO runtime (59 MB, once) into {}: it runs the local model several times as fast",
        libs.display()
    );
    let (bar, progress) = download_bar("runtime");
    let r = openvino::install(&libs, &progress).await;
    bar.finish_and_clear();
    match (r, runtime) {
        (Ok(()), _) => {
            openvino::note_failure(&libs, None);
            eprintln!("index: OpenVINO installed");
        }
        (Err(e), LocalRuntime::OpenVino) => {
            return Err(e).context("embed.local_runtime = \"openvino\" needs its runtime");
        }
        (Err(e), _) => {
            openvino::note_failure(&libs, Some(&e.to_string()));
            eprintln!(
                "index: {e}; candle runs the model instead (trawl tries again in {} days, or run scripts/fetch-model.sh)",
                openvino::RETRY_AFTER.as_secs() / 86_400
            );
        }
    }
    Ok(())
}

/// A download's progress bar, and the callback that moves it.
fn download_bar(what: &str) -> (indicatif::ProgressBar, impl Fn(u64, u64) + Sync + use<>) {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{bytes}}/{{total_bytes}} {{bar:30}} {{bytes_per_sec}}"
        ))
        .expect("a valid template"),
    );
    let b = bar.clone();
    (bar, move |done, total| {
        b.set_length(total);
        b.set_position(done);
    })
}

/// Prints what the pipeline tells, above the live status line.
struct Render {
    bar: indicatif::ProgressBar,
}

impl Render {
    fn line(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl trawl_pipeline::Observer for Render {
    fn early_generation(&self, m: &trawl_compactor::Manifest, early: &trawl_pipeline::Early) {
        let mut waiting = Vec::new();
        if m.counts.text_only > 0 {
            waiting.push(format!(
                "words only for the {} chunks still being embedded",
                m.counts.text_only
            ));
        }
        if early.deferred_files > 0 {
            waiting.push(format!(
                "without {} long prose file{} still being cut by meaning",
                early.deferred_files,
                if early.deferred_files == 1 { "" } else { "s" }
            ));
        }
        self.line(if waiting.is_empty() {
            format!(
                "index: generation {} is searchable now: trawl search \"…\"",
                m.generation
            )
        } else {
            format!(
                "index: generation {} is searchable now ({}; the full generation follows): trawl search \"…\"",
                m.generation,
                waiting.join(", ")
            )
        });
    }
    fn unchanged(&self, generation: trawl_core::ids::Generation) {
        eprintln!(
            "compact: nothing changed since generation {generation} was built; it stays live"
        );
    }
    fn no_vectors(&self, reason: &str) {
        eprintln!("compact: no vectors will be indexed ({reason}); text search only");
    }
}

/// The status line of a run.
fn status_line(s: &trawl_pipeline::Snapshot) -> String {
    if s.phase == Phase::Compact {
        return format!(
            "index: {}",
            crate::compact::build_status(s.shard, s.shards, s.swapping)
        );
    }
    let c = &s.chunked;
    format!(
        "{}: repos {}/{} · {} files changed · chunked {} files → {} chunks · embedded {} ({} cached, {} new)",
        s.phase.name(),
        s.repos_done,
        s.repos,
        s.files_changed,
        c.files + c.deletes,
        c.chunks,
        s.cache_hits + s.vectors_written,
        s.cache_hits,
        s.vectors_written,
    )
}

pub async fn run(cfg: &Config, args: Args) -> anyhow::Result<ExitCode> {
    if let Some(cmd) = args.command {
        return crate::compact::index(cfg, cmd).await;
    }
    let specs = crate::fetch::specs(args.repos.as_deref(), &args.targets)?;
    anyhow::ensure!(!specs.is_empty(), "nothing to index: give paths or URLs");
    let embedder = args.embedder.unwrap_or(cfg.embed.embedder);
    ensure_model(cfg, embedder).await?;
    let pipeline = Pipeline::new(
        cfg,
        IndexOptions {
            specs,
            embedder,
            full: args.full,
            keep_others: args.keep_others,
            rescan_secrets: args.rescan_secrets,
        },
    )?;
    let status = pipeline.status();
    let live = crate::progress::Live::start(move || status_line(&status.snapshot()));
    let render = Render {
        bar: live.bar.clone(),
    };
    let ran = Box::pin(pipeline.run(&render)).await;
    live.finish();
    let r = match ran {
        Ok(r) => r,
        Err(PipelineError::NothingFetched(report)) => {
            for r in &report.repos {
                print_failure(r);
            }
            anyhow::bail!(PipelineError::NothingFetched(report));
        }
        Err(e) => return Err(e.into()),
    };

    // The summary.
    let report = &r.fetch;
    let e = &r.embed.embed;
    let m = &r.manifest;
    let sum = |f: fn(&RepoReport) -> u64| report.repos.iter().map(f).sum::<u64>();
    let count = |s: &str| report.repos.iter().filter(|x| x.status == s).count();
    println!(
        "index: {} repositories ({} updated, {} unchanged, {} failed) in {:.1} s{}",
        report.repos.len(),
        count("updated"),
        count("unchanged"),
        count("failed"),
        r.seconds,
        if r.resumed {
            " (resumed an interrupted run)"
        } else {
            ""
        }
    );
    let skipped: u64 = report.repos.iter().flat_map(|r| r.skips.values()).sum();
    println!(
        "  fetch    {} changed files ({} upserts, {} deletes), {} skipped, {}",
        sum(|x| x.upserts + x.deletes),
        sum(|x| x.upserts),
        sum(|x| x.deletes),
        skipped,
        crate::fetch::human_bytes(sum(|x| x.bytes))
    );
    if let Some(line) = crate::secrets::summary_line(report) {
        println!("  {line}");
    }
    let rechunked = report.repos.iter().filter(|x| x.rechunked).count();
    if rechunked > 0 {
        println!(
            "  rechunk  {rechunked} repositories sent whole again: they were chunked by another chunker version"
        );
    }
    println!(
        "  chunk    {} files → {} chunks, {} dead letters",
        r.chunk.files, r.chunk.chunks, r.chunk.dead_letters
    );
    let views = if e.prose_vectors_written > 0 {
        format!(" (and {} prose views)", e.prose_vectors_written)
    } else {
        String::new()
    };
    println!(
        "  embed    {} chunks: {} already embedded, {} embedded now{views} · {}",
        e.chunks,
        e.cache_hits,
        e.vectors_written.saturating_sub(e.prose_vectors_written),
        r.space
    );
    println!(
        "  index    generation {} live: {} chunks from {} repositories ({} with vectors), {} shards ({} reused)",
        m.generation,
        m.counts.chunks,
        m.counts.repos,
        m.counts.with_vector,
        m.shard_count,
        m.build.shards_reused
    );
    if let Some(early) = r.early.filter(|e| e.text_only > 0 || e.deferred_files > 0) {
        println!(
            "  early    generation {} was searchable after {:.1} s, by words only for {} chunks then waiting for vectors, without {} prose files then being cut by meaning",
            early.generation, early.after, early.text_only, early.deferred_files
        );
    }
    for r in &report.repos {
        print_failure(r);
    }
    for d in r.dead_letters.iter().take(5) {
        if let Ok(d) = DeadLetter::from_json(d) {
            println!("  dead letter  {} {}: {}", d.topic, d.key, d.error);
        }
    }
    if !r.dead_letters.is_empty() {
        println!(
            "  {} dead letters kept: `trawl dlq list` shows them, `trawl dlq replay` retries them",
            r.dead_letters.len()
        );
    }
    if m.counts.chunks > 0 {
        println!("search it:  trawl search \"<what you are looking for>\"");
    }
    Ok(if r.incomplete() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// What to do about a local directory that could not be read as a repository: only a
/// directory that is no git repository at all, or one with no commit yet, is told to commit;
/// a repository that is there but broken (a missing object) keeps the fetcher's own message,
/// which names what is missing.
fn local_hint(dir: &std::path::Path) -> Option<&'static str> {
    if !dir.is_dir() {
        return None;
    }
    match git2::Repository::open(dir) {
        Err(_) => Some(
            " (not a git repository: trawl indexes what is committed; `git init && git add -A && git commit` first)",
        ),
        Ok(repo) if repo.head().is_err() => Some(
            " (the repository has no commit yet: trawl indexes what is committed; `git add -A && git commit` first)",
        ),
        Ok(_) => None,
    }
}

fn print_failure(r: &RepoReport) {
    let Some(f) = &r.failure else {
        return;
    };
    let hint = match f.reason {
        FailureReason::NotFound => local_hint(std::path::Path::new(&r.url)).unwrap_or(""),
        _ => "",
    };
    println!(
        "  FAILED   {}  {}: {}{hint}",
        r.url,
        f.reason.as_str(),
        f.message
    );
}

#[cfg(test)]
mod tests {
    use super::local_hint;

    fn commit_one_file(dir: &std::path::Path) -> git2::Oid {
        let repo = git2::Repository::init(dir).unwrap();
        std::fs::write(dir.join("a.py"), "def f():\n    return 1\n").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(std::path::Path::new("a.py")).unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "one", &tree, &[])
            .unwrap();
        tree.get_name("a.py").unwrap().id()
    }

    #[test]
    fn only_a_directory_that_is_no_repository_or_has_no_commit_is_told_to_commit() {
        let plain = tempfile::tempdir().unwrap();
        assert!(local_hint(plain.path()).unwrap().contains("git init"));

        let empty = tempfile::tempdir().unwrap();
        git2::Repository::init(empty.path()).unwrap();
        let hint = local_hint(empty.path()).unwrap();
        assert!(hint.contains("no commit yet") && !hint.contains("git init"));

        // A repository whose blob is gone is a repository: no advice to `git init` it.
        let broken = tempfile::tempdir().unwrap();
        let blob = commit_one_file(broken.path());
        let hex = blob.to_string();
        let object = broken
            .path()
            .join(".git/objects")
            .join(&hex[..2])
            .join(&hex[2..]);
        std::fs::remove_file(object).unwrap();
        assert_eq!(local_hint(broken.path()), None);

        // A URL is no directory: the fetcher's message stands alone.
        assert_eq!(
            local_hint(std::path::Path::new("https://example.com/r.git")),
            None
        );
    }
}

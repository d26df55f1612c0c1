//! `trawl secrets scan` and `trawl secrets rules`: the fetcher's secret policy, as a linter.
//!
//! The scan applies exactly what the fetcher applies to a commit — the configured excludes and
//! size caps, the path rules, the content rules, `fetch.secrets_allow` — to the files of a
//! directory, and prints per file what would be skipped or redacted: the rule and the line,
//! never the secret. Exit status 0 when nothing is found, 1 when something is, 2 on error.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use trawl_core::config::Config;
use trawl_fetcher::policy::{Content, EntryKind, Policy};
use trawl_fetcher::secrets::{self, Action, Finding};
use trawl_fetcher::{RunReport, SkipReason};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Scan a directory or a file with the fetcher's secret rules and print what would be
    /// skipped or redacted: path, line and rule id, never the secret. In a git work tree
    /// only the tracked files are read; elsewhere every file (`.git` aside). The configured
    /// `fetch.exclude`, size caps and `fetch.secrets_allow` apply, as in a fetch. Exit status
    /// 0: nothing found; 1: something found; 2: an error (a file that cannot be read, a bad
    /// configuration).
    Scan {
        /// The directory (or file) to scan.
        path: PathBuf,
        /// One JSON document: every finding, and the counts by rule.
        #[arg(long)]
        json: bool,
    },
    /// List the rules: id, kind (path or content), action (skip or redact), what it finds.
    Rules,
}

pub fn run(cfg: &Config, cmd: Command) -> ExitCode {
    match cmd {
        Command::Rules => {
            for (kind, id, action, description) in secrets::describe() {
                println!("{id:<30} {kind:<8} {:<7} {description}", action.as_str());
            }
            ExitCode::SUCCESS
        }
        Command::Scan { path, json } => match scan(cfg, &path) {
            Ok(scan) => {
                if json {
                    match serde_json::to_string_pretty(&scan) {
                        Ok(s) => println!("{s}"),
                        Err(e) => {
                            eprintln!("error: cannot encode the scan as JSON: {e}");
                            return ExitCode::from(2);
                        }
                    }
                } else {
                    print!("{}", scan.text());
                }
                for e in &scan.errors {
                    eprintln!("error: {e}");
                }
                if !scan.errors.is_empty() {
                    ExitCode::from(2)
                } else if scan.findings.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// One finding of the scan, with its file.
#[derive(Serialize)]
struct Located {
    path: String,
    #[serde(flatten)]
    finding: Finding,
}

#[derive(Default, Serialize)]
struct Scan {
    /// Files looked at.
    files: u64,
    /// Files the fetcher would not index for a reason other than a secret (vendored, binary…).
    not_indexed: u64,
    /// Files that would be skipped as secrets.
    skipped_files: u64,
    /// Files that would be indexed with secrets redacted.
    redacted_files: u64,
    /// Files skipped, by rule.
    skipped: BTreeMap<&'static str, u64>,
    /// Secrets redacted, by rule.
    redacted: BTreeMap<&'static str, u64>,
    findings: Vec<Located>,
    /// Files that could not be read.
    errors: Vec<String>,
}

impl Scan {
    fn text(&self) -> String {
        let mut s = String::new();
        for l in &self.findings {
            let place = if l.finding.line == 0 {
                l.path.clone()
            } else {
                format!("{}:{}", l.path, l.finding.line)
            };
            let _ = writeln!(
                s,
                "{:<7} {place}  {}",
                l.finding.action.as_str(),
                l.finding.rule
            );
        }
        let _ = write!(
            s,
            "secrets scan: {} files, {} would be skipped",
            self.files, self.skipped_files
        );
        if !self.skipped.is_empty() {
            let _ = write!(s, " ({})", by_rule(&self.skipped));
        }
        let _ = write!(
            s,
            ", {} indexed with {} secrets redacted",
            self.redacted_files,
            self.redacted.values().sum::<u64>()
        );
        if !self.redacted.is_empty() {
            let _ = write!(s, " ({})", by_rule(&self.redacted));
        }
        let _ = writeln!(s);
        s
    }

    fn file(&mut self, policy: &Policy, root: &Path, rel: &str) {
        self.files += 1;
        let full = root.join(rel);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) => {
                self.errors.push(format!("cannot read {rel}: {e}"));
                return;
            }
        };
        let kind = if meta.file_type().is_symlink() {
            EntryKind::Symlink
        } else {
            EntryKind::File
        };
        match policy.check_path(rel, kind, meta.len()) {
            Some(SkipReason::Secret) => {
                let rule = policy.secret_path_rule(rel).unwrap_or("secret");
                self.skip(rel, rule, 0);
                return;
            }
            Some(_) => {
                self.not_indexed += 1;
                return;
            }
            None => {}
        }
        let bytes = match std::fs::read(&full) {
            Ok(b) => b,
            Err(e) => {
                self.errors.push(format!("cannot read {rel}: {e}"));
                return;
            }
        };
        match policy.check_content(rel, &bytes) {
            Content::Secret(f) => self.skip(rel, f.rule, f.line),
            Content::Skip(_) => self.not_indexed += 1,
            Content::Text { redactions, .. } if !redactions.is_empty() => {
                self.redacted_files += 1;
                for finding in redactions {
                    *self.redacted.entry(finding.rule).or_default() += 1;
                    self.findings.push(Located {
                        path: rel.to_owned(),
                        finding,
                    });
                }
            }
            Content::Text { .. } => {}
        }
    }

    fn skip(&mut self, rel: &str, rule: &'static str, line: usize) {
        self.skipped_files += 1;
        *self.skipped.entry(rule).or_default() += 1;
        self.findings.push(Located {
            path: rel.to_owned(),
            finding: Finding {
                rule,
                line,
                action: Action::Skip,
            },
        });
    }
}

fn scan(cfg: &Config, path: &Path) -> anyhow::Result<Scan> {
    use anyhow::Context as _;
    let f = &cfg.fetch;
    let policy = Policy::new(&[], &f.exclude, f.max_file_bytes, f.max_line_bytes)
        .and_then(|p| p.with_secrets_allow(&f.secrets_allow))
        .context("bad glob in fetch.exclude or fetch.secrets_allow: fix the configuration")?;
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot scan {}: check the path", path.display()))?;
    let mut scan = Scan::default();
    if meta.is_file() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        scan.file(&policy, path.parent().unwrap_or(Path::new(".")), &name);
        return Ok(scan);
    }
    for rel in files(path)? {
        scan.file(&policy, path, &rel);
    }
    Ok(scan)
}

/// The files to scan under `root`, as `/`-separated relative paths, sorted: a git work
/// tree's tracked files, or every file of a plain directory (`.git` aside, symlinks not
/// followed).
fn files(root: &Path) -> anyhow::Result<Vec<String>> {
    if let Ok(repo) = git2::Repository::open(root)
        && repo.workdir().is_some()
    {
        let index = repo.index()?;
        let mut out: Vec<String> = index
            .iter()
            .filter(|e| e.mode != 0o160_000) // submodules: not followed
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .filter(|p| root.join(p).symlink_metadata().is_ok()) // deleted, not committed
            .collect();
        out.sort();
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(root.join(&dir))
            .map_err(|e| anyhow::anyhow!("cannot list {}: {e}", root.join(&dir).display()))?;
        for entry in entries {
            let entry = entry?;
            let rel = dir.join(entry.file_name());
            let ty = entry.file_type()?;
            if ty.is_dir() {
                if entry.file_name() != ".git" {
                    stack.push(rel);
                }
            } else {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The secrets line of a run's summary: files skipped and redacted by rule, when any.
pub fn summary_line(r: &RunReport) -> Option<String> {
    let mut skipped: BTreeMap<&str, u64> = BTreeMap::new();
    let mut redacted: BTreeMap<&str, u64> = BTreeMap::new();
    for repo in &r.repos {
        for (rule, n) in &repo.secrets_skipped {
            *skipped.entry(rule).or_default() += n;
        }
        for (rule, n) in &repo.secrets_redacted {
            *redacted.entry(rule).or_default() += n;
        }
    }
    if skipped.is_empty() && redacted.is_empty() {
        return None;
    }
    let none = || "none".to_owned();
    Some(format!(
        "secrets  skipped files: {} · files indexed with secrets redacted: {}",
        Some(by_rule(&skipped))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(none),
        Some(by_rule(&redacted))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(none),
    ))
}

/// `rule n, rule n, …`
fn by_rule(m: &BTreeMap<&str, u64>) -> String {
    m.iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

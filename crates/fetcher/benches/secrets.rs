//! Secret-scan benchmark: what the secret rules cost per file, over the Python standard
//! library, before (the exact, case-sensitive path globs and the line-alone PEM check of the
//! first fetcher) and after ([`trawl_fetcher::secrets`]: case-insensitive path rules, the
//! `RegexSet` prefilter, redaction). Both sides decode the bytes the same way, so the table
//! shows the scan's own cost beside the decoding every fetch pays anyway.
//!
//! `cargo bench -p trawl-fetcher --bench secrets` (`--profile dev` measures the debug build;
//! `TRAWL_BENCH_CORPUS=<dir>` for another corpus). Prints a table; asserts nothing about time.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use globset::{Glob, GlobSetBuilder};
use trawl_fetcher::policy::decode;
use trawl_fetcher::secrets::{self, Verdict};

/// The path globs of the first fetcher, for the "before" column.
const OLD_GLOBS: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/*.kdbx",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/.netrc",
    "**/_netrc",
    "**/.npmrc",
    "**/.pypirc",
    "**/.htpasswd",
    "**/.git-credentials",
    "**/credentials",
    "**/credentials.json",
    "**/credentials.yml",
    "**/credentials.yaml",
    "**/*.tfvars",
    "**/*.tfstate",
    "**/*.tfstate.backup",
];

/// The first fetcher's content rule: a PEM header alone on its line, then a base64 line.
fn old_private_key(text: &str) -> bool {
    let mut lines = text
        .lines()
        .map(|l| l.trim().trim_matches(|c| c == '"' || c == '\'' || c == ','));
    while let Some(line) = lines.next() {
        if line.starts_with("-----BEGIN ") && line.ends_with("PRIVATE KEY-----") {
            let next = lines.next().unwrap_or_default().trim();
            if next.len() >= 16
                && next
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            {
                return true;
            }
        }
    }
    false
}

fn stdlib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TRAWL_BENCH_CORPUS") {
        return Some(PathBuf::from(p));
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig;print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    dir.is_dir().then_some(dir)
}

/// Every file under `dir` as (relative path, bytes), site-packages and caches aside.
fn load(dir: &Path, rel: &str, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "site-packages" || name == "__pycache__" {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        match e.file_type() {
            Ok(t) if t.is_dir() => load(&e.path(), &path, out),
            Ok(t) if t.is_file() => {
                if let Ok(bytes) = std::fs::read(e.path()) {
                    out.push((path, bytes));
                }
            }
            _ => {}
        }
    }
}

fn main() {
    let Some(dir) = stdlib() else {
        println!("no corpus: set TRAWL_BENCH_CORPUS or install python3");
        return;
    };
    let mut files = Vec::new();
    load(&dir, "", &mut files);
    let bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
    let texts: Vec<(&str, String)> = files
        .iter()
        .filter_map(|(p, b)| Some((p.as_str(), decode(b).ok()?.0)))
        .collect();

    let t = Instant::now();
    for (_, b) in &files {
        std::hint::black_box(decode(b).ok());
    }
    let decode_secs = t.elapsed().as_secs_f64();

    let mut old = GlobSetBuilder::new();
    for g in OLD_GLOBS {
        old.add(Glob::new(g).expect("valid"));
    }
    let old = old.build().expect("valid");
    let t = Instant::now();
    let mut before = 0;
    for (path, text) in &texts {
        if old.is_match(path) || old_private_key(text) {
            before += 1;
        }
    }
    let before_secs = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let (mut skipped, mut redacted) = (BTreeMap::new(), BTreeMap::new());
    for (path, text) in &texts {
        if let Some(rule) = secrets::path_rule(path) {
            *skipped.entry(rule).or_insert(0) += 1;
            continue;
        }
        match secrets::scan(text) {
            Verdict::Clean(_) => {}
            Verdict::Skip(f) => *skipped.entry(f.rule).or_insert(0) += 1,
            Verdict::Redacted { findings, .. } => {
                for f in findings {
                    *redacted.entry(f.rule).or_insert(0) += 1;
                }
            }
        }
    }
    let after_secs = t.elapsed().as_secs_f64();

    let mb = bytes as f64 / 1e6;
    println!(
        "corpus: {} ({} files, {} text, {mb:.1} MB)",
        dir.display(),
        files.len(),
        texts.len()
    );
    println!("| step | seconds | MB/s |");
    println!("|---|---:|---:|");
    for (what, secs) in [
        ("decode (every fetch pays it)", decode_secs),
        ("secret rules before", before_secs),
        ("secret rules after", after_secs),
    ] {
        println!("| {what} | {secs:.3} | {:.0} |", mb / secs);
    }
    println!(
        "after / before: {:.1}×; after / decode: {:.2}×",
        after_secs / before_secs,
        after_secs / decode_secs
    );
    println!("before: {before} files skipped");
    println!("after: skipped {skipped:?}; redacted {redacted:?}");
}

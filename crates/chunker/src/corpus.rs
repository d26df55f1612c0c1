//! The real corpora every machine of this project has, for tests and benchmarks: the Python
//! standard library and the Rust sources of the cargo registry.

use std::path::{Path, PathBuf};

/// The Python standard library's directory, as `python3` reports it.
pub fn python_stdlib() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig;print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dir.is_dir().then_some(dir)
}

/// Files under `dir` with one of `exts`, recursively, in a stable (sorted) order; third-party
/// `site-packages` directories are left out.
pub fn files_under(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, exts, &mut out);
    out
}

fn walk(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("site-packages") {
                walk(&p, exts, out);
            }
        } else if p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| exts.contains(&x))
        {
            out.push(p);
        }
    }
}

/// The Python standard library (its tests left out) chunked as the chunk worker does, one
/// file at a time, lazily: `(path, chunks)`, with repo `github.com/python/cpython` and made-up
/// blob ids. Empty when python3 is missing.
pub fn python_stdlib_chunks()
-> impl Iterator<Item = (String, Vec<trawl_core::records::ChunkRecord>)> {
    use crate::records::{Source, to_records};
    let root = python_stdlib().unwrap_or_default();
    let files: Vec<PathBuf> = if root.as_os_str().is_empty() {
        Vec::new()
    } else {
        files_under(&root, &["py"])
            .into_iter()
            .filter(|p| !p.components().any(|c| c.as_os_str() == "test"))
            .collect()
    };
    let repo = trawl_core::RepoId::parse("github.com/python/cpython").expect("a valid repo id");
    let opts = crate::Options::default();
    files.into_iter().enumerate().filter_map(move |(i, f)| {
        let text = std::fs::read_to_string(&f).ok()?;
        let path = f
            .strip_prefix(&root)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        let blob: trawl_core::BlobId = format!("{:040x}", i + 1).parse().expect("a valid blob id");
        let chunked = crate::chunk(&path, Some("python"), &text, crate::Strategy::Ast, &opts);
        let src = Source {
            repo: &repo,
            path: &path,
            blob: &blob,
            language: "python",
        };
        let rows = to_records(&src, &chunked, &text);
        Some((path, rows))
    })
}

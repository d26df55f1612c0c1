//! The chunker on fixtures (snapshots), on real corpora (invariants), and as a user runs it.

use std::path::{Path, PathBuf};

use trawl_chunker::{Options, Strategy, check, chunk};
use trawl_core::language;

/// One fixture per statically compiled language.
const FIXTURE_EXTENSIONS: &[&str] = &[
    "py", "rs", "go", "java", "js", "ts", "tsx", "c", "cpp", "cs", "rb", "php", "sh", "lua", "md",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/chunk")
}

/// Chunks every sampled file of a corpus with a small and the default ceiling and checks
/// every invariant. Returns (files, bytes, chunks).
fn corpus(root: &Path, exts: &[&str], budget_bytes: usize) -> (usize, usize, usize) {
    let files = trawl_chunker::corpus::files_under(root, exts);
    let total: u64 = files
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    let step = ((total as usize / budget_bytes.max(1)) + 1).max(1);
    let (mut n, mut bytes, mut chunks) = (0, 0, 0);
    for f in files.iter().step_by(step) {
        let Ok(src) = std::fs::read_to_string(f) else {
            continue;
        };
        let path = f.to_string_lossy();
        let lang = language::detect(&path, src.as_bytes());
        for ceiling in [400, 2000] {
            let opts = Options {
                ceiling,
                floor: ceiling / 10,
                ..Options::default()
            };
            let c = chunk(&path, lang, &src, Strategy::Ast, &opts);
            if let Err(e) = check::invariants(&src, &c, ceiling) {
                panic!("{path} (ceiling {ceiling}): {e}");
            }
            chunks += c.pieces.len();
        }
        n += 1;
        bytes += src.len();
    }
    (n, bytes, chunks)
}

#[test]
fn invariants_hold_on_the_python_standard_library() {
    let root = trawl_chunker::corpus::python_stdlib().expect("python3 is part of the test machine");
    let (files, bytes, chunks) = corpus(&root, &["py"], 3_000_000);
    assert!(
        files > 50 && chunks > files,
        "{files} files, {bytes} bytes, {chunks} chunks"
    );
}

#[test]
fn invariants_hold_on_the_rust_and_c_sources_in_the_cargo_registry() {
    let home = crate::support::cargo_home();
    let root = home.join("registry/src");
    let (files, _, _) = corpus(&root, &["rs", "c", "h", "cc", "cpp"], 3_000_000);
    assert!(files > 50, "{files} files");
}

#[test]
fn invariants_hold_on_every_fixture() {
    let files = trawl_chunker::corpus::files_under(&fixture_dir(), FIXTURE_EXTENSIONS);
    assert_eq!(files.len(), 16);
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        let path = f.to_string_lossy();
        for ceiling in [120, 300, 2000] {
            let opts = Options {
                ceiling,
                floor: ceiling / 10,
                ..Options::default()
            };
            let c = chunk(
                &path,
                language::detect(&path, b""),
                &src,
                Strategy::Ast,
                &opts,
            );
            check::invariants(&src, &c, ceiling)
                .unwrap_or_else(|e| panic!("{path} @{ceiling}: {e}"));
        }
    }
}

/// A chunking as a reviewer reads it: one block per chunk, graph links by name.
fn render(path: &str, src: &str, ceiling: usize) -> String {
    use std::fmt::Write as _;
    use trawl_chunker::records::{Source, to_records};
    let repo = trawl_core::RepoId::parse("github.com/trawl/fixtures").unwrap();
    let blob: trawl_core::BlobId = "0".repeat(40).parse().unwrap();
    let lang = language::detect(path, src.as_bytes()).unwrap_or("text");
    let opts = Options {
        ceiling,
        floor: ceiling / 10,
        ..Options::default()
    };
    let chunked = chunk(path, Some(lang), src, Strategy::Ast, &opts);
    let records = to_records(
        &Source {
            repo: &repo,
            path,
            blob: &blob,
            language: lang,
        },
        &chunked,
        src,
    );
    let name_of = |id: &trawl_core::ChunkId| {
        records
            .iter()
            .find(|r| r.chunk_id == *id)
            .map(|r| format!("{} {}", r.kind, r.qualified_name.as_deref().unwrap_or("")))
            .unwrap_or_default()
    };
    let mut out = String::new();
    for r in &records {
        let _ = writeln!(
            out,
            "── {}-{} {} {}",
            r.start_line,
            r.end_line,
            r.kind,
            r.qualified_name.as_deref().unwrap_or("")
        );
        if let Some(p) = &r.parent_id {
            let _ = writeln!(out, "   parent: {}", name_of(p));
        }
        if !r.children_ids.is_empty() {
            let names: Vec<String> = r.children_ids.iter().map(name_of).collect();
            let _ = writeln!(out, "   children: {}", names.join(", "));
        }
        if !r.calls.is_empty() {
            let _ = writeln!(out, "   calls: {}", r.calls.join(", "));
        }
        for l in r.header.lines() {
            let _ = writeln!(out, "   # {l}");
        }
        for l in r.text.lines() {
            let _ = writeln!(out, "   │ {l}");
        }
    }
    out
}

/// One snapshot per fixture at the default ceiling, and one at 300 bytes, where containers
/// split into members and skeletons and long functions into parts. Review changes with
/// `cargo insta review`.
#[test]
fn fixture_snapshots() {
    let files = trawl_chunker::corpus::files_under(&fixture_dir(), FIXTURE_EXTENSIONS);
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().replace('.', "_");
        let src = std::fs::read_to_string(&f).unwrap();
        let rel = format!("fixtures/{}", f.file_name().unwrap().to_string_lossy());
        insta::assert_snapshot!(format!("{name}"), render(&rel, &src, 2000));
        insta::assert_snapshot!(format!("{name}_ceiling_300"), render(&rel, &src, 300));
    }
}

/// The long tail: a grammar compiled to a shared library and dropped in the language pack's
/// directory is loaded at run time, with definitions found from its own node kinds. The
/// library is built here from the Lua grammar's C sources, renamed so that it cannot be the
/// statically linked Lua.
#[test]
fn a_grammar_library_in_the_pack_directory_is_loaded_at_run_time() {
    let home = crate::support::cargo_home();
    let src_dir = std::fs::read_dir(home.join("registry/src"))
        .unwrap()
        .flatten()
        .flat_map(|index| {
            std::fs::read_dir(index.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("tree-sitter-lua-"))
        })
        .expect("the Lua grammar crate is a dependency")
        .join("src");
    let libs = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cc")
        .args([
            "-shared",
            "-fPIC",
            "-O1",
            "-Dtree_sitter_lua=tree_sitter_moonlang",
            "-I",
        ])
        .arg(&src_dir)
        .arg(src_dir.join("parser.c"))
        .arg(src_dir.join("scanner.c"))
        .arg("-o")
        .arg(libs.path().join("libtree_sitter_moonlang.so"))
        .status()
        .expect("a C compiler (cc) is on the test machine");
    assert!(status.success());
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("game.moon");
    std::fs::write(
        &file,
        "local json = require('json')\n\n-- Move the player.\nfunction move(p, dx)\n  p.x = p.x + dx\n  return clamp(p)\nend\n\nfunction clamp(p)\n  return p\nend\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trawl"))
        .env("TREE_SITTER_LANGUAGE_PACK_LIBS_DIR", libs.path())
        .args(["chunk", "--json", "--language", "moonlang"])
        .arg(&file)
        .output()
        .unwrap();
    let chunks = crate::support::json_lines(&out);
    let functions: Vec<(&str, &str)> = chunks
        .iter()
        .filter(|c| c["kind"] == "function")
        .map(|c| (c["symbol"].as_str().unwrap(), c["text"].as_str().unwrap()))
        .collect();
    assert_eq!(functions.len(), 2, "{chunks:#?}");
    assert_eq!(functions[0].0, "move");
    assert!(
        functions[0].1.starts_with("-- Move the player."),
        "leading comment attached"
    );
    let moved = chunks.iter().find(|c| c["symbol"] == "move").unwrap();
    assert_eq!(moved["calls"], serde_json::json!(["clamp"]));
    // Without the library the same file is chunked as text, with a reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trawl"))
        .env("TREE_SITTER_LANGUAGE_PACK_LIBS_DIR", work.path())
        .args(["chunk", "--language", "moonlang"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-grammar"));
}

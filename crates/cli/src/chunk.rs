//! `trawl chunk`: print the chunks of files or directories.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use trawl_chunker::records::{Source, to_records};
use trawl_chunker::{Options, Strategy};
use trawl_core::{BlobId, RepoId, language};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ChunkerArg {
    /// Definitions, sections and paragraphs (the product).
    Ast,
    /// Fixed windows of 1,000 characters with 100 of overlap (the naive baseline).
    Windows,
}

#[derive(clap::Args)]
pub struct Args {
    /// Files or directories (walked recursively, skipping hidden entries).
    #[arg(required = true)]
    paths: Vec<PathBuf>,

    /// One JSON object per chunk, with every record field.
    #[arg(long)]
    json: bool,

    /// Which chunker to use.
    #[arg(long, value_enum, default_value = "ast")]
    chunker: ChunkerArg,

    /// The floor in bytes: smaller pieces merge with a neighbour.
    #[arg(long, default_value_t = Options::default().floor)]
    floor: usize,

    /// The ceiling in bytes: no chunk's text is larger.
    #[arg(long, default_value_t = Options::default().ceiling)]
    ceiling: usize,

    /// Chunk every file as this language instead of detecting it. Besides the compiled
    /// grammars, any grammar library in `TREE_SITTER_LANGUAGE_PACK_LIBS_DIR`
    /// (`libtree_sitter_<name>.so`) is loaded at run time.
    #[arg(long, value_name = "NAME")]
    language: Option<String>,
}

fn walk(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)?.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let opts = Options {
        floor: args.floor,
        ceiling: args.ceiling,
        ..Options::default()
    };
    anyhow::ensure!(
        args.ceiling >= 64 && args.floor < args.ceiling,
        "--ceiling must be at least 64 bytes and larger than --floor"
    );
    let strategy = match args.chunker {
        ChunkerArg::Ast => Strategy::Ast,
        ChunkerArg::Windows => Strategy::Windows,
    };
    let mut files = Vec::new();
    for p in &args.paths {
        walk(p, &mut files).with_context(|| format!("reading {}", p.display()))?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let (mut chunks, mut skipped) = (0usize, 0usize);
    for file in files {
        let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        let text = match trawl_fetcher::policy::decode(&bytes) {
            Ok((text, _)) => text,
            Err(reason) => {
                eprintln!("skipped {}: {reason}", file.display());
                skipped += 1;
                continue;
            }
        };
        let abs = std::fs::canonicalize(&file)?;
        let dir = abs.parent().unwrap_or(Path::new("/"));
        // Ids need a repository; a directory whose path cannot be one (a `+` in it) still chunks.
        let repo = RepoId::from_local_path(dir)
            .or_else(|_| {
                RepoId::from_local_path(Path::new(&dir.to_string_lossy().replace('+', "_")))
            })
            .context("naming the directory")?;
        let display = file.display().to_string();
        let lang = match &args.language {
            Some(l) => Some(l.as_str()),
            None => language::detect(&display, bytes.get(..256).unwrap_or(&bytes)),
        };
        let oid = git2::Oid::hash_object(git2::ObjectType::Blob, &bytes)?;
        let blob: BlobId = oid.to_string().parse()?;
        let chunked = trawl_chunker::chunk(&display, lang, &text, strategy, &opts);
        let src = Source {
            repo: &repo,
            path: &display,
            blob: &blob,
            language: lang.unwrap_or("text"),
        };
        for r in to_records(&src, &chunked, &text) {
            chunks += 1;
            if args.json {
                serde_json::to_writer(&mut out, &r)?;
                writeln!(out)?;
            } else {
                writeln!(
                    out,
                    "── {}:{}-{} {} {} ({} bytes, ~{} tokens)",
                    r.path,
                    r.start_line,
                    r.end_line,
                    r.kind,
                    r.qualified_name.as_deref().unwrap_or(""),
                    r.text.len(),
                    r.token_estimate
                )?;
                for l in r.header.lines() {
                    writeln!(out, "   # {l}")?;
                }
                for l in r.text.lines() {
                    writeln!(out, "   │ {l}")?;
                }
            }
        }
        for n in &chunked.notes {
            eprintln!("note {}: {}", file.display(), n.as_str());
        }
    }
    out.flush()?;
    eprintln!("{chunks} chunks, {skipped} files skipped");
    Ok(ExitCode::SUCCESS)
}

//! Pieces → [`ChunkRecord`]s: headers, stable ids, content hashes, lines, graph links.

use std::collections::HashMap;

use trawl_core::hash::{chunk_id, content_hash};
use trawl_core::records::{CHUNK_VERSION, ChunkRecord};
use trawl_core::{BlobId, RepoId};

use crate::lang::Kind;
use crate::{CHUNKER_VERSION, Chunked, EMBED_INPUT_VERSION, Piece};

/// Where the chunks come from.
#[derive(Clone, Debug)]
pub struct Source<'a> {
    pub repo: &'a RepoId,
    pub path: &'a str,
    pub blob: &'a BlobId,
    pub language: &'a str,
}

/// The generated header: what the chunk is and where it lives. Embedding and BM25 read
/// `header + "\n" + text`.
pub fn header(src: &Source, p: &Piece) -> String {
    let mut where_ = String::new();
    match p.kind {
        Kind::Code => where_.push_str("module code"),
        Kind::Toc => where_.push_str("table of contents"),
        Kind::Text => where_.push_str("text"),
        Kind::Window => where_.push_str("window"),
        Kind::Section => {
            if p.trail.is_empty() {
                where_.push_str("preamble");
            } else {
                where_.push_str(&p.trail.join(" › "));
            }
        }
        _ => {
            let mut steps: Vec<String> = p
                .scope
                .iter()
                .map(|s| format!("{} {}", s.kind.as_str(), s.name))
                .collect();
            if let Some(sym) = &p.symbol {
                let kind = if p.kind == Kind::ClassSkeleton {
                    "skeleton of"
                } else {
                    p.kind.as_str()
                };
                match &p.owner {
                    Some(owner) => steps.push(format!("{kind} {owner}.{sym}")),
                    None => steps.push(format!("{kind} {sym}")),
                }
            }
            where_.push_str(&steps.join(" › "));
        }
    }
    let mut h = format!("{} · {where_}", src.path);
    if let Some((i, n)) = p.part {
        h.push_str(&trawl_core::records::part_label(i, n));
    }
    h.push('\n');
    if p.part.is_some()
        && let Some(sig) = &p.signature
    {
        h.push_str("signature: ");
        h.push_str(sig.lines().next().unwrap_or_default());
        h.push('\n');
    }
    if !p.imports.is_empty() && p.kind != Kind::Toc {
        let mut imports = p.imports.join("; ");
        if imports.len() > 400 {
            imports.truncate(crate::text::floor_boundary(&imports, 400));
            imports.push('…');
        }
        h.push_str(trawl_core::records::IMPORTS_LINE);
        h.push_str(&imports);
        h.push('\n');
    }
    h.push_str(trawl_core::records::LANGUAGE_LINE);
    h.push_str(src.language);
    h
}

/// Never undercounts: code averages well over 3 bytes per token in every tokenizer we know.
pub fn token_estimate(header: &str, text: &str) -> u32 {
    ((header.len() + 1 + text.len()).div_ceil(3)) as u32
}

/// The records of one file.
pub fn to_records(src: &Source, chunked: &Chunked, text: &str) -> Vec<ChunkRecord> {
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |byte: usize| line_starts.partition_point(|&s| s <= byte) as u32;
    let mut ordinals: HashMap<(Kind, String), u32> = HashMap::new();
    let ids: Vec<_> = chunked
        .pieces
        .iter()
        .map(|p| {
            let q = p.qualified_name().unwrap_or_else(|| p.trail.join(" › "));
            let n = ordinals.entry((p.kind, q.clone())).or_default();
            let id = chunk_id(src.repo, src.path, p.kind.as_str(), &q, *n);
            *n += 1;
            id
        })
        .collect();
    let mut children: HashMap<usize, Vec<_>> = HashMap::new();
    for (i, p) in chunked.pieces.iter().enumerate() {
        if let Some(parent) = p.parent {
            children.entry(parent).or_default().push(ids[i]);
        }
    }
    chunked
        .pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let header = header(src, p);
            let end_byte = p.end.max(p.start);
            ChunkRecord {
                schema_version: CHUNK_VERSION,
                chunk_id: ids[i],
                content_hash: content_hash(EMBED_INPUT_VERSION, &header, &p.text),
                repo_id: src.repo.clone(),
                path: src.path.to_owned(),
                blob: src.blob.clone(),
                language: src.language.to_owned(),
                kind: p.kind,
                symbol: p.symbol.clone(),
                qualified_name: p.qualified_name(),
                token_estimate: token_estimate(&header, &p.text),
                header,
                text: p.text.clone(),
                start_line: line_of(p.start),
                end_line: line_of(end_byte.saturating_sub(1).max(p.start)),
                start_byte: p.start as u64,
                end_byte: end_byte as u64,
                parent_id: p.parent.map(|j| ids[j]),
                children_ids: children.remove(&i).unwrap_or_default(),
                calls: p.calls.clone(),
                imports: p.imports.clone(),
                members: p.members.iter().map(|m| m.qualified_name.clone()).collect(),
                chunker_version: CHUNKER_VERSION.to_owned(),
            }
        })
        .collect()
}

//! The chunker's invariants as a checker, shared by unit tests, property tests, the corpus
//! test and the fuzz target.

use crate::Chunked;

/// Checks every invariant of a chunking of `src`; returns the first broken one.
pub fn invariants(src: &str, chunked: &Chunked, ceiling: usize) -> Result<(), String> {
    let mut covered = vec![false; src.len() + 1];
    for (i, p) in chunked.pieces.iter().enumerate() {
        if p.text.len() > ceiling {
            return Err(format!(
                "piece {i} ({:?}) has {} bytes > ceiling {ceiling}",
                p.kind,
                p.text.len()
            ));
        }
        if p.text.trim().is_empty() {
            return Err(format!("piece {i} ({:?}) is blank", p.kind));
        }
        if let Some(parent) = p.parent
            && parent >= chunked.pieces.len()
        {
            return Err(format!("piece {i} names a parent that does not exist"));
        }
        if p.is_generated() {
            continue;
        }
        if p.start > p.end || p.end > src.len() || src.get(p.start..p.end) != Some(p.text.as_str())
        {
            return Err(format!(
                "piece {i} ({:?}) text is not src[{}..{}]",
                p.kind, p.start, p.end
            ));
        }
        covered[p.start..p.end].iter_mut().for_each(|c| *c = true);
    }
    // Every non-blank line has its non-blank bytes inside some piece.
    let mut offset = 0;
    for (n, line) in src.split_inclusive('\n').enumerate() {
        for (j, ch) in line.char_indices() {
            if !ch.is_whitespace() && !covered[offset + j] {
                return Err(format!(
                    "line {} byte {} ({ch:?}) is in no chunk",
                    n + 1,
                    offset + j
                ));
            }
        }
        offset += line.len();
    }
    Ok(())
}

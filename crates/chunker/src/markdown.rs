//! Markdown: one chunk per section, with the heading trail (`Guide › Billing › Refunds`).
//! Sections come from tree-sitter-md's block grammar, so a `#` inside a fenced code block is
//! never mistaken for a heading.

use tree_sitter::Node;

use crate::lang::Kind;
use crate::text::{split_lines, trim};
use crate::{Chunked, Note, Options, Piece};

pub fn chunk(src: &str, opts: &Options) -> Chunked {
    let Some(tree) = crate::ast::parse(&crate::lang::markdown(), src, opts) else {
        let mut c = crate::text::chunk(src, opts);
        c.notes.push(Note::ParseTimeout);
        return c;
    };
    let mut notes = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    // Iterative walk over sections: (node, trail).
    let mut stack: Vec<(Node, Vec<String>)> = vec![(tree.root_node(), Vec::new())];
    let mut ordered: Vec<(usize, usize, Vec<String>, Vec<usize>)> = Vec::new();
    while let Some((node, trail)) = stack.pop() {
        let mut trail = trail;
        let mut c = node.walk();
        let children: Vec<Node> = node.children(&mut c).collect();
        if let Some(h) = children.iter().find(|n| n.kind().ends_with("_heading")) {
            trail.push(heading_text(&src[h.byte_range()]));
        }
        // The section's own content: every run of non-section children, before, between or
        // after its subsections (content after the last subsection happens at the top level).
        let mut run_start = Some(node.start_byte());
        let mut points: Vec<usize> = Vec::new();
        for c in &children {
            if c.kind() == "section" {
                if let Some(s) = run_start.take() {
                    ordered.push((
                        s,
                        c.start_byte(),
                        trail.clone(),
                        std::mem::take(&mut points),
                    ));
                }
            } else {
                run_start.get_or_insert(c.start_byte());
                points.push(c.start_byte());
            }
        }
        if let Some(s) = run_start {
            ordered.push((s, node.end_byte(), trail.clone(), points));
        }
        for s in children.iter().rev().filter(|n| n.kind() == "section") {
            stack.push((*s, trail.clone()));
        }
    }
    ordered.sort_by_key(|(s, ..)| *s);
    for (s, e, trail, points) in ordered {
        let (s, e) = trim(src, s, e);
        if e <= s {
            continue;
        }
        let ranges = crate::meaning::split(src, (s, e), &points, opts, &mut notes)
            .unwrap_or_else(|| pack(src, s, e, &points, opts.ceiling, &mut notes));
        for (a, b) in ranges {
            let mut p = Piece::new(Kind::Section, a, b, src[a..b].to_owned());
            p.trail.clone_from(&trail);
            pieces.push(p);
        }
    }
    // Tiny sections merge into the next one when the two fit.
    let mut merged: Vec<Piece> = Vec::new();
    for p in pieces {
        if let Some(last) = merged.last_mut()
            && last.end - last.start < opts.floor
            && p.end - last.start <= opts.ceiling
        {
            last.end = p.end;
            src[last.start..last.end].clone_into(&mut last.text);
            continue;
        }
        merged.push(p);
    }
    Chunked {
        pieces: merged,
        notes,
        imports: Vec::new(),
    }
}

fn heading_text(h: &str) -> String {
    let first = h.lines().next().unwrap_or_default();
    let t = first
        .trim()
        .trim_start_matches('#')
        .trim()
        .trim_end_matches('#')
        .trim();
    t.to_owned()
}

/// Greedy packing of `[s, e)` at `points`, under the ceiling; spans too large alone are cut
/// at line ends.
pub(crate) fn pack(
    src: &str,
    s: usize,
    e: usize,
    points: &[usize],
    ceiling: usize,
    notes: &mut Vec<Note>,
) -> Vec<(usize, usize)> {
    let mut bounds = vec![s];
    bounds.extend(points.iter().copied().filter(|p| *p > s && *p < e));
    bounds.push(e);
    bounds.dedup();
    let mut out = Vec::new();
    let mut cur = s;
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b - cur <= ceiling {
            continue;
        }
        if a > cur {
            out.extend(split_lines(src, cur, a, ceiling, notes));
            cur = a;
        }
        if b - a > ceiling {
            out.extend(split_lines(src, a, b, ceiling, notes));
            cur = b;
        }
    }
    if e > cur {
        out.extend(split_lines(src, cur, e, ceiling, notes));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keep_their_heading_trail() {
        let body =
            "Refunds are issued within five days of a request, to the card used.\n".repeat(3);
        let src = format!(
            "# Guide\n\nIntro text that is long enough to stand on its own as a section here, more than the floor.\n{body}\n## Billing\n\n{body}\n### Refunds\n\n{body}\n```sh\n# not a heading\n```\n"
        );
        let opts = Options {
            floor: 50,
            ..Options::default()
        };
        let c = chunk(&src, &opts);
        let trails: Vec<String> = c.pieces.iter().map(|p| p.trail.join(" › ")).collect();
        assert_eq!(
            trails,
            ["Guide", "Guide › Billing", "Guide › Billing › Refunds"]
        );
        assert!(c.pieces[2].text.contains("# not a heading"));
    }
}

//! Plain text: paragraphs merged up to the floor; and the helpers every chunker uses to cut
//! a span that is too large at line boundaries, and a line that is too long at character
//! boundaries.

use crate::lang::Kind;
use crate::{Chunked, Note, Options, Piece};

/// Trims whitespace from both ends of `src[s..e]`, returning the trimmed range.
pub fn trim(src: &str, s: usize, e: usize) -> (usize, usize) {
    let t = &src[s..e];
    let lead = t.len() - t.trim_start().len();
    let trail = t.len() - t.trim_end().len();
    if lead == t.len() {
        return (s, s);
    }
    (s + lead, e - trail)
}

/// The largest char boundary of `s` at or below `i`.
pub fn floor_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Cuts `src[s..e]` into ranges of at most `ceiling` bytes at line ends, and inside a line
/// (at character boundaries) only when a single line is longer than the ceiling. Blank
/// ranges are dropped; every non-blank byte is in some range.
///
/// Where a range must end, it ends at the best line start of the last two thirds of what
/// fits ([`cut_rank`]): after a blank line, else before the least indented line, so that a
/// long statement or docstring is cut between its paragraphs or its entries rather than
/// inside one.
pub fn split_lines(
    src: &str,
    s: usize,
    e: usize,
    ceiling: usize,
    notes: &mut Vec<Note>,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut cur = s;
    let mut pos = s;
    // The starts of the lines after `cur`, up to `pos`.
    let mut starts: Vec<usize> = Vec::new();
    // Walk line by line; `pos` is the start of the next line.
    while pos < e {
        let line_end = src[pos..e].find('\n').map_or(e, |i| pos + i + 1);
        while line_end - cur > ceiling && pos > cur {
            let lowest = cur + ceiling / 3;
            let cut = starts
                .iter()
                .copied()
                .filter(|&p| p > lowest)
                .min_by_key(|&p| (cut_rank(src, p), std::cmp::Reverse(p)))
                .unwrap_or(pos);
            push_trimmed(src, cur, cut, &mut out);
            cur = cut;
            starts.retain(|&p| p > cur);
        }
        if line_end - cur > ceiling {
            // One line longer than the ceiling: cut inside it.
            if !notes.contains(&Note::OversizeLine) {
                notes.push(Note::OversizeLine);
            }
            let mut a = cur;
            while line_end - a > ceiling {
                let b = floor_boundary(src, a + ceiling).max(a + 1);
                let b = if src.is_char_boundary(b) {
                    b
                } else {
                    next_boundary(src, b)
                };
                push_trimmed(src, a, b, &mut out);
                a = b;
            }
            cur = a;
            starts.clear();
        }
        pos = line_end;
        if pos > cur {
            starts.push(pos);
        }
    }
    push_trimmed(src, cur, e, &mut out);
    out
}

/// How good a place the line starting at `at` is to begin a range (lower is better): after
/// a blank line best, then by the line's indentation (a tab counts as four), a line that
/// closes a bracket (`}`, `)`, `]`) as if it were indented one step more.
fn cut_rank(src: &str, at: usize) -> usize {
    let before = &src[..at];
    let prev = before
        .strip_suffix('\n')
        .map_or("", |b| &b[b.rfind('\n').map_or(0, |i| i + 1)..]);
    if prev.trim().is_empty() {
        return 0;
    }
    let line = &src[at..];
    let line = &line[..line.find('\n').unwrap_or(line.len())];
    let indent: usize = line
        .chars()
        .take_while(|c| c.is_whitespace())
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum();
    let closes = line.trim_start().starts_with(['}', ')', ']']);
    1 + indent + if closes { 4 } else { 0 }
}

fn next_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

fn push_trimmed(src: &str, s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    let (s, e) = trim(src, s, e);
    if e > s {
        out.push((s, e));
    }
}

/// Ranges (in order, apart) under `floor` bytes joined to a neighbour while the two fit in
/// `ceiling`: the one before when it has room, else the one after. A part of one line (`return
/// rv`, `}`, a signature alone) cites nothing a reader can use, and scores high on words alone.
pub(crate) fn merge_small(ranges: &mut Vec<(usize, usize)>, floor: usize, ceiling: usize) {
    let mut k = 0;
    while k < ranges.len() {
        let (s, e) = ranges[k];
        if e - s >= floor {
            k += 1;
            continue;
        }
        if k > 0 && e - ranges[k - 1].0 <= ceiling {
            ranges[k - 1].1 = e;
            ranges.remove(k);
            k -= 1; // the joined range may still be under the floor
        } else if k + 1 < ranges.len() && ranges[k + 1].1 - s <= ceiling {
            ranges[k + 1].0 = s;
            ranges.remove(k);
        } else {
            k += 1;
        }
    }
}

/// Paragraphs (separated by blank lines), merged while the chunk is under the floor, never
/// over the ceiling.
pub fn chunk(src: &str, opts: &Options) -> Chunked {
    let mut notes = Vec::new();
    let mut paragraphs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    let mut blank_run = false;
    while pos < src.len() {
        let line_end = src[pos..].find('\n').map_or(src.len(), |i| pos + i + 1);
        let blank = src[pos..line_end].trim().is_empty();
        if blank && !blank_run && pos > start {
            paragraphs.push((start, pos));
        }
        if blank {
            start = line_end;
        }
        blank_run = blank;
        pos = line_end;
    }
    if start < src.len() {
        paragraphs.push((start, src.len()));
    }
    let points: Vec<usize> = paragraphs.iter().map(|p| p.0).collect();
    let whole = trim(src, 0, src.len());
    let ranges = crate::meaning::split(src, whole, &points, opts, &mut notes)
        .unwrap_or_else(|| by_size(src, &paragraphs, opts, &mut notes));
    Chunked {
        pieces: ranges
            .into_iter()
            .map(|(s, e)| Piece::new(Kind::Text, s, e, src[s..e].to_owned()))
            .collect(),
        notes,
        imports: Vec::new(),
    }
}

/// Paragraphs cut at lines to fit the ceiling, merged while a piece is under the floor.
fn by_size(
    src: &str,
    paragraphs: &[(usize, usize)],
    opts: &Options,
    notes: &mut Vec<Note>,
) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &(s, e) in paragraphs {
        for (s, e) in split_lines(src, s, e, opts.ceiling, notes) {
            match ranges.last_mut() {
                Some(last) if last.1 - last.0 < opts.floor && e - last.0 <= opts.ceiling => {
                    last.1 = e;
                }
                _ => ranges.push((s, e)),
            }
        }
    }
    ranges
}

/// Fixed windows of `size` characters with `overlap` characters shared between neighbours:
/// the naive baseline, kept for comparisons.
pub fn windows(src: &str, size: usize, overlap: usize) -> Vec<Piece> {
    let bounds: Vec<usize> = src
        .char_indices()
        .map(|(i, _)| i)
        .chain([src.len()])
        .collect();
    let chars = bounds.len() - 1;
    let step = size.saturating_sub(overlap).max(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars {
        let j = (i + size).min(chars);
        let (s, e) = (bounds[i], bounds[j]);
        if !src[s..e].trim().is_empty() {
            out.push(Piece::new(Kind::Window, s, e, src[s..e].to_owned()));
        }
        if j == chars {
            break;
        }
        i += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_merge_up_to_the_floor_and_never_pass_the_ceiling() {
        let src = "a\n\nb\n\n\n".to_owned() + &"c".repeat(300) + "\n\nd\n";
        let opts = Options {
            floor: 10,
            ceiling: 100,
            ..Options::default()
        };
        let c = chunk(&src, &opts);
        assert!(c.pieces.iter().all(|p| p.text.len() <= 100));
        assert_eq!(c.pieces[0].text, "a\n\nb");
        assert!(c.notes.contains(&Note::OversizeLine));
        let joined: String = c.pieces.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(joined.matches('c').count(), 300, "nothing is lost");
    }

    #[test]
    fn windows_overlap_and_respect_char_boundaries() {
        let src = "é".repeat(2500);
        let w = windows(&src, 1000, 100);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].text.chars().count(), 1000);
        assert_eq!(w[1].start, "é".len() * 900);
    }

    #[test]
    fn a_five_megabyte_line_is_cut_at_char_boundaries() {
        let src = "ü".repeat(2_500_000);
        let mut notes = Vec::new();
        let r = split_lines(&src, 0, src.len(), 2000, &mut notes);
        assert!(
            r.iter()
                .all(|(s, e)| e - s <= 2000 && src.is_char_boundary(*s))
        );
        assert_eq!(r.iter().map(|(s, e)| e - s).sum::<usize>(), src.len());
    }
}

//! Which lines of a file, as it reads now, a commit of its history changed: the commit's own
//! hunks, carried through the hunks of every later commit that changed the same file. A line a
//! later commit rewrote belongs to that commit, not to this one; a later change whose lines are
//! unknown (a binary version, one over the size limit, too many hunks) makes them unknown.

use trawl_core::records::Hunk;

/// An inclusive, 1-based line range.
pub type Lines = (u32, u32);

/// The lines `own` changed, in the file after that commit: each hunk's new side; a pure
/// deletion marks the line before it (or line 1).
pub fn changed_lines(own: &[Hunk]) -> Vec<Lines> {
    let mut out: Vec<Lines> = own
        .iter()
        .map(|h| {
            if h.new_lines == 0 {
                let at = h.new_start.max(1);
                (at, at)
            } else {
                (h.new_start, h.new_start + h.new_lines - 1)
            }
        })
        .collect();
    normalise(&mut out);
    out
}

/// `lines` of the file before a commit, in the file after it (`hunks`: that commit's, in file
/// order): lines the commit rewrote or removed drop out, the rest shift by what it inserted
/// and removed above them.
pub fn carry(lines: &[Lines], hunks: &[Hunk]) -> Vec<Lines> {
    let mut pieces: Vec<Lines> = lines.to_vec();
    for h in hunks {
        let mut next = Vec::with_capacity(pieces.len() + 1);
        for &(a, b) in &pieces {
            if h.old_lines == 0 {
                // An insertion after line old_start splits a range that runs past it.
                let at = h.old_start;
                if a <= at && at < b {
                    next.push((a, at));
                    next.push((at + 1, b));
                } else {
                    next.push((a, b));
                }
            } else {
                let (x, y) = (h.old_start, h.old_start + h.old_lines - 1);
                if b < x || a > y {
                    next.push((a, b));
                    continue;
                }
                if a < x {
                    next.push((a, x - 1));
                }
                if b > y {
                    next.push((y + 1, b));
                }
            }
        }
        pieces = next;
    }
    let mut out: Vec<Lines> = pieces
        .into_iter()
        .filter_map(|(a, b)| {
            let shift: i64 = hunks
                .iter()
                .filter(|h| {
                    if h.old_lines == 0 {
                        h.old_start < a
                    } else {
                        h.old_start + h.old_lines - 1 < a
                    }
                })
                .map(|h| i64::from(h.new_lines) - i64::from(h.old_lines))
                .sum();
            let a = i64::from(a) + shift;
            let b = i64::from(b) + shift;
            (a >= 1).then(|| (a as u32, b.max(a) as u32))
        })
        .collect();
    normalise(&mut out);
    out
}

/// The lines a commit changed, as the file reads now: `own` is its hunks of the file,
/// `later` the hunks of each later commit that changed the file, oldest first (`None`: that
/// commit changed it in ways not recorded, so nothing can be carried past it).
pub fn current_lines(own: &[Hunk], later: &[Option<&[Hunk]>]) -> Vec<Lines> {
    let mut lines = changed_lines(own);
    for hunks in later {
        match hunks {
            Some(h) => lines = carry(&lines, h),
            None => return Vec::new(),
        }
        if lines.is_empty() {
            break;
        }
    }
    lines
}

fn normalise(ranges: &mut Vec<Lines>) {
    ranges.sort_unstable();
    let mut out: Vec<Lines> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    *ranges = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hunk(old_start: u32, old_lines: u32, new_start: u32, new_lines: u32) -> Hunk {
        Hunk {
            old_start,
            old_lines,
            new_start,
            new_lines,
        }
    }

    #[test]
    fn own_lines_are_the_new_sides() {
        assert_eq!(
            changed_lines(&[hunk(3, 2, 3, 4), hunk(10, 1, 12, 0), hunk(20, 0, 21, 2)]),
            [(3, 6), (12, 12), (21, 22)]
        );
        assert_eq!(changed_lines(&[hunk(1, 3, 0, 0)]), [(1, 1)]);
    }

    #[test]
    fn later_changes_shift_and_take_over_lines() {
        // Two lines inserted after line 2 push lines 5–8 down by two.
        assert_eq!(carry(&[(5, 8)], &[hunk(2, 0, 3, 2)]), [(7, 10)]);
        // Line 6 rewritten by the later commit is its line now.
        assert_eq!(carry(&[(5, 8)], &[hunk(6, 1, 6, 1)]), [(5, 5), (7, 8)]);
        // Lines 1–3 removed above: everything moves up three.
        assert_eq!(carry(&[(5, 8)], &[hunk(1, 3, 0, 0)]), [(2, 5)]);
        // An insertion inside the range splits it.
        assert_eq!(carry(&[(5, 8)], &[hunk(6, 0, 7, 3)]), [(5, 6), (10, 11)]);
        // Below the range: nothing moves.
        assert_eq!(carry(&[(5, 8)], &[hunk(20, 2, 20, 9)]), [(5, 8)]);
        // Unknown later lines lose the trail.
        assert!(current_lines(&[hunk(1, 1, 1, 1)], &[None]).is_empty());
    }

    /// A file as numbered lines, and a random edit of it as `git diff -U0` hunks.
    fn edit(
        before: &[u32],
        cuts: &[(usize, usize, usize)],
        next_id: &mut u32,
    ) -> (Vec<u32>, Vec<Hunk>) {
        // cuts: (position, removed, inserted), applied in order on disjoint positions.
        let mut after = Vec::new();
        let mut hunks = Vec::new();
        let mut i = 0;
        for &(pos, removed, inserted) in cuts {
            if pos < i || pos > before.len() {
                continue;
            }
            let removed = removed.min(before.len() - pos);
            if removed == 0 && inserted == 0 {
                continue;
            }
            after.extend_from_slice(&before[i..pos]);
            let new_start = after.len() as u32;
            for _ in 0..inserted {
                after.push(*next_id);
                *next_id += 1;
            }
            hunks.push(Hunk {
                old_start: if removed == 0 {
                    pos as u32
                } else {
                    pos as u32 + 1
                },
                old_lines: removed as u32,
                new_start: if inserted == 0 {
                    new_start
                } else {
                    new_start + 1
                },
                new_lines: inserted as u32,
            });
            i = pos + removed;
        }
        after.extend_from_slice(&before[i..]);
        (after, hunks)
    }

    proptest! {
        /// Carried lines point at exactly the lines of the first edit that no later edit
        /// rewrote, wherever the later edits moved them.
        #[test]
        fn carried_lines_follow_the_content(
            len in 1usize..40,
            first in proptest::collection::vec((0usize..40, 0usize..4, 0usize..4), 1..4),
            second in proptest::collection::vec((0usize..45, 0usize..4, 0usize..4), 0..4),
        ) {
            let mut id = 1000;
            let base: Vec<u32> = (0..len as u32).collect();
            let mut first = first;
            first.sort_unstable();
            let (v1, h1) = edit(&base, &first, &mut id);
            let mut second = second;
            second.sort_unstable();
            let (v2, h2) = edit(&v1, &second, &mut id);
            // Content ids the first edit inserted, and where they are at the end.
            let inserted: Vec<u32> = v1.iter().copied().filter(|&x| x >= 1000).collect();
            let expected: Vec<u32> = v2
                .iter()
                .enumerate()
                .filter(|(_, x)| inserted.contains(x))
                .map(|(i, _)| i as u32 + 1)
                .collect();
            // Only insertions are content the first commit wrote; pure deletions mark a
            // neighbour, which is not checked here.
            let own: Vec<Hunk> = h1.iter().copied().filter(|h| h.new_lines > 0).collect();
            let got = current_lines(&own, &[Some(&h2)]);
            let got_lines: Vec<u32> = got.iter().flat_map(|&(a, b)| a..=b).collect();
            prop_assert_eq!(got_lines, expected, "v1 {:?} h1 {:?} v2 {:?} h2 {:?}", v1, h1, v2, h2);
        }
    }
}

//! Prose split by meaning: a Markdown section or a text file over the ceiling is cut where its
//! topic changes, not where its size runs out.
//!
//! The span is cut into units (sentences of a paragraph, items of a list, a code block or a
//! table whole), each unit is embedded by a [`Sentences`] model, and the distance between
//! neighbours (one minus their cosine) says where the text moves on. A cut goes wherever the
//! distance is above the given percentile of the span's distances; a piece still over the
//! ceiling is cut again at its own largest distance, and pieces under the floor merge with
//! the neighbour they are closer to while the two fit. Every non-blank byte of the span is in
//! exactly one piece, and pieces come in order.

use std::sync::Arc;

use crate::Note;
use crate::text::{split_lines, trim};

/// A model that embeds short texts: one vector per text, in order. The chunker calls it from
/// a blocking thread.
pub trait Sentences: Send + Sync {
    /// The vectors of `texts` (any length; they are normalised here).
    ///
    /// # Errors
    /// A message saying why the model could not embed them; the span is then packed by size.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String>;
}

/// How prose is split by meaning ([`crate::Options::meaning`]).
#[derive(Clone)]
pub struct Meaning {
    pub model: Arc<dyn Sentences>,
    /// A cut goes where the distance between neighbouring units is above this percentile of
    /// the span's distances (0–100).
    pub percentile: f32,
}

impl std::fmt::Debug for Meaning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meaning")
            .field("percentile", &self.percentile)
            .finish_non_exhaustive()
    }
}

/// Bytes of a unit sent to the model: a sentence is short; a code block or a table is known
/// by its start.
const UNIT_BYTES: usize = 600;

/// Splits `src[s..e]` (with block starts at `points`) by meaning into ranges of at most the
/// ceiling. `None` when `opts` has no [`Meaning`], the span fits the ceiling, it has fewer
/// than three units (nothing to choose between), or the model failed (with
/// [`Note::MeaningUnavailable`] in `notes`).
pub fn split(
    src: &str,
    (start, end): (usize, usize),
    points: &[usize],
    opts: &crate::Options,
    notes: &mut Vec<Note>,
) -> Option<Vec<(usize, usize)>> {
    let meaning = opts.meaning.as_ref()?;
    let (floor, ceiling) = (opts.floor, opts.ceiling);
    if end - start <= ceiling {
        return None;
    }
    let bounds = units(src, start, end, points);
    let count = bounds.len() - 1;
    if count < 3 {
        return None;
    }
    let texts: Vec<String> = bounds
        .windows(2)
        .map(|w| {
            let (a, b) = trim(src, w[0], w[1]);
            let b = crate::text::floor_boundary(src, b.min(a + UNIT_BYTES));
            src[a..b.max(a)].to_owned()
        })
        .collect();
    let vectors = match meaning.model.embed(&texts) {
        Ok(v) if v.len() == count => v,
        _ => {
            if !notes.contains(&Note::MeaningUnavailable) {
                notes.push(Note::MeaningUnavailable);
            }
            return None;
        }
    };
    let distances: Vec<f32> = vectors
        .windows(2)
        .map(|w| 1.0 - cosine(&w[0], &w[1]))
        .collect();
    let cuts = cut_points(&bounds, &distances, floor, ceiling, meaning.percentile);
    let mut out = Vec::new();
    let mut lo = 0;
    for hi in cuts.into_iter().chain([count]) {
        let (a, b) = trim(src, bounds[lo], bounds[hi]);
        if b > a {
            if b - a > ceiling {
                out.extend(split_lines(src, a, b, ceiling, notes));
            } else {
                out.push((a, b));
            }
        }
        lo = hi;
    }
    if !notes.contains(&Note::SplitByMeaning) {
        notes.push(Note::SplitByMeaning);
    }
    Some(out)
}

/// The unit boundaries of `src[s..e]`, `s` first and `e` last: block starts, list items and
/// sentence ends. Code blocks and tables are one unit each.
fn units(src: &str, s: usize, e: usize, points: &[usize]) -> Vec<usize> {
    let mut blocks = vec![s];
    blocks.extend(points.iter().copied().filter(|p| *p > s && *p < e));
    blocks.push(e);
    blocks.dedup();
    let mut out = vec![s];
    for w in blocks.windows(2) {
        let (a, b) = (w[0], w[1]);
        let block = &src[a..b];
        let head = block.trim_start();
        let whole = head.starts_with("```")
            || head.starts_with("~~~")
            || head.starts_with('|')
            || head.starts_with("    ")
            || head.starts_with('<');
        if !whole {
            out.extend(inner_bounds(src, a, b));
        }
        if b > *out.last().expect("starts with s") {
            out.push(b);
        }
    }
    out.dedup();
    out
}

/// Starts of list items (a line opening with `-`, `*`, `+` or `1.`) and of sentences (after
/// `.`, `!` or `?` and a space, before a capital, a digit or a quote) inside `src[a..b]`.
fn inner_bounds(src: &str, a: usize, b: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let text = &src[a..b];
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        let marker = t.strip_prefix(['-', '*', '+']).or_else(|| {
            let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            (digits > 0)
                .then(|| t[digits..].strip_prefix(['.', ')']))
                .flatten()
        });
        if line_start > 0 && marker.is_some_and(|r| r.starts_with(' ')) {
            out.push(a + line_start);
        }
        line_start += line.len();
    }
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let mut j = i + 1;
        while j < bytes.len() && matches!(bytes[j], b')' | b'"' | b'\'' | b'*' | b'_') {
            j += 1;
        }
        let ws = j;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\n') {
            j += 1;
        }
        if j == ws || j >= bytes.len() || text[ws..j].matches('\n').count() > 1 {
            continue;
        }
        let next = text[j..].chars().next().expect("in bounds");
        if next.is_uppercase() || next.is_ascii_digit() || matches!(next, '`' | '"' | '[') {
            out.push(a + j);
        }
    }
    out.sort_unstable();
    out
}

fn cosine(x: &[f32], y: &[f32]) -> f32 {
    let dot: f32 = x.iter().zip(y).map(|(a, b)| a * b).sum();
    let nx: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
    let ny: f32 = y.iter().map(|a| a * a).sum::<f32>().sqrt();
    if nx == 0.0 || ny == 0.0 {
        0.0
    } else {
        dot / (nx * ny)
    }
}

/// The units after which a piece ends (indices into `bounds`, each in `1..n`), ascending.
/// `distances[i]` is between unit `i` and unit `i + 1`.
fn cut_points(
    bounds: &[usize],
    distances: &[f32],
    floor: usize,
    ceiling: usize,
    percentile: f32,
) -> Vec<usize> {
    let n = bounds.len() - 1;
    let size = |lo: usize, hi: usize| bounds[hi] - bounds[lo];
    let mut sorted = distances.to_vec();
    sorted.sort_by(f32::total_cmp);
    let rank = ((percentile.clamp(0.0, 100.0) / 100.0) * sorted.len() as f32).ceil() as usize;
    let threshold = sorted[rank.clamp(1, sorted.len()) - 1];
    let mut cut: Vec<bool> = distances.iter().map(|d| *d > threshold).collect();
    // A piece over the ceiling is cut again at its largest distance (a work list, not
    // recursion: a long file has thousands of units).
    let mut todo = pieces_of(&cut);
    while let Some((lo, hi)) = todo.pop() {
        if hi - lo < 2 || size(lo, hi) <= ceiling {
            continue;
        }
        let at = (lo..hi - 1)
            .max_by(|a, b| distances[*a].total_cmp(&distances[*b]))
            .expect("two units or more");
        cut[at] = true;
        todo.push((lo, at + 1));
        todo.push((at + 1, hi));
    }
    // Pieces under the floor merge with the closer neighbour while the two fit.
    let mut pieces = pieces_of(&cut);
    let mut k = 0;
    while k < pieces.len() {
        let (lo, hi) = pieces[k];
        if size(lo, hi) >= floor || pieces.len() == 1 {
            k += 1;
            continue;
        }
        let left = (k > 0).then(|| (distances[lo - 1], k - 1));
        let right = (k + 1 < pieces.len()).then(|| (distances[hi - 1], k + 1));
        let mut options: Vec<(f32, usize)> = left.into_iter().chain(right).collect();
        options.sort_by(|a, b| a.0.total_cmp(&b.0));
        let fits = options.into_iter().find(|(_, j)| {
            let (a, b) = (pieces[*j].0.min(lo), pieces[*j].1.max(hi));
            size(a, b) <= ceiling
        });
        match fits {
            Some((_, j)) => {
                let merged = (pieces[j].0.min(lo), pieces[j].1.max(hi));
                let first = j.min(k);
                pieces[first] = merged;
                pieces.remove(first + 1);
                // Look again from the merged piece: it may still be under the floor.
                k = first;
            }
            None => k += 1,
        }
    }
    pieces.iter().map(|p| p.1).filter(|&h| h < n).collect()
}

/// The pieces `(first unit, past the last)` that `cut` (after unit `i`) makes of its units.
fn pieces_of(cut: &[bool]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut lo = 0;
    for (i, c) in cut.iter().enumerate() {
        if *c {
            out.push((lo, i + 1));
            lo = i + 1;
        }
    }
    out.push((lo, cut.len() + 1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model that knows topics by keyword: a sentence's vector is the topic it names.
    struct Topics;
    impl Sentences for Topics {
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            Ok(texts
                .iter()
                .map(|t| {
                    let topics = ["refund", "shipping", "password"];
                    let mut v: Vec<f32> = topics
                        .iter()
                        .map(|k| f32::from(u8::from(t.to_lowercase().contains(k))))
                        .collect();
                    v.push(0.1);
                    v
                })
                .collect())
        }
    }

    struct Broken;
    impl Sentences for Broken {
        fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, String> {
            Err("no model".into())
        }
    }

    fn opts(model: Arc<dyn Sentences>, floor: usize, ceiling: usize) -> crate::Options {
        crate::Options {
            floor,
            ceiling,
            meaning: Some(Meaning {
                model,
                percentile: 95.0,
            }),
            ..crate::Options::default()
        }
    }

    fn topic_text() -> String {
        let mut s = String::new();
        for i in 0..6 {
            s.push_str(&format!("A refund takes five days, case {i}. "));
        }
        s.push_str("\n\n");
        for i in 0..6 {
            s.push_str(&format!("Shipping goes out on Mondays, case {i}. "));
        }
        s.push('\n');
        for i in 0..6 {
            s.push_str(&format!(
                "- A password must have twelve letters, rule {i}.\n"
            ));
        }
        s
    }

    #[test]
    fn a_long_span_is_cut_where_the_topic_changes() {
        let src = topic_text();
        let points = [0, src.find("Shipping").unwrap()];
        let mut notes = Vec::new();
        let o = opts(Arc::new(Topics), 50, 400);
        let pieces = split(&src, (0, src.len()), &points, &o, &mut notes).expect("split");
        let texts: Vec<&str> = pieces.iter().map(|(a, b)| &src[*a..*b]).collect();
        assert_eq!(texts.len(), 3, "{texts:#?}");
        assert!(texts[0].starts_with("A refund") && !texts[0].contains("Shipping"));
        assert!(texts[1].starts_with("Shipping") && !texts[1].contains("password"));
        assert!(texts[2].starts_with("- A password") && texts[2].ends_with("rule 5."));
        assert_eq!(notes, [Note::SplitByMeaning]);
    }

    #[test]
    fn markdown_sections_and_text_files_are_cut_by_topic_with_their_trail() {
        let body = topic_text();
        let o = opts(Arc::new(Topics), 50, 400);
        let src = format!(
            "# Help\n\nWhat this guide covers, in a few words, for the new support staff.\n\n## Policies\n\n{body}"
        );
        let c = crate::chunk("HELP.md", Some("markdown"), &src, crate::Strategy::Ast, &o);
        let policies: Vec<&crate::Piece> = c
            .pieces
            .iter()
            .filter(|p| p.trail == ["Help", "Policies"])
            .collect();
        assert_eq!(policies.len(), 3, "{:#?}", c.pieces);
        assert!(
            policies[0].text.starts_with("## Policies") && policies[0].text.ends_with("case 5.")
        );
        assert!(policies[1].text.starts_with("Shipping") && !policies[1].text.contains("password"));
        assert!(c.notes.contains(&Note::SplitByMeaning));

        let c = crate::chunk("NOTES", Some("text"), &body, crate::Strategy::Ast, &o);
        let texts: Vec<&str> = c.pieces.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts.len(), 3, "{texts:#?}");
        assert!(texts[2].starts_with("- A password"));
    }

    /// [`Topics`], counting the texts it is asked to read.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);
    impl Sentences for Counting {
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            self.0
                .fetch_add(texts.len(), std::sync::atomic::Ordering::Relaxed);
            Topics.embed(texts)
        }
    }

    #[test]
    fn every_file_the_model_reads_is_one_may_use_meaning_names() {
        let model = Arc::new(Counting::default());
        let o = opts(model.clone(), 50, 400);
        let read = || model.0.load(std::sync::atomic::Ordering::Relaxed);
        let prose = topic_text();
        let code = "def f(x):\n    return x + 1\n\n".repeat(40);
        let md = format!("# Guide\n\n{prose}");
        let rows = "job:\n  run: cargo build\n\n".repeat(40);
        let cases: [(&str, Option<&str>, &str, bool); 9] = [
            ("GUIDE.md", Some("markdown"), &md, true),
            ("NOTES", Some("text"), &prose, true),
            ("docs/intro.rst", Some("rst"), &prose, true),
            ("LICENSE", None, &prose, true),
            (
                "short.md",
                Some("markdown"),
                "# Short\n\nOne line.\n",
                false,
            ),
            ("tests/data/sherlock.txt", Some("text"), &prose, false),
            ("ci.yml", Some("yaml"), &rows, false),
            ("app.py", Some("python"), &code, false),
            ("README.md", Some("markdown"), &md, true),
        ];
        for (path, language, src, prose_over_ceiling) in cases {
            let before = read();
            crate::chunk(path, language, src, crate::Strategy::Ast, &o);
            let may = crate::may_use_meaning(path, language, src.len(), crate::Strategy::Ast, &o);
            assert_eq!(may, prose_over_ceiling, "{path}");
            if read() > before {
                assert!(may, "{path} was read by the model but not named");
            }
            let windows =
                crate::may_use_meaning(path, language, src.len(), crate::Strategy::Windows, &o);
            assert!(!windows, "{path}: windows never read sentences");
        }
        assert!(read() > 0, "the prose cases were read by the model");
        let no_model = crate::Options { meaning: None, ..o };
        assert!(!crate::may_use_meaning(
            "GUIDE.md",
            Some("markdown"),
            md.len(),
            crate::Strategy::Ast,
            &no_model
        ));
    }

    #[test]
    fn data_configuration_and_test_fixtures_are_cut_by_size_without_the_model() {
        let model = Arc::new(Counting::default());
        let o = opts(model.clone(), 50, 400);
        let read = || model.0.load(std::sync::atomic::Ordering::Relaxed);
        // Blocks apart, as a sentence model would read them one by one.
        let rows = "job:\n  run: cargo build --release\n\n".repeat(200);
        for (path, language) in [("runs/jobs.csv", "csv"), ("ci.yml", "yaml")] {
            let c = crate::chunk(path, Some(language), &rows, crate::Strategy::Ast, &o);
            assert_eq!(read(), 0, "{path} was read by the sentence model");
            assert!(!c.notes.contains(&Note::SplitByMeaning));
            assert!(c.pieces.iter().all(|p| p.text.len() <= 400), "{path}");
            let kept: usize = c.pieces.iter().map(|p| p.text.len()).sum();
            assert!(kept + 200 >= rows.len(), "{path}: rows lost");
        }
        // So is a test suite's fixture text.
        for (path, language) in [
            ("tests/data/sherlock.txt", "text"),
            ("testdata/GUIDE.md", "markdown"),
        ] {
            let c = crate::chunk(
                path,
                Some(language),
                &topic_text(),
                crate::Strategy::Ast,
                &o,
            );
            assert_eq!(read(), 0, "{path} was read by the sentence model");
            assert!(!c.notes.contains(&Note::SplitByMeaning));
        }
        // Prose still is.
        let c = crate::chunk(
            "NOTES",
            Some("text"),
            &topic_text(),
            crate::Strategy::Ast,
            &o,
        );
        assert!(read() > 0 && c.notes.contains(&Note::SplitByMeaning));
    }

    #[test]
    fn a_failing_model_leaves_the_span_to_the_size_split() {
        let src = topic_text();
        let mut notes = Vec::new();
        let o = opts(Arc::new(Broken), 50, 400);
        let r = split(&src, (0, src.len()), &[], &o, &mut notes);
        assert!(r.is_none());
        assert_eq!(notes, [Note::MeaningUnavailable]);
    }

    #[test]
    fn sentences_lists_and_code_blocks_are_units() {
        let src =
            "First one. Second one, e.g. this. Third!\n\n```\nx. Y\n```\n- item one\n- Item two.\n";
        let code = src.find("```").unwrap();
        let b = units(src, 0, src.len(), &[0, code]);
        let texts: Vec<&str> = b.windows(2).map(|w| src[w[0]..w[1]].trim()).collect();
        assert_eq!(
            texts,
            [
                "First one.",
                "Second one, e.g. this.",
                "Third!",
                "```\nx. Y\n```\n- item one\n- Item two."
            ]
        );
        let list = src.find("- item").unwrap();
        let b = units(src, 0, src.len(), &[0, code, list]);
        let texts: Vec<&str> = b.windows(2).map(|w| src[w[0]..w[1]].trim()).collect();
        assert_eq!(texts[3..], ["```\nx. Y\n```", "- item one", "- Item two."]);
    }

    proptest::proptest! {
        /// Whatever the vectors, the pieces are in order, never overlap, never pass the
        /// ceiling, and hold every non-blank byte of the span.
        #[test]
        fn pieces_cover_the_span_in_order_under_the_ceiling(
            sentences in proptest::collection::vec(("[A-Z][a-z ]{0,80}", 0u8..4), 3..60),
            floor in 0usize..300,
            ceiling in 120usize..800,
            percentile in 0f32..100.0,
        ) {
            struct Given(Vec<Vec<f32>>);
            impl Sentences for Given {
                fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
                    Ok(texts.iter().enumerate().map(|(i, _)| self.0[i % self.0.len()].clone()).collect())
                }
            }
            let mut src = String::new();
            let mut vectors = Vec::new();
            for (s, topic) in &sentences {
                src.push_str(s.trim());
                src.push_str(". ");
                let mut v = vec![0.0f32; 4];
                v[usize::from(*topic)] = 1.0;
                vectors.push(v);
            }
            let mut o = opts(Arc::new(Given(vectors)), floor.min(ceiling - 1), ceiling);
            if let Some(m) = o.meaning.as_mut() {
                m.percentile = percentile;
            }
            let mut notes = Vec::new();
            if let Some(pieces) = split(&src, (0, src.len()), &[0], &o, &mut notes) {
                let mut last = 0;
                for (a, b) in &pieces {
                    proptest::prop_assert!(*a >= last && b > a && b - a <= ceiling);
                    proptest::prop_assert!(src[last..*a].trim().is_empty());
                    last = *b;
                }
                proptest::prop_assert!(src[last..].trim().is_empty());
            }
        }
    }
}

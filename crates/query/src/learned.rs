//! A learned ranking for questions in words. The fused ranking's first candidates are ranked
//! again by a weighted sum of features: the arms' ranks and scores, how much of the
//! question's rarer words (not the words that frame it) a chunk holds (in its text, in its
//! name and path, in its first lines, as adjacent pairs, close together), its role (and
//! whether a commit is what it asks for), kind and size, and how many of the other answers
//! share its repository and file. The weights (`query.ranker`) are fitted on a tuning split by
//! `trawl eval --train-ranker`: a pairwise logistic regression, every hit of a question
//! against every miss of it.

use std::collections::{HashMap, HashSet};

use trawl_core::ChunkKind;
use trawl_core::config::RankerWeights;
use trawl_index::docs::DocRow;

use crate::rank::{self, Role};

/// How many features there are.
pub const N: usize = RankerWeights::NAMES.len();
/// One candidate's features, in the order of [`RankerWeights::NAMES`].
pub type Features = [f64; N];

/// The rank constant of the arms' reciprocal-rank features.
const RANK_K: f64 = 20.0;
/// Lines of a chunk's text read as its lead (signature, docstring).
const LEAD_LINES: usize = 4;
/// The window of words in which [`Question::proximity`] looks for the question's terms.
const PROXIMITY_WORDS: usize = 40;
/// Answers whose repositories and files make the share features.
const SHARE_TOP: usize = 10;

/// Terms shorter than this say little about a chunk (`a`, `is`, `io`): the coverage features
/// leave them out.
const MIN_TERM_CHARS: usize = 3;

/// The words that frame a question rather than name what it is about; the coverage features
/// leave them out (their inverse document frequency is low in prose, but code and its
/// comments are not prose, and a chunk holding `the` and `how` covers nothing).
const FUNCTION_WORDS: [&str; 30] = [
    "the", "and", "for", "how", "what", "where", "when", "why", "which", "who", "does", "are",
    "was", "were", "this", "that", "these", "those", "with", "from", "into", "its", "their",
    "there", "can", "not", "get", "has", "have", "been",
];

/// What a question brings to every candidate's features.
pub struct Question {
    /// Distinct terms, each with its other inflections and its weight (inverse document
    /// frequency in the text index).
    terms: Vec<(String, Vec<String>, f64)>,
    /// Adjacent word pairs.
    pairs: HashSet<(String, String)>,
    /// Whether it asks why or when code changed ([`rank::asks_for_history`]).
    history: bool,
}

impl Question {
    /// `df` gives a term's document frequency among `docs` docs.
    pub fn new(query: &str, docs: u64, df: impl Fn(&str) -> u64) -> Self {
        let mut ts = trawl_index::analyzer::terms(query);
        ts.retain(|t| t.chars().count() >= MIN_TERM_CHARS && !FUNCTION_WORDS.contains(&t.as_str()));
        ts.sort();
        ts.dedup();
        let n = docs as f64;
        let terms = ts
            .into_iter()
            .map(|t| {
                let d = df(&t) as f64;
                let idf = (1.0 + (n - d + 0.5) / (d + 0.5)).ln();
                let inflections = trawl_index::analyzer::inflections(&t);
                (t, inflections, idf)
            })
            .collect();
        let words = trawl_index::analyzer::word_sequence(query);
        let pairs = words
            .windows(2)
            .map(|w| (w[0].clone(), w[1].clone()))
            .collect();
        Self {
            terms,
            pairs,
            history: rank::asks_for_history(query),
        }
    }

    /// The weighted share of the question's terms found in `text`'s terms.
    fn coverage(&self, found: &HashSet<String>) -> f64 {
        let total: f64 = self.terms.iter().map(|t| t.2).sum();
        if total <= 0.0 {
            return 0.0;
        }
        let hit: f64 = self
            .terms
            .iter()
            .filter(|(t, inf, _)| found.contains(t) || inf.iter().any(|i| found.contains(i)))
            .map(|t| t.2)
            .sum();
        hit / total
    }

    /// The largest weighted share of the question's terms found within one window of
    /// [`PROXIMITY_WORDS`] consecutive words of `words`: the question's words together, not
    /// scattered over a long chunk.
    fn proximity(&self, words: &[String]) -> f64 {
        let total: f64 = self.terms.iter().map(|t| t.2).sum();
        if total <= 0.0 || words.is_empty() {
            return 0.0;
        }
        // Each position's term index, if it is one of the question's.
        let at: Vec<Option<usize>> = words
            .iter()
            .map(|w| {
                self.terms
                    .iter()
                    .position(|(t, inf, _)| t == w || inf.iter().any(|i| i == w))
            })
            .collect();
        let mut counts = vec![0usize; self.terms.len()];
        let mut held = 0.0;
        let mut best: f64 = 0.0;
        for (i, t) in at.iter().enumerate() {
            if let Some(t) = *t {
                if counts[t] == 0 {
                    held += self.terms[t].2;
                }
                counts[t] += 1;
            }
            if i >= PROXIMITY_WORDS
                && let Some(t) = at[i - PROXIMITY_WORDS]
            {
                counts[t] -= 1;
                if counts[t] == 0 {
                    held -= self.terms[t].2;
                }
            }
            best = best.max(held);
        }
        best / total
    }

    /// The share of the question's adjacent word pairs found side by side in `words` (a
    /// text's [`trawl_index::analyzer::word_sequence`]).
    fn pair_coverage(&self, words: &[String]) -> f64 {
        if self.pairs.is_empty() {
            return 0.0;
        }
        let found: HashSet<(&str, &str)> = words
            .windows(2)
            .map(|w| (w[0].as_str(), w[1].as_str()))
            .collect();
        let hit = self
            .pairs
            .iter()
            .filter(|(a, b)| found.contains(&(a.as_str(), b.as_str())))
            .count();
        hit as f64 / self.pairs.len() as f64
    }
}

fn term_set(text: &str) -> HashSet<String> {
    trawl_index::analyzer::terms(text).into_iter().collect()
}

/// A candidate's place and its score in one arm's ranking (best first).
pub type ArmHits<K> = HashMap<K, (usize, f64)>;

/// The features of `pool` (the fused ranking, best first; `key` and `doc` read each one).
/// `vector` and `lexical` are the arms' rankings; `lexical_top` the best lexical score and
/// `vector_floor` the lowest similarity the vector arm returned.
pub struct Arms<K> {
    pub vector: ArmHits<K>,
    pub lexical: ArmHits<K>,
    pub vector_floor: f64,
    pub lexical_top: f64,
}

pub fn features<'a, K: std::hash::Hash + Eq + Copy>(
    q: &Question,
    arms: &Arms<K>,
    pool: &[(K, f64)],
    doc: impl Fn(K) -> &'a DocRow,
) -> Vec<Features> {
    let top = pool.first().map_or(1.0, |c| c.1).max(f64::MIN_POSITIVE);
    let repos: Vec<&str> = pool
        .iter()
        .take(SHARE_TOP)
        .map(|c| doc(c.0).repo_id.as_str())
        .collect();
    let files: Vec<(&str, &str)> = pool
        .iter()
        .take(SHARE_TOP)
        .map(|c| (doc(c.0).repo_id.as_str(), doc(c.0).path.as_str()))
        .collect();
    pool.iter()
        .enumerate()
        .map(|(i, &(key, score))| {
            let d = doc(key);
            let (vrrf, vsim) = arms.vector.get(&key).map_or((0.0, 0.0), |&(r, s)| {
                (1.0 / (RANK_K + r as f64 + 1.0), s - arms.vector_floor)
            });
            let (lrrf, lshare) = arms.lexical.get(&key).map_or((0.0, 0.0), |&(r, s)| {
                (
                    1.0 / (RANK_K + r as f64 + 1.0),
                    s / arms.lexical_top.max(f64::MIN_POSITIVE),
                )
            });
            let name = format!(
                "{} {} {} {}",
                d.symbol.as_deref().unwrap_or(""),
                d.qualified_name.as_deref().unwrap_or(""),
                d.path,
                d.header
            );
            let name_terms = term_set(&name);
            // One analysis of the text gives its terms and its word sequence.
            let (terms, words) = trawl_index::analyzer::terms_and_words(&d.text);
            let mut all: HashSet<String> = terms.into_iter().collect();
            let lead: String = d
                .text
                .lines()
                .take(LEAD_LINES)
                .collect::<Vec<_>>()
                .join("\n");
            let lead_terms = term_set(&lead);
            all.extend(name_terms.iter().cloned());
            let role = rank::chunk_role(d);
            let lines = f64::from(d.end_line.saturating_sub(d.start_line) + 1);
            let repo = d.repo_id.as_str();
            let file = (repo, d.path.as_str());
            let flag = |b: bool| if b { 1.0 } else { 0.0 };
            let k = d.kind;
            [
                score / top,
                1.0 / (i as f64 + 1.0),
                vrrf,
                vsim,
                lrrf,
                lshare,
                q.coverage(&all),
                q.coverage(&name_terms),
                q.coverage(&lead_terms),
                q.pair_coverage(&words),
                flag(role == Role::Docs),
                flag(matches!(role, Role::Test | Role::Example | Role::Generated)),
                flag(role == Role::History),
                flag(role == Role::History && q.history),
                lines.ln(),
                repos.iter().filter(|r| **r == repo).count() as f64 / SHARE_TOP as f64,
                files.iter().filter(|f| **f == file).count() as f64 / SHARE_TOP as f64,
                flag(matches!(
                    k,
                    ChunkKind::Function | ChunkKind::Method | ChunkKind::Macro
                )),
                // A type declares a shape as a struct or an interface does (and Rust's and
                // Go's were structs when the weights were fitted).
                flag(k.is_container() || k == ChunkKind::Type),
                flag(rank::is_wide(k)),
                flag(k == ChunkKind::Code),
                flag(matches!(
                    k,
                    ChunkKind::Section | ChunkKind::Text | ChunkKind::Window
                )),
                q.proximity(&words),
            ]
        })
        .collect()
}

/// The learned score of one candidate.
pub fn score(f: &Features, w: &Features) -> f64 {
    f.iter().zip(w).map(|(a, b)| a * b).sum()
}

/// The order of `feats` by learned score, best first (ties keep their fused order).
pub fn order(feats: &[Features], w: &RankerWeights) -> Vec<usize> {
    let w = w.to_array();
    let s: Vec<f64> = feats.iter().map(|f| score(f, &w)).collect();
    let mut idx: Vec<usize> = (0..feats.len()).collect();
    idx.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
    idx
}

/// One question's candidates for fitting: features and whether each answers it.
pub type Sample = Vec<(Features, bool)>;

/// Fits weights to `samples`: a pairwise logistic regression (every hit of a question
/// against every miss of it) on standardised features, by gradient descent with an L2
/// penalty `l2`, returned on the features' own scale. Questions with no hit, or no miss,
/// teach nothing and are skipped.
pub fn fit(samples: &[Sample], l2: f64) -> RankerWeights {
    let rows: Vec<&Features> = samples.iter().flatten().map(|(f, _)| f).collect();
    let mut mean = [0.0; N];
    let mut sd = [0.0; N];
    if rows.is_empty() {
        return RankerWeights::default();
    }
    for f in &rows {
        for (m, x) in mean.iter_mut().zip(f.iter()) {
            *m += x / rows.len() as f64;
        }
    }
    for f in &rows {
        for ((s, x), m) in sd.iter_mut().zip(f.iter()).zip(&mean) {
            *s += (x - m).powi(2) / rows.len() as f64;
        }
    }
    for s in &mut sd {
        *s = s.sqrt().max(1e-9);
    }
    let z = |f: &Features| -> Features {
        let mut out = [0.0; N];
        for (i, o) in out.iter_mut().enumerate() {
            *o = (f[i] - mean[i]) / sd[i];
        }
        out
    };
    let mut pairs: Vec<Features> = Vec::new();
    for s in samples {
        for (p, _) in s.iter().filter(|c| c.1) {
            for (n, _) in s.iter().filter(|c| !c.1) {
                let (zp, zn) = (z(p), z(n));
                let mut d = [0.0; N];
                for (i, o) in d.iter_mut().enumerate() {
                    *o = zp[i] - zn[i];
                }
                pairs.push(d);
            }
        }
    }
    if pairs.is_empty() {
        return RankerWeights::default();
    }
    let mut w = [0.0; N];
    let rate = 0.1;
    for _ in 0..FIT_EPOCHS {
        let mut grad = [0.0; N];
        for d in &pairs {
            let s: f64 = d.iter().zip(&w).map(|(a, b)| a * b).sum();
            // d/dw of ln(1 + e^-s) = -d / (1 + e^s)
            let g = 1.0 / (1.0 + s.exp());
            for (gi, di) in grad.iter_mut().zip(d) {
                *gi -= di * g / pairs.len() as f64;
            }
        }
        for (wi, gi) in w.iter_mut().zip(grad) {
            *wi -= rate * (gi + l2 * *wi);
        }
    }
    let mut raw = [0.0; N];
    for (i, r) in raw.iter_mut().enumerate() {
        *r = w[i] / sd[i];
    }
    RankerWeights::from_array(raw)
}

/// Passes of gradient descent in [`fit`].
const FIT_EPOCHS: usize = 400;

/// MRR@10 of `samples` ranked by `w` (`None`: in their fused order).
pub fn mrr(samples: &[Sample], w: Option<&RankerWeights>) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let total: f64 = samples
        .iter()
        .map(|s| {
            let feats: Vec<Features> = s.iter().map(|c| c.0).collect();
            let idx = match w {
                Some(w) => order(&feats, w),
                None => (0..s.len()).collect(),
            };
            idx.iter()
                .take(10)
                .position(|&i| s[i].1)
                .map_or(0.0, |p| 1.0 / (p as f64 + 1.0))
        })
        .sum();
    total / samples.len() as f64
}

/// Mean MRR@10 of each fold's questions ranked by weights fitted on the other folds, and of
/// the same questions in fused order: whether the fit generalises, on the tuning split alone.
pub fn cross_validate(samples: &[Sample], folds: usize, l2: f64) -> (f64, f64) {
    let folds = folds.clamp(2, samples.len().max(2));
    let (mut learned, mut fused, mut n) = (0.0, 0.0, 0usize);
    for k in 0..folds {
        let held: Vec<Sample> = samples.iter().skip(k).step_by(folds).cloned().collect();
        let train: Vec<Sample> = samples
            .iter()
            .enumerate()
            .filter(|(i, _)| i % folds != k)
            .map(|(_, s)| s.clone())
            .collect();
        if held.is_empty() {
            continue;
        }
        let w = fit(&train, l2);
        learned += mrr(&held, Some(&w)) * held.len() as f64;
        fused += mrr(&held, None) * held.len() as f64;
        n += held.len();
    }
    let n = n.max(1) as f64;
    (learned / n, fused / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(i: usize, x: f64) -> Features {
        let mut f = [0.0; N];
        f[i] = x;
        f
    }

    #[test]
    fn the_fit_learns_which_feature_marks_the_answers() {
        // The answer is never first in fused order but always covers the question best.
        let cov = RankerWeights::NAMES
            .iter()
            .position(|n| *n == "coverage")
            .unwrap();
        let samples: Vec<Sample> = (0..20u8)
            .map(|q| {
                (0..8u8)
                    .map(|c| {
                        let x = f64::from(c);
                        let mut f = with(cov, if c == 3 { 0.9 } else { 0.1 * f64::from(c % 4) });
                        f[1] = 1.0 / (x + 1.0);
                        f[0] = 1.0 - 0.1 * x + 0.01 * f64::from(q % 3);
                        (f, c == 3)
                    })
                    .collect()
            })
            .collect();
        assert!((mrr(&samples, None) - 0.25).abs() < 1e-9);
        let w = fit(&samples, 0.01);
        assert!(w.coverage > 0.0, "{w:?}");
        assert!((mrr(&samples, Some(&w)) - 1.0).abs() < 1e-9);
        let (learned, fused) = cross_validate(&samples, 4, 0.01);
        assert!(learned > fused, "{learned} vs {fused}");
    }

    #[test]
    fn rare_words_weigh_more_than_common_ones() {
        // "retry" is in 2 of 1,000 docs, "the" in all of them.
        let q = Question::new("the retry", 1000, |t| if t == "retry" { 2 } else { 1000 });
        let with_rare = term_set("fn retry() {}");
        let with_common = term_set("the end");
        assert!(q.coverage(&with_rare) > 0.9);
        assert!(q.coverage(&with_common) < 0.1);
        // Another inflection of a word counts as the word.
        let q = Question::new("retries", 1000, |_| 2);
        assert!(q.coverage(&term_set("fn retry()")) > 0.9);
    }

    #[test]
    fn a_commit_is_what_is_asked_for_only_when_the_question_asks_why_or_when() {
        use trawl_index::testing::function_doc;
        let code = function_doc(
            "github.com/acme/shop",
            "src/retry.py",
            "retry",
            "def retry(): pass",
            (1, 1),
        );
        let commit = DocRow {
            kind: ChunkKind::Commit,
            symbol: None,
            qualified_name: None,
            text: "Remove the retry of POST requests".into(),
            ..function_doc("github.com/acme/shop", "COMMIT", "c", "", (1, 1))
        };
        let docs = [&code, &commit];
        let arms = Arms {
            vector: HashMap::new(),
            lexical: HashMap::new(),
            vector_floor: 0.0,
            lexical_top: 1.0,
        };
        let at = RankerWeights::NAMES
            .iter()
            .position(|n| *n == "history_asked")
            .unwrap();
        for (question, asked) in [
            ("why was the retry of POST requests removed?", true),
            ("which commit removed the retry", true),
            ("how are POST requests retried?", false),
        ] {
            let q = Question::new(question, 10, |_| 1);
            let f = features(&q, &arms, &[(0usize, 1.0), (1, 0.9)], |k| docs[k]);
            assert!(
                f[0][at] < 0.5,
                "{question}: code is never the commit asked for"
            );
            assert_eq!(f[1][at] > 0.5, asked, "{question}");
        }
    }

    #[test]
    fn the_words_that_frame_a_question_cover_nothing() {
        // Every word in every doc: only the weights' share decides, and a chunk holding the
        // question's framing words (and a two-letter word) but not what it asks about covers
        // none of it.
        let q = Question::new("how does the pool give a connection back?", 1000, |_| 500);
        assert!(q.coverage(&term_set("how does the a go")) < 1e-9);
        let half = q.coverage(&term_set("the pool, the connection"));
        assert!((half - 0.5).abs() < 1e-9, "{half}");
        assert!(q.coverage(&term_set("pool give connection back")) > 0.999);
    }

    #[test]
    fn the_question_s_words_together_count_more_than_scattered() {
        let q = Question::new("how is the retry delay capped?", 1000, |_| 5);
        let words = trawl_index::analyzer::word_sequence;
        let filler = "x ".repeat(PROXIMITY_WORDS);
        let together = words(&format!(
            "{filler} // cap the retry delay at max\n {filler}"
        ));
        let apart = words(&format!("retry {filler} delay {filler} capped"));
        assert!(q.proximity(&together) > 0.99, "{}", q.proximity(&together));
        let scattered = q.proximity(&apart);
        assert!(scattered > 0.3 && scattered < 0.4, "{scattered}");
        // Inflections count as the word; a window holds each word once however often it
        // recurs.
        assert!(q.proximity(&words("caps: retries, retries, delays")) > 0.99);
        assert!(q.proximity(&words("retry retry retry")) < 0.4);
        assert!(q.proximity(&[]).abs() < 1e-12);
    }

    #[test]
    fn pairs_count_only_side_by_side() {
        let q = Question::new("parse the flags", 10, |_| 1);
        let words = trawl_index::analyzer::word_sequence;
        assert!(q.pair_coverage(&words("we parse the flags here")) > 0.99);
        assert!(q.pair_coverage(&words("flags the parse")) < 0.01);
    }
}

//! Retrieval quality of a query set: Recall@1/5/10 and MRR@10, overall, per query kind and
//! per repository.
//!
//! A query is a JSON line `{"id","query","kind","targets":[{"repo","path","start_line",
//! "end_line"}]}`. A result hits a target when it is in the same repository (the target's
//! `repo` is a pattern: `*` matches any) and path, and their line ranges overlap by at least
//! half of the smaller range. A target with a `commit` (a hexadecimal prefix of its id) is a
//! commit message: a result hits it when it is that commit's doc in a matching repository.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use trawl_core::config::QueryConfig;

use crate::QueryError;
use crate::request::Hit;

/// One expected answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub repo: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub start_line: u32,
    #[serde(default)]
    pub end_line: u32,
    /// A commit message as the answer: a prefix of the commit's id (at least 7 digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// One query of the set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalQuery {
    pub id: String,
    pub query: String,
    /// What sort of query: `natural`, `symbol`, `error`, `config`, …
    pub kind: String,
    pub targets: Vec<Target>,
    /// Which half of a development set: `tune` (weights were chosen on it) or `test` (never
    /// looked at while tuning). Absent: the query belongs to no split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// Reads a JSON-lines query set; blank lines are skipped; an error names the line.
pub fn load(path: &Path) -> Result<Vec<EvalQuery>, QueryError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| QueryError::BadRequest(format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let q: EvalQuery = serde_json::from_str(line)
            .map_err(|e| QueryError::BadRequest(format!("{}:{}: {e}", path.display(), i + 1)))?;
        if q.targets.is_empty() {
            return Err(QueryError::BadRequest(format!(
                "{}:{}: query {:?} has no targets",
                path.display(),
                i + 1,
                q.id
            )));
        }
        for t in &q.targets {
            let bad = match &t.commit {
                Some(c) => (c.len() < 7 || !c.chars().all(|c| c.is_ascii_hexdigit())).then(|| {
                    format!("commit {c:?} is not a hexadecimal commit id of 7 or more digits")
                }),
                None => (t.path.is_empty() || t.start_line == 0 || t.end_line < t.start_line).then(
                    || {
                        "a target needs a path and lines (1 ≤ start_line ≤ end_line), or a commit"
                            .to_owned()
                    },
                ),
            };
            if let Some(why) = bad {
                return Err(QueryError::BadRequest(format!(
                    "{}:{}: query {:?}: {why}",
                    path.display(),
                    i + 1,
                    q.id
                )));
            }
        }
        out.push(q);
    }
    if out.is_empty() {
        return Err(QueryError::BadRequest(format!(
            "{} holds no queries",
            path.display()
        )));
    }
    Ok(out)
}

/// The knobs of naive RAG over a windows index: every ranking change off, plain BM25 (no
/// phrase pairs, no identifier weight), both arms weighted alike, RRF k=60.
pub fn naive(params: &QueryConfig) -> QueryConfig {
    let mut p = params.clone();
    for (_, off) in ablations() {
        off(&mut p);
    }
    p.rrf_k = 60.0;
    p.weight_vector = 1.0;
    p.weight_lexical = 1.0;
    p.identifier_lexical_weight = 1.0;
    p.phrase_weight = 0.0;
    p
}

/// A ranking change's name and how to switch it off.
pub type Ablation = (&'static str, fn(&mut QueryConfig));

/// Each ranking change of [`crate::rank`], and how to switch it off.
pub fn ablations() -> Vec<Ablation> {
    vec![
        ("intent weights", |p| p.intent_weights = false),
        ("message match", |p| p.message_boost = 0.0),
        ("raise sites", |p| p.raise_lend = 0.0),
        ("key match", |p| p.key_boost = 0.0),
        ("role prior", |p| {
            p.test_prior = 1.0;
            p.generated_prior = 1.0;
            p.docs_prior = 1.0;
            p.config_docs_prior = 1.0;
            p.usage_docs_prior = 1.0;
            p.module_prior = 1.0;
        }),
        ("narrow citations", |p| {
            p.wide_prior = 1.0;
            p.narrow = false;
        }),
        ("delegates", |p| p.delegates = false),
        ("functions first", |p| p.acts_first = false),
        ("doc place", |p| p.doc_place = 0),
        ("usage questions", |p| p.usage_docs_prior = p.docs_prior),
        ("repository names", |p| p.named_repo_prior = 1.0),
        ("prose lending", |p| p.prose_lend = 0.0),
        ("history lending", |p| p.history_lend = 0.0),
        ("callers", |p| p.callers_boost = 0.0),
        ("commit messages", |p| p.commits = false),
        ("learned ranking", |p| p.ranker_pool = 0),
    ]
}

fn repo_matches(pattern: &str, repo: &str) -> bool {
    pattern == repo
        || crate::access::glob(pattern).is_ok_and(|g| g.compile_matcher().is_match(repo))
}

/// Whether a result (or what it collapsed into it) hits a target.
pub fn hits(hit: &Hit, t: &Target) -> bool {
    if let Some(prefix) = &t.commit {
        return hit.kind == "commit"
            && repo_matches(&t.repo, &hit.repo)
            && hit.commit.starts_with(&prefix.to_ascii_lowercase());
    }
    if !repo_matches(&t.repo, &hit.repo) || hit.path != t.path {
        return false;
    }
    let lo = hit.start_line.max(t.start_line);
    let hi = hit.end_line.min(t.end_line);
    if hi < lo {
        return false;
    }
    let overlap = hi - lo + 1;
    let smaller = (hit.end_line - hit.start_line + 1).min(t.end_line - t.start_line + 1);
    2 * overlap >= smaller
}

/// Whether `hit` hits `t` and cites about as many lines as it: at most twice the target's
/// span and [`PRECISE_SLACK`] lines more. A container holding the target hits it, but a
/// ranking fitted on hits alone learns that long chunks hit more often; the learned
/// ranking is fitted on precise hits, so that it prefers the lines that answer.
pub fn hits_precisely(hit: &Hit, t: &Target) -> bool {
    if !hits(hit, t) {
        return false;
    }
    if t.commit.is_some() {
        return true;
    }
    let span = |a: u32, b: u32| b.saturating_sub(a) + 1;
    span(hit.chunk.start_line, hit.chunk.end_line)
        <= 2 * span(t.start_line, t.end_line) + PRECISE_SLACK
}

/// Lines a precise hit may cite beyond twice its target's span.
pub const PRECISE_SLACK: u32 = 10;

/// Recall@1/5/10 and MRR@10 over some queries.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Scores {
    pub queries: usize,
    pub recall_1: f64,
    pub recall_5: f64,
    pub recall_10: f64,
    /// The share of queries with a target hit by the first result (Recall@1 counts the share
    /// of each query's targets, so a query with two targets adds at most a half to it).
    pub hit_1: f64,
    /// The share of queries with a target hit in the top 10.
    pub hit_10: f64,
    pub mrr_10: f64,
    /// Mean lines a returned result spans (over the top 10 of every query): what a reader
    /// has to read for one citation.
    pub mean_span: f64,
}

#[derive(Default)]
struct Sum {
    n: usize,
    r: [f64; 3],
    hit: [usize; 2],
    mrr: f64,
    span_lines: u64,
    spans: u64,
}

impl Sum {
    /// One query: its recalls, the rank of its first hit, its results.
    fn add(&mut self, r: [f64; 3], rank: Option<usize>, hits: &[Hit]) {
        self.n += 1;
        for (a, b) in self.r.iter_mut().zip(r) {
            *a += b;
        }
        for (h, k) in self.hit.iter_mut().zip([1, 10]) {
            *h += usize::from(rank.is_some_and(|r| r <= k));
        }
        let mrr = rank.filter(|&r| r <= 10).map_or(0.0, |r| 1.0 / r as f64);
        self.mrr += mrr;
        for h in hits.iter().take(10) {
            self.span_lines += u64::from(h.chunk.end_line.saturating_sub(h.chunk.start_line) + 1);
            self.spans += 1;
        }
    }
    fn scores(&self) -> Scores {
        let n = self.n.max(1) as f64;
        Scores {
            queries: self.n,
            recall_1: self.r[0] / n,
            recall_5: self.r[1] / n,
            recall_10: self.r[2] / n,
            hit_1: self.hit[0] as f64 / n,
            hit_10: self.hit[1] as f64 / n,
            mrr_10: self.mrr / n,
            mean_span: self.span_lines as f64 / self.spans.max(1) as f64,
        }
    }
}

/// The scores of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    pub overall: Scores,
    pub by_kind: BTreeMap<String, Scores>,
    pub by_repo: BTreeMap<String, Scores>,
    /// Queries with no target in the top 10.
    pub missed: Vec<String>,
    /// Each query's rank (from 1) of its first result that hits a target, among every
    /// result fetched (`trawl eval --depth`); `None` when none does.
    pub ranks: BTreeMap<String, Option<usize>>,
}

/// Scores `results[i]` (ranked) against `queries[i]`. Recall@k is the share of a query's
/// targets found in the top k; MRR@10 the reciprocal rank of the first result that hits any.
pub fn score(queries: &[EvalQuery], results: &[Vec<Hit>]) -> Report {
    let mut all = Sum::default();
    let mut kinds: BTreeMap<String, Sum> = BTreeMap::new();
    let mut repos: BTreeMap<String, Sum> = BTreeMap::new();
    let mut missed = Vec::new();
    let mut ranks = BTreeMap::new();
    for (q, hits_) in queries.iter().zip(results) {
        let found_by = |k: usize| {
            q.targets
                .iter()
                .filter(|t| hits_.iter().take(k).any(|h| hits(h, t)))
                .count() as f64
                / q.targets.len() as f64
        };
        let r = [found_by(1), found_by(5), found_by(10)];
        let rank = hits_
            .iter()
            .position(|h| q.targets.iter().any(|t| hits(h, t)))
            .map(|p| p + 1);
        ranks.insert(q.id.clone(), rank);
        if rank.is_none_or(|r| r > 10) {
            missed.push(q.id.clone());
        }
        all.add(r, rank, hits_);
        kinds.entry(q.kind.clone()).or_default().add(r, rank, hits_);
        repos
            .entry(q.targets[0].repo.clone())
            .or_default()
            .add(r, rank, hits_);
    }
    Report {
        overall: all.scores(),
        by_kind: kinds.into_iter().map(|(k, s)| (k, s.scores())).collect(),
        by_repo: repos.into_iter().map(|(k, s)| (k, s.scores())).collect(),
        missed,
        ranks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, a: u32, b: u32) -> Hit {
        Hit {
            chunk: crate::request::Cited {
                repo: "local/x".into(),
                commit: "c".into(),
                path: path.into(),
                start_line: a,
                end_line: b,
                symbol: None,
                kind: "function".into(),
                text: String::new(),
            },
            score: 0.0,
            language: "python".into(),
            chunk_id: String::new(),
            context: vec![],
        }
    }

    fn target(path: &str, a: u32, b: u32) -> Target {
        Target {
            commit: None,
            repo: "*".into(),
            path: path.into(),
            start_line: a,
            end_line: b,
        }
    }

    #[test]
    fn a_hit_needs_the_same_file_and_half_the_smaller_span() {
        let t = target("a.py", 10, 20);
        assert!(hits(&hit("a.py", 10, 20), &t));
        assert!(
            hits(&hit("a.py", 1, 100), &t),
            "a container holds the target"
        );
        assert!(hits(&hit("a.py", 15, 30), &t), "6 of 11 lines");
        assert!(!hits(&hit("a.py", 17, 40), &t), "4 of 11 lines");
        assert!(!hits(&hit("b.py", 10, 20), &t));
        let mut other = t.clone();
        other.repo = "github.com/a/*".into();
        assert!(!hits(&hit("a.py", 10, 20), &other));
    }

    #[test]
    fn a_commit_target_is_hit_by_that_commit_only() {
        let t = Target {
            commit: Some("61B69E9".into()),
            repo: "*/click".into(),
            path: String::new(),
            start_line: 0,
            end_line: 0,
        };
        let mut c = hit("", 1, 3);
        c.chunk.kind = "commit".into();
        c.chunk.repo = "github.com/pallets/click".into();
        c.chunk.commit = "61b69e967e525bd502f5bf42def4d551e761fe0e".into();
        assert!(hits(&c, &t));
        let mut other = c.clone();
        other.chunk.commit = "a2ac5839f29f61cf7f3f229c67b97d07988e479b".into();
        assert!(!hits(&other, &t), "another commit");
        let mut code = c.clone();
        code.chunk.kind = "function".into();
        assert!(!hits(&code, &t), "code of that commit is not its message");
        let mut elsewhere = c;
        elsewhere.chunk.repo = "github.com/spf13/cobra".into();
        assert!(!hits(&elsewhere, &t));
    }

    #[test]
    fn a_target_without_lines_or_a_commit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bad = [
            r#"{"id":"a","query":"q","kind":"history","targets":[{"repo":"*","commit":"61b6"}]}"#,
            r#"{"id":"b","query":"q","kind":"history","targets":[{"repo":"*","commit":"not-hex!"}]}"#,
            r#"{"id":"c","query":"q","kind":"natural","targets":[{"repo":"*","path":"a.py"}]}"#,
        ];
        for line in bad {
            let p = dir.path().join("q.jsonl");
            std::fs::write(&p, line).unwrap();
            let e = load(&p).unwrap_err().to_string();
            assert!(e.contains("q.jsonl:1"), "{e}");
        }
        let p = dir.path().join("ok.jsonl");
        std::fs::write(
            &p,
            r#"{"id":"d","query":"q","kind":"history","targets":[{"repo":"*","commit":"61b69e9"}]}"#,
        )
        .unwrap();
        assert_eq!(
            load(&p).unwrap()[0].targets[0].commit.as_deref(),
            Some("61b69e9")
        );
    }

    #[test]
    fn recall_and_mrr_follow_the_first_hit() {
        let q = |id: &str, kind: &str, targets: Vec<Target>| EvalQuery {
            id: id.into(),
            query: id.into(),
            kind: kind.into(),
            targets,
            split: None,
        };
        let queries = vec![
            q("first", "symbol", vec![target("a.py", 1, 5)]),
            q("third", "natural", vec![target("a.py", 1, 5)]),
            q("never", "natural", vec![target("a.py", 1, 5)]),
            q(
                "half",
                "natural",
                vec![target("a.py", 1, 5), target("b.py", 1, 5)],
            ),
        ];
        let miss = hit("c.py", 1, 5);
        let good = hit("a.py", 1, 5);
        let results = vec![
            vec![good.clone()],
            vec![miss.clone(), miss.clone(), good.clone()],
            vec![miss.clone(); 12],
            vec![good.clone()],
        ];
        let r = score(&queries, &results);
        assert_eq!(r.overall.queries, 4);
        assert!((r.overall.recall_1 - (1.0 + 0.0 + 0.0 + 0.5) / 4.0).abs() < 1e-9);
        assert!((r.overall.recall_5 - (1.0 + 1.0 + 0.0 + 0.5) / 4.0).abs() < 1e-9);
        assert!((r.overall.mrr_10 - (1.0 + 1.0 / 3.0 + 0.0 + 1.0) / 4.0).abs() < 1e-9);
        // Hit@k counts queries, not targets: the query with two targets, one found first,
        // counts whole.
        assert!((r.overall.hit_1 - 2.0 / 4.0).abs() < 1e-9);
        assert!((r.overall.hit_10 - 3.0 / 4.0).abs() < 1e-9);
        assert!((r.by_kind["symbol"].recall_1 - 1.0).abs() < 1e-9);
        // 1 + 3 + 12 + 1 results of 5 lines each, the third query's cut at 10.
        assert!((r.overall.mean_span - 5.0).abs() < 1e-9);
        assert_eq!(r.missed, ["never"]);
        assert_eq!(r.ranks["never"], None);
        let mut deep = results.clone();
        deep[2].push(good.clone());
        let d = score(&queries, &deep);
        assert_eq!(
            d.ranks["never"],
            Some(13),
            "a hit past the tenth is ranked, not scored"
        );
        assert_eq!(d.overall, r.overall);
    }
}

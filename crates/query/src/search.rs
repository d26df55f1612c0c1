//! One search over an open generation.
//!
//! [`candidates`] runs the arms — per segment, ANN and BM25 in parallel (rayon), each with
//! the filters and the caller's access applied inside the search (usearch's filtered search,
//! tantivy's filter collector), so another repository's docs never take a top-k slot — and
//! fuses them by reciprocal rank. [`finish`] collapses overlapping hits and expands along
//! the graph. Between the two the service may rerank.

use std::collections::HashMap;
use std::sync::Arc;

use globset::GlobSet;
use rayon::prelude::*;
use trawl_core::ChunkKind;
use trawl_core::config::{Fusion, QueryConfig};
use trawl_index::VectorData;
use trawl_index::docs::DocRow;
use trawl_index::segment;

use crate::QueryError;
use crate::access::{Access, globset};
use crate::index::{
    Generation, Segment, is_definition, named_definition, normalize_symbol, spell_symbol,
};
use crate::learned;
use crate::rank::{self, Intent};
use crate::request::{Cited, Context, Hit, Mode, SearchRequest};

/// What restricts the docs a search may touch: the request's filters and the caller's access.
#[derive(Debug)]
pub struct Filter {
    access: Access,
    repo: Option<GlobSet>,
    lang: Vec<String>,
    kind: Vec<ChunkKind>,
    path: Option<GlobSet>,
}

impl Filter {
    pub fn new(req: &SearchRequest, access: Access) -> Result<Self, QueryError> {
        let lower = |v: &[String]| v.iter().map(|s| s.trim().to_lowercase()).collect();
        let repo = if req.repo.is_empty() {
            None
        } else {
            Some(globset(&req.repo)?)
        };
        let path = if req.path.is_empty() {
            None
        } else {
            // A pattern without a wildcard is a prefix: `Lib/http` = `Lib/http` and below.
            let pats: Vec<String> = req
                .path
                .iter()
                .flat_map(|p| {
                    let p = p.trim().trim_start_matches("./").to_owned();
                    if p.contains(['*', '?', '[', '{']) {
                        vec![p]
                    } else {
                        let base = p.trim_end_matches('/').to_owned();
                        vec![base.clone(), format!("{base}/**")]
                    }
                })
                .collect();
            Some(globset(&pats).map_err(|e| {
                QueryError::BadRequest(e.to_string().replace("repository pattern", "path pattern"))
            })?)
        };
        Ok(Self {
            access,
            repo,
            lang: lower(&req.lang),
            kind: kinds(&req.kind)?,
            path,
        })
    }

    /// Refuses a `lang` filter that names no language of `generation`'s docs (`pyhton`, or a
    /// file extension such as `py`): the search would find nothing and say nothing. The
    /// error offers the nearest name; it lists the index's languages only to a caller who
    /// may see every repository.
    pub fn check_languages(&self, generation: &Generation) -> Result<(), QueryError> {
        if self.lang.is_empty() {
            return Ok(());
        }
        let known = generation.languages();
        let Some(bad) = self.lang.iter().find(|l| !known.contains(&l.as_str())) else {
            return Ok(());
        };
        // A file extension names its language (`py` → python); else the nearest spelling.
        let by_extension =
            trawl_core::language::detect(&format!("x.{bad}"), b"").filter(|k| known.contains(k));
        let nearest = by_extension.or_else(|| {
            known
                .iter()
                .map(|k| (strsim::damerau_levenshtein(bad, k), *k))
                .filter(|&(d, _)| d <= 1.max(bad.len() / 3))
                .min()
                .map(|(_, k)| k)
        });
        let mut msg = format!("no chunk of the index is in language {bad:?}");
        if let Some(k) = nearest {
            msg.push_str(&format!(": did you mean {k:?}?"));
        }
        if self.access.allows_all() {
            msg.push_str(&format!(" (the index holds {})", known.join(", ")));
        }
        Err(QueryError::BadRequest(msg))
    }

    fn repo_ok(&self, repo: &str) -> bool {
        self.access.allows(repo) && self.repo.as_ref().is_none_or(|g| g.is_match(repo))
    }

    fn restricts_docs(&self) -> bool {
        !self.lang.is_empty() || !self.kind.is_empty() || self.path.is_some()
    }

    fn doc_ok(&self, d: &DocRow) -> bool {
        (self.lang.is_empty() || self.lang.iter().any(|l| l == &d.language))
            && (self.kind.is_empty() || self.kind.iter().any(|&k| is_of_kind(d, k)))
            && self.path.as_ref().is_none_or(|g| g.is_match(&d.path))
    }
}

/// The kinds a request names (`function`, `module_code`, …), each checked: a misspelt kind
/// is an error that lists them all, not a search that silently finds nothing.
fn kinds(names: &[String]) -> Result<Vec<ChunkKind>, QueryError> {
    names
        .iter()
        .map(|n| {
            let n = n.trim().to_lowercase();
            n.parse().map_err(|_| {
                let all: Vec<&str> = ChunkKind::ALL.iter().map(|k| k.as_str()).collect();
                QueryError::BadRequest(format!(
                    "unknown chunk kind {n:?}: use one of {}",
                    all.join(", ")
                ))
            })
        })
        .collect()
}

/// Whether `d` passes a `kind` filter. A named constant is not a chunk of its own but a
/// member of the module code that declares it, so `constant` finds that module code.
fn is_of_kind(d: &DocRow, kind: ChunkKind) -> bool {
    d.kind == kind
        || (kind == ChunkKind::Constant && d.kind == ChunkKind::Code && !d.members.is_empty())
}

/// The filter of one segment, cheap to clone into tantivy's collector.
#[derive(Clone)]
struct SegFilter {
    seg: Arc<Segment>,
    filter: Arc<Filter>,
    repo_ok: Arc<Vec<bool>>,
}

impl SegFilter {
    fn new(seg: &Arc<Segment>, filter: &Arc<Filter>) -> Self {
        Self {
            repo_ok: Arc::new(seg.repos.iter().map(|r| filter.repo_ok(r)).collect()),
            seg: seg.clone(),
            filter: filter.clone(),
        }
    }

    /// Nothing in this segment is excluded.
    fn passes_all(&self) -> bool {
        self.repo_ok.iter().all(|&b| b) && !self.filter.restricts_docs() && self.seg.all_alive
    }

    /// The caller's token hides a repository of this segment: its lexical scores must then
    /// come from the statistics of the docs it may see (see [`VisibleStats`]).
    fn hides_repos(&self) -> bool {
        self.seg.repos.iter().any(|r| !self.filter.access.allows(r))
    }

    /// The caller's token sees at least one repository of this segment.
    fn sees_any(&self) -> bool {
        self.seg.repos.iter().any(|r| self.filter.access.allows(r))
    }

    /// Whether the caller may see this (live) doc at all, whatever the request filters.
    fn visible(&self, ord: u64) -> bool {
        let o = ord as usize;
        o < self.seg.docs.len()
            && self.seg.alive[o]
            && self
                .filter
                .access
                .allows(&self.seg.repos[self.seg.repo_of[o] as usize])
    }

    /// No doc of this segment can pass.
    fn passes_none(&self) -> bool {
        !self.repo_ok.iter().any(|&b| b)
    }

    fn ok(&self, ord: u64) -> bool {
        let o = ord as usize;
        o < self.seg.docs.len()
            && self.seg.alive[o]
            && self.repo_ok[self.seg.repo_of[o] as usize]
            && self.filter.doc_ok(&self.seg.docs[o])
    }
}

/// A candidate: segment, ord, score.
pub type Candidate = (u32, u32, f64);

/// The fused ranking, before collapse.
#[derive(Debug, Default)]
pub struct Ranked {
    pub candidates: Vec<Candidate>,
    /// A question in words: the features of the candidates the learned ranking considered,
    /// in fused order (to fit its weights on; empty otherwise).
    pub pool: Vec<(Candidate, learned::Features)>,
    /// What could not be done as asked.
    pub notes: Vec<String>,
}

pub use crate::rank::identifier_like;

/// The arms, fused. `vector` is the query's embedding in the generation's space (`None`:
/// lexical only, with a note when the mode wanted vectors).
pub fn candidates(
    generation: &Generation,
    req: &SearchRequest,
    k: usize,
    filter: Filter,
    vector: Option<&VectorData>,
    params: &QueryConfig,
) -> Result<Ranked, QueryError> {
    candidates_with(generation, req, k, filter, vector, None, params)
}

/// [`candidates`], with the vector of HyDE's hypothetical code searched as a third arm
/// (`query.hyde_weight`) when there is one.
///
/// The ranking does not depend on `k`: each arm returns `query.candidates` per segment
/// whatever is asked, so the first ten answers of a search for fifty are the ten of a search
/// for ten. Only when that leaves fewer than three candidates per answer asked (a deep page,
/// a small index) are the arms searched again, as deep as the deepest page allowed
/// (`query.max_k`), and what only that search finds is put after everything the first one
/// ranked, so a longer page always begins with a shorter one.
pub fn candidates_with(
    generation: &Generation,
    req: &SearchRequest,
    k: usize,
    filter: Filter,
    vector: Option<&VectorData>,
    hyde: Option<&VectorData>,
    params: &QueryConfig,
) -> Result<Ranked, QueryError> {
    let filter = Arc::new(filter);
    let mut head = ranked_at(
        generation,
        req,
        params.candidates,
        &filter,
        vector,
        hyde,
        params,
    )?;
    let want = 3 * k;
    if head.candidates.len() >= want || params.candidates >= want {
        return Ok(head);
    }
    // One depth for every k, so that the tail too is the same whatever is asked.
    let deep_per_arm = 3 * params.max_k.max(k);
    let deep = ranked_at(generation, req, deep_per_arm, &filter, vector, hyde, params)?;
    let seen: std::collections::HashSet<(u32, u32)> =
        head.candidates.iter().map(|c| (c.0, c.1)).collect();
    head.candidates.extend(
        deep.candidates
            .into_iter()
            .filter(|c| !seen.contains(&(c.0, c.1))),
    );
    Ok(head)
}

/// The fused (and, for a question in words, learned) ranking with each arm returning
/// `per_arm` candidates per segment.
fn ranked_at(
    generation: &Generation,
    req: &SearchRequest,
    per_arm: usize,
    filter: &Arc<Filter>,
    vector: Option<&VectorData>,
    hyde: Option<&VectorData>,
    params: &QueryConfig,
) -> Result<Ranked, QueryError> {
    let mut notes = Vec::new();
    let mode = req.mode;
    let intent = rank::classify(&req.query);
    let want_vector = mode != Mode::Lexical;
    let vector = if want_vector { vector } else { None };
    if want_vector && vector.is_none() {
        notes.push(if generation.manifest.space.is_none() {
            "the index has no vectors: lexical search only (run `trawl embed`, then compact)"
                .to_owned()
        } else {
            "the query could not be embedded in the index's vector space: lexical search only"
                .to_owned()
        });
    }
    let waiting = generation.manifest.counts.text_only;
    if want_vector && vector.is_some() && waiting > 0 {
        notes.push(format!(
            "{waiting} of {} chunks are still waiting for their vectors: the meaning search does not see them yet, words do (the next generation has them)",
            generation.manifest.counts.chunks
        ));
    }
    let run_lexical = mode != Mode::Vector || vector.is_none();
    // A pasted message's producer may share few rare words with it: the lexical arm looks
    // deeper, and every candidate is searched for the format string.
    let depth = if intent == Intent::Error && params.message_boost > 0.0 {
        rank::ERROR_DEPTH
    } else {
        1
    };
    let per_arm = per_arm * depth;
    // Each segment's filter, made once: the arms, the statistics, the symbol and caller
    // lookups all read it.
    let filters: Vec<SegFilter> = generation
        .segments
        .iter()
        .map(|seg| SegFilter::new(seg, filter))
        .collect();
    let schema = generation.segments.first().map(|s| s.text.schema());
    // The words score against the statistics of the whole generation (of what the caller
    // may see), so a chunk's lexical score does not depend on the shard it was built into.
    let lexical = match (&schema, run_lexical) {
        (Some(schema), true) => {
            let text = rank::lexical_text(&req.query, intent);
            let (text, dropped) = cap_terms(&text, params.max_query_terms);
            if dropped > 0 {
                notes.push(format!(
                    "the query has more than {} distinct words (query.max_query_terms): the last {dropped} words were left out of the lexical search",
                    params.max_query_terms
                ));
            }
            let q = trawl_index::segment::text_query(schema, &text, params.phrase_weight)?;
            let stats = CorpusStats::new(&filters, &q)
                .map_err(|e| QueryError::Index(format!("text statistics: {e}")))?;
            Some((q, stats))
        }
        _ => None,
    };
    let dims = generation.manifest.space.as_ref().map_or(1, |s| s.dims);
    let binary = generation
        .manifest
        .space
        .as_ref()
        .is_some_and(|s| s.dtype.is_binary());

    let arm = VectorArm {
        vector,
        n: per_arm,
        dims,
        binary,
        exact_below: params.exact_scan_below,
        // A prose view is words about code: it answers a question in words; a name, a
        // pasted message or a key is matched as it is spelled.
        prose: params.prose_vectors && intent == Intent::Natural,
    };
    // HyDE's arm searches only beside the question's own vector, in hybrid mode.
    let hyde_arm = VectorArm {
        vector: hyde.filter(|_| mode == Mode::Hybrid && vector.is_some()),
        ..arm
    };
    type Arm = Vec<Candidate>;
    let per_segment: Vec<Result<(Arm, Arm, Arm), QueryError>> = filters
        .par_iter()
        .enumerate()
        .map(|(si, f)| {
            let seg = &f.seg;
            if f.passes_none() {
                return Ok((Vec::new(), Vec::new(), Vec::new()));
            }
            let si = si as u32;
            let ((v, hy), l) = rayon::join(
                || {
                    (
                        vector_arm(seg, f, &arm, si),
                        vector_arm(seg, f, &hyde_arm, si),
                    )
                },
                || match &lexical {
                    Some((q, stats)) => lexical_arm(seg, f, q, stats, per_arm, si),
                    None => Ok(Vec::new()),
                },
            );
            Ok((v?, l?, hy?))
        })
        .collect();
    let mut vec_hits = Vec::new();
    let mut lex_hits = Vec::new();
    let mut hyde_hits = Vec::new();
    for r in per_segment {
        let (v, l, hy) = r?;
        vec_hits.extend(v);
        lex_hits.extend(l);
        hyde_hits.extend(hy);
    }
    // Equal scores go in chunk id order, which does not depend on the shard a chunk was built
    // into (a segment and ord would: the same search over another sharding would order them
    // otherwise). Only ties read the ids.
    let chunk_id = |c: &Candidate| &generation.segments[c.0 as usize].docs[c.1 as usize].chunk_id;
    let by_score = |a: &Candidate, b: &Candidate| {
        b.2.total_cmp(&a.2)
            .then_with(|| chunk_id(a).cmp(chunk_id(b)))
    };
    for hits in [&mut vec_hits, &mut lex_hits, &mut hyde_hits] {
        hits.sort_by(by_score);
        hits.truncate(per_arm);
    }

    let effective = if vector.is_none() {
        Mode::Lexical
    } else {
        mode
    };
    let mut fused: HashMap<(u32, u32), f64> = HashMap::new();
    match effective {
        Mode::Vector => {
            for &(s, o, score) in &vec_hits {
                fused.insert((s, o), score);
            }
        }
        Mode::Lexical => {
            for &(s, o, score) in &lex_hits {
                fused.insert((s, o), score);
            }
        }
        Mode::Hybrid => {
            let w_lex = if params.intent_weights {
                match intent {
                    Intent::Identifier => params.identifier_lexical_weight,
                    Intent::Error => params.error_lexical_weight,
                    Intent::Config => params.config_lexical_weight,
                    Intent::Natural => params.weight_lexical,
                }
            } else if identifier_like(&req.query) {
                params.identifier_lexical_weight
            } else {
                params.weight_lexical
            };
            let arms = [
                (&vec_hits, params.weight_vector),
                (&lex_hits, w_lex),
                (&hyde_hits, params.hyde_weight),
            ];
            for (arm, w) in arms {
                fuse_arm(&mut fused, arm, w, params);
            }
        }
    }
    let doc = |(s, o): rank::Key| &generation.segments[s as usize].docs[o as usize];
    let definitions = |name: &str| -> Vec<rank::Key> {
        let mut out = Vec::new();
        for (si, f) in filters.iter().enumerate() {
            let Some(ords) = f.seg.symbols.get(name) else {
                continue;
            };
            out.extend(
                ords.iter()
                    .filter(|&&o| f.ok(u64::from(o)))
                    .map(|&o| (si as u32, o)),
            );
        }
        out
    };
    // A query that names a definition (symbol or qualified name) ranks it first; one that
    // names it through another owner (`ctx.throw` for `proto.throw`, `app.listen` for
    // `Application.listen`) ranks the few definitions of that member name next.
    if mode == Mode::Hybrid
        && let Some(named) = named_definition(&req.query)
    {
        let key = normalize_symbol(&named.name);
        let mut defs = definitions(&key);
        let mut boost = EXACT_SYMBOL;
        if defs.is_empty()
            && let Some((owner, member)) = key.rsplit_once('.')
        {
            let named = owned_by(owner, definitions(member), doc);
            if distinct_definitions(&named, doc) <= MAX_MEMBER_MATCHES {
                defs = named;
                boost = MEMBER_SYMBOL;
            }
        }
        let written = spell_symbol(&named.name);
        for k in defs {
            let d = doc(k);
            let case = if same_case(d, &written) {
                EXACT_CASE
            } else {
                0.0
            };
            // Written with its keyword (`impl Builder`, `struct Builder`), the definition of
            // that kind comes first; else a type's definition before its impl blocks.
            let first = if named.kinds.is_empty() {
                definition_first(d, &key)
            } else if named.kinds.iter().any(|&kind| is_of_kind(d, kind)) {
                DEFINITION_FIRST
            } else {
                0.0
            };
            *fused.entry(k).or_default() += boost + first + case;
        }
    }
    // The callers of a definition, in the call graph the compactor resolved, that this
    // request may see.
    let callers = |k: rank::Key| -> Vec<rank::Key> {
        generation
            .callers(&doc(k).chunk_id)
            .iter()
            .copied()
            .filter(|&(s, o)| filters[s as usize].ok(u64::from(o)))
            .collect()
    };
    // "Who calls X?": the callers of X's definitions join the answers ahead of the words that
    // merely mention X.
    if params.callers_boost > 0.0 && rank::asks_for_callers(&req.query) {
        for name in rank::named_identifiers(&req.query) {
            let key = normalize_symbol(&name);
            let mut defs = definitions(&key);
            if defs.is_empty()
                && let Some((owner, member)) = key.rsplit_once('.')
            {
                defs = owned_by(owner, definitions(member), doc);
            }
            // A definition split at statements is called through its first part.
            defs.retain(|&k| !trawl_core::records::is_later_part(&doc(k).header));
            if defs.is_empty() || defs.len() > MAX_MEMBER_MATCHES {
                continue;
            }
            for def in defs {
                for caller in callers(def) {
                    *fused.entry(caller).or_default() += params.callers_boost;
                }
            }
        }
    }
    rank::adjust(
        &mut fused,
        &req.query,
        intent,
        params,
        doc,
        definitions,
        callers,
    );
    if params.history_lend > 0.0 && params.commits && rank::asks_about_a_change(&req.query) {
        // The code that answers a "why did this change" question is often found before the
        // commit that changed it (a commit message is short, and says it in other words):
        // the first candidates (commits aside) lend their score to the last commits of their
        // lines.
        let code = rank::in_fused_order(&fused, doc, |d| d.kind != ChunkKind::Commit);
        for (k, score) in code.into_iter().take(HISTORY_LEND_POOL) {
            let d = doc(k);
            let commits =
                generation.commits_touching(&d.repo_id, &d.path, d.start_line, d.end_line);
            for (s, o) in commits.into_iter().take(HISTORY_LEND_COMMITS) {
                if filters[s as usize].ok(u64::from(o)) {
                    *fused.entry((s, o)).or_default() += params.history_lend * score;
                }
            }
        }
    }
    // A "who calls" question asks for the callers, wrappers among them.
    if params.delegates && !rank::asks_for_callers(&req.query) {
        // The definitions a chunk calls, as the compactor resolved them, that this request
        // may see.
        let callees = |k: rank::Key| -> Vec<rank::Key> {
            doc(k)
                .call_ids
                .iter()
                .filter_map(|id| generation.doc(id))
                .filter(|&(s, o)| filters[s as usize].ok(u64::from(o)))
                .collect()
        };
        rank::give_way_to_delegates(&mut fused, EXACT_SYMBOL, doc, callees);
    }
    let mut candidates: Vec<Candidate> = fused.into_iter().map(|((s, o), v)| (s, o, v)).collect();
    candidates.sort_by(by_score);
    if params.narrow {
        rank::narrow(&mut candidates, |s, o| doc((s, o)));
    }
    // Definitions named exactly (and callers of a named definition) stay first: no later
    // reordering moves them.
    let fixed = candidates
        .iter()
        .take_while(|c| c.2 >= EXACT_SYMBOL)
        .count();
    let mut pool = Vec::new();
    if let (true, Some(schema), Some((_, stats))) = (
        params.ranker_pool > 0 && effective == Mode::Hybrid && intent == Intent::Natural,
        &schema,
        &lexical,
    ) {
        let body = schema
            .get_field("body")
            .map_err(|e| QueryError::Index(format!("text index: {e}")))?;
        use tantivy::query::Bm25StatisticsProvider;
        let docs = stats.total_num_docs().unwrap_or(0);
        let question = learned::Question::new(&req.query, docs, |t| {
            stats
                .doc_freq(&tantivy::Term::from_field_text(body, t))
                .unwrap_or(0)
        });
        let arm = |hits: &[Candidate]| -> learned::ArmHits<rank::Key> {
            hits.iter()
                .enumerate()
                .map(|(r, &(s, o, score))| ((s, o), (r, score)))
                .collect()
        };
        let arms = learned::Arms {
            vector: arm(&vec_hits),
            lexical: arm(&lex_hits),
            vector_floor: vec_hits.last().map_or(0.0, |c| c.2),
            lexical_top: lex_hits.first().map_or(1.0, |c| c.2),
        };
        let end = (fixed + params.ranker_pool).min(candidates.len());
        let span: Vec<(rank::Key, f64)> = candidates[fixed..end]
            .iter()
            .map(|&(s, o, v)| ((s, o), v))
            .collect();
        let feats = learned::features(&question, &arms, &span, doc);
        pool = candidates[fixed..end].iter().copied().zip(feats).collect();
        // The pool takes its new order with the fused scores it had, best first, so that
        // scores still fall down the list.
        let order = learned::order(
            &pool.iter().map(|p| p.1).collect::<Vec<_>>(),
            &params.ranker,
        );
        let scores: Vec<f64> = candidates[fixed..end].iter().map(|c| c.2).collect();
        for (slot, &i) in order.iter().enumerate() {
            let (s, o, _) = pool[i].0;
            candidates[fixed + slot] = (s, o, scores[slot]);
        }
    }
    // A question is answered first by code that does what it asks.
    if params.acts_first
        && effective == Mode::Hybrid
        && intent == Intent::Natural
        && rank::is_question(&req.query)
    {
        rank::acts_first(&mut candidates, fixed, |s, o| doc((s, o)));
    }
    // A name or a key shows its documentation among its first answers.
    if effective == Mode::Hybrid && matches!(intent, Intent::Identifier | Intent::Config) {
        rank::give_docs_a_place(
            &mut candidates,
            params.doc_place,
            EXACT_SYMBOL,
            |s, o| doc((s, o)),
            |a, b| overlap(a, b).is_some(),
        );
    }
    Ok(Ranked {
        candidates,
        pool,
        notes,
    })
}

/// Adds one arm's candidates (best first) to the fused scores, weighted by `w`, as
/// `query.fusion` says.
fn fuse_arm(fused: &mut HashMap<(u32, u32), f64>, arm: &[Candidate], w: f64, params: &QueryConfig) {
    match params.fusion {
        Fusion::Rrf => {
            for (rank, &(s, o, _)) in arm.iter().enumerate() {
                *fused.entry((s, o)).or_default() += w / (params.rrf_k + rank as f64 + 1.0);
            }
        }
        Fusion::Scores => {
            let (lo, hi) = arm
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| {
                    (lo.min(c.2), hi.max(c.2))
                });
            let span = hi - lo;
            for &(s, o, score) in arm {
                let norm = if span > 0.0 { (score - lo) / span } else { 1.0 };
                *fused.entry((s, o)).or_default() += w * norm / (params.rrf_k + 1.0);
            }
        }
    }
}

/// The leading words of `text` that hold at most `max` distinct index terms, and how many
/// words were left out. Each term is a clause per text field (and more for its inflections),
/// so this bounds the lexical query a request can build.
fn cap_terms(text: &str, max: usize) -> (std::borrow::Cow<'_, str>, usize) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut seen = std::collections::HashSet::new();
    for (i, w) in words.iter().enumerate() {
        let terms = trawl_index::analyzer::terms(w);
        let new = terms.iter().filter(|t| !seen.contains(*t)).count();
        if seen.len() + new > max.max(1) {
            return (words[..i].join(" ").into(), words.len() - i);
        }
        seen.extend(terms);
    }
    (text.into(), 0)
}

/// Added to the fused score of an exact symbol match: more than any fusion can give.
pub const EXACT_SYMBOL: f64 = 1.0;
/// Added besides to a named definition that is not an `impl` block: what puts a type's
/// definition before its implementations (less than the gap between the two tiers above).
pub const DEFINITION_FIRST: f64 = 0.25;
/// [`DEFINITION_FIRST`] for a definition named by `key` (normalised), 0 for an `impl` block
/// named by its type: a type's own definition comes before the blocks that implement it
/// (`struct Walker` before `impl Walker`, `impl Display for Walker`); an impl found by one of
/// its members' names (`run` in a one-chunk `impl Walker`) defines that member, and counts.
pub fn definition_first(d: &DocRow, key: &str) -> f64 {
    if d.kind == ChunkKind::Impl && member_named(d, key).is_none() {
        0.0
    } else {
        DEFINITION_FIRST
    }
}

/// The member of `d` that `key` (normalised) names, by its qualified name (`walker.run`) or
/// its own (`run`).
fn member_named<'d>(d: &'d DocRow, key: &str) -> Option<&'d String> {
    d.members.iter().find(|m| {
        let m = normalize_symbol(m);
        m == key || m.rsplit('.').next() == Some(key)
    })
}

/// Added to a named definition whose name is written as the query writes it: in Go, Java or
/// JavaScript `Handle` and `handle` are two definitions (`RouterGroup.Handle`, exported, and
/// `RouterGroup.handle`, its helper), and the symbol map finds both.
pub const EXACT_CASE: f64 = 0.1;

/// Whether `d`'s name or qualified name ends with `written` (a name as
/// [`spell_symbol`] writes it), letter case included.
pub fn same_case(d: &DocRow, written: &str) -> bool {
    [d.qualified_name.as_deref(), d.symbol.as_deref()]
        .into_iter()
        .flatten()
        .map(spell_symbol)
        .any(|n| {
            n == written
                || n.strip_suffix(written)
                    .is_some_and(|head| head.ends_with('.'))
        })
}

/// Added to the definitions of a qualified query's member name when the owner differs.
pub const MEMBER_SYMBOL: f64 = 0.5;
/// A member name defined more often than this says too little to boost any of them.
pub const MAX_MEMBER_MATCHES: usize = 3;

/// How many definitions `defs` are: the parts of a definition split at statements count
/// once.
fn distinct_definitions<'a>(defs: &[rank::Key], doc: impl Fn(rank::Key) -> &'a DocRow) -> usize {
    defs.iter()
        .filter(|&&k| !trawl_core::records::is_later_part(&doc(k).header))
        .count()
}

/// The definitions of a member name that `owner` (as the query wrote it: `app` in
/// `app.callback`) may stand for, when there are too many to boost them all: those whose
/// owner in the qualified name, or whose file's name, `owner` abbreviates (`app` →
/// `Application`, `ctx` → `context.js`, `cmd` → `Command`). Through a receiver (`self`,
/// `this`, one or two letters) few enough are kept as they are.
fn owned_by<'a>(
    owner: &str,
    defs: Vec<rank::Key>,
    doc: impl Fn(rank::Key) -> &'a DocRow,
) -> Vec<rank::Key> {
    let owner = owner.rsplit('.').next().unwrap_or(owner);
    // A receiver (`self.run`, `this.emit`, Go's `c.Execute`) names no owner: the few
    // definitions of its member stand. A word that names one (`hooks.init`) picks among
    // them, and picks none when none is its.
    let receiver = owner.len() <= 2 || matches!(owner, "self" | "this" | "cls" | "super");
    if receiver && distinct_definitions(&defs, &doc) <= MAX_MEMBER_MATCHES {
        return defs;
    }
    defs.into_iter()
        .filter(|&k| {
            let d = doc(k);
            // `Application.callback` → `application`: the segment before the member.
            let of_qualified = d
                .qualified_name
                .as_deref()
                .and_then(|q| normalize_symbol(q).rsplit('.').nth(1).map(str::to_owned));
            let stem = d
                .path
                .rsplit('/')
                .next()
                .and_then(|f| f.split('.').next())
                .map(str::to_lowercase);
            [of_qualified, stem]
                .into_iter()
                .flatten()
                .any(|long| abbreviates(owner, &long))
        })
        .collect()
}

/// Whether `short` abbreviates `long` (both lowercase): the same first letter, and every
/// letter of `short` in `long`, in order (`app`, `application`; `ctx`, `context`). One letter
/// says too little.
fn abbreviates(short: &str, long: &str) -> bool {
    if short.chars().count() < 2 || short.chars().next() != long.chars().next() {
        return false;
    }
    let mut rest = long.chars();
    short.chars().all(|c| rest.any(|l| l == c))
}

/// What the vector arm searches with, the same for every segment.
struct VectorArm<'a> {
    vector: Option<&'a VectorData>,
    /// Candidates to take.
    n: usize,
    dims: u32,
    binary: bool,
    /// `query.exact_scan_below`.
    exact_below: f64,
    /// `query.prose_vectors`: a doc's prose vector counts too.
    prose: bool,
}

fn vector_arm(
    seg: &Segment,
    f: &SegFilter,
    arm: &VectorArm<'_>,
    si: u32,
) -> Result<Vec<Candidate>, QueryError> {
    let VectorArm {
        vector,
        n,
        dims,
        binary,
        exact_below,
        prose,
    } = *arm;
    let (Some(index), Some(q)) = (&seg.vectors, vector) else {
        return Ok(Vec::new());
    };
    // A doc may have two vectors, its own and its prose view's (keyed apart by
    // `segment::PROSE_KEY_BIT`): twice as many are taken, and each doc scores by the nearer.
    // A segment without prose vectors is searched as if there were none to leave out.
    let views = seg.prose_vectors;
    let prose = prose && views;
    let all = f.passes_all() && (prose || !views);
    let pred =
        |key: u64| (prose || key & segment::PROSE_KEY_BIT == 0) && f.ok(segment::doc_of_key(key));
    let doc_pred = |ord: u64| f.ok(ord);
    let wanted = if prose { 2 * n } else { n };
    let err =
        |e: &dyn std::fmt::Display| QueryError::Index(format!("vector search in {}: {e}", seg.dir));
    // A filter that admits few docs makes the filtered HNSW walk most of the graph to find
    // them: below `exact_below` of the segment, scanning the admitted docs is faster.
    let exact = if f.passes_all() {
        None
    } else {
        selective(seg.docs.len(), exact_below, n, &doc_pred)
    };
    let pairs: Vec<(u64, f32)> = if let Some(docs) = exact {
        let keys: Vec<u64> = if prose {
            docs.iter()
                .flat_map(|&o| [o, segment::prose_key(o)])
                .collect()
        } else {
            docs
        };
        exact_scan(index, q, &keys, wanted)?
    } else {
        let r = match q {
            VectorData::F32(v) if all => index.search(v, wanted),
            VectorData::F32(v) => index.filtered_search(v, wanted, pred),
            VectorData::I8(v) if all => index.search(v, wanted),
            VectorData::I8(v) => index.filtered_search(v, wanted, pred),
            VectorData::Bits(b) if all => index.search(usearch::b1x8::from_u8s(b), wanted),
            VectorData::Bits(b) => index.filtered_search(usearch::b1x8::from_u8s(b), wanted, pred),
        }
        .map_err(|e| err(&e))?;
        r.keys.into_iter().zip(r.distances).collect()
    };
    // Nearest first: the first key of a doc is its nearer vector.
    let mut pairs = pairs;
    pairs.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut seen = std::collections::HashSet::new();
    Ok(pairs
        .into_iter()
        // A filtered search may return fewer keys; never trust one that fails the filter.
        .filter(|&(key, _)| pred(key))
        .map(|(key, d)| (segment::doc_of_key(key), d))
        .filter(|&(ord, _)| seen.insert(ord))
        .take(n)
        .map(|(key, d)| {
            let sim = if binary {
                1.0 - f64::from(d) / f64::from(dims)
            } else {
                1.0 - f64::from(d)
            };
            (si, key as u32, sim)
        })
        .collect())
}

/// Docs sampled to estimate a filter's selectivity before deciding how to search.
const SELECTIVITY_SAMPLE: usize = 1024;

/// The keys `ok` admits among `0..docs`, when they are few enough for an exact scan: at most
/// `n` (the scan returns them all), or under `fraction` of the docs. The fraction is first
/// estimated on an even sample, so a filter that admits many costs ~1,000 predicate calls,
/// not one per doc.
fn selective(docs: usize, fraction: f64, n: usize, ok: &dyn Fn(u64) -> bool) -> Option<Vec<u64>> {
    if docs == 0 {
        return None;
    }
    let step = (docs / SELECTIVITY_SAMPLE).max(1);
    let sampled = (0..docs).step_by(step);
    let (seen, hit) = sampled.fold((0usize, 0usize), |(s, h), o| {
        (s + 1, h + usize::from(ok(o as u64)))
    });
    if hit as f64 > fraction * seen as f64 * 2.0 && hit * step > n {
        // Clearly not selective (the factor 2 leaves room for sampling error).
        return None;
    }
    let keys: Vec<u64> = (0..docs as u64).filter(|&o| ok(o)).collect();
    (keys.len() <= n || (keys.len() as f64) < fraction * docs as f64).then_some(keys)
}

/// The `n` nearest of `keys` to `q`, by the index's own metric, computed one by one: a
/// distance per admitted doc instead of a graph walk. Distances are those usearch reports
/// for the same pairs — inner product distance (`1 - a·b`) for float, cosine distance for
/// int8, Hamming for bits — ties broken by key.
pub fn exact_scan(
    index: &usearch::Index,
    q: &VectorData,
    keys: &[u64],
    n: usize,
) -> Result<Vec<(u64, f32)>, QueryError> {
    let dims = index.dimensions();
    let get_err = |e: &dyn std::fmt::Display| QueryError::Index(format!("reading a vector: {e}"));
    let mut out: Vec<(u64, f32)> = Vec::with_capacity(keys.len());
    match q {
        VectorData::F32(qv) => {
            let mut buf = vec![0f32; dims];
            for &k in keys {
                if index.get(k, &mut buf).map_err(|e| get_err(&e))? == 0 {
                    continue;
                }
                let dot: f64 = qv
                    .iter()
                    .zip(&buf)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                out.push((k, (1.0 - dot) as f32));
            }
        }
        VectorData::I8(qv) => {
            let mut buf = vec![0i8; dims];
            let qq: f64 = qv.iter().map(|a| f64::from(*a) * f64::from(*a)).sum();
            for &k in keys {
                if index.get(k, &mut buf).map_err(|e| get_err(&e))? == 0 {
                    continue;
                }
                let (mut ab, mut bb) = (0f64, 0f64);
                for (a, b) in qv.iter().zip(&buf) {
                    ab += f64::from(*a) * f64::from(*b);
                    bb += f64::from(*b) * f64::from(*b);
                }
                let d = if qq == 0.0 || bb == 0.0 {
                    1.0
                } else {
                    1.0 - ab / (qq.sqrt() * bb.sqrt())
                };
                out.push((k, d as f32));
            }
        }
        VectorData::Bits(qb) => {
            let mut buf = vec![usearch::b1x8(0); dims.div_ceil(8)];
            for &k in keys {
                if index.get(k, &mut buf).map_err(|e| get_err(&e))? == 0 {
                    continue;
                }
                let d: u32 = usearch::b1x8::to_u8s(&buf)
                    .iter()
                    .zip(qb)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum();
                out.push((k, d as f32));
            }
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    out.truncate(n);
    Ok(out)
}

fn lexical_arm(
    seg: &Segment,
    f: &SegFilter,
    q: &tantivy::query::BooleanQuery,
    stats: &CorpusStats,
    n: usize,
    si: u32,
) -> Result<Vec<Candidate>, QueryError> {
    use tantivy::collector::{FilterCollector, TopDocs};
    let tv =
        |e: tantivy::TantivyError| QueryError::Index(format!("text search in {}: {e}", seg.dir));
    let searcher = seg.reader.searcher();
    let top = TopDocs::with_limit(n).order_by_score();
    let hits = if f.passes_all() {
        searcher
            .search_with_statistics_provider(q, &top, stats)
            .map_err(tv)?
    } else {
        let f2 = f.clone();
        let collector = FilterCollector::new("ord".into(), move |ord: u64| f2.ok(ord), top);
        searcher
            .search_with_statistics_provider(q, &collector, stats)
            .map_err(tv)?
    };
    Ok(trawl_index::segment::ords(&searcher, hits)?
        .into_iter()
        .map(|(ord, score)| (si, ord as u32, f64::from(score)))
        .collect())
}

/// BM25 statistics over every segment of a generation, for the terms of one query. Each
/// shard is its own text index: scored with its own statistics, a chunk's words would weigh
/// more or less by the shard its id hashed to, and the arm would merge scores of different
/// scales. For a caller whose token hides repositories, only the docs it may see count
/// ([`VisibleStats`]).
struct CorpusStats {
    docs: u64,
    tokens: HashMap<tantivy::schema::Field, u64>,
    doc_freq: HashMap<tantivy::Term, u64>,
}

impl CorpusStats {
    fn new(filters: &[SegFilter], q: &tantivy::query::BooleanQuery) -> tantivy::Result<Self> {
        use tantivy::query::{Bm25StatisticsProvider, Query};
        let mut terms: Vec<tantivy::Term> = Vec::new();
        q.query_terms(&mut |t, _| terms.push(t.clone()));
        terms.sort();
        terms.dedup();
        let mut fields: Vec<tantivy::schema::Field> =
            terms.iter().map(tantivy::Term::field).collect();
        fields.sort();
        fields.dedup();
        let mut out = Self {
            docs: 0,
            tokens: fields.iter().map(|&f| (f, 0)).collect(),
            doc_freq: terms.iter().map(|t| (t.clone(), 0)).collect(),
        };
        let mut add = |p: &dyn Bm25StatisticsProvider| -> tantivy::Result<()> {
            out.docs += p.total_num_docs()?;
            for (field, n) in &mut out.tokens {
                *n += p.total_num_tokens(*field)?;
            }
            for (term, n) in &mut out.doc_freq {
                *n += p.doc_freq(term)?;
            }
            Ok(())
        };
        for f in filters {
            let searcher = f.seg.reader.searcher();
            if !f.hides_repos() {
                add(&searcher)?;
            } else if f.sees_any() {
                add(&VisibleStats::new(&searcher, f)?)?;
            }
        }
        Ok(out)
    }
}

impl tantivy::query::Bm25StatisticsProvider for CorpusStats {
    fn total_num_tokens(&self, field: tantivy::schema::Field) -> tantivy::Result<u64> {
        Ok(self.tokens.get(&field).copied().unwrap_or(0))
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.docs)
    }

    fn doc_freq(&self, term: &tantivy::Term) -> tantivy::Result<u64> {
        Ok(self.doc_freq.get(term).copied().unwrap_or(0))
    }
}

/// BM25 statistics of the docs a caller may see. The index's own count every doc, so the
/// score a token gets would depend on how often a word occurs in repositories it cannot see
/// (a probe could learn that a hidden repository says `AKIA…`); with these, a restricted
/// token's scores are exactly those of an index holding only its repositories. Costs one
/// pass over the segment's ord column and each query term's postings, per search of a
/// restricted token.
struct VisibleStats<'a> {
    searcher: &'a tantivy::Searcher,
    /// Per tantivy segment, per doc id: visible to the caller.
    visible: Vec<Vec<bool>>,
}

impl<'a> VisibleStats<'a> {
    fn new(searcher: &'a tantivy::Searcher, f: &SegFilter) -> tantivy::Result<Self> {
        let mut visible = Vec::new();
        for reader in searcher.segment_readers() {
            let ords = reader.fast_fields().u64("ord")?;
            visible.push(
                (0..reader.max_doc())
                    .map(|d| !reader.is_deleted(d) && ords.first(d).is_some_and(|o| f.visible(o)))
                    .collect(),
            );
        }
        Ok(Self { searcher, visible })
    }
}

impl tantivy::query::Bm25StatisticsProvider for VisibleStats<'_> {
    fn total_num_tokens(&self, field: tantivy::schema::Field) -> tantivy::Result<u64> {
        let mut total = 0u64;
        for (reader, visible) in self.searcher.segment_readers().iter().zip(&self.visible) {
            let norms = reader.get_fieldnorms_reader(field)?;
            total += visible
                .iter()
                .enumerate()
                .filter(|(_, v)| **v)
                .map(|(d, _)| u64::from(norms.fieldnorm(d as u32)))
                .sum::<u64>();
        }
        Ok(total)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self
            .visible
            .iter()
            .map(|v| v.iter().filter(|b| **b).count() as u64)
            .sum())
    }

    fn doc_freq(&self, term: &tantivy::Term) -> tantivy::Result<u64> {
        use tantivy::DocSet;
        let mut n = 0u64;
        for (reader, visible) in self.searcher.segment_readers().iter().zip(&self.visible) {
            let index = reader.inverted_index(term.field())?;
            let Some(mut postings) =
                index.read_postings(term, tantivy::schema::IndexRecordOption::Basic)?
            else {
                continue;
            };
            let mut d = postings.doc();
            while d != tantivy::TERMINATED {
                n += u64::from(visible[d as usize]);
                d = postings.advance();
            }
        }
        Ok(n)
    }
}

/// Longest text of a context chunk; longer ones are cut at a line end.
pub const CONTEXT_TEXT_BYTES: usize = 4096;
/// Context chunks of one kind attached to a result.
pub const MAX_CONTEXT: usize = 5;

fn cut(text: &str) -> String {
    if text.len() <= CONTEXT_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = CONTEXT_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').unwrap_or(end);
    format!("{}\n…", &text[..end])
}

fn cited(d: &DocRow, text: String) -> Cited {
    Cited {
        repo: d.repo_id.as_str().to_owned(),
        commit: d.commit.to_string(),
        path: d.path.clone(),
        start_line: d.start_line,
        end_line: d.end_line,
        symbol: d.qualified_name.clone().or_else(|| d.symbol.clone()),
        kind: d.kind.to_string(),
        text,
    }
}

fn context(relation: &str, d: &DocRow) -> Context {
    Context {
        relation: relation.to_owned(),
        chunk: cited(d, cut(&d.text)),
    }
}

pub fn hit(d: &DocRow, score: f64) -> Hit {
    Hit {
        chunk: cited(d, d.text.clone()),
        score,
        language: d.language.clone(),
        chunk_id: d.chunk_id.to_string(),
        context: Vec::new(),
    }
}

/// The lines of `d` that declare its member named `key` (normalised, as the symbol map files
/// it: `all_levels`, `walker.run`), as a citation of the member alone, with the comment,
/// attribute or decorator lines right above it:
/// - in module code, a named constant (kind `constant`): from its first line until its
///   brackets and strings close;
/// - in a class or impl small enough to stay one chunk, a method (kind `method`): until its
///   body's braces close, or in Python until its indentation ends.
///
/// `None` when `d` declares no such member, or its text does not map line for line onto its
/// span (the whole chunk then stays the citation).
pub fn cite_member(d: &DocRow, key: &str) -> Option<Cited> {
    let in_code = d.kind == ChunkKind::Code;
    if !in_code && !d.kind.is_container() {
        return None;
    }
    let member = member_named(d, key)?;
    let name = member.rsplit(['.', ':']).next().unwrap_or(member);
    let lines: Vec<&str> = d.text.lines().collect();
    if lines.len() != (d.end_line + 1).checked_sub(d.start_line)? as usize {
        return None;
    }
    // A container's first line declares the container, not its member.
    let skip = usize::from(!in_code);
    // A Python method is declared by `def` (a bare `run(x)` is a call).
    let python = d.language == "python";
    let first = skip
        + lines[skip..].iter().position(|l| {
            declares(l, name)
                && (in_code
                    || !python
                    || ["def ", "async ", "class "]
                        .iter()
                        .any(|k| l.trim_start().starts_with(k)))
        })?;
    let last = if in_code {
        statement_end(&lines, first)
    } else if python {
        indented_end(&lines, first)
    } else {
        braced_end(&lines, first)
    };
    let lead = lines[..first]
        .iter()
        .rev()
        .take_while(|l| {
            let t = l.trim_start();
            ["//", "#", "/*", "*", "--", "@"]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .count();
    let from = first - lead;
    // A nested container (`class Inner`, `struct Span`) is cited as what it is.
    let nested = lines[first]
        .split_whitespace()
        .take_while(|w| !w.contains(name))
        .find_map(container_kind);
    let kind = match nested {
        Some(k) => k,
        None if in_code => ChunkKind::Constant,
        None => ChunkKind::Method,
    };
    Some(Cited {
        start_line: d.start_line + from as u32,
        end_line: d.start_line + last as u32,
        symbol: Some(member.clone()),
        kind: kind.to_string(),
        text: lines[from..=last].join("\n"),
        ..cited(d, String::new())
    })
}

/// The last line of the statement that starts at `first`: where its brackets close and no
/// string spans the line end (a Go or JavaScript template in backquotes, a Python
/// triple-quoted string). A Go `const (` group's closing parenthesis is not its row's.
fn statement_end(lines: &[&str], first: usize) -> usize {
    let (mut depth, mut open_strings) = (0i64, [false; 2]);
    let mut last = first;
    for (i, l) in lines.iter().enumerate().skip(first) {
        depth += l.matches(['(', '[', '{']).count() as i64;
        depth -= l.matches([')', ']', '}']).count() as i64;
        for (open, delim) in open_strings.iter_mut().zip(["`", "\"\"\""]) {
            *open ^= l.matches(delim).count() % 2 == 1;
        }
        last = i;
        if depth <= 0 && open_strings == [false; 2] {
            break;
        }
    }
    if depth < 0 && last > first {
        last - 1
    } else {
        last
    }
}

/// The last line of a Python block whose header is at `first`: the lines indented deeper
/// (blank lines inside it too).
fn indented_end(lines: &[&str], first: usize) -> usize {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let base = indent(lines[first]);
    let mut last = first;
    for (i, l) in lines.iter().enumerate().skip(first + 1) {
        if l.trim().is_empty() {
            continue;
        }
        if indent(l) <= base {
            break;
        }
        last = i;
    }
    last
}

/// The last line of a member that starts at `first` in a language of braces: its signature
/// runs until a body opens (or a line ends it: a Go interface's method, a field), then until
/// the body's braces close.
fn braced_end(lines: &[&str], first: usize) -> usize {
    let mut depth = 0i64;
    let mut opened = false;
    for (i, l) in lines.iter().enumerate().skip(first) {
        depth += l.matches(['(', '[', '{']).count() as i64;
        depth -= l.matches([')', ']', '}']).count() as i64;
        opened |= l.contains('{');
        if opened && depth <= 0 {
            return i;
        }
        let t = l.trim_end();
        let continues = depth > 0
            || t.ends_with([',', '(', '=', '>', '|', '&'])
            || t.ends_with("where")
            || lines.get(i + 1).is_some_and(|n| {
                let n = n.trim_start();
                n.starts_with(['{', ')', '-', ':', '.']) || n.starts_with("where")
            });
        if !opened && !continues {
            return i;
        }
    }
    lines.len() - 1
}

/// Whether `line` declares `name`: only declaration words come before it (`pub const`,
/// `export const`, `static`, `var`, Go's bare name in a `const (` group, Python's
/// assignment), and an `=`, `:` or type follows it, or nothing (Go's `iota` rows).
fn declares(line: &str, name: &str) -> bool {
    const WORDS: &[&str] = &[
        "pub",
        "const",
        "static",
        "mut",
        "var",
        "let",
        "export",
        "final",
        "public",
        "private",
        "protected",
        "readonly",
        "internal",
        "define",
        "#define",
        "fn",
        "def",
        "func",
        "function",
        "async",
        "get",
        "set",
        "override",
        "abstract",
        "unsafe",
        "extern",
        "virtual",
        "inline",
        "sealed",
        "data",
    ];
    let t = line.trim_start();
    let Some(at) = t.find(name) else {
        return false;
    };
    let before = &t[..at];
    let after = &t[at + name.len()..];
    let whole = !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
        && !before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.');
    whole
        && before.split_whitespace().all(|w| {
            WORDS.contains(&w)
                || container_kind(w).is_some()
                || (w.starts_with("pub(") && w.ends_with(')'))
        })
        && {
            let a = after.trim_start();
            a.is_empty()
                || a.starts_with(['=', ':', ',', '<', '?', '{'])
                || a.chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || "[*(".contains(c))
        }
}

/// The kind of container (or type) a declaration word declares (`class Inner`, `struct
/// Span`, `type Level`).
fn container_kind(word: &str) -> Option<ChunkKind> {
    crate::index::declared_kinds(word)
        .map(|kinds| kinds[0])
        .filter(|k| k.is_container() || *k == ChunkKind::Type)
}

/// How `b` relates to an accepted result `a` of the same file, if they share lines.
fn overlap(a: &DocRow, b: &DocRow) -> Option<&'static str> {
    // A table of contents covers everything, and commit messages have no place in a file.
    let placed = |d: &DocRow| !matches!(d.kind, ChunkKind::Toc | ChunkKind::Commit);
    if a.repo_id != b.repo_id || a.path != b.path || !placed(a) || !placed(b) {
        return None;
    }
    if b.start_line > a.end_line || a.start_line > b.end_line {
        return None;
    }
    Some(
        if a.start_line <= b.start_line && b.end_line <= a.end_line {
            "member"
        } else if b.start_line <= a.start_line && a.end_line <= b.end_line {
            "container"
        } else {
            "overlap"
        },
    )
}

/// The top `k` results of a ranking: overlapping hits collapse into the better-ranked one
/// (shown as its context), and with `expand` each result carries its parent, siblings and
/// callees — only those the caller may see.
///
/// `query` is what was asked: when it names a constant (`ALL_LEVELS`, `const MAX_AGE`), a
/// module-code result that declares it cites the constant's own lines ([`cite_member`]).
pub fn finish(
    generation: &Generation,
    ranked: &[Candidate],
    k: usize,
    expand: bool,
    access: &Access,
    query: &str,
) -> Vec<Hit> {
    let doc = |s: u32, o: u32| &generation.segments[s as usize].docs[o as usize];
    let named = named_definition(query).map(|n| normalize_symbol(&n.name));
    let mut accepted: Vec<(u32, u32, Hit)> = Vec::new();
    for &(s, o, score) in ranked {
        let d = doc(s, o);
        if accepted
            .iter()
            .any(|(as_, ao, _)| overlap(doc(*as_, *ao), d).is_some())
        {
            continue;
        }
        if accepted.len() >= k {
            break;
        }
        let mut h = hit(d, score);
        if let Some(key) = &named
            && let Some(member) = cite_member(d, key)
        {
            h.context.push(context("container", d));
            h.chunk = member;
        }
        accepted.push((s, o, h));
    }
    // Collapsed hits as context of the result they overlap (a second pass keeps the borrow
    // of `accepted` simple).
    for &(s, o, _) in ranked {
        let d = doc(s, o);
        if accepted.iter().any(|(as_, ao, _)| (*as_, *ao) == (s, o)) {
            continue;
        }
        for (as_, ao, h) in &mut accepted {
            let a = doc(*as_, *ao);
            if let Some(rel) = overlap(a, d) {
                let shown = h.context.iter().any(|c| {
                    c.start_line == d.start_line
                        && c.end_line == d.end_line
                        && c.kind == d.kind.as_str()
                });
                if !shown && h.context.len() < MAX_CONTEXT {
                    h.context.push(context(rel, d));
                }
                break;
            }
        }
    }
    if expand {
        for (s, o, h) in &mut accepted {
            expand_one(generation, doc(*s, *o), h, access);
        }
    }
    accepted.into_iter().map(|(_, _, h)| h).collect()
}

fn expand_one(generation: &Generation, d: &DocRow, h: &mut Hit, access: &Access) {
    let visible = |id: &trawl_core::ChunkId| -> Option<&DocRow> {
        let (s, o) = generation.doc(id)?;
        let doc = &generation.segments[s as usize].docs[o as usize];
        access.allows(doc.repo_id.as_str()).then_some(doc)
    };
    let mut seen: Vec<trawl_core::ChunkId> = vec![d.chunk_id];
    let mut add = |rel: &str, doc: &DocRow, h: &mut Hit| {
        // Context from the collapse is already shown: compare by region.
        if seen.contains(&doc.chunk_id)
            || h.context.iter().any(|c| {
                c.path == doc.path && c.start_line == doc.start_line && c.end_line == doc.end_line
            })
        {
            return;
        }
        seen.push(doc.chunk_id);
        h.context.push(context(rel, doc));
    };
    if let Some(parent) = d.parent_id.as_ref().and_then(&visible) {
        add("parent", parent, h);
        for sib in parent
            .children_ids
            .iter()
            .filter(|c| **c != d.chunk_id)
            .filter_map(&visible)
            .take(MAX_CONTEXT)
        {
            add("sibling", sib, h);
        }
    }
    for callee in d.call_ids.iter().filter_map(&visible).take(MAX_CONTEXT) {
        if is_definition(callee.kind) {
            add("callee", callee, h);
        }
    }
    let callers = generation
        .callers(&d.chunk_id)
        .iter()
        .map(|&(s, o)| &generation.segments[s as usize].docs[o as usize])
        .filter(|c| access.allows(c.repo_id.as_str()))
        .take(MAX_CONTEXT);
    for caller in callers {
        add("caller", caller, h);
    }
    // The last commits that changed these lines, newest first: why they read as they do.
    if d.kind != ChunkKind::Commit && !d.path.is_empty() {
        let commits = generation
            .commits_touching(&d.repo_id, &d.path, d.start_line, d.end_line)
            .into_iter()
            .map(|(s, o)| &generation.segments[s as usize].docs[o as usize])
            .filter(|c| access.allows(c.repo_id.as_str()))
            .take(MAX_COMMITS);
        for c in commits {
            add("commit", c, h);
        }
    }
}

/// Commits shown as a result's context.
const MAX_COMMITS: usize = 2;
/// Candidates (commits aside) of a "why did this change" question that lend their score to
/// commits; chosen on the tune halves (5: words 0.464, 20: 0.505; development 0.772 both).
const HISTORY_LEND_POOL: usize = 20;
/// The newest commits of a candidate's lines that its score is lent to.
const HISTORY_LEND_COMMITS: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// A usearch index of `n` vectors of `space`, and the graph walk made exhaustive.
    fn index_of(space: &trawl_core::space::Space, vectors: &[VectorData]) -> usearch::Index {
        let index =
            usearch::Index::new(&trawl_index::segment::index_options(space).unwrap()).unwrap();
        index.reserve(vectors.len()).unwrap();
        for (k, v) in vectors.iter().enumerate() {
            match v {
                VectorData::F32(f) => index.add(k as u64, f).unwrap(),
                VectorData::I8(i) => index.add(k as u64, i).unwrap(),
                VectorData::Bits(b) => index.add(k as u64, usearch::b1x8::from_u8s(b)).unwrap(),
            }
        }
        index.change_expansion_search(vectors.len());
        index
    }

    #[test]
    fn the_exact_scan_finds_what_the_filtered_graph_walk_finds() {
        let dims = 48;
        let unit = |seed: u64| trawl_index::testing::unit(seed, dims);
        let float = trawl_core::space::Space {
            model: "t".into(),
            dims: dims as u32,
            dtype: trawl_core::space::Dtype::Float,
        };
        let int8 = trawl_core::space::Space {
            dtype: trawl_core::space::Dtype::Int8,
            ..float.clone()
        };
        let n = 2000u64;
        let as_i8 = |v: Vec<f32>| VectorData::I8(v.iter().map(|x| (x * 127.0) as i8).collect());
        for (space, vectors, query) in [
            (
                &float,
                (0..n).map(|i| VectorData::F32(unit(i))).collect::<Vec<_>>(),
                VectorData::F32(unit(9_999)),
            ),
            (
                &int8,
                (0..n).map(|i| as_i8(unit(i))).collect(),
                as_i8(unit(9_999)),
            ),
        ] {
            let index = index_of(space, &vectors);
            for modulus in [3u64, 40, 400] {
                let ok = |k: u64| k % modulus == 1;
                let keys: Vec<u64> = (0..n).filter(|&k| ok(k)).collect();
                let ann = match &query {
                    VectorData::F32(q) => index.filtered_search(q, 10, ok),
                    VectorData::I8(q) => index.filtered_search(q, 10, ok),
                    VectorData::Bits(_) => unreachable!(),
                }
                .unwrap();
                let exact = exact_scan(&index, &query, &keys, 10).unwrap();
                let exact_keys: Vec<u64> = exact.iter().map(|p| p.0).collect();
                assert_eq!(ann.keys, exact_keys, "{} 1/{modulus}", space.dtype);
                for ((_, d), a) in exact.iter().zip(&ann.distances) {
                    assert!((d - a).abs() < 1e-5, "{} {d} {a}", space.dtype);
                }
            }
        }
    }

    #[test]
    fn only_a_selective_filter_is_scanned() {
        let few = |k: u64| k.is_multiple_of(100);
        let keys = selective(10_000, 0.05, 10, &few).unwrap();
        assert_eq!(keys.len(), 100);
        assert!(selective(10_000, 0.05, 10, &|k| k.is_multiple_of(2)).is_none());
        // Fewer admitted docs than asked for: scanned whatever the fraction.
        assert_eq!(selective(10_000, 0.0, 200, &few).unwrap().len(), 100);
        assert!(selective(0, 0.05, 10, &few).is_none());
    }

    #[test]
    fn a_long_query_is_cut_to_the_term_limit() {
        let long = (0..5000)
            .map(|i| format!("word{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let (text, dropped) = cap_terms(&long, 64);
        let terms: std::collections::HashSet<String> =
            trawl_index::analyzer::terms(&text).into_iter().collect();
        assert!(terms.len() <= 64, "{}", terms.len());
        assert!(dropped > 4000, "{dropped}");
        let (same, none) = cap_terms("parse the config file", 64);
        assert_eq!((same.as_ref(), none), ("parse the config file", 0));
    }

    /// Fused by score, an arm's clear winner stays ahead of what another arm ranks first by
    /// a hair; by rank the two tie.
    #[test]
    fn score_fusion_keeps_a_clear_winner_ahead() {
        let lexical: Vec<Candidate> = vec![(0, 1, 10.0), (0, 2, 1.0), (0, 3, 0.9)];
        let vector: Vec<Candidate> = vec![(0, 2, 0.81), (0, 1, 0.80), (0, 3, 0.10)];
        let fuse = |fusion| {
            let params = QueryConfig {
                fusion,
                ..QueryConfig::default()
            };
            let mut fused = HashMap::new();
            fuse_arm(&mut fused, &lexical, 1.0, &params);
            fuse_arm(&mut fused, &vector, 1.0, &params);
            fused
        };
        let rrf = fuse(Fusion::Rrf);
        assert!((rrf[&(0, 1)] - rrf[&(0, 2)]).abs() < 1e-12);
        let scores = fuse(Fusion::Scores);
        assert!(scores[&(0, 1)] > 1.5 * scores[&(0, 2)], "{scores:?}");
        // The last of both arms adds nothing; the best of both is on RRF's scale.
        assert!(scores[&(0, 3)].abs() < 1e-12);
        let top = 2.0 / (QueryConfig::default().rrf_k + 1.0);
        assert!(scores.values().all(|&v| v <= top + 1e-12));
        // One candidate, or all equal: each gets the arm's full weight.
        let mut one = HashMap::new();
        let p = QueryConfig {
            fusion: Fusion::Scores,
            ..QueryConfig::default()
        };
        fuse_arm(&mut one, &[(0, 7, 3.0)], 0.5, &p);
        assert!((one[&(0, 7)] - 0.5 / (p.rrf_k + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn an_owner_abbreviates_the_class_or_file_it_stands_for() {
        assert!(abbreviates("app", "application"));
        assert!(abbreviates("ctx", "context"));
        assert!(abbreviates("cmd", "command"));
        assert!(abbreviates("command", "command"));
        assert!(!abbreviates("app", "group"));
        assert!(!abbreviates("xt", "context"));
        assert!(!abbreviates("a", "application"));
        assert!(!abbreviates("tcx", "context"));
    }

    #[test]
    fn a_member_named_through_an_abbreviated_owner_finds_its_definition() {
        let def = |i: u64, q: &str, path: &str| {
            let mut d = trawl_index::testing::handler_doc(i, "callback () {}");
            d.qualified_name = Some(q.to_owned());
            d.symbol = q.rsplit('.').next().map(str::to_owned);
            d.path = path.to_owned();
            d
        };
        let docs = [
            def(0, "Group.result_callback", "src/click/core.py"),
            def(1, "Application.callback", "lib/application.js"),
            def(2, "Option.callback", "src/option.py"),
            def(3, "Parser.callback", "src/parser.py"),
            def(4, "callback", "lib/context.js"),
        ];
        let keys: Vec<rank::Key> = (0..docs.len() as u32).map(|o| (0, o)).collect();
        let doc = |(_, o): rank::Key| &docs[o as usize];
        assert_eq!(owned_by("app", keys.clone(), doc), vec![(0, 1)]);
        // The file's name stands for a module-level definition's owner.
        assert_eq!(owned_by("ctx", keys.clone(), doc), vec![(0, 4)]);
        // Nothing it abbreviates: none of the many is boosted.
        assert!(owned_by("zz", keys.clone(), doc).is_empty());
        // Few definitions: through a receiver, kept whatever their owner; through a word
        // that is none of their owners (`hooks.init` against `Builder.init`), none.
        assert_eq!(owned_by("zz", keys[..2].to_vec(), doc), keys[..2].to_vec());
        assert_eq!(
            owned_by("self", keys[..2].to_vec(), doc),
            keys[..2].to_vec()
        );
        assert!(owned_by("hooks", keys[..2].to_vec(), doc).is_empty());
        assert_eq!(owned_by("app", keys[..2].to_vec(), doc), vec![(0, 1)]);
    }
}

//! The searcher a process keeps: the live generation (replaced atomically when `CURRENT`
//! moves; requests in flight finish on the one they started with), the query embedder for the
//! generation's vector space, the optional reranker, and the service's counters.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use trawl_core::config::{Config, EmbedConfig, EmbedderKind, QueryConfig};
use trawl_core::space::{Dtype, Space};
use trawl_core::store::Store;
use trawl_embed::{Embedder, InputType, Vector};
use trawl_index::VectorData;

use crate::QueryError;
use crate::access::Access;
use crate::index::{Generation, prune_cache};
use crate::learned;
use crate::request::{Hit, SearchRequest, SearchResponse};
use crate::rerank::Reranker;
use crate::search::{self, Filter};

/// The note of a search the reranker failed; the reason is in the server's log.
pub const RERANK_FAILED: &str = "not reranked: the reranker failed (the reason is in the server log); results are in fused order";

/// The service's counters, gauge and histograms, exported on `/metrics`: typed
/// `prometheus-client` metrics in one registry per searcher, encoded as OpenMetrics text.
/// Counter families are named without `_total` (the encoder appends it to the samples), so
/// the series are `trawl_query_searches_total` and so on.
#[derive(Debug)]
pub struct Metrics {
    pub searches: Counter,
    pub bad_requests: Counter,
    pub unauthorized: Counter,
    pub errors: Counter,
    pub generation_swaps: Counter,
    /// Requests refused for their `Host` or `Content-Type`.
    pub refused: Counter,
    /// Searches answered 503 because every slot was taken.
    pub saturated: Counter,
    /// Requests cut by the body or whole-request timeout.
    pub timeouts: Counter,
    pub rerank_failures: Counter,
    /// The index generation served (set when `/metrics` is read).
    pub generation: Gauge,
    /// Search latency (excluding the query embedding), bucketed.
    pub search_seconds: Histogram,
    /// Query embedding latency.
    pub embed_seconds: Histogram,
    registry: Registry,
}

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The content type of [`Metrics::encode`]'s text.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Default for Metrics {
    fn default() -> Self {
        let histogram = || Histogram::new(BUCKETS);
        let m = Self {
            searches: Counter::default(),
            bad_requests: Counter::default(),
            unauthorized: Counter::default(),
            errors: Counter::default(),
            generation_swaps: Counter::default(),
            refused: Counter::default(),
            saturated: Counter::default(),
            timeouts: Counter::default(),
            rerank_failures: Counter::default(),
            generation: Gauge::default(),
            search_seconds: histogram(),
            embed_seconds: histogram(),
            registry: Registry::default(),
        };
        let mut registry = Registry::default();
        // The registry ends each help text with a period.
        fn add(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
            registry.register(name, help.trim_end_matches('.'), metric);
        }
        for (name, help, counter) in [
            ("trawl_query_searches", "Searches answered.", &m.searches),
            (
                "trawl_query_bad_requests",
                "Requests refused as malformed or over a limit.",
                &m.bad_requests,
            ),
            (
                "trawl_query_unauthorized",
                "Requests without a valid bearer token.",
                &m.unauthorized,
            ),
            ("trawl_query_errors", "Searches that failed.", &m.errors),
            (
                "trawl_query_generation_swaps",
                "Index generations loaded.",
                &m.generation_swaps,
            ),
            (
                "trawl_query_refused",
                "Requests refused for their Host or Content-Type (DNS rebinding, cross-site posts).",
                &m.refused,
            ),
            (
                "trawl_query_saturated",
                "Searches answered 503 because every search slot was taken.",
                &m.saturated,
            ),
            (
                "trawl_query_timeouts",
                "Requests cut by the body or the whole-request timeout.",
                &m.timeouts,
            ),
            (
                "trawl_query_rerank_failures",
                "Searches answered without the reranker because it failed.",
                &m.rerank_failures,
            ),
        ] {
            add(&mut registry, name, help, counter.clone());
        }
        add(
            &mut registry,
            "trawl_query_generation",
            "The index generation served.",
            m.generation.clone(),
        );
        add(
            &mut registry,
            "trawl_query_search_seconds",
            "Search latency, excluding the query embedding.",
            m.search_seconds.clone(),
        );
        add(
            &mut registry,
            "trawl_query_embed_seconds",
            "Query embedding latency.",
            m.embed_seconds.clone(),
        );
        Self { registry, ..m }
    }
}

impl Metrics {
    /// Every metric as OpenMetrics text ([`OPENMETRICS_TEXT`]).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The query embedder of one vector space.
struct QueryEmbedder {
    space: Space,
    embedder: Arc<dyn Embedder>,
}

/// Searches the live generation of a store.
pub struct Searcher {
    store: Store,
    cache: PathBuf,
    embed: EmbedConfig,
    /// The embedder to try first (`embed.embedder`, or `--embedder`).
    preferred: EmbedderKind,
    params: QueryConfig,
    ef_search: usize,
    pub max_k: usize,
    pub max_query_bytes: usize,
    reranker: Option<Reranker>,
    hyde: Option<crate::hyde::Hyde>,
    current: RwLock<Option<Arc<Generation>>>,
    embedder: RwLock<Option<Arc<QueryEmbedder>>>,
    /// A generation whose vector space no embedder here can serve is refused rather than
    /// served lexical-only (`trawl serve`).
    strict: bool,
    pub metrics: Metrics,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// A vector space as people name it: `voyage-code-3 (1024 × float)`.
fn describe(space: &Space) -> String {
    format!("{} ({} × {})", space.model, space.dims, space.dtype)
}

/// The default shard cache of a remote store.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("trawl").join("query")
}

impl Searcher {
    /// A searcher over `store` with the configuration's knobs; `embedder` overrides
    /// `embed.embedder` as the first choice for embedding queries. Opens the live generation
    /// if there is one.
    pub async fn open(
        store: Store,
        cfg: &Config,
        embedder: Option<EmbedderKind>,
    ) -> Result<Self, QueryError> {
        Self::open_with(store, cfg, embedder, false).await
    }

    /// A searcher for `trawl serve`: a generation whose vectors cannot be searched here (its
    /// space needs a key that is not set, or a model this process does not have) is an error
    /// — at start, and at every swap (the old generation stays) — never a silent lexical-only
    /// service.
    pub async fn open_serving(store: Store, cfg: &Config) -> Result<Self, QueryError> {
        Self::open_with(store, cfg, None, true).await
    }

    async fn open_with(
        store: Store,
        cfg: &Config,
        embedder: Option<EmbedderKind>,
        strict: bool,
    ) -> Result<Self, QueryError> {
        let q = &cfg.query;
        let cache = if q.cache_dir.as_os_str().is_empty() {
            default_cache_dir()
        } else {
            q.cache_dir.clone()
        };
        let reranker = if q.rerank_model.is_empty() {
            None
        } else {
            let key = std::env::var(trawl_embed::VOYAGE_API_KEY).unwrap_or_default();
            Some(Reranker::new(
                &cfg.embed.base_url,
                &key,
                &q.rerank_model,
                q.rerank_top,
            )?)
        };
        let hyde =
            crate::hyde::Hyde::from_config(q).map_err(|e| QueryError::Config(e.to_string()))?;
        let s = Self {
            store,
            cache,
            // A query waits on its vector: it is embedded at normal priority.
            embed: EmbedConfig {
                local_nice: 0,
                ..cfg.embed.clone()
            },
            preferred: embedder.unwrap_or(cfg.embed.embedder),
            params: q.clone(),
            ef_search: q.ef_search,
            max_k: q.max_k,
            max_query_bytes: q.max_query_bytes,
            reranker,
            hyde,
            current: RwLock::new(None),
            embedder: RwLock::new(None),
            strict,
            metrics: Metrics::default(),
        };
        s.refresh().await?;
        Ok(s)
    }

    /// Reranks with `reranker` (replacing the configured one).
    #[must_use]
    pub fn with_reranker(mut self, reranker: Reranker) -> Self {
        self.reranker = Some(reranker);
        self
    }

    /// The live generation, if any.
    pub fn generation(&self) -> Option<Arc<Generation>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Loads the generation `CURRENT` names if it is not the one served, then swaps it in.
    /// Returns the new generation's number when it swapped.
    pub async fn refresh(&self) -> Result<Option<trawl_core::ids::Generation>, QueryError> {
        let Some((cur, _)) = trawl_index::generation::current(&self.store).await? else {
            return Ok(None);
        };
        // Identity is number and manifest content, never the number alone.
        if self.generation().is_some_and(|g| {
            g.number == cur.generation
                && cur
                    .manifest_hash
                    .as_ref()
                    .is_none_or(|h| *h == g.manifest_hash)
        }) {
            return Ok(None);
        }
        let g = Generation::open_pointed(&self.store, &self.cache, &cur).await?;
        for seg in &g.segments {
            if let Some(v) = &seg.vectors {
                v.change_expansion_search(self.ef_search.max(16));
            }
        }
        if let Err(reason) = self.prepare_embedder(g.manifest.space.as_ref()) {
            let space = g.manifest.space.as_ref().map(describe);
            if self.strict {
                return Err(QueryError::Unembeddable {
                    space: space.unwrap_or_default(),
                    reason,
                });
            }
            tracing::warn!(space, reason = %reason, "no embedder for the index's vector space: searches are lexical only");
        }
        let g = Arc::new(g);
        let old = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(g.clone());
        self.metrics.generation_swaps.inc();
        if self.store.local_dir().is_none() {
            let keep: Vec<&Generation> =
                std::iter::once(g.as_ref()).chain(old.as_deref()).collect();
            let removed = prune_cache(&self.cache, &keep);
            if removed > 0 {
                tracing::info!(removed, "cached segments of older generations removed");
            }
        }
        Ok(Some(g.number))
    }

    /// Polls `CURRENT` every `every` until the task is dropped; errors are logged and the
    /// served generation stays.
    pub async fn poll(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            match self.refresh().await {
                Ok(Some(g)) => tracing::info!(generation = g.0, "now serving a new generation"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot load the new generation; still serving the old one");
                }
            }
        }
    }

    /// Finds an embedder whose space is the generation's: the preferred one first. `Err`
    /// says why none could be started.
    fn prepare_embedder(&self, space: Option<&Space>) -> Result<(), String> {
        let Some(space) = space else {
            return Ok(());
        };
        if self
            .embedder
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|e| &e.space == space)
        {
            return Ok(());
        }
        let mut reasons = Vec::new();
        let mut names = vec![self.preferred];
        names.extend(
            [
                EmbedderKind::Local,
                EmbedderKind::Hash,
                EmbedderKind::Voyage,
            ]
            .into_iter()
            .filter(|n| *n != self.preferred),
        );
        for name in names {
            let Ok(embedders) = trawl_embed::query_embedders(&self.embed, name) else {
                continue;
            };
            let Some((_, cfg)) = embedders.into_iter().find(|(s, _)| s == space) else {
                continue;
            };
            match trawl_embed::from_config(&cfg, Some(name), false) {
                Ok(e) => {
                    tracing::debug!(embedder = %name, space = %space, "query embedder ready");
                    *self
                        .embedder
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(Arc::new(QueryEmbedder {
                            space: space.clone(),
                            embedder: e,
                        }));
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(embedder = %name, error = %e, "cannot start the query embedder");
                    reasons.push(format!("{name}: {e}"));
                }
            }
        }
        Err(if reasons.is_empty() {
            format!(
                "no embedder configured here produces {}: set [embed] (embedder, model, dims, dtype, hash_dims) to what the index was embedded with",
                describe(space)
            )
        } else {
            reasons.join("; ")
        })
    }

    /// Embeds the query in the generation's space.
    async fn embed(&self, g: &Generation, query: &str) -> Option<VectorData> {
        self.embed_as(g, query, InputType::Query).await
    }

    /// HyDE's vector for a question in words: its hypothetical code embedded as a document.
    /// `Err` is the note a search carries when the generator did not answer.
    async fn hyde_vector(
        &self,
        g: &Generation,
        req: &SearchRequest,
    ) -> Result<Option<VectorData>, String> {
        let Some(h) = &self.hyde else {
            return Ok(None);
        };
        if req.mode != crate::Mode::Hybrid
            || crate::rank::classify(&req.query) != crate::rank::Intent::Natural
        {
            return Ok(None);
        }
        match h.snippet(&req.query).await {
            Ok(code) => Ok(self.embed_as(g, &code, InputType::Document).await),
            Err(e) => {
                tracing::warn!(error = %e, "HyDE: searching without hypothetical code");
                Err(format!("{e}: searched without hypothetical code"))
            }
        }
    }

    async fn embed_as(&self, g: &Generation, query: &str, kind: InputType) -> Option<VectorData> {
        let space = g.manifest.space.as_ref()?;
        let e = self
            .embedder
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()?;
        if &e.space != space {
            return None;
        }
        let out = match e.embedder.embed(&[query.to_owned()], kind).await {
            Ok(o) => o,
            Err(err) => {
                tracing::warn!(error = %err, "cannot embed the query; lexical search only");
                return None;
            }
        };
        match (out.vectors.into_iter().next()?, space.dtype) {
            (Vector::Float(v), _) => Some(VectorData::F32(v)),
            (Vector::Bytes(b), Dtype::Int8) => Some(VectorData::I8(
                b.into_iter().map(|x| i8::from_ne_bytes([x])).collect(),
            )),
            (Vector::Bytes(b), _) => Some(VectorData::Bits(b)),
        }
    }

    /// Searches as `access` may. Filters apply inside the search.
    pub async fn search(
        &self,
        req: &SearchRequest,
        access: Access,
    ) -> Result<SearchResponse, QueryError> {
        self.search_with(req, access, &self.params).await
    }

    /// The retrieval knobs of this searcher (`[query]`).
    pub fn params(&self) -> &QueryConfig {
        &self.params
    }

    /// Searches with other retrieval knobs than the configured ones (an evaluation comparing
    /// variants on one open generation).
    pub async fn search_with(
        &self,
        req: &SearchRequest,
        access: Access,
        params: &QueryConfig,
    ) -> Result<SearchResponse, QueryError> {
        let k = req.validate(self.max_k, self.max_query_bytes)?;
        let filter = Filter::new(req, access.clone())?;
        let g = self.generation().ok_or(QueryError::NoIndex)?;
        filter.check_languages(&g)?;
        let (ranked, mut notes, embed_s, t1) = self.ranked(&g, req, k, filter, params).await?;
        notes.extend(ranked.notes);
        let mut candidates = ranked.candidates;
        let mut search_s = t1.elapsed().as_secs_f64();
        if let Some(r) = &self.reranker {
            let t2 = Instant::now();
            match self.rerank(r, &g, &req.query, &candidates).await {
                Ok(c) => candidates = c,
                Err(e) => {
                    self.metrics.rerank_failures.inc();
                    // The reason stays in the server's log: it can carry what the provider
                    // said about the account, which is no client's business.
                    tracing::warn!(error = %e, "reranking failed; answering in fused order");
                    notes.push(RERANK_FAILED.to_owned());
                }
            }
            search_s += t2.elapsed().as_secs_f64();
        }
        let t3 = Instant::now();
        let results = search::finish(&g, &candidates, k, req.expand, &access, &req.query);
        search_s += t3.elapsed().as_secs_f64();
        self.metrics.search_seconds.observe(search_s);
        self.metrics.searches.inc();
        Ok(SearchResponse {
            generation: g.number,
            mode: req.mode,
            results,
            notes,
            search_ms: search_s * 1e3,
            embed_ms: embed_s * 1e3,
        })
    }

    /// The query embedded (and HyDE's code, when on), then the arms searched and fused:
    /// the ranking, notes, seconds spent embedding, and when the search began.
    async fn ranked(
        &self,
        g: &Arc<Generation>,
        req: &SearchRequest,
        k: usize,
        filter: Filter,
        params: &QueryConfig,
    ) -> Result<(search::Ranked, Vec<String>, f64, Instant), QueryError> {
        let t0 = Instant::now();
        let vector = if req.mode == crate::Mode::Lexical {
            None
        } else {
            self.embed(g, &req.query).await
        };
        let mut notes = Vec::new();
        let hyde = if vector.is_some() {
            self.hyde_vector(g, req).await.unwrap_or_else(|note| {
                notes.push(note);
                None
            })
        } else {
            None
        };
        let embed_s = t0.elapsed().as_secs_f64();
        if vector.is_some() {
            self.metrics.embed_seconds.observe(embed_s);
        }
        let t1 = Instant::now();
        let ranked = {
            let g = g.clone();
            let req = req.clone();
            let params = params.clone();
            tokio::task::spawn_blocking(move || {
                search::candidates_with(
                    &g,
                    &req,
                    k,
                    filter,
                    vector.as_ref(),
                    hyde.as_ref(),
                    &params,
                )
            })
            .await
            .map_err(|e| QueryError::Index(format!("search task: {e}")))??
        };
        Ok((ranked, notes, embed_s, t1))
    }

    /// The learned ranking's pool for a question in words: each candidate it considered, as
    /// a result, with its features, in fused order (what `trawl eval --train-ranker` fits
    /// the weights on). Empty for any other query.
    pub async fn ranker_pool(
        &self,
        req: &SearchRequest,
        access: Access,
        params: &QueryConfig,
    ) -> Result<Vec<(Hit, learned::Features)>, QueryError> {
        let k = req.validate(self.max_k, self.max_query_bytes)?;
        let filter = Filter::new(req, access)?;
        let g = self.generation().ok_or(QueryError::NoIndex)?;
        filter.check_languages(&g)?;
        let (ranked, ..) = self.ranked(&g, req, k, filter, params).await?;
        Ok(ranked
            .pool
            .iter()
            .map(|&((s, o, score), f)| {
                let d = &g.segments[s as usize].docs[o as usize];
                (search::hit(d, score), f)
            })
            .collect())
    }

    /// Reorders the first `reranker.top` candidates by the reranker's relevance; exact symbol
    /// matches stay first, the rest keep their fused order after them.
    async fn rerank(
        &self,
        r: &Reranker,
        g: &Generation,
        query: &str,
        candidates: &[search::Candidate],
    ) -> Result<Vec<search::Candidate>, QueryError> {
        let exact = candidates
            .iter()
            .take_while(|c| c.2 >= search::EXACT_SYMBOL)
            .count();
        let end = (exact + r.top).min(candidates.len());
        let pool = &candidates[exact..end];
        if pool.is_empty() {
            return Ok(candidates.to_vec());
        }
        let docs: Vec<String> = pool
            .iter()
            .map(|&(s, o, _)| {
                let d = &g.segments[s as usize].docs[o as usize];
                format!("{}\n{}", d.header, d.text)
            })
            .collect();
        let order = r.rerank(query, &docs).await?;
        let mut out: Vec<search::Candidate> = candidates[..exact].to_vec();
        let mut used = vec![false; pool.len()];
        for (i, score) in order {
            if !used[i] {
                used[i] = true;
                out.push((pool[i].0, pool[i].1, score));
            }
        }
        out.extend(
            pool.iter()
                .zip(&used)
                .filter(|(_, u)| !**u)
                .map(|(c, _)| *c),
        );
        out.extend_from_slice(&candidates[end..]);
        Ok(out)
    }
}

//! Configuration: defaults → TOML file → `TRAWL_<SECTION>_<KEY>` environment variables →
//! command-line flags. Every struct denies unknown fields: a typo is an error, never a silent
//! default. Every key is documented in the README's configuration reference; a test checks
//! that the README names each one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;

/// The whole configuration. One file serves every stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub store: StoreConfig,
    pub bus: BusConfig,
    pub fetch: FetchConfig,
    pub chunk: ChunkConfig,
    pub embed: EmbedConfig,
    pub compact: CompactConfig,
    pub query: QueryConfig,
    pub serve: ServeConfig,
    pub log: LogConfig,
    pub ops: OpsConfig,
}

/// The stage processes' operations endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpsConfig {
    /// Where `trawl fetcher`, `chunk-worker`, `embed-worker` and `compactor` serve `/healthz`
    /// and `/metrics` (port 0: any free port, printed at start; empty: none).
    pub listen: String,
}

impl Default for OpsConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9100".into(),
        }
    }
}

/// The query service and `trawl search`: retrieval knobs, the shard cache, the server and its
/// tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Address `trawl serve` listens on.
    pub listen: String,
    /// Where shards are cached locally; empty = `<store dir>/cache` for a local store, else
    /// `${XDG_CACHE_HOME:-~/.cache}/trawl/query`.
    pub cache_dir: PathBuf,
    /// How often `trawl serve` checks `index/CURRENT` for a new generation.
    pub poll_secs: u64,
    /// Reciprocal rank fusion constant: a hit at rank r of an arm scores weight / (rrf_k + r).
    pub rrf_k: f64,
    /// How the arms become one ranking: by rank (`rrf`) or by score (`scores`).
    pub fusion: Fusion,
    /// Weight of the vector (ANN) arm in the fusion.
    pub weight_vector: f64,
    /// Weight of the lexical (BM25) arm in the fusion.
    pub weight_lexical: f64,
    /// Extra weight of the lexical arm when the query looks like an identifier
    /// (`parse_args`, `HTTPConnection.request`, `os::path`).
    pub identifier_lexical_weight: f64,
    /// The query's intent (identifier, pasted error line, config key, question) picks the
    /// lexical arm's weight: `identifier_lexical_weight`, `error_lexical_weight`,
    /// `config_lexical_weight` or `weight_lexical` (false: identifiers or not, as before).
    pub intent_weights: bool,
    /// Weight of the lexical arm for a pasted error or log line.
    pub error_lexical_weight: f64,
    /// Weight of the lexical arm for a config key, flag or environment variable.
    pub config_lexical_weight: f64,
    /// For a pasted error line: a chunk with a string literal whose fixed parts (between
    /// placeholders such as `%d`, `{}`, `${x}`) appear in the message, in order, gains this
    /// times the top fused score times the share of the message it explains (0 = off).
    pub message_boost: f64,
    /// For a pasted error line: the few chunks whose string literals best explain the
    /// message (a constructor, a function that formats it) lend this share of their score to
    /// the code that calls them, where the error is raised (0 = off).
    pub raise_lend: f64,
    /// For a config key, flag or environment variable: a chunk that spells the key as written
    /// (`REQUESTS_CA_BUNDLE`, `no-ignore-vcs` for `--no-ignore-vcs`, `show_default`) gains
    /// this times the top fused score times the share of the query's keys it spells (0 = off).
    pub key_boost: f64,
    /// Prior of tests, examples and benchmarks when the query asks for code (1 = off).
    pub test_prior: f64,
    /// Prior of vendored, built and generated code (`vendor/`, `dist/`, `*.min.js`,
    /// `*.pb.go`), whatever the query asks for (1 = off).
    pub generated_prior: f64,
    /// Prior of every other repository's chunks when the query names repositories by their
    /// own name (`how does commander parse …`) (1 = off).
    pub named_repo_prior: f64,
    /// Prior of documentation when the query asks for code (1 = off).
    pub docs_prior: f64,
    /// [`Self::docs_prior`] for a query that reads as a config key, flag or variable: a doc
    /// that documents the key is half of what such a query asks for.
    pub config_docs_prior: f64,
    /// Prior of documentation for a question asked as a user of the code (`how can I …`,
    /// `my command …`): such a question is answered by a doc page as often as by the code
    /// (the value of `docs_prior` = no difference from any other question).
    pub usage_docs_prior: f64,
    /// Prior of a file's table of contents and of class skeletons (1 = off).
    pub wide_prior: f64,
    /// Prior of module-level code (statements outside any definition) when the query asks
    /// for code (1 = off).
    pub module_prior: f64,
    /// A table of contents or a skeleton gives its place to a narrower candidate inside it.
    pub narrow: bool,
    /// A thin wrapper among the first candidates (a function of a few lines that calls a
    /// definition of its own name) has that definition raised just above it in the fused order.
    pub delegates: bool,
    /// A question (in words, opening with a question word or ending with `?`) whose first
    /// answer is a container (a class, a type, an `impl`) has the first answer after it that is
    /// not one placed first, the container second.
    pub acts_first: bool,
    /// A query for a name or a key (not a question in words, not a pasted message) whose
    /// first `doc_place` results hold no documentation section has the best section among its
    /// first 50 candidates placed `doc_place`-th (0 = off).
    pub doc_place: usize,
    /// A doc section that names a definition in a code span (`` `Client.retry` ``) adds
    /// this share of its score to that definition (0 = off).
    pub prose_lend: f64,
    /// A question that asks why or when code changed: each of its first twenty candidates adds
    /// this share of its score to the last commits that changed its lines (0 = off).
    pub history_lend: f64,
    /// A question in words about code that does not ask about a change: each of its first
    /// five commit messages adds this share of its score to the definitions it touched (0 =
    /// off, the default: chosen at 1.0 on the tune halves, it gained nothing on the test
    /// halves; README, "Retrieval quality").
    pub commit_lend: f64,
    /// A question that asks who calls a definition (`who calls parse_args`, `where is
    /// Client.retry used`) adds this to the fused score of each of its callers, as resolved
    /// by the call graph (0 = off: the words alone decide).
    pub callers_boost: f64,
    /// Commit messages are searched (false: they never answer, whatever is asked).
    pub commits: bool,
    /// Prior of a commit message when the question asks why or when code changed (`why was
    /// the retry removed`, `which commit added …`); 1 = on equal terms with the code.
    pub history_prior: f64,
    /// Weight of a query's adjacent word pairs found side by side in a chunk, relative to
    /// one matching word (0 = no phrase scoring).
    pub phrase_weight: f32,
    /// Candidates each arm contributes per segment, whatever k is (searched deeper only when
    /// that leaves fewer than 3 × k, below what it ranked).
    pub candidates: usize,
    /// HNSW breadth of search (usearch `expansion_search`): recall against latency.
    pub ef_search: usize,
    /// A filter (a restricted token, `lang`, `path`) that admits less than this fraction of a
    /// segment's docs is searched by an exact scan of those docs instead of the filtered
    /// HNSW walk, which visits most of the graph to find them.
    pub exact_scan_below: f64,
    /// Whether the vector arm, for a question in words, also searches the vectors of chunks'
    /// prose views (`embed.prose_view`), scoring a chunk by the nearer of its two; off, or
    /// for any other query, only the chunks' own vectors.
    pub prose_vectors: bool,
    /// Largest `k` a request may ask for.
    pub max_k: usize,
    /// Longest query accepted, in bytes.
    pub max_query_bytes: usize,
    /// Distinct words of a query the lexical arm searches; the rest are dropped with a note
    /// (each word is one clause per text field, so a pasted page would build thousands).
    pub max_query_terms: usize,
    /// Voyage reranker applied to the fused top `rerank_top` (`rerank-2.5`, `rerank-2.5-lite`);
    /// empty = no reranking. Needs `VOYAGE_API_KEY`.
    pub rerank_model: String,
    /// Fused candidates sent to the reranker.
    pub rerank_top: usize,
    /// HyDE: a question in words is answered by a language model with hypothetical code,
    /// which is embedded as a document and searched as a third arm beside the question's own
    /// (off by default; needs `hyde_url` and `hyde_model`).
    pub hyde: bool,
    /// An OpenAI-compatible chat-completions endpoint
    /// (`https://api.openai.com/v1/chat/completions`, a local server's `/v1/chat/completions`).
    pub hyde_url: String,
    /// The chat model HyDE asks.
    pub hyde_model: String,
    /// The environment variable holding the endpoint's bearer key (unset: no key sent).
    pub hyde_key_env: String,
    /// How long a search waits for the hypothetical code before answering without it (with
    /// a note).
    pub hyde_timeout_ms: u64,
    /// Questions whose generated code is kept in memory.
    pub hyde_cache: usize,
    /// Weight of the HyDE arm in the fusion.
    pub hyde_weight: f64,
    /// A question in words: its first `ranker_pool` fused candidates are ranked again by a
    /// weighted sum of what is known of each (the arms' ranks and scores, how much of the
    /// question's rarer words the chunk holds, its role, kind and size, how many of the other
    /// answers share its repository and file). 0 = off.
    pub ranker_pool: usize,
    /// The weights of that sum, fitted by `trawl eval --train-ranker` on a tuning split.
    pub ranker: RankerWeights,
    /// Bearer tokens of `trawl serve` and the repositories each may see (glob patterns such as
    /// `github.com/acme/*`). No tokens = an open server (for a laptop); with tokens, every
    /// request needs one.
    pub tokens: Vec<TokenConfig>,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7700".into(),
            cache_dir: PathBuf::new(),
            poll_secs: 10,
            rrf_k: 20.0,
            fusion: Fusion::Rrf,
            weight_vector: 0.7,
            weight_lexical: 1.0,
            identifier_lexical_weight: 2.0,
            intent_weights: true,
            error_lexical_weight: 3.0,
            config_lexical_weight: 2.0,
            message_boost: 1.0,
            raise_lend: 0.5,
            key_boost: 0.5,
            test_prior: 0.5,
            generated_prior: 0.5,
            named_repo_prior: 0.5,
            docs_prior: 0.6,
            config_docs_prior: 0.75,
            usage_docs_prior: 1.0,
            wide_prior: 0.5,
            module_prior: 1.0,
            narrow: true,
            delegates: true,
            acts_first: true,
            doc_place: 3,
            prose_lend: 0.1,
            history_lend: 1.0,
            commit_lend: 0.0,
            callers_boost: 1.0,
            commits: true,
            history_prior: 1.5,
            phrase_weight: 6.0,
            candidates: 100,
            ef_search: 128,
            exact_scan_below: 0.03,
            prose_vectors: true,
            max_k: 100,
            max_query_bytes: 8192,
            max_query_terms: 64,
            rerank_model: String::new(),
            rerank_top: 50,
            hyde: false,
            hyde_url: String::new(),
            hyde_model: String::new(),
            hyde_key_env: "HYDE_API_KEY".into(),
            hyde_timeout_ms: 3000,
            hyde_cache: 1000,
            hyde_weight: 0.7,
            ranker_pool: 50,
            ranker: RankerWeights::default(),
            tokens: Vec::new(),
        }
    }
}

/// Declares [`RankerWeights`] from one list of feature names: its fields, its
/// [`RankerWeights::NAMES`] and its conversions to and from an array, in that order.
macro_rules! ranker_weights {
    ($($name:ident),+ $(,)?) => {
        /// Weights of the learned ranking's features (`query.ranker`), one per feature; a key
        /// that names no feature is an error. Each feature is described where it is computed
        /// (`trawl_query::learned`).
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct RankerWeights {
            $(pub $name: f64,)+
        }

        impl RankerWeights {
            /// The features, in the order of [`RankerWeights::to_array`].
            pub const NAMES: [&'static str; [$(stringify!($name)),+].len()] =
                [$(stringify!($name)),+];

            pub fn to_array(&self) -> [f64; Self::NAMES.len()] {
                [$(self.$name),+]
            }

            pub fn from_array(w: [f64; Self::NAMES.len()]) -> Self {
                let [$($name),+] = w;
                Self { $($name),+ }
            }
        }
    };
}

ranker_weights!(
    fused,
    position,
    vector_rrf,
    vector_similarity,
    lexical_rrf,
    lexical_share,
    coverage,
    name_coverage,
    lead_coverage,
    pair_coverage,
    docs,
    test,
    history,
    history_asked,
    log_lines,
    repo_share,
    file_share,
    callable,
    container,
    wide,
    module_code,
    prose,
    proximity,
);

impl Default for RankerWeights {
    /// Fitted by `scripts/fit-ranker.sh` (`trawl eval --train-ranker --ranker-l2 0.1 --split
    /// tune`): the tune halves of the development and prose sets and the training questions of
    /// `eval/train`, on one index of their ten repositories (README, "The learned ranking").
    fn default() -> Self {
        Self {
            fused: 1.0283,
            position: 1.1660,
            vector_rrf: 3.7177,
            vector_similarity: 1.5528,
            lexical_rrf: -7.8953,
            lexical_share: -0.2784,
            coverage: 2.7735,
            name_coverage: 1.2614,
            lead_coverage: 1.2747,
            pair_coverage: -0.5703,
            docs: -0.2188,
            test: -1.0968,
            history: 0.9226,
            history_asked: 0.3722,
            log_lines: 0.1019,
            repo_share: 0.4042,
            file_share: 0.4064,
            callable: 0.4524,
            container: -0.7149,
            wide: 0.0000,
            module_code: -0.3956,
            prose: -0.2038,
            proximity: 3.4456,
        }
    }
}

/// One bearer token of the query service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// A name for logs and metrics (the token itself is never logged).
    pub name: String,
    /// The token, inline (tests, laptops). Never printed: `Debug` and `trawl config` show `***`.
    #[serde(default, skip_serializing_if = "crate::secret::Secret::is_empty")]
    pub token: crate::secret::Secret,
    /// An environment variable holding the token (a Kubernetes Secret mounted as env).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_env: String,
    /// Repository patterns this token may see: `github.com/acme/*`, `*` for all.
    pub repos: Vec<String>,
}

/// `trawl serve`'s defences: timeouts, limits, the names it answers to, TLS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Host names (`Host` header, without the port) the server answers to, besides IP
    /// addresses and `localhost`; anything else is refused with 421, so a web page cannot
    /// reach the server through a DNS name that resolves to it (DNS rebinding). `"*"` turns
    /// the check off (behind a proxy that already checks).
    pub allowed_hosts: Vec<String>,
    /// PEM certificate chain: with `tls_key`, the server speaks only HTTPS (rustls).
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// Seconds a connection may take to send a request's headers (and the TLS handshake)
    /// before it is closed.
    pub header_timeout_secs: u64,
    /// Seconds a request body may take to arrive (408 after).
    pub body_timeout_secs: u64,
    /// Seconds a whole request may take, body and search included (503 after).
    pub request_timeout_secs: u64,
    /// Connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Searches run at once; more wait up to `queue_ms`, then get 503 with `Retry-After`.
    pub max_concurrent_searches: usize,
    /// Milliseconds a search waits for a free slot before 503.
    pub queue_ms: u64,
    /// Largest request body, in bytes (413 over it).
    pub max_body_bytes: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            header_timeout_secs: 10,
            body_timeout_secs: 10,
            request_timeout_secs: 30,
            max_connections: 512,
            max_concurrent_searches: 16,
            queue_ms: 500,
            max_body_bytes: 64 * 1024,
        }
    }
}

/// The compactor: shards, merges, generations kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactConfig {
    /// Shards of a full build (chunks are spread by a hash of their id): a number, or `auto`.
    pub shards: Shards,
    /// With `shards = "auto"`: the most chunks a shard is made for. A shard's build holds
    /// its chunks, so this, times the cores, is what bounds the compactor's memory.
    pub shard_chunks: u64,
    /// Generations `trawl compact --gc` keeps (the live one and those before it).
    pub keep: usize,
    /// A shard with more segments than this is merged into one.
    pub max_segments: usize,
    /// A shard whose deleted docs exceed this fraction is merged into one segment.
    pub merge_tombstone_ratio: f64,
    /// `--gc` keeps, beyond `keep`, every generation that was live or built less than this
    /// long ago (query nodes may still be serving it).
    pub gc_grace_secs: u64,
    /// The compactor lease: a build renews it every third of this; a compactor that dies
    /// blocks others for at most this long.
    pub lease_ttl_secs: u64,
    /// `--gc` deletes run reports older than this (days; 0 keeps them).
    pub retain_runs_days: u64,
    /// `--gc` deletes large Kafka payloads (`bus/large/`) older than this (days; 0 keeps
    /// them): longer than the topics' own retention.
    pub retain_bus_large_days: u64,
    /// A whole build reads the live set through local temporary files, in groups of
    /// repositories and buckets of vectors sized to about this much memory (MiB): with the
    /// shards being written, what bounds the compactor's memory whatever the corpus size.
    pub spill_memory_mb: u64,
}

impl Default for CompactConfig {
    fn default() -> Self {
        Self {
            shards: Shards::Auto,
            shard_chunks: Shards::DEFAULT_SHARD_CHUNKS,
            keep: 3,
            max_segments: 8,
            merge_tombstone_ratio: 0.25,
            gc_grace_secs: 3600,
            lease_ttl_secs: 120,
            retain_runs_days: 30,
            retain_bus_large_days: 14,
            spill_memory_mb: 512,
        }
    }
}

/// How many shards a whole build spreads the chunks over: `compact.shards`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shards {
    /// As many as the corpus needs for none to hold more than `compact.shard_chunks`, and
    /// at least [`Shards::AUTO_MIN`]. A generation built on a live one keeps its count until
    /// the corpus needs twice as many: that build is a whole one, with the new count.
    #[default]
    Auto,
    /// Always this many (at least 1). An incremental build keeps the live generation's
    /// count; `trawl compact --full` takes this one.
    Fixed(u32),
}

impl Shards {
    /// The fewest shards `auto` builds: a small corpus is searched over this many segments.
    pub const AUTO_MIN: u32 = 4;
    /// `compact.shard_chunks`' default.
    pub const DEFAULT_SHARD_CHUNKS: u64 = 100_000;

    /// The shard count of a whole build of `chunks` live chunks, `shard_chunks` at most each.
    pub fn count_for(self, chunks: u64, shard_chunks: u64) -> u32 {
        match self {
            Shards::Fixed(n) => n.max(1),
            Shards::Auto => {
                let need = chunks.div_ceil(shard_chunks.max(1));
                u32::try_from(need).unwrap_or(u32::MAX).max(Self::AUTO_MIN)
            }
        }
    }

    /// Whether a live generation of `shards` shards holding `chunks` chunks is to be rebuilt
    /// whole with another count rather than built on: `auto`, and the corpus now needs at
    /// least twice its count (so a growing corpus is sharded again each time it doubles,
    /// never by a chunk here or there).
    pub fn outgrown(self, shards: u32, chunks: u64, shard_chunks: u64) -> bool {
        self == Shards::Auto
            && u64::from(self.count_for(chunks, shard_chunks)) >= 2 * u64::from(shards.max(1))
    }
}

impl std::str::FromStr for Shards {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Shards::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Shards::Fixed(n)),
            _ => Err(format!(
                "compact.shards = {s:?}: expected \"auto\" or a number of shards, at least 1"
            )),
        }
    }
}

impl Serialize for Shards {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Shards::Auto => s.serialize_str("auto"),
            Shards::Fixed(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Shards {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Count(i64),
            Word(String),
        }
        match Repr::deserialize(d)? {
            // One rule for both spellings: a count is read as its digits would be.
            Repr::Count(n) => n.to_string().parse().map_err(serde::de::Error::custom),
            Repr::Word(w) => w.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// How the search arms' results are fused into one ranking: `query.fusion`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Reciprocal rank fusion: a hit at rank r of an arm adds weight / (rrf_k + r). Only the
    /// order counts, so a clear winner of one arm weighs what a near tie does.
    #[default]
    Rrf,
    /// A convex combination of scores: each arm's scores min-max normalised over the
    /// candidates it returned (its best 1, its last 0), times the arm's weight, over
    /// (rrf_k + 1) so that the best fused score is on RRF's scale (the boosts and priors
    /// added after fusion keep their meaning).
    Scores,
}

/// What the local model reads: `embed.local_input`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalInput {
    /// The chunk as written.
    #[default]
    Text,
    /// Compound identifiers spelled as their words: `parse_args`, `parseArgs` → `parse args`.
    Words,
    /// The words alone: identifiers spelled as words, and the punctuation between words
    /// dropped (`if (err) { return next(err); }` → `if err return next err`), so more of a
    /// long chunk fits the model's window and its mean is not diluted by brackets.
    Plain,
}

impl LocalInput {
    /// `text` with the model's reading applied.
    pub fn apply(self, text: &str) -> std::borrow::Cow<'_, str> {
        match self {
            LocalInput::Text => text.into(),
            LocalInput::Words => crate::words::spell_identifiers(text).into(),
            LocalInput::Plain => crate::words::plain_words(text).into(),
        }
    }

    /// The suffix the reading adds to the vector space's name (`""` for the text as written).
    pub fn space_suffix(self) -> &'static str {
        match self {
            LocalInput::Text => "",
            LocalInput::Words => "+words",
            LocalInput::Plain => "+plain",
        }
    }
}

/// What runs the local model: `embed.local_runtime`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalRuntime {
    /// OpenVINO where its runtime is installed (`trawl index` fetches it on first use, on
    /// Linux x86-64) and loads; candle otherwise.
    #[default]
    Auto,
    /// OpenVINO, or an error saying why it cannot run.
    OpenVino,
    /// candle, in process, never anything else.
    Candle,
}

/// Which model the local embedder runs when `embed.model_dir` is empty: `embed.local_model`.
/// Both live in trawl's cache and come from the same PyPI wheel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LocalModel {
    /// all-MiniLM-L6-v2 as published.
    #[default]
    #[serde(rename = "all-MiniLM-L6-v2")]
    Base,
    /// all-MiniLM-L6-v2 with trawl's low-rank delta trained on code (README, "Retrieval
    /// quality", "A model tuned on code"), derived from the base model on first use.
    #[serde(rename = "all-MiniLM-L6-v2-code")]
    Code,
}

impl LocalModel {
    /// The model's directory name in the cache, as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            LocalModel::Base => "all-MiniLM-L6-v2",
            LocalModel::Code => "all-MiniLM-L6-v2-code",
        }
    }
}

/// Which embedder: configured as `embed.embedder`, chosen with `--embedder`, written in run
/// reports, by these names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum EmbedderKind {
    /// A sentence-transformers model directory run with candle: the default, no key needed.
    Local,
    /// The Voyage API; needs `VOYAGE_API_KEY`.
    Voyage,
    /// Deterministic feature hashing, for tests only.
    Hash,
}

impl EmbedderKind {
    pub const ALL: [EmbedderKind; 3] = [
        EmbedderKind::Local,
        EmbedderKind::Voyage,
        EmbedderKind::Hash,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EmbedderKind::Local => "local",
            EmbedderKind::Voyage => "voyage",
            EmbedderKind::Hash => "hash",
        }
    }
}

impl std::fmt::Display for EmbedderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EmbedderKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        EmbedderKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Error::Config(format!("unknown embedder {s:?}: use local, voyage or hash"))
            })
    }
}

/// The embed stage: which embedder, its vector space, the provider's limits, the cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedConfig {
    /// `local` (a model directory run with candle: the default, no key needed), `voyage`
    /// (the Voyage API; needs `VOYAGE_API_KEY`) or `hash` (deterministic, for tests only).
    pub embedder: EmbedderKind,
    /// The Voyage model.
    pub model: String,
    /// Voyage `output_dimension`: 256, 512, 1024 or 2048 for voyage-code-3.
    pub dims: u32,
    /// Voyage `output_dtype`: `float`, `int8`, `uint8`, `binary` or `ubinary`.
    pub dtype: String,
    /// The Voyage API root; point it at a proxy or a fake server.
    pub base_url: String,
    /// Requests per minute the account allows (Voyage basic tier: 2000).
    pub rpm: u32,
    /// Tokens per minute the account allows (Voyage basic tier for voyage-code-3: 3M).
    pub tpm: u64,
    /// Most inputs in one request (Voyage: 1000).
    pub max_batch_inputs: usize,
    /// Most tokens in one request (voyage-code-3: 120K).
    pub max_batch_tokens: u64,
    /// Longest input the model accepts, in tokens (voyage-code-3: 32K); longer inputs are
    /// cut to fit and counted as `truncated`.
    pub max_input_tokens: u64,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Attempts of one request on 429, 5xx, timeouts and dropped connections.
    pub max_retries: u32,
    /// Seconds one request may take before it counts as a timeout.
    pub timeout_secs: u64,
    /// Price in US dollars per million tokens, for the run report's estimated cost.
    pub price_per_mtok: f64,
    /// Price in US dollars per million tokens through the Voyage Batch API (`trawl embed --all
    /// --batch`; a third below the synchronous price), for the report and `--dry-run`.
    pub batch_price_per_mtok: f64,
    /// Most inputs in one Batch API job (Voyage: 100K); more are split into several jobs.
    pub batch_max_inputs: usize,
    /// Largest input file of one Batch API job, in bytes (Voyage: 1 GB).
    pub batch_max_file_bytes: u64,
    /// Milliseconds before the first poll of running batch jobs; doubled after every round of
    /// polls, up to `batch_max_poll_ms`.
    pub batch_poll_ms: u64,
    /// The longest wait between two rounds of polls, in milliseconds.
    pub batch_max_poll_ms: u64,
    /// Milliseconds a partly filled batch waits for more chunks before it is sent.
    pub linger_ms: u64,
    /// The local model's directory (sentence-transformers layout: `config.json`,
    /// `tokenizer.json`, `model.safetensors`). Empty: the default all-MiniLM-L6-v2 under the
    /// user cache (`scripts/fetch-model.sh` puts it there).
    pub model_dir: PathBuf,
    /// The local model when `model_dir` is empty: `all-MiniLM-L6-v2` (the default) or
    /// `all-MiniLM-L6-v2-code`, the same model with trawl's delta trained on code. Each is
    /// its own vector space, so changing it re-embeds everything.
    pub local_model: LocalModel,
    /// Inputs per forward pass of the local model.
    pub local_batch: usize,
    /// The local model reads at most this many tokens of a chunk (header first); 0 = the
    /// model's own limit (256 for all-MiniLM-L6-v2). 128 embeds about 1.6× as fast and
    /// retrieves a little worse (README, "Retrieval quality"); another value is another
    /// vector space, so changing it re-embeds everything.
    pub local_max_tokens: usize,
    /// What the local model reads of a chunk (and of a query): `text` as written, `words`
    /// with compound identifiers spelled as words (`parseArgs` → `parse args`), or `plain`:
    /// those words without the punctuation between them. Each is its own vector space, so
    /// changing it re-embeds everything.
    pub local_input: LocalInput,
    /// Windows of `local_max_tokens` the local model reads of a longer chunk; its vector is
    /// the mean over every token read (1: the first window only, the rest cut). Another
    /// value is another vector space, so changing it re-embeds everything.
    pub local_windows: usize,
    /// Whether the local model reads the imports line of a chunk's header (the default). Off,
    /// a file's imports (the same for each of its chunks, up to a third of a small model's
    /// window) are left out of what it embeds; BM25 still reads them. Measured (README,
    /// "Retrieval quality"): the vector arm alone is better off, the hybrid ranking is not.
    /// Each choice is its own vector space (off adds `+noimports` to its name), so changing it
    /// re-embeds everything; a query is embedded the same either way, so either setting
    /// searches an index embedded with the other.
    pub local_imports: bool,
    /// How far below normal the local model's inference threads are scheduled when they embed
    /// chunks (Linux thread niceness, 0–19; 0 keeps them at normal priority; other systems are
    /// left as they are). Chunking and the index
    /// build, which make the first generation of `trawl index` searchable, then take the
    /// cores first, and the vectors follow with what is left; on an otherwise idle machine
    /// the embedder loses nothing. Queries are always embedded at normal priority.
    pub local_nice: u8,
    /// What runs the local model: `auto` (OpenVINO where its runtime is installed — `trawl
    /// index` fetches it from PyPI on first use on Linux x86-64 — and candle otherwise),
    /// `openvino` (or fail) or `candle`. The vectors are the model's either way (within a
    /// cosine of 0.999), so switching keeps the index; OpenVINO is ~7× as fast as candle
    /// on a CPU with bf16 units (README, Performance, "OpenVINO in trawl").
    pub local_runtime: LocalRuntime,
    /// Dimensions of the hash embedder.
    pub hash_dims: u32,
    /// Whether each chunk of code also gets a vector of its prose view
    /// ([`crate::prose::view`]: its name spelled as words, its comments and docstrings, the
    /// sentences of its string literals, its identifiers' words), stored in the same vector
    /// space; for a question in words the vector arm scores a chunk by the nearer of its two
    /// (`query.prose_vectors`). About 1.7× the embedding work. Off by default: measured
    /// (README, "Retrieval quality"), it helps on some repositories and not on others. A
    /// contextual model (`voyage-context-*`) embeds no prose view.
    pub prose_view: bool,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        Self {
            embedder: EmbedderKind::Local,
            model: "voyage-code-3".into(),
            dims: 1024,
            dtype: "float".into(),
            base_url: "https://api.voyageai.com/v1".into(),
            rpm: 2000,
            tpm: 3_000_000,
            max_batch_inputs: 1000,
            max_batch_tokens: 120_000,
            max_input_tokens: 32_000,
            concurrency: 4,
            max_retries: 8,
            timeout_secs: 60,
            price_per_mtok: 0.18,
            batch_price_per_mtok: 0.12,
            batch_max_inputs: 100_000,
            batch_max_file_bytes: 1_000_000_000,
            batch_poll_ms: 30_000,
            batch_max_poll_ms: 600_000,
            linger_ms: 200,
            model_dir: PathBuf::new(),
            local_model: LocalModel::Base,
            local_batch: 8,
            local_max_tokens: 0,
            local_input: LocalInput::Text,
            local_windows: 1,
            local_imports: true,
            local_nice: 10,
            local_runtime: LocalRuntime::Auto,
            hash_dims: 256,
            prose_view: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkConfig {
    /// Pieces smaller than this many bytes merge with a neighbour.
    pub floor: usize,
    /// No chunk's text is larger than this many bytes.
    pub ceiling: usize,
    /// A parse slower than this falls back to text chunking, in milliseconds.
    pub parse_timeout_ms: u64,
    /// Files chunked at once by a worker.
    pub concurrency: usize,
    /// `ast` (definitions: the product) or `windows` (fixed 1,000-character windows with 100
    /// of overlap: the naive baseline, for retrieval evaluations).
    pub strategy: String,
    /// Prose over the ceiling (a Markdown section, a text file) is cut where its topic
    /// changes: its sentences are embedded with the local model and cut where neighbours
    /// differ most (false: at paragraphs, by size). Applies to files chunked from then on.
    pub meaning: bool,
    /// A cut goes where the distance between neighbouring sentences is above this
    /// percentile of the section's distances (0–100); pieces over the ceiling are cut again.
    pub meaning_percentile: f32,
    /// What tells the sentences apart: `local` (the local model's sentence vectors) or
    /// `words` (the words and word pairs neighbours share; no model, no wait).
    pub meaning_model: MeaningModel,
}

/// What cuts prose by meaning ([`ChunkConfig::meaning_model`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MeaningModel {
    /// The local model's sentence vectors: as many forward passes as the prose has
    /// sentences.
    #[default]
    Local,
    /// Hashed words and word pairs: neighbours that share few words are a change of topic.
    Words,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            floor: 200,
            ceiling: 2000,
            parse_timeout_ms: 5000,
            concurrency: 4,
            strategy: "ast".into(),
            meaning: true,
            meaning_percentile: 95.0,
            meaning_model: MeaningModel::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Where everything is stored: `file://<dir>` or a plain path, `memory://`, `s3://bucket/prefix`.
    pub url: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusConfig {
    /// `spool://` (durable, in the store: the default for stand-alone stages on one machine),
    /// `inproc://` (bounded channels inside one process).
    pub url: String,
    /// Messages a topic holds before publishers wait (in-process bus).
    pub capacity: usize,
    /// The topic names on the bus (on a shared Kafka cluster, e.g. `trawl.prod.files`).
    pub topic_files: String,
    pub topic_chunks: String,
    pub topic_embedded: String,
    pub topic_dead_letters: String,
    /// Deliveries of a message that failed on its own content (a chunker panic) before it
    /// goes to the dead-letter topic. The bus keeps the count across restarts.
    pub max_attempts: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    /// Local directory holding the bare git mirrors.
    pub cache_dir: PathBuf,
    /// Repositories cloned or fetched at once.
    pub concurrency: usize,
    /// Files larger than this are skipped (`too-large`), in bytes.
    pub max_file_bytes: u64,
    /// A file whose lines longer than this hold more than half its bytes is treated as
    /// minified (`minified`), in bytes.
    pub max_line_bytes: usize,
    /// Globs of paths skipped as vendored or generated, on top of the built-in list.
    pub exclude: Vec<String>,
    /// Seconds a clone or fetch of one repository may take before it fails with `timeout`.
    pub timeout_secs: u64,
    /// Globs of paths exempt from the secret rules (path and content): their text is indexed
    /// as it is. For fixtures of fake keys; see docs/operations.md.
    pub secrets_allow: Vec<String>,
    /// Commit messages indexed as `commit` docs (why code changed): the last this many
    /// commits of the branch on a repository's first run, then every new one (at most
    /// 1,000 a run). 0 = none.
    pub commit_history: usize,
    /// Hosts `TRAWL_GIT_TOKEN` is sent to (exact host names, over https or ssh only).
    pub token_hosts: Vec<String>,
    /// Git tokens bound to one host each: `[[fetch.credentials]] host = "git.example.com",
    /// token_env = "GIT_TOKEN_EXAMPLE"`. Sent over https or ssh only, never to another host.
    pub credentials: Vec<GitCredentialConfig>,
}

/// A git token for one host, read from an environment variable (never written in the file).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitCredentialConfig {
    /// The host name (`git.example.com`, or `host:port`) the token is sent to, and only it.
    pub host: String,
    /// The environment variable holding the token.
    pub token_env: String,
    /// The user name sent with the token (GitHub and GitLab accept any).
    #[serde(default = "default_git_username")]
    pub username: String,
}

fn default_git_username() -> String {
    "x-access-token".into()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: String,
    /// A `tracing` filter: `info`, `trawl_fetcher=debug,info`, ….
    pub level: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "file://./.trawl".into(),
        }
    }
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            url: "spool://".into(),
            capacity: 1024,
            topic_files: "files".into(),
            topic_chunks: "chunks".into(),
            topic_embedded: "embedded".into(),
            topic_dead_letters: "dead-letters".into(),
            max_attempts: 3,
        }
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            cache_dir: PathBuf::from(".trawl-cache/mirrors"),
            concurrency: 4,
            max_file_bytes: 1024 * 1024,
            max_line_bytes: 10_000,
            exclude: Vec::new(),
            timeout_secs: 600,
            secrets_allow: Vec::new(),
            commit_history: 100,
            token_hosts: vec!["github.com".into()],
            credentials: Vec::new(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: "text".into(),
            level: "info".into(),
        }
    }
}

/// Environment variables with the `TRAWL_` prefix that are not configuration keys: the
/// config file, the log filter, git credentials, benchmark inputs.
const NOT_KEYS: &[&str] = &[
    "TRAWL_CONFIG",
    "TRAWL_LOG",
    "TRAWL_GIT_TOKEN",
    "TRAWL_GIT_USERNAME",
    "TRAWL_GIT_SSH_KEY",
    "TRAWL_GIT_SSH_PASSPHRASE",
    "TRAWL_BENCH_CORPUS",
    "TRAWL_BENCH_SECONDS",
    "TRAWL_BENCH_ONLY",
    "TRAWL_BENCH_BATCH",
    "TRAWL_BENCH_PYTHON",
    "TRAWL_BENCH_CHUNKS",
    "TRAWL_BENCH_QUERIES",
    "TRAWL_BENCH_FILES",
    "TRAWL_TOKEN",
];

impl Config {
    /// Loads the layered configuration. `file` is optional; `env` is usually
    /// `std::env::vars()`; `overrides` are `section.key=value` pairs from the command line
    /// (values in TOML syntax, or bare strings).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Self, Error> {
        let mut table =
            toml::Table::try_from(Config::default()).map_err(|e| Error::Config(e.to_string()))?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::Config(format!("cannot read config file {}: {e}", path.display()))
            })?;
            let from_file: toml::Table = text
                .parse()
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            // Validate the file alone first, so its errors name the file.
            toml::Value::Table(from_file.clone())
                .try_into::<Config>()
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            merge(&mut table, from_file);
        }
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("TRAWL_") else {
                continue;
            };
            if NOT_KEYS.contains(&name.as_str()) {
                continue;
            }
            // Only a known section makes a variable configuration: others are the operator's
            // own (a token named by `query.tokens[].token_env`, say `TRAWL_TOKEN_PAYMENTS`).
            // Within a known section an unknown key is still an error (a typo).
            let Some((section, key)) = rest.split_once('_') else {
                continue;
            };
            if !matches!(
                table.get(&section.to_ascii_lowercase()),
                Some(toml::Value::Table(_))
            ) {
                continue;
            }
            set(
                &mut table,
                &section.to_ascii_lowercase(),
                &key.to_ascii_lowercase(),
                &value,
            )
            .map_err(|e| Error::Config(format!("environment variable {name}: {e}")))?;
        }
        for (dotted, value) in overrides {
            let (section, key) = dotted.split_once('.').ok_or_else(|| {
                Error::Config(format!("--set {dotted}: expected section.key=value"))
            })?;
            set(&mut table, section, key, value)
                .map_err(|e| Error::Config(format!("--set {dotted}: {e}")))?;
        }
        toml::Value::Table(table)
            .try_into::<Config>()
            .map_err(|e| Error::Config(e.to_string()))
    }

    /// Every key as `section.key`, for documentation checks and `trawl config`.
    pub fn keys() -> Vec<String> {
        let table = toml::Table::try_from(Config::default()).expect("defaults serialise");
        let mut out = Vec::new();
        for (section, v) in &table {
            if let toml::Value::Table(t) = v {
                out.extend(t.keys().map(|k| format!("{section}.{k}")));
            }
        }
        out
    }
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn set(table: &mut toml::Table, section: &str, key: &str, raw: &str) -> Result<(), String> {
    let Some(toml::Value::Table(sec)) = table.get_mut(section) else {
        return Err(format!("unknown section {section:?}"));
    };
    let Some(old) = sec.get(key) else {
        return Err(format!("unknown key {key:?} in section [{section}]"));
    };
    // Parse the value as TOML (numbers, booleans, arrays); a bare word is a string.
    let parsed = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()));
    let value = match (old, parsed) {
        (toml::Value::String(_), p @ toml::Value::String(_)) => p,
        (toml::Value::String(_), _) => toml::Value::String(raw.to_owned()),
        (_, p) => p,
    };
    sec.insert(key.to_owned(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn shards_are_auto_or_a_positive_count_from_every_layer() {
        let load = |sets: &[(&str, &str)]| {
            let sets: Vec<(String, String)> = sets
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect();
            Config::load(None, env(&[("HOME", "/x")]), &sets)
        };
        assert_eq!(load(&[]).unwrap().compact.shards, Shards::Auto);
        let c = load(&[("compact.shards", "133")]).unwrap();
        assert_eq!(c.compact.shards, Shards::Fixed(133));
        let c = load(&[("compact.shards", "auto")]).unwrap();
        assert_eq!(c.compact.shards, Shards::Auto);
        for bad in ["0", "-2", "many"] {
            let e = load(&[("compact.shards", bad)]).unwrap_err().to_string();
            assert!(
                e.contains("compact.shards") && e.contains("auto"),
                "{bad}: {e}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("trawl.toml");
        std::fs::write(&f, "[compact]\nshards = 8\nshard_chunks = 1000\n").unwrap();
        let c = Config::load(Some(&f), env(&[("HOME", "/x")]), &[]).unwrap();
        assert_eq!(
            (c.compact.shards, c.compact.shard_chunks),
            (Shards::Fixed(8), 1000)
        );
        // What a file says round-trips.
        let text = toml::to_string(&c).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.compact, c.compact);

        assert_eq!(Shards::Auto.count_for(10, 150_000), Shards::AUTO_MIN);
        assert_eq!(Shards::Auto.count_for(2_450_000, 150_000), 17);
        assert_eq!(Shards::Fixed(3).count_for(2_450_000, 150_000), 3);
        assert!(!Shards::Auto.outgrown(4, 1_000_000, 150_000)); // needs 7
        assert!(Shards::Auto.outgrown(4, 1_200_000, 150_000)); // needs 8
        assert!(!Shards::Fixed(4).outgrown(4, 9_000_000, 150_000));
    }

    #[test]
    fn the_local_model_is_named_as_in_the_cache_and_a_wrong_name_is_refused() {
        let set = |v: &str| {
            Config::load(
                None,
                env(&[("HOME", "/x")]),
                &[("embed.local_model".into(), v.into())],
            )
        };
        assert_eq!(Config::default().embed.local_model, LocalModel::Base);
        let c = set("all-MiniLM-L6-v2-code").unwrap();
        assert_eq!(c.embed.local_model, LocalModel::Code);
        assert_eq!(c.embed.local_model.name(), "all-MiniLM-L6-v2-code");
        assert_eq!(
            set("all-MiniLM-L6-v2").unwrap().embed.local_model.name(),
            "all-MiniLM-L6-v2"
        );
        let e = set("minilm-code").unwrap_err().to_string();
        assert!(e.contains("local_model"), "{e}");
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("trawl.toml");
        std::fs::write(&f, "[fetch]\nconcurrency = 2\nmax_file_bytes = 10\n").unwrap();
        let c = Config::load(
            Some(&f),
            env(&[("TRAWL_FETCH_CONCURRENCY", "3"), ("HOME", "/x")]),
            &[("fetch.max_file_bytes".into(), "20".into())],
        )
        .unwrap();
        assert_eq!(c.fetch.concurrency, 3);
        assert_eq!(c.fetch.max_file_bytes, 20);
        assert_eq!(c.store, StoreConfig::default());
        let c = Config::load(None, env(&[("TRAWL_STORE_URL", "memory://")]), &[]).unwrap();
        assert_eq!(c.store.url, "memory://");
        let c = Config::load(
            None,
            [],
            &[("fetch.exclude".into(), r#"["gen/**"]"#.into())],
        )
        .unwrap();
        assert_eq!(c.fetch.exclude, ["gen/**"]);
    }

    #[test]
    fn embedder_kinds_keep_the_names_configs_and_reports_use() {
        for (kind, name) in [
            (EmbedderKind::Local, "local"),
            (EmbedderKind::Voyage, "voyage"),
            (EmbedderKind::Hash, "hash"),
        ] {
            assert_eq!(kind.to_string(), name);
            assert_eq!(name.parse::<EmbedderKind>().unwrap(), kind);
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{name}\""));
            let c = Config::load(None, env(&[("TRAWL_EMBED_EMBEDDER", name)]), &[]).unwrap();
            assert_eq!(c.embed.embedder, kind);
        }
        assert_eq!(EmbedConfig::default().embedder, EmbedderKind::Local);
        let e = "openai".parse::<EmbedderKind>().unwrap_err().to_string();
        assert!(e.contains("use local, voyage or hash"), "{e}");
        let e = Config::load(None, [], &[("embed.embedder".into(), "openai".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("openai") && e.contains("voyage"), "{e}");
    }

    #[test]
    fn typos_are_errors_that_name_the_culprit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("trawl.toml");
        std::fs::write(&f, "[fetch]\nconcurency = 2\n").unwrap();
        let e = Config::load(Some(&f), [], &[]).unwrap_err().to_string();
        assert!(e.contains("concurency") && e.contains("trawl.toml"), "{e}");
        let e = Config::load(None, env(&[("TRAWL_FETCH_CONCURENCY", "2")]), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("TRAWL_FETCH_CONCURENCY"), "{e}");
        let e = Config::load(None, env(&[("TRAWL_FETCH_CONCURRENCY", "many")]), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("concurrency") || e.contains("integer"), "{e}");
        for not_a_key in [
            "TRAWL_CONFIG",
            "TRAWL_LOG",
            "TRAWL_GIT_TOKEN",
            "TRAWL_GIT_SSH_KEY",
            // The README's token_env example, and other variables of no section.
            "TRAWL_TOKEN_PAYMENTS",
            "TRAWL_SECRET",
        ] {
            assert!(
                Config::load(None, env(&[(not_a_key, "x")]), &[]).is_ok(),
                "{not_a_key}"
            );
        }
    }

    #[test]
    fn keys_lists_every_key() {
        let keys = Config::keys();
        assert!(keys.contains(&"store.url".to_owned()));
        assert!(keys.contains(&"fetch.max_line_bytes".to_owned()));
    }
}

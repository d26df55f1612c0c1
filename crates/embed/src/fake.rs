//! A fake Voyage embeddings server on 127.0.0.1, for the tests and the benchmark: never chosen
//! by configuration. It follows the contract in the project's notes on the Voyage API:
//!
//! - `POST /v1/embeddings` with `Authorization: Bearer <key>` (else 401) and the documented
//!   body; unknown models, dimensions or dtypes, more than 1,000 inputs or more than 120K
//!   tokens in a request, or an input over the 32K context with `truncation: false`, are 400s
//!   with a `detail` message, as the real API answers.
//! - Rate limits: a sliding 60-second window (configurable for tests) of accepted requests and tokens; a request that
//!   would exceed either gets 429 with `Retry-After` (whole seconds until it would fit).
//! - `POST /v1/contextualizedembeddings` with `voyage-context-3`: `inputs` is a list of
//!   documents, each a list of chunks; at most 1,000 documents and 16,000 chunks, 32K tokens
//!   a document and 120K a request, else 400. Each chunk's vector is [`fake_context_vector`]:
//!   its own text's, pulled towards its document's, so a test can tell that the context was
//!   sent. The answer has one entry per document, each with its chunks' vectors.
//! - `POST /v1/rerank` likewise, with the reranker's limits and [`fake_relevance`] as its
//!   relevance; it shares the key check, the faults and the rate window.
//! - Faults, drawn per request from a seeded generator: 429 without `Retry-After`, 500/502/503,
//!   a slow answer, and a connection dropped in the middle of the response body (embeddings
//!   only). [`FakeVoyage::fail_next`] queues exact answers for the next requests instead.
//! - Inputs containing [`FakeConfig::poison`] are refused with 400, to test isolation.
//! - Its tokenizer is a stand-in: `ceil(bytes / 4)` per input, which the client's estimate
//!   (`bytes / 3`) overcounts, as with real code.
//! - The Batch API: `POST /v1/files` (multipart, `purpose=batch`), `POST /v1/batches`
//!   (`/v1/embeddings`, `12h`, `request_params` checked like a request's), `GET
//!   /v1/batches/{id}` (answers `validating`, then `in_progress`, for
//!   [`FakeConfig::batch_polls`] polls each, then `completed` — or what
//!   [`FakeVoyage::end_next_batch`] queued), `GET /v1/files/{id}/content`. A completed batch's
//!   lines are embedded as requests of one input are; refused lines (e.g. poisoned) go to the
//!   error file with their 400. They share the key check and the faults, not the rate window.
//! - Vectors are the [`crate::hash::HashEmbedder`] vector of the input text at the requested
//!   dimension, quantised to the requested dtype, so a test can check that each vector
//!   belongs to its text.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::{Rng, SeedableRng};

use crate::embedder::{Dtype, Vector, quantize};
use crate::hash::HashEmbedder;

/// The fake's behaviour.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    pub api_key: String,
    pub rpm: u64,
    pub tpm: u64,
    pub max_inputs: usize,
    pub max_request_tokens: u64,
    pub context_tokens: u64,
    /// Probability of an injected 429 (no `Retry-After`).
    pub p429: f64,
    /// Probability of an injected 500/502/503.
    pub p5xx: f64,
    /// Probability of answering after [`FakeConfig::slow`].
    pub p_slow: f64,
    pub slow: Duration,
    /// Probability of dropping the connection mid-response.
    pub p_drop: f64,
    /// Inputs containing this are refused with 400.
    pub poison: Option<String>,
    pub seed: u64,
    /// The rate window (60 s, as Voyage states its limits; shorter in tests).
    pub window: Duration,
    /// Polls a batch answers in each of `validating` and `in_progress` before it ends.
    pub batch_polls: u32,
    /// Most input lines in one batch (Voyage: 100K).
    pub batch_max_inputs: usize,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            api_key: "test-key".into(),
            rpm: 2000,
            tpm: 3_000_000,
            max_inputs: 1000,
            max_request_tokens: 120_000,
            context_tokens: 32_000,
            p429: 0.0,
            p5xx: 0.0,
            p_slow: 0.0,
            slow: Duration::from_secs(2),
            p_drop: 0.0,
            poison: None,
            seed: 7,
            window: Duration::from_secs(60),
            batch_polls: 1,
            batch_max_inputs: 100_000,
        }
    }
}

/// What the fake saw.
#[derive(Clone, Debug, Default)]
pub struct FakeStats {
    /// Every request that reached the handler.
    pub requests: u64,
    /// Requests answered with vectors.
    pub accepted: u64,
    /// Tokens of accepted requests, by the fake's tokenizer.
    pub accepted_tokens: u64,
    /// Answers by status and cause: `400`, `401`, `429-budget`, `429-injected`, `5xx`,
    /// `slow`, `dropped`.
    pub outcomes: HashMap<String, u64>,
    /// Times each input text was embedded in an accepted request.
    pub embedded: HashMap<String, u64>,
    /// The most tokens accepted in any window.
    pub peak_window_tokens: u64,
    /// The most requests accepted in any window.
    pub peak_window_requests: u64,
    /// Accepted requests by `input_type`.
    pub input_types: HashMap<String, u64>,
    /// When the first and last request was accepted.
    pub first_accept: Option<Instant>,
    pub last_accept: Option<Instant>,
    /// Batch API: files uploaded, batches created, polls of a batch's status.
    pub files_uploaded: u64,
    pub batches_created: u64,
    pub batch_polls: u64,
}

struct Inner {
    cfg: FakeConfig,
    stats: FakeStats,
    window: VecDeque<(Instant, u64)>,
    rng: rand::rngs::StdRng,
    /// Answers for the next requests, before anything else: status and `Retry-After` seconds.
    script: VecDeque<(StatusCode, Option<u64>)>,
    /// Batch API: uploaded files by id, batches by id, the last id handed out, and the
    /// terminal statuses the next batches end with instead of `completed`.
    files: HashMap<String, bytes::Bytes>,
    batches: HashMap<String, FakeBatch>,
    ids: u64,
    batch_ends: VecDeque<String>,
}

/// A batch of the fake's Batch API.
struct FakeBatch {
    input_file_id: String,
    params: serde_json::Value,
    polls: u32,
    status: String,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    errors: Option<serde_json::Value>,
}

/// A running fake; stops when dropped.
pub struct FakeVoyage {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeVoyage {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fake's token count of one input.
pub fn fake_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

/// The vector the fake returns for `text`.
pub fn fake_vector(text: &str, dims: u32, dtype: Dtype) -> Vector {
    let v = HashEmbedder::new(dims).expect("dims > 0").vector(text);
    quantize(&v, dtype)
}

/// The vector the fake's contextualized endpoint returns for chunk `i` of `document`: its own
/// text's vector plus half its whole document's, normalised (a document of one chunk gets
/// [`fake_vector`]'s).
pub fn fake_context_vector(document: &[String], i: usize, dims: u32, dtype: Dtype) -> Vector {
    let hash = HashEmbedder::new(dims).expect("dims > 0");
    let mut v = hash.vector(&document[i]);
    if document.len() > 1 {
        let whole = hash.vector(&document.concat());
        for (x, w) in v.iter_mut().zip(whole) {
            *x += 0.5 * w;
        }
        crate::embedder::normalize(&mut v);
    }
    quantize(&v, dtype)
}

impl FakeVoyage {
    /// Starts a fake on a free loopback port.
    pub async fn start(cfg: FakeConfig) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Mutex::new(Inner {
            rng: rand::rngs::StdRng::seed_from_u64(cfg.seed),
            cfg,
            stats: FakeStats::default(),
            window: VecDeque::new(),
            script: VecDeque::new(),
            files: HashMap::new(),
            batches: HashMap::new(),
            ids: 0,
            batch_ends: VecDeque::new(),
        }));
        let app = axum::Router::new()
            .route("/v1/embeddings", axum::routing::post(handle))
            .route(
                "/v1/contextualizedembeddings",
                axum::routing::post(handle_contextual),
            )
            .route("/v1/rerank", axum::routing::post(rerank))
            .route("/v1/files", axum::routing::post(upload))
            .route("/v1/files/{id}/content", axum::routing::get(file_content))
            .route("/v1/batches", axum::routing::post(create_batch))
            .route("/v1/batches/{id}", axum::routing::get(poll_batch))
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, inner, task })
    }

    /// The API root to give the client: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn stats(&self) -> FakeStats {
        self.lock().stats.clone()
    }

    /// Answers the next request (embeddings or rerank, after those already queued) with
    /// `status` and a `detail` body, with `Retry-After: <secs>` when given; counted in
    /// [`FakeStats::outcomes`] as `injected-<status>`.
    pub fn fail_next(&self, status: u16, retry_after_secs: Option<u64>) {
        let status = StatusCode::from_u16(status).expect("an HTTP status");
        self.lock().script.push_back((status, retry_after_secs));
    }

    /// The next batch created (after those already queued) ends with `status` (`failed`,
    /// `expired` or `cancelled`) instead of `completed`, with no output.
    pub fn end_next_batch(&self, status: &str) {
        self.lock().batch_ends.push_back(status.to_owned());
    }

    /// Changes the behaviour of a running fake (faults, limits, key).
    pub fn configure(&self, f: impl FnOnce(&mut FakeConfig)) {
        f(&mut self.lock().cfg);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn detail(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "detail": msg.into() })),
    )
        .into_response()
}

enum Fault {
    None,
    Status(StatusCode, Option<u64>),
    Slow(Duration),
    Drop,
}

type Shared = Arc<Mutex<Inner>>;

fn lock(inner: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    inner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bump(s: &mut FakeStats, k: &str) {
    *s.outcomes.entry(k.to_owned()).or_default() += 1;
}

/// What happens to a request before it is read: counts it, then takes the next scripted answer
/// or draws a fault. A status fault is answered here (`Err`); a slow answer has waited.
async fn fault(inner: &Shared) -> Result<Fault, Response> {
    let fault = {
        let mut g = lock(inner);
        g.stats.requests += 1;
        let cfg = g.cfg.clone();
        let r: f64 = g.rng.random();
        if let Some((code, after)) = g.script.pop_front() {
            bump(&mut g.stats, &format!("injected-{}", code.as_u16()));
            Fault::Status(code, after)
        } else if r < cfg.p429 {
            bump(&mut g.stats, "429-injected");
            Fault::Status(StatusCode::TOO_MANY_REQUESTS, None)
        } else if r < cfg.p429 + cfg.p5xx {
            let codes = [
                StatusCode::INTERNAL_SERVER_ERROR,
                StatusCode::BAD_GATEWAY,
                StatusCode::SERVICE_UNAVAILABLE,
            ];
            bump(&mut g.stats, "5xx");
            Fault::Status(codes[g.rng.random_range(0..3)], None)
        } else if r < cfg.p429 + cfg.p5xx + cfg.p_slow {
            Fault::Slow(cfg.slow)
        } else if r < cfg.p429 + cfg.p5xx + cfg.p_slow + cfg.p_drop {
            Fault::Drop
        } else {
            Fault::None
        }
    };
    match fault {
        Fault::Status(code, after) => {
            let mut resp = detail(code, "injected failure");
            if let Some(secs) = after {
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    secs.to_string().parse().expect("digits"),
                );
            }
            Err(resp)
        }
        Fault::Slow(d) => {
            bump(&mut lock(inner).stats, "slow");
            tokio::time::sleep(d).await;
            Ok(Fault::None)
        }
        f => Ok(f),
    }
}

/// The key check: `None` when the bearer key is the fake's.
fn unauthorized(inner: &Shared, headers: &HeaderMap) -> Option<Response> {
    let key = lock(inner).cfg.api_key.clone();
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth == Some(&format!("Bearer {key}")) {
        return None;
    }
    bump(&mut lock(inner).stats, "401");
    Some(detail(
        StatusCode::UNAUTHORIZED,
        "Provided API key is invalid. Please check your key.",
    ))
}

/// The rate window: admits a request of `total` tokens if both budgets hold over the window
/// (and records it: `None`), else answers 429 with `Retry-After` (whole seconds until it
/// would fit).
fn over_budget(g: &mut Inner, total: u64, now: Instant) -> Option<Response> {
    let cfg = &g.cfg;
    let minute = cfg.window;
    while g
        .window
        .front()
        .is_some_and(|(t, _)| now.duration_since(*t) >= minute)
    {
        g.window.pop_front();
    }
    let used: u64 = g.window.iter().map(|(_, n)| n).sum();
    let count = g.window.len() as u64;
    if used + total > cfg.tpm || count + 1 > cfg.rpm {
        // Wait until enough of the window has expired.
        let mut free = cfg.tpm.saturating_sub(used);
        let mut wait = Duration::ZERO;
        for (i, (t, n)) in g.window.iter().enumerate() {
            free += n;
            wait = minute.saturating_sub(now.duration_since(*t));
            if free >= total && count - (i as u64 + 1) < cfg.rpm {
                break;
            }
        }
        bump(&mut g.stats, "429-budget");
        let mut resp = detail(
            StatusCode::TOO_MANY_REQUESTS,
            "You have exceeded your rate limit.",
        );
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            secs.to_string().parse().expect("digits"),
        );
        return Some(resp);
    }
    g.window.push_back((now, total));
    let in_window: u64 = g.window.iter().map(|(_, n)| n).sum();
    let reqs = g.window.len() as u64;
    let s = &mut g.stats;
    s.peak_window_tokens = s.peak_window_tokens.max(in_window);
    s.peak_window_requests = s.peak_window_requests.max(reqs);
    None
}

/// The fake reranker's relevance: the share of the query's words found in the document.
pub fn fake_relevance(query: &str, document: &str) -> f64 {
    let words = |t: &str| -> Vec<String> {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let q = words(query);
    if q.is_empty() {
        return 0.0;
    }
    let d: std::collections::HashSet<String> = words(document).into_iter().collect();
    q.iter().filter(|w| d.contains(*w)).count() as f64 / q.len() as f64
}

/// `POST /v1/rerank`, with the real limits: 1,000 documents, 8,000 query tokens, and
/// (query tokens × documents) + document tokens ≤ 600K.
async fn rerank(
    State(inner): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    bump(&mut lock(&inner).stats, "rerank");
    if let Err(resp) = fault(&inner).await {
        return resp;
    }
    if let Some(resp) = unauthorized(&inner, &headers) {
        return resp;
    }
    let Ok(req) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return detail(StatusCode::BAD_REQUEST, "invalid JSON body");
    };
    if !matches!(
        req["model"].as_str(),
        Some("rerank-2.5" | "rerank-2.5-lite")
    ) {
        return detail(
            StatusCode::BAD_REQUEST,
            format!("Model {} is not supported.", req["model"]),
        );
    }
    let Some(query) = req["query"].as_str() else {
        return detail(StatusCode::BAD_REQUEST, "query must be a string");
    };
    let Some(docs) = req["documents"]
        .as_array()
        .and_then(|a| a.iter().map(|d| d.as_str()).collect::<Option<Vec<_>>>())
    else {
        return detail(
            StatusCode::BAD_REQUEST,
            "documents must be a list of strings",
        );
    };
    let qt = fake_tokens(query);
    let total = qt * docs.len() as u64 + docs.iter().map(|d| fake_tokens(d)).sum::<u64>();
    if docs.is_empty() || docs.len() > 1000 || qt > 8000 || total > 600_000 {
        return detail(
            StatusCode::BAD_REQUEST,
            format!(
                "{} documents, query of {qt} tokens, {total} tokens in all: over the limits",
                docs.len()
            ),
        );
    }
    if let Some(resp) = over_budget(&mut lock(&inner), total, Instant::now()) {
        return resp;
    }
    let mut data: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (i, fake_relevance(query, d)))
        .collect();
    data.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if let Some(k) = req["top_k"].as_u64() {
        data.truncate(k as usize);
    }
    axum::Json(serde_json::json!({
        "object": "list",
        "data": data.iter().map(|(i, s)| serde_json::json!({"index": i, "relevance_score": s})).collect::<Vec<_>>(),
        "model": req["model"],
        "usage": {"total_tokens": total},
    }))
    .into_response()
}

async fn handle(
    State(inner): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    serve(inner, headers, body, Endpoint::Embeddings).await
}

async fn handle_contextual(
    State(inner): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    serve(inner, headers, body, Endpoint::Contextualized).await
}

/// Which embeddings endpoint a request came to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Embeddings,
    Contextualized,
}

async fn serve(
    inner: Shared,
    headers: HeaderMap,
    body: axum::body::Bytes,
    endpoint: Endpoint,
) -> Response {
    let lock = || lock(&inner);
    // Faults first: a real overloaded server fails before reading the request.
    let fault = match fault(&inner).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    if let Some(resp) = unauthorized(&inner, &headers) {
        return resp;
    }
    let cfg = lock().cfg.clone();
    let req: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            bump(&mut lock().stats, "400");
            return detail(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}"));
        }
    };
    let checked = match endpoint {
        Endpoint::Embeddings => check(&cfg, &req),
        Endpoint::Contextualized => check_contextual(&cfg, &req),
    };
    let Request {
        inputs,
        documents,
        input_type,
        dims,
        dtype,
        total,
    } = match checked {
        Ok(r) => r,
        Err(msg) => {
            bump(&mut lock().stats, "400");
            return detail(StatusCode::BAD_REQUEST, msg);
        }
    };

    // The rate window: accept only if both budgets hold over the last 60 seconds.
    {
        let mut g = lock();
        let now = Instant::now();
        if let Some(resp) = over_budget(&mut g, total, now) {
            return resp;
        }
        let s = &mut g.stats;
        s.accepted += 1;
        s.accepted_tokens += total;
        s.first_accept.get_or_insert(now);
        s.last_accept = Some(now);
        *s.input_types.entry(input_type).or_default() += 1;
        for t in &inputs {
            *s.embedded.entry(t.clone()).or_default() += 1;
        }
    }

    let body = match &documents {
        None => answer(&inputs, dims, dtype, total),
        Some(sizes) => answer_contextual(&inputs, sizes, dims, dtype, total),
    };
    let json = serde_json::to_vec(&body).expect("serialisable");

    if matches!(fault, Fault::Drop) {
        bump(&mut lock().stats, "dropped");
        // Headers and half the body, then the connection breaks.
        let half = bytes::Bytes::from(json[..json.len() / 2].to_vec());
        let stream = futures::stream::iter(vec![
            Ok::<_, std::io::Error>(half),
            Err(std::io::Error::other("connection dropped")),
        ]);
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, json.len())
            .body(Body::from_stream(stream))
            .expect("a valid response");
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json))
        .expect("a valid response")
}

/// An embeddings request the fake accepts.
struct Request {
    /// Every input; for the contextualized endpoint, every document's chunks in order.
    inputs: Vec<String>,
    /// The contextualized endpoint's documents: their sizes.
    documents: Option<Vec<usize>>,
    input_type: String,
    dims: u32,
    dtype: Dtype,
    /// Tokens after truncation.
    total: u64,
}

/// Checks an embeddings request as the real API does: the refusal's message, or the request.
fn check(cfg: &FakeConfig, req: &serde_json::Value) -> Result<Request, String> {
    let inputs: Vec<String> = match &req["input"] {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("input must be a string or a list of strings")?,
        _ => return Err("input must be a string or a list of strings".into()),
    };
    let (input_type, dims, dtype) = check_params(req)?;
    if inputs.is_empty() {
        return Err("input must not be empty".into());
    }
    if inputs.len() > cfg.max_inputs {
        return Err(format!(
            "The batch size limit is {}. Your batch size is {}.",
            cfg.max_inputs,
            inputs.len()
        ));
    }
    let truncation = req["truncation"].as_bool().unwrap_or(true);
    let mut total = 0;
    for (i, t) in inputs.iter().enumerate() {
        let n = fake_tokens(t);
        if n > cfg.context_tokens && !truncation {
            return Err(format!(
                "Input {i} has {n} tokens, over the context length {}.",
                cfg.context_tokens
            ));
        }
        total += n.min(cfg.context_tokens);
        if let Some(p) = &cfg.poison
            && t.contains(p.as_str())
        {
            return Err(format!("Input {i} contains invalid content."));
        }
    }
    if total > cfg.max_request_tokens {
        return Err(format!(
            "Request to model 'voyage-code-3' failed. The max allowed tokens per submitted \
             batch is {}. Your batch has {total} tokens after truncation.",
            cfg.max_request_tokens
        ));
    }
    Ok(Request {
        inputs,
        documents: None,
        input_type,
        dims,
        dtype,
        total,
    })
}

/// Checks a contextualized embeddings request as the real API does.
fn check_contextual(cfg: &FakeConfig, req: &serde_json::Value) -> Result<Request, String> {
    const MAX_DOCUMENTS: usize = 1000;
    const MAX_CHUNKS: usize = 16_000;
    let shape = "inputs must be a list of lists of strings";
    let lists = req["inputs"].as_array().ok_or(shape)?;
    let mut documents = Vec::with_capacity(lists.len());
    let mut inputs = Vec::new();
    for list in lists {
        let chunks = list.as_array().ok_or(shape)?;
        if chunks.is_empty() {
            return Err("a document must hold at least one chunk".into());
        }
        for c in chunks {
            inputs.push(c.as_str().ok_or(shape)?.to_owned());
        }
        documents.push(chunks.len());
    }
    let model = req["model"].as_str().unwrap_or_default();
    if model != "voyage-context-3" {
        return Err(format!(
            "Model {model} is not supported for contextualized embeddings."
        ));
    }
    let mut params = req.clone();
    params["model"] = serde_json::json!("voyage-code-3");
    let (input_type, dims, dtype) = check_params(&params)?;
    if documents.is_empty() {
        return Err("inputs must not be empty".into());
    }
    if documents.len() > MAX_DOCUMENTS || inputs.len() > MAX_CHUNKS {
        return Err(format!(
            "At most {MAX_DOCUMENTS} documents and {MAX_CHUNKS} chunks per request; this one has \
             {} documents and {} chunks.",
            documents.len(),
            inputs.len()
        ));
    }
    let mut total = 0;
    let mut at = 0;
    for (d, &n) in documents.iter().enumerate() {
        let doc = &inputs[at..at + n];
        let tokens: u64 = doc.iter().map(|t| fake_tokens(t)).sum();
        if tokens > cfg.context_tokens {
            return Err(format!(
                "Document {d} has {tokens} tokens, over the context length {}.",
                cfg.context_tokens
            ));
        }
        if let Some(p) = &cfg.poison
            && doc.iter().any(|t| t.contains(p.as_str()))
        {
            return Err(format!("Document {d} contains invalid content."));
        }
        total += tokens;
        at += n;
    }
    if total > cfg.max_request_tokens {
        return Err(format!(
            "The max allowed tokens per request is {}. Your request has {total} tokens.",
            cfg.max_request_tokens
        ));
    }
    Ok(Request {
        inputs,
        documents: Some(documents),
        input_type,
        dims,
        dtype,
        total,
    })
}

/// The model, `input_type`, `output_dimension` and `output_dtype` of a request (or of a
/// batch's `request_params`): the input type, dimension and dtype, or the refusal's message.
fn check_params(req: &serde_json::Value) -> Result<(String, u32, Dtype), String> {
    if req["model"] != "voyage-code-3" {
        return Err(format!("Model {} is not supported.", req["model"]));
    }
    let input_type = match &req["input_type"] {
        serde_json::Value::Null => "null".to_owned(),
        serde_json::Value::String(s) if s == "query" || s == "document" => s.clone(),
        other => return Err(format!("input_type {other} is not supported")),
    };
    let dims = req["output_dimension"].as_u64().unwrap_or(1024) as u32;
    if ![256, 512, 1024, 2048].contains(&dims) {
        return Err(format!("output_dimension {dims} is not supported"));
    }
    let dtype = match req["output_dtype"].as_str().unwrap_or("float") {
        "float" => Dtype::Float,
        "int8" => Dtype::Int8,
        "uint8" => Dtype::Uint8,
        "binary" => Dtype::Binary,
        "ubinary" => Dtype::Ubinary,
        other => return Err(format!("output_dtype {other} is not supported")),
    };
    Ok((input_type, dims, dtype))
}

/// A vector as the API writes it: floats, or the bytes as signed or unsigned integers.
fn vector_json(v: Vector, dtype: Dtype) -> serde_json::Value {
    match v {
        Vector::Float(f) => serde_json::json!(f),
        Vector::Bytes(b) => match dtype {
            Dtype::Int8 | Dtype::Binary => {
                serde_json::json!(b.iter().map(|x| *x as i8).collect::<Vec<_>>())
            }
            _ => serde_json::json!(b),
        },
    }
}

/// The contextualized answer: one entry per document (in reverse order), each with its
/// chunks' vectors (in reverse order too: match by index, not by position).
fn answer_contextual(
    inputs: &[String],
    documents: &[usize],
    dims: u32,
    dtype: Dtype,
    total: u64,
) -> serde_json::Value {
    let mut data = Vec::with_capacity(documents.len());
    let mut at = 0;
    for (d, &n) in documents.iter().enumerate() {
        let doc = &inputs[at..at + n];
        let chunks: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let embedding = vector_json(fake_context_vector(doc, i, dims, dtype), dtype);
                serde_json::json!({"object": "embedding", "embedding": embedding, "index": i})
            })
            .rev()
            .collect();
        data.push(serde_json::json!({"object": "list", "data": chunks, "index": d}));
        at += n;
    }
    data.reverse();
    serde_json::json!({
        "object": "list",
        "data": data,
        "model": "voyage-context-3",
        "usage": {"total_tokens": total},
    })
}

/// The embeddings answer for `inputs`: their vectors, in reverse order (match by index, not by
/// position).
fn answer(inputs: &[String], dims: u32, dtype: Dtype, total: u64) -> serde_json::Value {
    let data: Vec<serde_json::Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let embedding = vector_json(fake_vector(t, dims, dtype), dtype);
            serde_json::json!({"object": "embedding", "embedding": embedding, "index": i})
        })
        .rev()
        .collect();
    serde_json::json!({
        "object": "list",
        "data": data,
        "model": "voyage-code-3",
        "usage": {"total_tokens": total},
    })
}

/// The `file` part and the `purpose` field of a `multipart/form-data` body, or why it is not
/// one.
fn multipart_file(headers: &HeaderMap, body: &[u8]) -> Result<(bytes::Bytes, String), String> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boundary = ct
        .strip_prefix("multipart/form-data; boundary=")
        .ok_or_else(|| format!("expected a multipart/form-data body, not {ct:?}"))?;
    let delimiter = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let mut file = None;
    let mut purpose = String::new();
    let mut at = find(body, delimiter.as_bytes(), 0).ok_or("no multipart boundary")?;
    loop {
        at += delimiter.len();
        if body[at..].starts_with(b"--") {
            break;
        }
        let head_end = find(body, b"\r\n\r\n", at).ok_or("a part without headers")?;
        let head = String::from_utf8_lossy(&body[at..head_end]).into_owned();
        let next = find(body, format!("\r\n{delimiter}").as_bytes(), head_end)
            .ok_or("a part without an end")?;
        let content = &body[head_end + 4..next];
        if head.contains("name=\"file\"") {
            file = Some(bytes::Bytes::copy_from_slice(content));
        } else if head.contains("name=\"purpose\"") {
            purpose = String::from_utf8_lossy(content).into_owned();
        }
        at = next + 2;
    }
    Ok((file.ok_or("no file part")?, purpose))
}

/// Faults, then the key check: the answer to give instead, if any.
async fn refuse(inner: &Shared, headers: &HeaderMap) -> Option<Response> {
    if let Err(resp) = fault(inner).await {
        return Some(resp);
    }
    unauthorized(inner, headers)
}

/// `POST /v1/files`.
async fn upload(
    State(inner): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(resp) = refuse(&inner, &headers).await {
        return resp;
    }
    let (content, purpose) = match multipart_file(&headers, &body) {
        Ok(f) => f,
        Err(msg) => return detail(StatusCode::BAD_REQUEST, msg),
    };
    if purpose != "batch" {
        return detail(
            StatusCode::BAD_REQUEST,
            format!("purpose {purpose:?} is not supported"),
        );
    }
    let mut g = lock(&inner);
    g.ids += 1;
    let id = format!("file-{}", g.ids);
    let size = content.len();
    g.files.insert(id.clone(), content);
    g.stats.files_uploaded += 1;
    axum::Json(serde_json::json!({
        "id": id, "object": "file", "bytes": size, "filename": "inputs.jsonl", "purpose": "batch",
    }))
    .into_response()
}

/// `GET /v1/files/{id}/content`.
async fn file_content(
    State(inner): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(resp) = refuse(&inner, &headers).await {
        return resp;
    }
    match lock(&inner).files.get(&id) {
        Some(b) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/jsonl")
            .body(Body::from(b.clone()))
            .expect("a valid response"),
        None => detail(StatusCode::NOT_FOUND, format!("file {id} not found")),
    }
}

fn batch_json(id: &str, b: &FakeBatch) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "object": "batch",
        "endpoint": "/v1/embeddings",
        "input_file_id": b.input_file_id,
        "completion_window": "12h",
        "status": b.status,
        "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id,
        "errors": b.errors,
    })
}

/// `POST /v1/batches`.
async fn create_batch(
    State(inner): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(resp) = refuse(&inner, &headers).await {
        return resp;
    }
    let Ok(req) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return detail(StatusCode::BAD_REQUEST, "invalid JSON body");
    };
    if req["endpoint"] != "/v1/embeddings" || req["completion_window"] != "12h" {
        return detail(
            StatusCode::BAD_REQUEST,
            format!(
                "endpoint {} with completion_window {} is not supported",
                req["endpoint"], req["completion_window"]
            ),
        );
    }
    if let Err(msg) = check_params(&req["request_params"]) {
        return detail(StatusCode::BAD_REQUEST, msg);
    }
    let mut g = lock(&inner);
    let file = req["input_file_id"].as_str().unwrap_or_default().to_owned();
    let Some(lines) = g
        .files
        .get(&file)
        .map(|f| f.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count())
    else {
        return detail(
            StatusCode::BAD_REQUEST,
            format!("input file {file:?} not found"),
        );
    };
    if lines > g.cfg.batch_max_inputs {
        return detail(
            StatusCode::BAD_REQUEST,
            format!(
                "A batch holds at most {} inputs; this file has {lines}.",
                g.cfg.batch_max_inputs
            ),
        );
    }
    g.ids += 1;
    let id = format!("batch-{}", g.ids);
    let b = FakeBatch {
        input_file_id: file,
        params: req["request_params"].clone(),
        polls: 0,
        status: "validating".into(),
        output_file_id: None,
        error_file_id: None,
        errors: None,
    };
    let json = batch_json(&id, &b);
    g.batches.insert(id, b);
    g.stats.batches_created += 1;
    axum::Json(json).into_response()
}

/// `GET /v1/batches/{id}`: one step further along at each poll.
async fn poll_batch(
    State(inner): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(resp) = refuse(&inner, &headers).await {
        return resp;
    }
    let mut g = lock(&inner);
    g.stats.batch_polls += 1;
    let polls = g.cfg.batch_polls;
    let Some(b) = g.batches.get_mut(&id) else {
        return detail(StatusCode::NOT_FOUND, format!("batch {id} not found"));
    };
    if b.status == "validating" || b.status == "in_progress" {
        b.polls += 1;
        if b.polls > 2 * polls {
            finish(&mut g, &id);
        } else if b.polls > polls {
            b.status = "in_progress".into();
        }
    }
    let b = &g.batches[&id];
    axum::Json(batch_json(&id, b)).into_response()
}

/// Ends batch `id`: as queued by [`FakeVoyage::end_next_batch`], or completed, each line
/// embedded as a request of its own.
fn finish(g: &mut Inner, id: &str) {
    if let Some(end) = g.batch_ends.pop_front() {
        let b = g.batches.get_mut(id).expect("a known batch");
        b.errors = Some(
            serde_json::json!({"data": [{"code": end, "message": format!("the batch {end}")}]}),
        );
        b.status = end;
        return;
    }
    let b = &g.batches[id];
    let params = b.params.clone();
    let input = g.files.get(&b.input_file_id).cloned().unwrap_or_default();
    let (mut output, mut errors) = (Vec::new(), Vec::new());
    for raw in input.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
        let line: serde_json::Value = serde_json::from_slice(raw).unwrap_or_default();
        let mut req = params.clone();
        if let (Some(r), Some(body)) = (req.as_object_mut(), line["body"].as_object()) {
            r.extend(body.clone());
        }
        let custom_id = line["custom_id"].clone();
        let out = match check(&g.cfg, &req) {
            Ok(r) => {
                g.stats.accepted_tokens += r.total;
                for t in &r.inputs {
                    *g.stats.embedded.entry(t.clone()).or_default() += 1;
                }
                serde_json::json!({"custom_id": custom_id, "response": {"status_code": 200,
                    "body": answer(&r.inputs, r.dims, r.dtype, r.total)}, "error": null})
            }
            Err(msg) => {
                errors.push(serde_json::json!({"custom_id": custom_id, "response": {
                    "status_code": 400, "body": {"detail": msg}}, "error": null}));
                continue;
            }
        };
        output.push(out);
    }
    // The output's order is not the input's.
    output.reverse();
    let mut file = |lines: &[serde_json::Value]| {
        if lines.is_empty() {
            return None;
        }
        g.ids += 1;
        let fid = format!("file-{}", g.ids);
        let mut text = String::new();
        for l in lines {
            text.push_str(&l.to_string());
            text.push('\n');
        }
        g.files.insert(fid.clone(), text.into());
        Some(fid)
    };
    let (out_id, err_id) = (file(&output), file(&errors));
    let b = g.batches.get_mut(id).expect("a known batch");
    b.output_file_id = out_id;
    b.error_file_id = err_id;
    b.status = "completed".into();
}

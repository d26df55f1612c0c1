//! The Voyage embeddings client: reqwest, two governor limiters (requests and tokens per
//! minute), bounded concurrency, retries with exponential backoff and jitter.
//!
//! Pacing. Voyage states its limits per minute. Each limiter is a GCRA bucket whose burst is
//! one second's worth (at least one request, at least the largest input) and whose rate is the
//! limit minus that burst, so no 60-second window ever holds more than the limit — the client
//! waits instead of tripping 429s. A request's token cap is the smaller of the provider's
//! per-request cap and that burst, so requests stay small enough to pace smoothly.
//!
//! Counting. Batches are cut with the estimate ([`estimate_tokens`]), which overcounts, so a
//! request never exceeds the per-request cap. The token limiter is charged with the estimate
//! scaled by the ratio the provider has actually billed so far (`usage.total_tokens` over the
//! estimate, clamped to [0.25, 1]), so an overcounting estimate does not leave the budget idle.
//!
//! Contextualized chunk embeddings. A `voyage-context-*` model is sent to
//! `/v1/contextualizedembeddings`: each document's chunks as one inner list, in order, so that
//! every chunk's vector is encoded with its file around it ([`Embedder::embed_documents`]);
//! a query, or an input given alone, is a list of one. Same limiters, retries and decoding
//! as the embeddings endpoint; a different vector space.
//!
//! Retries and the request limiter are the shared client's ([`crate::client`]); a retried
//! request is not charged to the token limiter again (the provider did not count the rejected
//! one). A 400 is returned as [`EmbedError::BadRequest`] for
//! [`crate::embedder::embed_isolating`] to split; 401/403 stop everything with a message that
//! says what to fix.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use governor::{DefaultDirectRateLimiter, RateLimiter};
use serde::Deserialize;
use trawl_core::secret::Secret;

use crate::client::{ClientConfig, VoyageClient, VoyageError, quota};

use crate::embedder::{
    Counters, Dtype, EmbedError, Embedded, Embedder, InputType, Limits, Space, Vector,
    estimate_tokens,
};

/// Everything the client needs; built from `[embed]` in the configuration.
#[derive(Clone, Debug)]
pub struct VoyageConfig {
    /// API root, e.g. `https://api.voyageai.com/v1`.
    pub base_url: String,
    /// Never printed (`Debug` shows `***`).
    pub api_key: Secret,
    pub model: String,
    pub dims: u32,
    pub dtype: Dtype,
    pub rpm: u32,
    pub tpm: u64,
    pub max_batch_inputs: usize,
    pub max_batch_tokens: u64,
    pub max_input_tokens: u64,
    pub concurrency: usize,
    pub max_retries: u32,
    pub timeout: Duration,
}

impl VoyageConfig {
    /// Voyage's defaults for voyage-code-3 on the basic tier, against `base_url`.
    pub fn new(base_url: &str, api_key: &str) -> Self {
        Self {
            base_url: base_url.to_owned(),
            api_key: Secret::new(api_key),
            model: "voyage-code-3".into(),
            dims: 1024,
            dtype: Dtype::Float,
            rpm: 2000,
            tpm: 3_000_000,
            max_batch_inputs: 1000,
            max_batch_tokens: 120_000,
            max_input_tokens: 32_000,
            concurrency: 4,
            max_retries: 8,
            timeout: Duration::from_secs(60),
        }
    }
}

/// See the module documentation.
pub struct VoyageEmbedder {
    cfg: VoyageConfig,
    space: Space,
    limits: Limits,
    client: VoyageClient,
    tokens: DefaultDirectRateLimiter,
    in_flight: tokio::sync::Semaphore,
    estimated: AtomicU64,
    billed: AtomicU64,
}

impl From<VoyageError> for EmbedError {
    fn from(e: VoyageError) -> Self {
        match e {
            VoyageError::Refused {
                status: 401,
                detail,
            } => EmbedError::Auth(format!(
                "Voyage rejected the API key (401: {detail}): check VOYAGE_API_KEY"
            )),
            VoyageError::Refused {
                status: 403,
                detail,
            } => EmbedError::Auth(format!(
                "Voyage refused access (403: {detail}): the key's account or this machine's IP \
                 address is not allowed"
            )),
            VoyageError::Refused {
                status: 400 | 413 | 422,
                detail,
            } => EmbedError::BadRequest(detail),
            VoyageError::Refused { status, detail } => {
                EmbedError::BadRequest(format!("unexpected HTTP {status}: {detail}"))
            }
            VoyageError::Exhausted { attempts, last } => EmbedError::Exhausted { attempts, last },
            VoyageError::Config(m) => EmbedError::Config(m),
        }
    }
}

impl VoyageEmbedder {
    pub fn new(cfg: VoyageConfig) -> Result<Self, EmbedError> {
        if cfg.api_key.expose().trim().is_empty() {
            return Err(EmbedError::Auth(
                "no Voyage API key: set VOYAGE_API_KEY, or use --embedder local".into(),
            ));
        }
        if !matches!(cfg.dims, 256 | 512 | 1024 | 2048)
            && matches!(cfg.model.as_str(), "voyage-code-3" | "voyage-context-3")
        {
            return Err(EmbedError::Config(format!(
                "{} offers 256, 512, 1024 or 2048 dimensions, not {}",
                cfg.model, cfg.dims
            )));
        }
        if cfg.rpm == 0 || cfg.tpm == 0 || cfg.max_batch_inputs == 0 || cfg.max_batch_tokens == 0 {
            return Err(EmbedError::Config(
                "rpm, tpm, max_batch_inputs and max_batch_tokens must be positive".into(),
            ));
        }
        let max_input = cfg
            .max_input_tokens
            .min(cfg.max_batch_tokens)
            .min(cfg.tpm)
            .max(16);
        let token_burst = (cfg.tpm / 60).max(max_input).min(cfg.tpm);
        let limits = Limits {
            max_inputs: cfg.max_batch_inputs,
            max_tokens: cfg.max_batch_tokens.min(token_burst),
            max_input_tokens: max_input,
        };
        let client = VoyageClient::new(ClientConfig {
            rpm: cfg.rpm,
            max_retries: cfg.max_retries,
            timeout: cfg.timeout,
            ..ClientConfig::new(&cfg.base_url, cfg.api_key.clone())
        })?;
        Ok(Self {
            space: Space {
                model: cfg.model.clone(),
                dims: cfg.dims,
                dtype: cfg.dtype,
            },
            limits,
            client,
            tokens: RateLimiter::direct(quota(cfg.tpm, token_burst)),
            in_flight: tokio::sync::Semaphore::new(cfg.concurrency.max(1)),
            estimated: AtomicU64::new(0),
            billed: AtomicU64::new(0),
            cfg,
        })
    }

    /// What the limiter is charged for `estimate` tokens: the estimate scaled by what the
    /// provider has billed per estimated token so far.
    fn charge(&self, estimate: u64) -> u64 {
        let est = self.estimated.load(Ordering::Relaxed);
        let billed = self.billed.load(Ordering::Relaxed);
        if est < 10_000 {
            return estimate;
        }
        let ratio = (billed as f64 / est as f64).clamp(0.25, 1.0);
        ((estimate as f64 * ratio).ceil() as u64).max(1)
    }

    /// Whether the model embeds chunks in their document's context (`voyage-context-*`).
    fn is_contextual(&self) -> bool {
        self.cfg.model.starts_with("voyage-context")
    }

    /// Sends `body` (of ~`estimate` tokens) to `endpoint` under the limiters; the answer's
    /// bytes.
    async fn send(
        &self,
        endpoint: &str,
        body: &serde_json::Value,
        estimate: u64,
    ) -> Result<bytes::Bytes, EmbedError> {
        let _permit = self.in_flight.acquire().await.expect("never closed");
        let charge = self.charge(estimate);
        if let Ok(n) = NonZeroU32::try_from(charge.min(u64::from(u32::MAX)) as u32)
            && self.tokens.until_n_ready(n).await.is_err()
        {
            // Larger than the burst: only possible for a caller that ignored `limits()`.
            return Err(EmbedError::BadRequest(format!(
                "a request of ~{estimate} tokens exceeds the per-request limit of {}",
                self.limits.max_tokens
            )));
        }
        Ok(self.client.post(endpoint, body).await?)
    }

    /// Counts what the provider billed against the estimate.
    fn billed(&self, estimate: u64, billed: u64) {
        self.estimated.fetch_add(estimate, Ordering::Relaxed);
        self.billed.fetch_add(billed, Ordering::Relaxed);
    }

    /// `inputs` as documents of `documents[i]` chunks each, through the contextualized
    /// chunk embeddings endpoint.
    async fn contextualized(
        &self,
        inputs: &[String],
        documents: &[usize],
        kind: InputType,
    ) -> Result<Embedded, EmbedError> {
        let mut lists: Vec<&[String]> = Vec::with_capacity(documents.len());
        let mut at = 0;
        for &n in documents {
            lists.push(&inputs[at..at + n]);
            at += n;
        }
        if at != inputs.len() {
            return Err(EmbedError::BadRequest(format!(
                "documents of {at} chunks for {} inputs",
                inputs.len()
            )));
        }
        let estimate: u64 = inputs.iter().map(|t| estimate_tokens(t)).sum();
        let body = serde_json::json!({
            "inputs": lists,
            "model": self.cfg.model,
            "input_type": kind.as_str(),
            "output_dimension": self.cfg.dims,
            "output_dtype": self.cfg.dtype.as_str(),
        });
        let bytes = self
            .send("contextualizedembeddings", &body, estimate)
            .await?;
        let r: ContextualResponse = serde_json::from_slice(&bytes).map_err(|e| malformed(&e))?;
        let (vectors, billed) = r
            .decode(&self.space, documents)
            .map_err(|e| malformed(&e))?;
        self.billed(estimate, billed);
        Ok(Embedded {
            vectors,
            tokens: billed,
        })
    }
}

/// A malformed answer: retrying the same request will not mend it.
fn malformed(why: &dyn std::fmt::Display) -> EmbedError {
    EmbedError::Exhausted {
        attempts: 1,
        last: format!("malformed response from the provider: {why}"),
    }
}

/// The body of a contextualized embeddings answer: one entry per document (`index`: the
/// inner list's position), each with its chunks' vectors (their own `index`).
#[derive(Debug, Deserialize)]
struct ContextualResponse {
    data: Vec<ContextualDocument>,
    usage: Usage,
}

#[derive(Debug, Deserialize)]
struct ContextualDocument {
    index: usize,
    data: Vec<EmbeddingItem>,
}

impl ContextualResponse {
    /// One vector per chunk of `documents` (their sizes), in input order; and the tokens
    /// billed.
    fn decode(self, space: &Space, documents: &[usize]) -> Result<(Vec<Vector>, u64), String> {
        let mut per: Vec<Option<Vec<Vector>>> = vec![None; documents.len()];
        for doc in self.data {
            let n = *documents
                .get(doc.index)
                .ok_or_else(|| format!("document index {} out of range", doc.index))?;
            let vectors = decode_items(doc.data, space, n)?;
            match per.get_mut(doc.index) {
                Some(slot @ None) => *slot = Some(vectors),
                _ => return Err(format!("document index {} repeated", doc.index)),
            }
        }
        let vectors = per
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "some documents have no vectors".to_owned())?
            .into_iter()
            .flatten()
            .collect();
        Ok((vectors, self.usage.total_tokens))
    }
}

/// The body of an embeddings answer: the synchronous endpoint's, and each line's of a batch.
#[derive(Debug, Deserialize)]
pub(crate) struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
    usage: Usage,
}

#[derive(Debug, Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f64>,
    index: usize,
}

#[derive(Debug, Deserialize)]
struct Usage {
    total_tokens: u64,
}

impl EmbeddingsResponse {
    /// One vector per input of `n`, in input order (matched by `index`), in `space`; and the
    /// tokens billed. The error says what is wrong with the answer.
    pub(crate) fn decode(self, space: &Space, n: usize) -> Result<(Vec<Vector>, u64), String> {
        Ok((decode_items(self.data, space, n)?, self.usage.total_tokens))
    }
}

/// One vector per input of `n`, in input order (matched by `index`), in `space`; the error
/// says what is wrong with the answer.
fn decode_items(items: Vec<EmbeddingItem>, space: &Space, n: usize) -> Result<Vec<Vector>, String> {
    let want = match space.dtype {
        Dtype::Binary | Dtype::Ubinary => space.dims.div_ceil(8) as usize,
        _ => space.dims as usize,
    };
    let mut out: Vec<Option<Vector>> = vec![None; n];
    for item in items {
        if item.embedding.len() != want {
            return Err(format!(
                "a vector of {} values where {want} were asked for",
                item.embedding.len()
            ));
        }
        let v = match space.dtype {
            Dtype::Float => Vector::Float(item.embedding.iter().map(|x| *x as f32).collect()),
            Dtype::Int8 | Dtype::Binary => {
                Vector::Bytes(item.embedding.iter().map(|x| (*x as i8) as u8).collect())
            }
            Dtype::Uint8 | Dtype::Ubinary => {
                Vector::Bytes(item.embedding.iter().map(|x| *x as u8).collect())
            }
        };
        match out.get_mut(item.index) {
            Some(slot @ None) => *slot = Some(v),
            _ => return Err(format!("index {} out of range or repeated", item.index)),
        }
    }
    out.into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "some inputs have no vector".to_owned())
}

#[async_trait]
impl Embedder for VoyageEmbedder {
    fn space(&self) -> &Space {
        &self.space
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn counters(&self) -> Counters {
        Counters {
            http_requests: self.client.http_requests(),
            retries: self.client.retries(),
            truncated: 0,
        }
    }

    fn contextual(&self) -> bool {
        self.is_contextual()
    }

    fn max_document_tokens(&self) -> u64 {
        if self.is_contextual() {
            self.cfg.max_input_tokens
        } else {
            u64::MAX
        }
    }

    async fn embed(&self, inputs: &[String], kind: InputType) -> Result<Embedded, EmbedError> {
        if inputs.is_empty() {
            return Ok(Embedded {
                vectors: Vec::new(),
                tokens: 0,
            });
        }
        if self.is_contextual() {
            // Each input a document of its own (a query is a list of one).
            return self
                .contextualized(inputs, &vec![1; inputs.len()], kind)
                .await;
        }
        let estimate: u64 = inputs.iter().map(|t| estimate_tokens(t)).sum();
        let body = serde_json::json!({
            "input": inputs,
            "model": self.cfg.model,
            "input_type": kind.as_str(),
            "truncation": true,
            "output_dimension": self.cfg.dims,
            "output_dtype": self.cfg.dtype.as_str(),
        });
        let bytes = self.send("embeddings", &body, estimate).await?;
        let r: EmbeddingsResponse = serde_json::from_slice(&bytes).map_err(|e| malformed(&e))?;
        let (vectors, billed) = r
            .decode(&self.space, inputs.len())
            .map_err(|e| malformed(&e))?;
        self.billed(estimate, billed);
        Ok(Embedded {
            vectors,
            tokens: billed,
        })
    }

    async fn embed_documents(
        &self,
        inputs: &[String],
        documents: &[usize],
        kind: InputType,
    ) -> Result<Embedded, EmbedError> {
        if self.is_contextual() && !inputs.is_empty() {
            self.contextualized(inputs, documents, kind).await
        } else {
            self.embed(inputs, kind).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedder::{embed_isolating, suite};
    use crate::fake::{FakeConfig, FakeVoyage, fake_vector};

    fn client(fake: &FakeVoyage, f: impl FnOnce(&mut VoyageConfig)) -> VoyageEmbedder {
        let mut cfg = VoyageConfig::new(&fake.base_url(), "test-key");
        cfg.dims = 256;
        cfg.timeout = Duration::from_secs(2);
        f(&mut cfg);
        VoyageEmbedder::new(cfg).unwrap()
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("def handler_{i}(request):\n    return respond({i})\n"))
            .collect()
    }

    #[tokio::test]
    async fn passes_the_embedder_suite_and_sends_the_documented_request() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        let c = client(&fake, |_| {});
        suite::run(&c).await;
        let s = fake.stats();
        assert!(s.input_types["document"] > 0 && s.input_types["query"] == 1);
        assert_eq!(s.outcomes.get("400"), None, "{:?}", s.outcomes);
        assert_eq!(c.space().key(), "voyage-code-3.256.float");
    }

    #[tokio::test]
    async fn every_vector_belongs_to_its_text_through_429s_5xx_timeouts_and_drops() {
        let fake = FakeVoyage::start(FakeConfig {
            p429: 0.15,
            p5xx: 0.1,
            p_slow: 0.05,
            slow: Duration::from_millis(1500),
            p_drop: 0.05,
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        let c = client(&fake, |c| {
            c.timeout = Duration::from_millis(700);
            c.max_retries = 30;
        });
        let inputs = texts(120);
        for batch in inputs.chunks(4) {
            let out = c.embed(batch, InputType::Document).await.unwrap();
            for (t, v) in batch.iter().zip(&out.vectors) {
                assert_eq!(*v, fake_vector(t, 256, Dtype::Float), "the vector of {t:?}");
            }
        }
        let retries = c.counters().retries;
        for cause in ["429", "5xx", "timeout", "connection"] {
            assert!(
                retries.get(cause).copied().unwrap_or(0) > 0,
                "{cause}: {retries:?}"
            );
        }
        let s = fake.stats();
        assert_eq!(s.embedded.len(), inputs.len());
    }

    #[tokio::test]
    async fn quantised_dtypes_decode_to_the_providers_bytes() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        for dtype in [Dtype::Int8, Dtype::Uint8, Dtype::Binary, Dtype::Ubinary] {
            let c = client(&fake, |c| c.dtype = dtype);
            let inputs = texts(3);
            let out = c.embed(&inputs, InputType::Document).await.unwrap();
            for (t, v) in inputs.iter().zip(&out.vectors) {
                assert_eq!(*v, fake_vector(t, 256, dtype), "{dtype}");
                let Vector::Bytes(b) = v else { panic!() };
                assert_eq!(b.len(), dtype.bytes(256));
            }
        }
    }

    #[tokio::test]
    async fn a_bad_key_stops_with_a_message_that_names_the_fix() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        let mut cfg = VoyageConfig::new(&fake.base_url(), "wrong");
        cfg.dims = 256;
        let c = VoyageEmbedder::new(cfg).unwrap();
        let err = c.embed(&texts(1), InputType::Document).await.unwrap_err();
        assert!(matches!(err, EmbedError::Auth(_)), "{err}");
        assert!(err.to_string().contains("VOYAGE_API_KEY"), "{err}");
        assert_eq!(fake.stats().requests, 1, "no retries on 401");
        let err = VoyageEmbedder::new(VoyageConfig::new(&fake.base_url(), ""))
            .err()
            .unwrap();
        assert!(err.to_string().contains("VOYAGE_API_KEY"), "{err}");
        let mut cfg = VoyageConfig::new(&fake.base_url(), "k");
        cfg.dims = 300;
        assert!(VoyageEmbedder::new(cfg).is_err());
    }

    #[test]
    fn debug_of_the_config_hides_the_key() {
        let cfg = VoyageConfig::new("https://api.voyageai.com/v1", "pa-secret-key-0123456789");
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("pa-secret-key"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }

    #[tokio::test]
    async fn over_limit_requests_are_refused_and_a_bad_input_is_isolated() {
        let fake = FakeVoyage::start(FakeConfig {
            poison: Some("POISON".into()),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        // A client configured past the provider's limits gets the provider's 400s.
        let c = client(&fake, |c| {
            c.max_batch_inputs = 5000;
            c.max_batch_tokens = 1_000_000;
            c.tpm = 100_000_000;
        });
        let err = c
            .embed(&texts(1001), InputType::Document)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("batch size limit is 1000"),
            "{err}"
        );
        let huge = vec!["x".repeat(100_000); 6];
        let err = c.embed(&huge, InputType::Document).await.unwrap_err();
        assert!(err.to_string().contains("max allowed tokens"), "{err}");

        // Every input refused one by one: the request is wrong, nothing is dead-lettered.
        let all_bad = vec![
            "POISON a".to_owned(),
            "POISON b".to_owned(),
            "POISON c".to_owned(),
        ];
        let err = embed_isolating(&client(&fake, |_| {}), &all_bad, InputType::Document)
            .await
            .unwrap_err();
        assert!(matches!(err, EmbedError::Rejected(_)), "{err}");
        assert!(err.to_string().contains("embed.model"), "{err}");

        // One poisoned input among 37: exactly it fails, the rest are embedded.
        let c = client(&fake, |_| {});
        let mut inputs = texts(37);
        inputs[23] = "POISON in here".into();
        let (out, _) = embed_isolating(&c, &inputs, InputType::Document)
            .await
            .unwrap();
        for (i, o) in out.iter().enumerate() {
            assert_eq!(o.is_err(), i == 23, "input {i}: {o:?}");
        }
        assert!(out[23].as_ref().unwrap_err().contains("invalid content"));
    }

    #[tokio::test]
    async fn the_client_paces_itself_inside_the_window_and_honours_retry_after() {
        // A 2-second window standing in for Voyage's minute: 4,000 tokens and 20 requests.
        let fake = FakeVoyage::start(FakeConfig {
            tpm: 4000,
            rpm: 20,
            window: Duration::from_secs(2),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        // The client believes in a 30× larger budget, so the fake's 429s (with Retry-After)
        // are what keep it inside: every request still succeeds.
        let c = client(&fake, |c| {
            c.tpm = 120_000 * 30;
            c.rpm = 600 * 30;
        });
        // 40 inputs of ~200 tokens: twice the window's budget.
        let inputs: Vec<String> = texts(40)
            .into_iter()
            .map(|t| t + &"# padding\n".repeat(80))
            .collect();
        for batch in inputs.chunks(4) {
            c.embed(batch, InputType::Document).await.unwrap();
        }
        let s = fake.stats();
        assert!(s.outcomes.get("429-budget").copied().unwrap_or(0) > 0);
        assert!(c.counters().retries["429"] > 0);
        assert_eq!(s.embedded.len(), 40);
        assert!(s.peak_window_tokens <= 4000 && s.peak_window_requests <= 20);
    }

    #[tokio::test]
    async fn a_contextual_model_sends_documents_whole_and_each_vector_sees_its_document() {
        use crate::embedder::embed_isolating_documents;
        use crate::fake::fake_context_vector;
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        let c = client(&fake, |c| c.model = "voyage-context-3".into());
        assert!(c.contextual());
        assert_eq!(c.space().key(), "voyage-context-3.256.float");
        // A query (or an input alone) is a document of one: the suite's contracts hold.
        suite::run(&c).await;
        let inputs = texts(5);
        let out = c
            .embed_documents(&inputs, &[3, 2], InputType::Document)
            .await
            .unwrap();
        let (a, b) = (&inputs[..3], &inputs[3..]);
        let want: Vec<Vector> = (0..3)
            .map(|i| fake_context_vector(a, i, 256, Dtype::Float))
            .chain((0..2).map(|i| fake_context_vector(b, i, 256, Dtype::Float)))
            .collect();
        assert_eq!(
            out.vectors, want,
            "each chunk with its own document around it"
        );
        assert_ne!(
            out.vectors[0],
            fake_vector(&inputs[0], 256, Dtype::Float),
            "the context changes the vector"
        );
        // A poisoned chunk is isolated: its document is split, the rest still embedded.
        fake.configure(|f| f.poison = Some("respond(1)".into()));
        let (outcomes, _) = embed_isolating_documents(&c, &inputs, &[3, 2], InputType::Document)
            .await
            .unwrap();
        for (i, o) in outcomes.iter().enumerate() {
            assert_eq!(o.is_err(), i == 1, "input {i}: {o:?}");
        }
        assert_eq!(
            outcomes[3].as_ref().unwrap(),
            &want[3],
            "the other document is whole"
        );
        // The embeddings endpoint is not the contextual model's; nor are odd dimensions.
        let wrong = VoyageEmbedder::new(VoyageConfig {
            dims: 300,
            model: "voyage-context-3".into(),
            ..VoyageConfig::new(&fake.base_url(), "test-key")
        });
        assert!(matches!(wrong, Err(EmbedError::Config(m)) if m.contains("voyage-context-3")));
    }

    #[tokio::test]
    async fn the_fake_refuses_contextual_requests_the_real_api_refuses() {
        let fake = FakeVoyage::start(FakeConfig {
            context_tokens: 100,
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        let c = client(&fake, |c| c.model = "voyage-context-3".into());
        // 3 chunks of ~60 fake tokens: a document of 180, over the 100-token context.
        let long: Vec<String> = (0..3).map(|i| format!("{i}{}", "x".repeat(240))).collect();
        let err = c
            .embed_documents(&long, &[3], InputType::Document)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EmbedError::BadRequest(m) if m.contains("context length")),
            "{err}"
        );
        // voyage-code-3 at the contextual endpoint is refused too.
        let body = serde_json::json!({"inputs": [["a"]], "model": "voyage-code-3"});
        let bytes = c.client.post("contextualizedembeddings", &body).await;
        assert!(bytes.is_err());
    }
}

//! The Voyage reranker (`POST /v1/rerank`): reorders the fused top N by relevance to the
//! query, over the shared Voyage client ([`trawl_embed::client`]: request limiter, retries of
//! 429, 5xx and timeouts with jittered backoff and `Retry-After`). Any failure leaves the
//! fused order (with a note), since a search must not fail because an optional stage did;
//! retries are few and short for the same reason.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use trawl_core::secret::Secret;
use trawl_embed::client::{ClientConfig, VoyageClient, VoyageError};

use crate::QueryError;

/// A configured reranker.
#[derive(Clone, Debug)]
pub struct Reranker {
    client: Arc<VoyageClient>,
    pub model: String,
    pub top: usize,
}

/// Documents one request may hold.
const MAX_DOCUMENTS: usize = 1000;
/// Query tokens × documents + document tokens, per request.
const MAX_TOTAL_TOKENS: u64 = 600_000;
/// Longest document sent, in estimated tokens (longer ones are cut: the start of a chunk
/// carries its signature and docstring).
const MAX_DOCUMENT_TOKENS: u64 = 4_000;

impl Reranker {
    /// A reranker with the client settings of [`Reranker::client_config`].
    pub fn new(base_url: &str, api_key: &str, model: &str, top: usize) -> Result<Self, QueryError> {
        Self::with_client(
            Self::client_config(base_url, Secret::new(api_key)),
            model,
            top,
        )
    }

    /// Voyage's basic-tier request limit for the rerank models (2,000 a minute); 3 retries from
    /// 0.25 s, `Retry-After` obeyed up to 2 s, 20 s per attempt: a search waits seconds, not
    /// minutes, before it answers in fused order.
    pub fn client_config(base_url: &str, api_key: Secret) -> ClientConfig {
        ClientConfig {
            rpm: 2000,
            max_retries: 3,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(2),
            max_retry_after: Duration::from_secs(2),
            timeout: Duration::from_secs(20),
            ..ClientConfig::new(base_url, api_key)
        }
    }

    /// A reranker over a client configured by `cfg`.
    pub fn with_client(cfg: ClientConfig, model: &str, top: usize) -> Result<Self, QueryError> {
        if cfg.api_key.expose().is_empty() {
            return Err(QueryError::BadRequest(format!(
                "query.rerank_model is {model:?} but {} is not set: set it, or empty query.rerank_model",
                trawl_embed::VOYAGE_API_KEY
            )));
        }
        let client =
            VoyageClient::new(cfg).map_err(|e| QueryError::Index(format!("reranker: {e}")))?;
        Ok(Self {
            client: Arc::new(client),
            model: model.to_owned(),
            top: top.clamp(1, MAX_DOCUMENTS),
        })
    }

    /// The documents' indexes, most relevant first, with their scores.
    pub async fn rerank(
        &self,
        query: &str,
        documents: &[String],
    ) -> Result<Vec<(usize, f64)>, QueryError> {
        use trawl_embed::embedder::{estimate_tokens, fit};
        let qt = estimate_tokens(query);
        let mut docs: Vec<String> = Vec::with_capacity(documents.len());
        let mut total = 0;
        for d in documents.iter().take(self.top) {
            let mut d = d.clone();
            fit(&mut d, MAX_DOCUMENT_TOKENS, estimate_tokens);
            let t = qt + estimate_tokens(&d);
            if total + t > MAX_TOTAL_TOKENS {
                break;
            }
            total += t;
            docs.push(d);
        }
        let body = serde_json::json!({
            "query": query,
            "documents": docs,
            "model": self.model,
            "top_k": docs.len(),
            "truncation": true,
        });
        let answer = match self.client.post("rerank", &body).await {
            Ok(a) => a,
            Err(VoyageError::Refused { status, detail }) => {
                // The provider's message may echo the request or name the account: the log
                // has it, the error (which can reach a client) only the status.
                let detail: String = detail.chars().take(2000).collect();
                tracing::warn!(status, body = %detail, "the reranker refused the request");
                return Err(QueryError::Index(refused(status)));
            }
            Err(e) => return Err(QueryError::Index(format!("reranker: {e}"))),
        };
        #[derive(Deserialize)]
        struct Item {
            index: usize,
            relevance_score: f64,
        }
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            data: Vec<Item>,
        }
        let a: Answer = serde_json::from_slice(&answer)
            .map_err(|e| QueryError::Index(format!("reranker answer: {e}")))?;
        Ok(a.data
            .into_iter()
            .map(|d| (d.index, d.relevance_score))
            .filter(|(i, _)| *i < docs.len())
            .collect())
    }

    /// HTTP requests made, retries included.
    pub fn http_requests(&self) -> u64 {
        self.client.http_requests()
    }
}

/// What a final refusal says, without the provider's words.
fn refused(status: u16) -> String {
    let what = match status {
        401 => "Voyage rejected the API key: check VOYAGE_API_KEY",
        403 => {
            "Voyage refused access: the key's account or this machine's IP address is not allowed"
        }
        400 | 413 | 422 => {
            "Voyage refused the request: check query.rerank_model (the server log has the provider's answer)"
        }
        _ => "unexpected answer from Voyage (the server log has it)",
    };
    format!("reranker: HTTP {status}: {what}")
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use trawl_embed::fake::{FakeConfig, FakeVoyage};

    use super::*;

    fn docs() -> Vec<String> {
        vec![
            "fn parse_config(path: &Path) -> Config".to_owned(),
            "/// Borrows a connection from the pool, waiting while every connection is busy"
                .to_owned(),
            "struct Metrics { searches: AtomicU64 }".to_owned(),
        ]
    }

    const QUERY: &str = "borrow a connection from the pool";

    #[tokio::test]
    async fn a_429_with_retry_after_and_a_503_are_retried_then_the_answer_is_used() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        fake.fail_next(429, Some(2));
        fake.fail_next(503, None);
        let r = Reranker::new(&fake.base_url(), "test-key", "rerank-2.5", 10).unwrap();
        let t = Instant::now();
        let order = r.rerank(QUERY, &docs()).await.unwrap();
        let took = t.elapsed();
        assert_eq!(order[0].0, 1, "{order:?}");
        assert_eq!(order.len(), 3, "{order:?}");
        let s = fake.stats();
        assert_eq!(s.requests, 3, "{:?}", s.outcomes);
        assert_eq!(s.outcomes.get("injected-429"), Some(&1));
        assert_eq!(s.outcomes.get("injected-503"), Some(&1));
        assert_eq!(r.http_requests(), 3);
        // Backoff alone waits under 1.5 s for two retries; Retry-After: 2 makes it 2.5 s.
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(6),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_bad_key_or_a_bad_request_is_not_retried_and_says_what_to_fix() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        let r = Reranker::new(&fake.base_url(), "wrong-key", "rerank-2.5", 10).unwrap();
        let err = r.rerank(QUERY, &docs()).await.unwrap_err().to_string();
        assert!(
            err.contains("HTTP 401") && err.contains("VOYAGE_API_KEY"),
            "{err}"
        );
        // The provider's words stay in the log.
        assert!(!err.contains("Provided API key"), "{err}");
        assert_eq!(fake.stats().requests, 1);

        let r = Reranker::new(&fake.base_url(), "test-key", "rerank-0", 10).unwrap();
        let err = r.rerank(QUERY, &docs()).await.unwrap_err().to_string();
        assert!(
            err.contains("HTTP 400") && err.contains("query.rerank_model"),
            "{err}"
        );
        assert!(!err.contains("not supported"), "{err}");
        assert_eq!(fake.stats().requests, 2);

        // A 400 after a retried 503 ends the retries too.
        let r = Reranker::new(&fake.base_url(), "test-key", "rerank-2.5", 10).unwrap();
        fake.fail_next(503, None);
        fake.fail_next(400, None);
        let err = r.rerank(QUERY, &docs()).await.unwrap_err().to_string();
        assert!(err.contains("HTTP 400"), "{err}");
        assert_eq!(fake.stats().requests, 4);
    }

    #[tokio::test]
    async fn persistent_5xx_gives_up_after_three_retries() {
        let fake = FakeVoyage::start(FakeConfig::default()).await.unwrap();
        for _ in 0..5 {
            fake.fail_next(502, None);
        }
        let r = Reranker::new(&fake.base_url(), "test-key", "rerank-2.5", 10).unwrap();
        let err = r.rerank(QUERY, &docs()).await.unwrap_err().to_string();
        assert!(err.contains("gave up after 4 attempts"), "{err}");
        assert_eq!(fake.stats().requests, 4);
    }

    #[tokio::test]
    async fn requests_wait_for_the_limiter() {
        // A 1-second window to measure in; no limit there, so nothing but the client paces.
        let fake = FakeVoyage::start(FakeConfig {
            window: Duration::from_secs(1),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        // 120 a minute: a burst of 2, then one every ~0.51 s.
        let cfg = ClientConfig {
            rpm: 120,
            ..Reranker::client_config(&fake.base_url(), Secret::new("test-key"))
        };
        let r = Reranker::with_client(cfg, "rerank-2.5", 10).unwrap();
        let t = Instant::now();
        for _ in 0..6 {
            r.rerank(QUERY, &docs()).await.unwrap();
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(1900), "{took:?}");
        let s = fake.stats();
        assert_eq!(s.requests, 6);
        assert!(s.peak_window_requests <= 3, "{}", s.peak_window_requests);
    }
}

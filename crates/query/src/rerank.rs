//! The Voyage reranker (`POST /v1/rerank`): reorders the fused top N by relevance to the
//! query. Retries 429 and 5xx with backoff; any other failure leaves the fused order (with a
//! note), since a search must not fail because an optional stage did.

use std::time::Duration;

use trawl_core::secret::Secret;

use crate::QueryError;

/// A configured reranker.
#[derive(Clone, Debug)]
pub struct Reranker {
    client: reqwest::Client,
    base_url: String,
    /// Never printed (`Debug` shows `***`).
    api_key: Secret,
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
    pub fn new(base_url: &str, api_key: &str, model: &str, top: usize) -> Result<Self, QueryError> {
        if api_key.is_empty() {
            return Err(QueryError::BadRequest(format!(
                "query.rerank_model is {model:?} but {} is not set: set it, or empty query.rerank_model",
                trawl_embed::VOYAGE_API_KEY
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| QueryError::Index(format!("reranker client: {e}")))?;
        Ok(Self {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: Secret::new(api_key),
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
        let mut last = String::new();
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * (1 << attempt))).await;
            }
            let r = self
                .client
                .post(format!("{}/rerank", self.base_url))
                .bearer_auth(self.api_key.expose())
                .json(&body)
                .send()
                .await;
            let resp = match r {
                Ok(r) => r,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            let status = resp.status();
            if status.as_u16() == 429 || status.is_server_error() {
                last = format!("HTTP {status}");
                continue;
            }
            let text = resp.text().await.unwrap_or_default();
            if !status.is_success() {
                // The body may echo the request or name the account: the log has it, the
                // error (which can reach a client) only the status.
                let body: String = text.chars().take(2000).collect();
                tracing::warn!(status = status.as_u16(), body = %body, "the reranker refused the request");
                return Err(QueryError::Index(format!("reranker: HTTP {status}")));
            }
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| QueryError::Index(format!("reranker answer: {e}")))?;
            let data = v["data"].as_array().cloned().unwrap_or_default();
            return Ok(data
                .iter()
                .filter_map(|d| {
                    Some((
                        usize::try_from(d["index"].as_u64()?).ok()?,
                        d["relevance_score"].as_f64()?,
                    ))
                })
                .filter(|(i, _)| *i < docs.len())
                .collect());
        }
        Err(QueryError::Index(format!(
            "reranker: gave up after 4 attempts: {last}"
        )))
    }
}

//! The Voyage Batch API over the one client ([`crate::client`]): asynchronous, a third cheaper
//! than the synchronous endpoint, finished within a 12-hour window. For backfills and model
//! changes, where nobody waits for the vectors.
//!
//! The shape is OpenAI's Files + Batches: the inputs are uploaded as a JSONL file (multipart,
//! `purpose=batch`), one line per input, `{"custom_id": …, "body": {"input": [text]}}`; a batch
//! is created over it for `/v1/embeddings` with the model, `input_type`, `output_dimension` and
//! `output_dtype` as its `request_params`; its status is polled until terminal; the output file
//! (and the error file, when some lines failed) is downloaded, and each line is matched back to
//! its input by `custom_id` — the output's order is not the input's.
//!
//! One input per line, so a line's error names exactly one input. Every call goes through the
//! shared client: its request limiter, its retries on 429/5xx/timeouts, its `Retry-After`.
//! Polling is the caller's (it polls many batches, and decides how long to wait between rounds
//! from [`BatchConfig`]).

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::{ClientConfig, VoyageClient};
use crate::embedder::{Counters, EmbedError, InputType, Space, Vector};
use crate::voyage::{EmbeddingsResponse, VoyageConfig};

/// Limits and pacing of batch jobs; from `[embed]` in the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchConfig {
    /// Most inputs in one batch (Voyage: 100K); more are split into several batches.
    pub max_inputs: usize,
    /// Largest input file of one batch, in bytes (Voyage: 1 GB).
    pub max_file_bytes: u64,
    /// The first wait between two polls of the running batches; doubled after each round.
    pub poll: Duration,
    /// The longest wait between two polls.
    pub max_poll: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_inputs: 100_000,
            max_file_bytes: 1_000_000_000,
            poll: Duration::from_secs(30),
            max_poll: Duration::from_secs(600),
        }
    }
}

/// A batch as `GET /v1/batches/{id}` describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchStatus {
    pub id: String,
    /// `validating`, `in_progress`, `finalizing`, `completed`, `failed`, `expired`,
    /// `cancelling` or `cancelled`.
    pub status: String,
    #[serde(default)]
    pub output_file_id: Option<String>,
    #[serde(default)]
    pub error_file_id: Option<String>,
    /// Why a failed batch failed, as the provider says it (its `errors`).
    #[serde(default)]
    pub errors: Option<serde_json::Value>,
}

impl BatchStatus {
    /// No further change will come.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "expired" | "cancelled"
        )
    }

    /// Terminal with results to download.
    pub fn is_completed(&self) -> bool {
        self.status == "completed"
    }
}

/// The result of one input line.
pub type LineOutcome = Result<(Vector, u64), String>;

/// See the module documentation.
pub struct VoyageBatches {
    client: VoyageClient,
    space: Space,
    cfg: BatchConfig,
}

impl std::fmt::Debug for VoyageBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoyageBatches")
            .field("client", &self.client)
            .field("space", &self.space)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl VoyageBatches {
    /// Batches for the embedder `voyage` describes (key, model, dims, dtype, retries).
    pub fn new(voyage: &VoyageConfig, cfg: BatchConfig) -> Result<Self, EmbedError> {
        if voyage.api_key.expose().trim().is_empty() {
            return Err(EmbedError::Auth(
                "no Voyage API key: set VOYAGE_API_KEY (the Batch API is Voyage's)".into(),
            ));
        }
        if voyage.model.starts_with("voyage-context") {
            return Err(EmbedError::Config(format!(
                "the Batch API path sends each chunk alone, which would drop what {} is for \
                 (a chunk embedded with its file): embed without --batch",
                voyage.model
            )));
        }
        if cfg.max_inputs == 0 || cfg.max_file_bytes == 0 || cfg.poll.is_zero() {
            return Err(EmbedError::Config(
                "embed.batch_max_inputs, embed.batch_max_file_bytes and embed.batch_poll_ms \
                 must be positive"
                    .into(),
            ));
        }
        let client = VoyageClient::new(ClientConfig {
            rpm: voyage.rpm,
            max_retries: voyage.max_retries,
            timeout: voyage.timeout,
            ..ClientConfig::new(&voyage.base_url, voyage.api_key.clone())
        })?;
        Ok(Self {
            client,
            space: Space {
                model: voyage.model.clone(),
                dims: voyage.dims,
                dtype: voyage.dtype,
            },
            cfg,
        })
    }

    pub fn config(&self) -> &BatchConfig {
        &self.cfg
    }

    pub fn space(&self) -> &Space {
        &self.space
    }

    /// HTTP requests and retries so far.
    pub fn counters(&self) -> Counters {
        Counters {
            http_requests: self.client.http_requests(),
            retries: self.client.retries(),
            truncated: 0,
        }
    }

    /// One line of an input file (newline included): `text` as the only input of the line
    /// `custom_id`.
    pub fn line(custom_id: &str, text: &str) -> Vec<u8> {
        let mut line = serde_json::to_vec(&serde_json::json!({
            "custom_id": custom_id,
            "body": {"input": [text]},
        }))
        .unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// Uploads `jsonl` (lines made by [`VoyageBatches::line`]) and creates a batch over it,
    /// with `metadata` attached. Returns the new batch.
    pub async fn submit(
        &self,
        jsonl: bytes::Bytes,
        metadata: serde_json::Value,
    ) -> Result<BatchStatus, EmbedError> {
        #[derive(Deserialize)]
        struct FileObject {
            id: String,
        }
        let uploaded = self
            .client
            .post_file("files", &[("purpose", "batch")], "inputs.jsonl", &jsonl)
            .await?;
        let file: FileObject = parse(&uploaded, "the uploaded file")?;
        let body = serde_json::json!({
            "endpoint": "/v1/embeddings",
            "input_file_id": file.id,
            "completion_window": "12h",
            "request_params": {
                "model": self.space.model,
                "input_type": InputType::Document.as_str(),
                "truncation": true,
                "output_dimension": self.space.dims,
                "output_dtype": self.space.dtype.as_str(),
            },
            "metadata": metadata,
        });
        let created = self.client.post("batches", &body).await?;
        parse(&created, "the created batch")
    }

    /// The batch's current status.
    pub async fn status(&self, id: &str) -> Result<BatchStatus, EmbedError> {
        let body = self.client.get(&format!("batches/{id}")).await?;
        parse(&body, "a batch's status")
    }

    /// The outcome of every line of a completed batch, by `custom_id`: its output file's lines
    /// and its error file's. A line missing from both is missing from the map.
    pub async fn results(
        &self,
        batch: &BatchStatus,
    ) -> Result<HashMap<String, LineOutcome>, EmbedError> {
        let mut out = HashMap::new();
        for file in [&batch.output_file_id, &batch.error_file_id]
            .into_iter()
            .flatten()
        {
            let body = self.client.get(&format!("files/{file}/content")).await?;
            for (custom_id, outcome) in parse_lines(&body, &self.space)? {
                out.insert(custom_id, outcome);
            }
        }
        Ok(out)
    }
}

/// The JSON `what` in `body`, or an error saying the answer is malformed.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, EmbedError> {
    serde_json::from_slice(body).map_err(|e| EmbedError::Exhausted {
        attempts: 1,
        last: format!("malformed answer from the Batch API for {what}: {e}"),
    })
}

/// The lines of an output or error file: each line's `custom_id` and its vector and billed
/// tokens, or the reason it failed (a non-200 `response`, or an `error` object).
fn parse_lines(body: &[u8], space: &Space) -> Result<Vec<(String, LineOutcome)>, EmbedError> {
    #[derive(Deserialize)]
    struct Line {
        custom_id: String,
        #[serde(default)]
        response: Option<LineResponse>,
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct LineResponse {
        status_code: u16,
        body: serde_json::Value,
    }
    let mut out = Vec::new();
    for raw in body.split(|b| *b == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line: Line = parse(raw, "a line of a batch's output")?;
        let outcome = match (line.response, line.error) {
            (_, Some(e)) if !e.is_null() => Err(e
                .get("message")
                .and_then(serde_json::Value::as_str)
                .map_or_else(|| e.to_string(), str::to_owned)),
            (Some(r), _) if r.status_code == 200 => {
                serde_json::from_value::<EmbeddingsResponse>(r.body)
                    .map_err(|e| format!("malformed embeddings answer: {e}"))
                    .and_then(|resp| resp.decode(space, 1))
                    .map(|(mut vectors, tokens)| (vectors.remove(0), tokens))
            }
            (Some(r), _) => Err(format!(
                "HTTP {}: {}",
                r.status_code,
                r.body
                    .get("detail")
                    .and_then(serde_json::Value::as_str)
                    .map_or_else(|| r.body.to_string(), str::to_owned)
            )),
            (None, _) => Err("the line has neither a response nor an error".into()),
        };
        out.push((line.custom_id, outcome));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedder::Dtype;
    use crate::fake::fake_vector;

    fn space() -> Space {
        Space {
            model: "voyage-code-3".into(),
            dims: 256,
            dtype: Dtype::Float,
        }
    }

    #[test]
    fn a_line_holds_one_input_under_its_custom_id() {
        let line = VoyageBatches::line("abc", "fn main() {\n\"quoted\"\n}");
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(
            line.split(|b| *b == b'\n').count(),
            2,
            "one newline, at the end"
        );
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["custom_id"], "abc");
        assert_eq!(v["body"]["input"][0], "fn main() {\n\"quoted\"\n}");
    }

    #[test]
    fn output_lines_map_to_vectors_or_to_the_reason_they_failed() {
        let vector = match fake_vector("x", 256, Dtype::Float) {
            Vector::Float(f) => f,
            Vector::Bytes(_) => unreachable!(),
        };
        let ok = serde_json::json!({"custom_id": "b", "response": {"status_code": 200, "body": {
            "object": "list", "data": [{"object": "embedding", "embedding": vector, "index": 0}],
            "model": "voyage-code-3", "usage": {"total_tokens": 7}}}, "error": null});
        let refused = serde_json::json!({"custom_id": "a", "response": {"status_code": 400,
            "body": {"detail": "Input 0 contains invalid content."}}, "error": null});
        let errored = serde_json::json!({"custom_id": "c", "response": null,
            "error": {"code": "server_error", "message": "the model failed"}});
        let short = serde_json::json!({"custom_id": "d", "response": {"status_code": 200, "body": {
            "object": "list", "data": [{"object": "embedding", "embedding": [0.5], "index": 0}],
            "model": "voyage-code-3", "usage": {"total_tokens": 1}}}});
        let body = format!("{refused}\n{ok}\n\n{errored}\n{short}\n");
        let out: HashMap<String, LineOutcome> = parse_lines(body.as_bytes(), &space())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(out["b"], Ok((fake_vector("x", 256, Dtype::Float), 7)));
        assert_eq!(
            out["a"],
            Err("HTTP 400: Input 0 contains invalid content.".into())
        );
        assert_eq!(out["c"], Err("the model failed".into()));
        assert!(out["d"].as_ref().unwrap_err().contains("256 were asked"));
        assert!(parse_lines(b"not json\n", &space()).is_err());
    }

    #[tokio::test]
    async fn a_batch_goes_through_the_fake_from_upload_to_results() {
        use crate::fake::{FakeConfig, FakeVoyage};
        let fake = FakeVoyage::start(FakeConfig {
            poison: Some("POISON".into()),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        let mut voyage = VoyageConfig::new(&fake.base_url(), "test-key");
        voyage.dims = 256;
        let b = VoyageBatches::new(&voyage, BatchConfig::default()).unwrap();
        let texts = [
            "fn a() {}",
            "POISON here",
            "line one\r\n--boundary-like\r\n",
        ];
        let mut jsonl = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            jsonl.extend(VoyageBatches::line(&format!("id-{i}"), t));
        }
        let created = b
            .submit(jsonl.into(), serde_json::json!({"k": "v"}))
            .await
            .unwrap();
        assert_eq!(created.status, "validating");
        let mut seen = vec![created.status.clone()];
        let done = loop {
            let s = b.status(&created.id).await.unwrap();
            if seen.last() != Some(&s.status) {
                seen.push(s.status.clone());
            }
            if s.is_terminal() {
                break s;
            }
        };
        assert_eq!(seen, ["validating", "in_progress", "completed"]);
        let out = b.results(&done).await.unwrap();
        assert_eq!(out.len(), 3);
        for i in [0, 2] {
            let (v, tokens) = out[&format!("id-{i}")].clone().unwrap();
            assert_eq!(v, fake_vector(texts[i], 256, Dtype::Float));
            assert!(tokens > 0);
        }
        assert!(
            out["id-1"]
                .as_ref()
                .unwrap_err()
                .contains("invalid content")
        );
        let s = fake.stats();
        assert_eq!((s.files_uploaded, s.batches_created), (1, 1));

        let wrong = VoyageBatches::new(
            &VoyageConfig::new(&fake.base_url(), "wrong"),
            BatchConfig::default(),
        )
        .unwrap();
        let err = wrong
            .submit(bytes::Bytes::from_static(b"{}\n"), serde_json::Value::Null)
            .await
            .unwrap_err();
        assert!(matches!(err, EmbedError::Auth(_)), "{err}");
    }

    #[test]
    fn terminal_statuses() {
        let s = |status: &str| BatchStatus {
            id: "b".into(),
            status: status.into(),
            output_file_id: None,
            error_file_id: None,
            errors: None,
        };
        for t in ["completed", "failed", "expired", "cancelled"] {
            assert!(s(t).is_terminal(), "{t}");
        }
        for t in ["validating", "in_progress", "finalizing", "cancelling"] {
            assert!(!s(t).is_terminal(), "{t}");
        }
        assert!(s("completed").is_completed() && !s("failed").is_completed());
    }
}

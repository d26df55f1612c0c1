//! The one Voyage HTTP client, shared by the embedder ([`crate::voyage`]) and the query
//! service's reranker: the bearer key, a governor limiter on requests, and one retry policy.
//!
//! Retries. 429, 5xx, timeouts, dropped connections and bodies cut short are retried up to
//! `max_retries` times with exponential backoff and jitter (`backon`: from `min_delay`,
//! doubling, capped at `max_delay`, each delay stretched by a random factor in [1, 2)), or
//! after `Retry-After` (at most `max_retry_after`) when the answer carries one. Any other
//! status is final: [`VoyageError::Refused`] keeps the status and the provider's message, so
//! each caller decides what its user sees (the embedder names the fix; the reranker logs the
//! message, which can name the account, and reports only the status). The key is never logged.
//!
//! Pacing. Every attempt, retries included, waits for the request limiter first: a GCRA bucket
//! whose burst is one second's worth of the per-minute limit ([`quota`]), so no 60-second
//! window holds more than the limit.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use trawl_core::secret::Secret;

/// Where and how to call Voyage.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// API root, e.g. `https://api.voyageai.com/v1`.
    pub base_url: String,
    /// Never printed (`Debug` shows `***`).
    pub api_key: Secret,
    /// Requests per minute, retries included.
    pub rpm: u32,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff delay (before jitter).
    pub min_delay: Duration,
    /// The longest backoff delay (before jitter).
    pub max_delay: Duration,
    /// The longest `Retry-After` obeyed; longer ones are cut to it.
    pub max_retry_after: Duration,
    /// One attempt's time limit, body included.
    pub timeout: Duration,
}

impl ClientConfig {
    /// Voyage's basic-tier request limit, 8 retries from 0.25 s up to 15 s, `Retry-After`
    /// up to 5 minutes, 60 s per attempt.
    pub fn new(base_url: &str, api_key: Secret) -> Self {
        Self {
            base_url: base_url.to_owned(),
            api_key,
            rpm: 2000,
            max_retries: 8,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(15),
            max_retry_after: Duration::from_secs(300),
            timeout: Duration::from_secs(60),
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum VoyageError {
    /// A final answer other than 429 and 5xx: retrying the same request cannot help.
    #[error("Voyage refused the request (HTTP {status}): {detail}")]
    Refused { status: u16, detail: String },
    /// Retries ran out on 429s, 5xx, timeouts or dropped connections.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted { attempts: u32, last: String },
    /// The client could not be built.
    #[error("Voyage client: {0}")]
    Config(String),
}

/// One attempt's failure.
enum Failure {
    /// Worth another attempt: `cause` counts it (`429`, `5xx`, `timeout`, `connection`).
    Retry {
        cause: &'static str,
        after: Option<Duration>,
        last: String,
    },
    Refused {
        status: u16,
        detail: String,
    },
}

/// See the module documentation.
pub struct VoyageClient {
    http: reqwest::Client,
    base_url: String,
    api_key: Secret,
    requests: DefaultDirectRateLimiter,
    policy: ExponentialBuilder,
    max_retry_after: Duration,
    http_requests: AtomicU64,
    retries: Mutex<BTreeMap<&'static str, u64>>,
}

impl std::fmt::Debug for VoyageClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoyageClient")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .finish_non_exhaustive()
    }
}

/// A GCRA quota for `per_minute`, with a burst of `burst` and the rest as the steady rate, so
/// that any 60-second window holds at most `per_minute`.
pub(crate) fn quota(per_minute: u64, burst: u64) -> Quota {
    let burst = burst.clamp(1, per_minute.max(1));
    let rate = per_minute.saturating_sub(burst).max(1);
    let period = Duration::from_secs_f64(60.0 / rate as f64);
    Quota::with_period(period)
        .expect("a positive period")
        .allow_burst(NonZeroU32::new(burst.min(u64::from(u32::MAX)) as u32).expect("burst ≥ 1"))
}

/// The backoff of `cfg`: `max_retries` delays from `min_delay`, doubling up to `max_delay`,
/// each stretched by a random factor in [1, 2).
fn policy(cfg: &ClientConfig) -> ExponentialBuilder {
    trawl_core::retry::backoff(cfg.min_delay, cfg.max_delay, cfg.max_retries as usize)
}

impl VoyageClient {
    pub fn new(cfg: ClientConfig) -> Result<Self, VoyageError> {
        if cfg.rpm == 0 {
            return Err(VoyageError::Config("rpm must be positive".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(Duration::from_secs(10).min(cfg.timeout))
            .user_agent(concat!("trawl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| VoyageError::Config(format!("HTTP client: {e}")))?;
        let request_burst = u64::from(cfg.rpm / 60).max(1);
        let policy = policy(&cfg);
        Ok(Self {
            http,
            base_url: cfg.base_url.trim_end_matches('/').to_owned(),
            api_key: cfg.api_key,
            requests: RateLimiter::direct(quota(u64::from(cfg.rpm), request_burst)),
            policy,
            max_retry_after: cfg.max_retry_after,
            http_requests: AtomicU64::new(0),
            retries: Mutex::default(),
        })
    }

    /// HTTP requests made, retries included.
    pub fn http_requests(&self) -> u64 {
        self.http_requests.load(Ordering::Relaxed)
    }

    /// Failed attempts that were worth retrying, by cause: `429`, `5xx`, `timeout`,
    /// `connection` (the last attempt's failure included).
    pub fn retries(&self) -> BTreeMap<&'static str, u64> {
        self.retries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// `POST {base_url}/{path}` with `body` as JSON; the body of the first 2xx answer.
    pub async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<bytes::Bytes, VoyageError> {
        self.call(path, |http, url| http.post(url).json(body)).await
    }

    /// `GET {base_url}/{path}`; the body of the first 2xx answer.
    pub async fn get(&self, path: &str) -> Result<bytes::Bytes, VoyageError> {
        self.call(path, |http, url| http.get(url)).await
    }

    /// `POST {base_url}/{path}` with a `multipart/form-data` body: the text `fields`, then one
    /// file part named `file` holding `content` (sent as `filename`); the body of the first
    /// 2xx answer.
    pub async fn post_file(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        filename: &str,
        content: &bytes::Bytes,
    ) -> Result<bytes::Bytes, VoyageError> {
        let (content_type, body) = multipart(fields, filename, content);
        self.call(path, |http, url| {
            http.post(url)
                .header(reqwest::header::CONTENT_TYPE, &content_type)
                .body(body.clone())
        })
        .await
    }

    /// Sends the request `build` makes for `{base_url}/{path}` (the key is added here) under
    /// the request limiter and the retry policy.
    async fn call(
        &self,
        path: &str,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<bytes::Bytes, VoyageError> {
        let url = format!("{}/{}", self.base_url, path.trim_start_matches('/'));
        let attempts = AtomicU32::new(0);
        let attempt = || async {
            attempts.fetch_add(1, Ordering::Relaxed);
            self.attempt(build(&self.http, &url)).await
        };
        let result = attempt
            .retry(self.policy)
            .when(|f| matches!(f, Failure::Retry { .. }))
            .adjust(|f, delay| {
                // Retry-After replaces the backoff's delay, never the decision to stop.
                let Failure::Retry {
                    after: Some(after), ..
                } = f
                else {
                    return delay;
                };
                delay.map(|_| {
                    use rand::Rng;
                    (*after).min(self.max_retry_after)
                        + Duration::from_millis(rand::rng().random_range(0..100))
                })
            })
            .notify(|f, delay| {
                if let Failure::Retry { cause, last, .. } = f {
                    tracing::debug!(cause, last = %last, ?delay, "retrying a Voyage request");
                }
            })
            .await;
        result.map_err(|f| match f {
            Failure::Refused { status, detail } => VoyageError::Refused { status, detail },
            Failure::Retry { last, .. } => VoyageError::Exhausted {
                attempts: attempts.load(Ordering::Relaxed),
                last,
            },
        })
    }

    async fn attempt(&self, request: reqwest::RequestBuilder) -> Result<bytes::Bytes, Failure> {
        self.requests.until_ready().await;
        self.http_requests.fetch_add(1, Ordering::Relaxed);
        let sent = request.bearer_auth(self.api_key.expose()).send().await;
        let failure = match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let after = retry_after(resp.headers());
                match resp.bytes().await {
                    Ok(bytes) if (200..300).contains(&status) => return Ok(bytes),
                    Ok(bytes) if status == 429 => Failure::Retry {
                        cause: "429",
                        after,
                        last: format!("429 {}", message(&bytes)),
                    },
                    Ok(bytes) if status >= 500 => Failure::Retry {
                        cause: "5xx",
                        after,
                        last: format!("{status} {}", message(&bytes)),
                    },
                    Ok(bytes) => Failure::Refused {
                        status,
                        detail: message(&bytes),
                    },
                    Err(e) => transport(&e),
                }
            }
            Err(e) => transport(&e),
        };
        if let Failure::Retry { cause, .. } = &failure {
            *self
                .retries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(cause)
                .or_default() += 1;
        }
        Err(failure)
    }
}

/// A request or a body that did not arrive: always worth another attempt.
fn transport(e: &reqwest::Error) -> Failure {
    Failure::Retry {
        cause: if e.is_timeout() {
            "timeout"
        } else {
            "connection"
        },
        after: None,
        last: e.to_string(),
    }
}

/// A `multipart/form-data` body: its content type (with the boundary) and its bytes. The
/// boundary is random and checked against the content, so no part can end early.
fn multipart(fields: &[(&str, &str)], filename: &str, content: &[u8]) -> (String, bytes::Bytes) {
    use rand::Rng;
    let boundary = loop {
        let b = format!("trawl-{:032x}", rand::rng().random::<u128>());
        let found = content.windows(b.len()).any(|w| w == b.as_bytes());
        if !found {
            break b;
        }
    };
    let mut body = Vec::with_capacity(content.len() + 512);
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
             Content-Type: application/jsonl\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/form-data; boundary={boundary}"),
        body.into(),
    )
}

/// `Retry-After` in seconds (the HTTP-date form is not used by Voyage).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The provider's `detail` message, or the start of the body.
fn message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Detail {
        detail: String,
    }
    serde_json::from_slice::<Detail>(body).map_or_else(
        |_| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned(),
        |d| d.detail,
    )
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;

    use super::*;

    #[test]
    fn quotas_keep_every_window_inside_the_limit() {
        // burst + rate × 60 s never exceeds the per-minute limit.
        let q = quota(1_000_000, 16_666);
        let per_minute = 60.0 / q.replenish_interval().as_secs_f64();
        assert!(f64::from(q.burst_size().get()) + per_minute <= 1_000_000.5);
        assert!(per_minute > 980_000.0);
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap_and_stops_after_max_retries() {
        let cfg = ClientConfig::new("http://127.0.0.1:9/v1", Secret::new("k"));
        let delays: Vec<Duration> = policy(&cfg).build().collect();
        assert_eq!(delays.len(), 8);
        let secs = |d: &Duration| d.as_secs_f64();
        // 0.25, 0.5, 1, 2, 4, 8, 15, 15 s, each × [1, 2).
        for (d, base) in delays
            .iter()
            .zip([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0])
        {
            assert!(secs(d) >= base && secs(d) < 2.0 * base, "{d:?} from {base}");
        }
        // Jittered: not every run of the same policy waits the same.
        let again: Vec<Duration> = policy(&cfg).build().collect();
        assert_ne!(delays, again);
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}

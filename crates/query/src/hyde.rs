//! HyDE (hypothetical document embeddings): a question in words is answered by a language
//! model with the code that might answer it; that snippet is embedded as a document and
//! searched beside the question's own vector, as a third arm of the fusion. Code looks like
//! code to the embedding model, so a snippet lands nearer the implementation than the question
//! does; the question's own arms still count, so a wrong guess costs little.
//!
//! Off by default (`query.hyde`). Any OpenAI-compatible chat-completions endpoint serves
//! (`query.hyde_url`, `query.hyde_model`, the key from the environment variable named by
//! `query.hyde_key_env`). One request per distinct question, answers cached; a generator
//! slower than `query.hyde_timeout_ms` (or failing) leaves the plain search to answer, with a
//! note.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use trawl_core::config::QueryConfig;
use trawl_core::secret::Secret;

/// What the model is asked to do.
const SYSTEM: &str = "You write code. Answer the developer's question about a codebase with \
the source code that would implement or answer it: one short function, method or \
configuration snippet in the most likely language, with the names a real implementation would \
use. Code only, no explanation, at most 30 lines.";

/// Most tokens a snippet may have.
const MAX_TOKENS: u32 = 300;

/// Why no snippet came back.
#[derive(Debug, thiserror::Error)]
pub enum HydeError {
    #[error("the HyDE generator did not answer within {0} ms")]
    Timeout(u64),
    #[error(
        "the HyDE generator refused the request ({status}): check query.hyde_url, query.hyde_model and the key in ${key_env}"
    )]
    Refused { status: u16, key_env: String },
    #[error("the HyDE generator failed: {0}")]
    Failed(String),
    /// The configuration cannot work: the message says which key.
    #[error("{0}")]
    Config(String),
}

/// The generator client with its answer cache.
pub struct Hyde {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Secret,
    key_env: String,
    timeout: Duration,
    cache: Mutex<Cache>,
}

/// Answers by question, oldest dropped first past `capacity`.
struct Cache {
    capacity: usize,
    answers: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Cache {
    fn get(&self, q: &str) -> Option<String> {
        self.answers.get(q).cloned()
    }

    fn put(&mut self, q: String, answer: String) {
        if self.capacity == 0 || self.answers.contains_key(&q) {
            return;
        }
        while self.answers.len() >= self.capacity {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.answers.remove(&old);
        }
        self.order.push_back(q.clone());
        self.answers.insert(q, answer);
    }
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
}

impl Hyde {
    /// The generator `cfg` names, or `None` when HyDE is off.
    pub fn from_config(cfg: &QueryConfig) -> Result<Option<Self>, HydeError> {
        if !cfg.hyde {
            return Ok(None);
        }
        if cfg.hyde_url.is_empty() || cfg.hyde_model.is_empty() {
            return Err(HydeError::Config(
                "query.hyde is on but query.hyde_url (a chat-completions endpoint, e.g. https://api.openai.com/v1/chat/completions) or query.hyde_model is empty".into(),
            ));
        }
        let key = std::env::var(&cfg.hyde_key_env).unwrap_or_default();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| HydeError::Config(format!("HyDE HTTP client: {e}")))?;
        Ok(Some(Self {
            http,
            url: cfg.hyde_url.clone(),
            model: cfg.hyde_model.clone(),
            key: key.into(),
            key_env: cfg.hyde_key_env.clone(),
            timeout: Duration::from_millis(cfg.hyde_timeout_ms.max(1)),
            cache: Mutex::new(Cache {
                capacity: cfg.hyde_cache,
                answers: HashMap::new(),
                order: VecDeque::new(),
            }),
        }))
    }

    /// The hypothetical code for `question`, from the cache or the generator.
    pub async fn snippet(&self, question: &str) -> Result<String, HydeError> {
        let key = question.trim().to_owned();
        if let Some(hit) = self.lock().get(&key) {
            return Ok(hit);
        }
        let ms = self.timeout.as_millis() as u64;
        let answer = tokio::time::timeout(self.timeout, self.generate(&key))
            .await
            .map_err(|_| HydeError::Timeout(ms))??;
        self.lock().put(key, answer.clone());
        Ok(answer)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn generate(&self, question: &str) -> Result<String, HydeError> {
        let body = serde_json::json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
            ],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
        });
        let mut req = self.http.post(&self.url).json(&body);
        if !self.key.expose().is_empty() {
            req = req.bearer_auth(self.key.expose());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| HydeError::Failed(e.without_url().to_string()))?;
        let status = resp.status();
        if status.is_client_error() {
            return Err(HydeError::Refused {
                status: status.as_u16(),
                key_env: self.key_env.clone(),
            });
        }
        if !status.is_success() {
            return Err(HydeError::Failed(format!("status {status}")));
        }
        let c: Completion = resp
            .json()
            .await
            .map_err(|e| HydeError::Failed(format!("unreadable answer: {}", e.without_url())))?;
        let text = c
            .choices
            .into_iter()
            .find_map(|c| c.message.content)
            .map(|t| strip_fences(&t))
            .unwrap_or_default();
        if text.trim().is_empty() {
            return Err(HydeError::Failed("an empty answer".into()));
        }
        Ok(text)
    }
}

/// The code inside a Markdown fence when the model wrapped its answer in one.
fn strip_fences(text: &str) -> String {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t.to_owned();
    };
    let body = rest.split_once('\n').map_or("", |(_, b)| b);
    body.trim_end()
        .strip_suffix("```")
        .unwrap_or(body)
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_taken_off_and_plain_code_is_kept() {
        assert_eq!(
            strip_fences("```python\ndef f():\n    return 1\n```\n"),
            "def f():\n    return 1"
        );
        assert_eq!(strip_fences("fn main() {}"), "fn main() {}");
        assert_eq!(strip_fences("```\nx = 1"), "x = 1");
    }

    #[test]
    fn the_cache_drops_the_oldest_answer() {
        let mut c = Cache {
            capacity: 2,
            answers: HashMap::new(),
            order: VecDeque::new(),
        };
        c.put("a".into(), "1".into());
        c.put("b".into(), "2".into());
        c.put("c".into(), "3".into());
        assert_eq!(c.get("a"), None);
        assert_eq!(c.get("b").as_deref(), Some("2"));
        assert_eq!(c.get("c").as_deref(), Some("3"));
    }

    #[test]
    fn on_without_an_endpoint_is_a_config_error() {
        let cfg = QueryConfig {
            hyde: true,
            ..QueryConfig::default()
        };
        let err = Hyde::from_config(&cfg).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("query.hyde_url")));
        assert!(
            Hyde::from_config(&QueryConfig::default())
                .unwrap()
                .is_none()
        );
    }
}

//! The hash embedder: deterministic, dependency-free, for tests only.
//!
//! It is feature hashing over identifier-aware terms: each word, each piece of a
//! camelCase/snake_case identifier and each adjacent pair of words is hashed (BLAKE3) to a
//! dimension and a sign, the counts are log-scaled and the vector L2-normalised. So texts that
//! share words are close, which is enough for tests and for the eval's "hash vs local" row —
//! and is nothing like a learned model. It is only ever chosen explicitly (`--embedder hash`);
//! no failure falls back to it.

use async_trait::async_trait;

use crate::embedder::{
    Dtype, EmbedError, Embedded, Embedder, InputType, Limits, Space, Vector, estimate_tokens,
    normalize,
};

/// The hash embedder's model name.
pub const MODEL: &str = "trawl-hash-v1";

/// See the module documentation.
pub struct HashEmbedder {
    space: Space,
}

impl HashEmbedder {
    pub fn new(dims: u32) -> Result<Self, EmbedError> {
        if dims == 0 {
            return Err(EmbedError::Config("hash_dims must be at least 1".into()));
        }
        Ok(Self {
            space: Space {
                model: MODEL.into(),
                dims,
                dtype: Dtype::Float,
            },
        })
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let dims = self.space.dims as usize;
        let mut v = vec![0f32; dims];
        let mut add = |term: &str, weight: f32| {
            let h = blake3::hash(term.as_bytes());
            let b = h.as_bytes();
            let idx = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize % dims;
            let sign = if b[8] & 1 == 0 { 1.0 } else { -1.0 };
            v[idx] += sign * weight;
        };
        let words = terms(text);
        for w in &words {
            add(w, 1.0);
        }
        for pair in words.windows(2) {
            add(&format!("{} {}", pair[0], pair[1]), 0.5);
        }
        for x in &mut v {
            *x = x.signum() * x.abs().ln_1p();
        }
        normalize(&mut v);
        v
    }
}

/// Lowercased words, with identifiers also split at case and underscore boundaries.
fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric() && c != '_') {
        if word.is_empty() {
            continue;
        }
        let lower = word.to_lowercase();
        let mut piece = String::new();
        let mut pieces = Vec::new();
        let mut prev_lower = false;
        for c in word.chars() {
            if (c == '_' || (c.is_uppercase() && prev_lower)) && !piece.is_empty() {
                pieces.push(std::mem::take(&mut piece));
            }
            if c != '_' {
                piece.extend(c.to_lowercase());
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
        }
        if !piece.is_empty() {
            pieces.push(piece);
        }
        if pieces.len() > 1 {
            out.extend(pieces);
        }
        out.push(lower);
    }
    out
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn space(&self) -> &Space {
        &self.space
    }

    fn limits(&self) -> Limits {
        Limits {
            max_inputs: 1000,
            max_tokens: 1_000_000,
            max_input_tokens: 100_000,
        }
    }

    async fn embed(&self, inputs: &[String], _kind: InputType) -> Result<Embedded, EmbedError> {
        Ok(Embedded {
            vectors: inputs
                .iter()
                .map(|t| Vector::Float(self.vector(t)))
                .collect(),
            tokens: inputs.iter().map(|t| estimate_tokens(t)).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_embedder_suite() {
        crate::embedder::suite::run(&HashEmbedder::new(256).unwrap()).await;
    }

    #[test]
    fn identifiers_split_into_their_words() {
        assert_eq!(
            terms("parseHTTPResponse snake_case"),
            [
                "parse",
                "httpresponse",
                "parsehttpresponse",
                "snake",
                "case",
                "snake_case"
            ]
        );
        assert!(HashEmbedder::new(0).is_err());
    }
}

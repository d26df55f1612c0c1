#!/usr/bin/env bash
# The development retrieval evaluation (README "Retrieval quality"): six public repositories in
# five languages (eval/dev/repos.tsv, pinned commits), indexed together as one organisation,
# whole (docs, tests, examples), and searched with the 216 queries of eval/dev/*.jsonl, split
# in halves: `tune` (the ranking's weights were chosen on it) and `test` (never tuned on). The
# naive baseline (1,000-character windows with 100 overlap, plain BM25 + the same local model,
# RRF k=60) is indexed from the same checkouts and printed beside the default, with each
# ranking change switched off in turn.
#
#   bash scripts/eval-dev.sh MIRRORS [EMBEDDER]
#
# MIRRORS holds a git clone (bare or not) of each repository as `<owner>+<name>` (or
# `<owner>+<name>/repo`), containing the pinned commit; nothing is downloaded. EMBEDDER is
# `local` (default) or `hash`. EVAL_WORK=<dir> keeps the checkouts and both indexes there
# and reuses them on the next run (delete it after changing the chunker).
set -euo pipefail
cd "$(dirname "$0")/.."
mirrors=${1:?usage: eval-dev.sh MIRRORS [local|hash]}
embedder=${2:-local}
if [ -z "${TRAWL:-}" ]; then
  cargo build -q -p trawl-cli
  TRAWL=$PWD/target/debug/trawl
fi
if [ -n "${EVAL_WORK:-}" ]; then
  work=$EVAL_WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
repos=()
while IFS=$'\t' read -r name repo commit _lang; do
  case "$name" in '#'*|'') continue ;; esac
  dest="$work/repos/$name"
  repos+=("$dest")
  [ -d "$dest/.git" ] && continue
  src="$mirrors/${repo/\//+}"
  [ -d "$src/repo" ] && src="$src/repo"
  if [ ! -d "$src" ]; then
    echo "eval-dev: no clone of $repo at $src" >&2
    exit 2
  fi
  git clone -q --no-checkout "$src" "$dest"
  git -C "$dest" -c advice.detachedHead=false checkout -q "$commit"
done < eval/dev/repos.tsv
cat eval/dev/*.jsonl > "$work/queries.jsonl"
for kind in trawl naive; do
  store="$work/$kind-$embedder"
  [ -e "$store/index/CURRENT" ] && continue
  set=()
  [ "$kind" = naive ] && set=(--set chunk.strategy=windows)
  echo "== indexing ($kind, $embedder embedder)" >&2
  "$TRAWL" --store "$store" "${set[@]}" --set "fetch.cache_dir=$work/mirrors" \
    index "${repos[@]}" --embedder "$embedder" >&2
done
"$TRAWL" --store "$work/trawl-$embedder" eval "$work/queries.jsonl" --embedder "$embedder" \
  --baseline "$work/naive-$embedder" --ablate "${@:3}"

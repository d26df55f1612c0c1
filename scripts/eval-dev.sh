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
# shellcheck source=scripts/work.sh
source scripts/work.sh
checkouts=$(bash scripts/checkouts.sh "$mirrors" "$work" eval/dev/repos.tsv)
mapfile -t repos <<< "$checkouts"
cat eval/dev/*.jsonl > "$work/queries.jsonl"
index_pair "$work/trawl-$embedder" "$work/naive-$embedder" "$embedder" "${repos[@]}"
"$TRAWL" --store "$work/trawl-$embedder" eval "$work/queries.jsonl" --embedder "$embedder" \
  --baseline "$work/naive-$embedder" --ablate "${@:3}"

#!/usr/bin/env bash
# A check outside every set (README, "Retrieval quality"): the questions of eval/outside
# (express and axios, written after the learned ranking was fitted, never tuned on), searched
# in one index of those two repositories beside the development and training ones (twelve,
# at their pinned commits, whole), as an organisation would index them; the naive baseline
# is indexed from the same checkouts and printed beside it. Then, in the same index, the
# lookups of eval/lookup (pasted errors, config keys and symbols about the four training
# repositories, whose questions in words are fitted on but whose lookups never were), by half.
#
#   bash scripts/eval-outside.sh MIRRORS
#
# MIRRORS as for scripts/eval-dev.sh. EVAL_WORK=<dir> keeps the checkouts and the indexes
# there and reuses them (delete them after changing the chunker).
set -euo pipefail
cd "$(dirname "$0")/.."
mirrors=${1:?usage: eval-outside.sh MIRRORS}
# shellcheck source=scripts/work.sh
source scripts/work.sh
checkouts=$(bash scripts/checkouts.sh "$mirrors" "$work" eval/dev/repos.tsv eval/train/repos.tsv eval/outside/repos.tsv)
mapfile -t repos <<< "$checkouts"
cat eval/outside/*.jsonl > "$work/outside.jsonl"
for kind in outside naive-outside; do
  store="$work/$kind-local"
  [ -e "$store/index/CURRENT" ] && continue
  set=()
  [ "$kind" = naive-outside ] && set=(--set chunk.strategy=windows)
  echo "== indexing ${#repos[@]} repositories ($kind)" >&2
  "$TRAWL" --store "$store" "${set[@]}" --set "fetch.cache_dir=$work/mirrors" index "${repos[@]}" >&2
done
cat eval/lookup/*.jsonl > "$work/lookup.jsonl"
"$TRAWL" --store "$work/outside-local" eval "$work/outside.jsonl" --baseline "$work/naive-outside-local"
"$TRAWL" --store "$work/outside-local" eval "$work/lookup.jsonl" --baseline "$work/naive-outside-local"

#!/usr/bin/env bash
# Fits the learned ranking's weights (README, "The learned ranking"): the development set's
# six repositories (eval/dev/repos.tsv) and the four training repositories
# (eval/train/repos.tsv), at their pinned commits, indexed together as one organisation, whole;
# then `trawl eval --split tune --train-ranker` on the tune halves of the development and prose
# sets and on the training questions (eval/train/*.jsonl, all `tune`). The test halves are
# never fitted on. Prints the cross-validated MRR@10 of the pool's questions in words and the
# `[query.ranker]` table to put in the configuration (or in `RankerWeights::default`).
#
#   bash scripts/fit-ranker.sh MIRRORS [extra `trawl eval` flags, e.g. --ranker-l2 0.1]
#
# MIRRORS as for scripts/eval-dev.sh. EVAL_WORK=<dir> keeps the checkouts and the index there
# and reuses them (delete the index after changing the chunker).
set -euo pipefail
cd "$(dirname "$0")/.."
mirrors=${1:?usage: fit-ranker.sh MIRRORS [trawl eval flags]}
# shellcheck source=scripts/work.sh
source scripts/work.sh
checkouts=$(bash scripts/checkouts.sh "$mirrors" "$work" eval/dev/repos.tsv eval/train/repos.tsv)
mapfile -t repos <<< "$checkouts"
cat eval/dev/*.jsonl eval/prose/*.jsonl eval/train/*.jsonl > "$work/pool.jsonl"
store="$work/fit-local"
if [ ! -e "$store/index/CURRENT" ]; then
  echo "== indexing ${#repos[@]} repositories (local model)" >&2
  "$TRAWL" --store "$store" --set "fetch.cache_dir=$work/mirrors" index "${repos[@]}" >&2
fi
"$TRAWL" --store "$store" eval "$work/pool.jsonl" --split tune --train-ranker "${@:2}"

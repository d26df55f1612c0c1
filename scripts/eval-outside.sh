#!/usr/bin/env bash
# Checks outside every set (README, "Retrieval quality"), searched in one index of sixteen
# repositories (the development, training, eval/outside and eval/unseen ones, at their pinned
# commits, whole), as an organisation would index them; the naive baseline is indexed from the
# same checkouts and printed beside each:
# - eval/outside: questions about express and axios, written after the learned ranking was
#   fitted, never tuned on;
# - eval/lookup: pasted errors, config keys and symbols about the four training repositories
#   (whose questions in words are fitted on, but whose lookups never were), by half;
# - eval/unseen: four more repositories in four languages, every kind, by half;
# - eval/keys: config keys, flags, environment variables and options of six of them, by half.
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
checkouts=$(bash scripts/checkouts.sh "$mirrors" "$work" eval/dev/repos.tsv eval/train/repos.tsv eval/outside/repos.tsv eval/unseen/repos.tsv)
mapfile -t repos <<< "$checkouts"
index_pair "$work/outside-local" "$work/naive-outside-local" local "${repos[@]}"
for set in outside lookup unseen keys; do
  cat eval/"$set"/*.jsonl > "$work/$set.jsonl"
  "$TRAWL" --store "$work/outside-local" eval "$work/$set.jsonl" --baseline "$work/naive-outside-local"
done

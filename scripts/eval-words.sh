#!/usr/bin/env bash
# The questions-in-words set (README, "Retrieval quality"): four repositories in four
# languages (eval/words/repos.tsv, at their pinned commits, whole) indexed together and alone,
# as the external evaluation indexes its four; the naive baseline is indexed from the same
# checkouts and printed beside it, by half.
#
#   bash scripts/eval-words.sh MIRRORS [extra `trawl eval` flags, e.g. --ablate]
#
# MIRRORS as for scripts/eval-dev.sh. EVAL_WORK=<dir> keeps the checkouts and the indexes
# there and reuses them (delete them after changing the chunker).
set -euo pipefail
cd "$(dirname "$0")/.."
mirrors=${1:?usage: eval-words.sh MIRRORS [trawl eval flags]}
# shellcheck source=scripts/work.sh
source scripts/work.sh
checkouts=$(bash scripts/checkouts.sh "$mirrors" "$work" eval/words/repos.tsv)
mapfile -t repos <<< "$checkouts"
index_pair "$work/words-local" "$work/naive-words-local" local "${repos[@]}"
cat eval/words/*.jsonl > "$work/words.jsonl"
"$TRAWL" --store "$work/words-local" eval "$work/words.jsonl" --baseline "$work/naive-words-local" "${@:2}"

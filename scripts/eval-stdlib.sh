#!/usr/bin/env bash
# The retrieval evaluation of the README ("Retrieval quality"): a subset of the Python standard
# library indexed four ways (AST chunks or fixed windows × hash or local embedder), each
# searched three ways (BM25 only, vector only, hybrid) with the query set of
# scripts/stdlib_eval.py. Prints one Markdown table per index. Takes ~15 minutes on 2 cores
# with a debug build (the local model embeds ~4,000 chunks twice).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TRAWL:-}" ]; then
  cargo build -q -p trawl-cli
  TRAWL=target/debug/trawl
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 scripts/stdlib_eval.py corpus "$work/stdlib"
python3 scripts/stdlib_eval.py queries "$work/queries.jsonl"
for chunker in ast windows; do
  for embedder in hash local; do
    store="$work/$chunker-$embedder"
    echo "== $chunker chunks, $embedder embedder" >&2
    "$TRAWL" --store "$store" --set "chunk.strategy=$chunker" --set "fetch.cache_dir=$work/mirrors" \
      index "$work/stdlib" --embedder "$embedder" >&2
    "$TRAWL" --store "$store" eval "$work/queries.jsonl" --mode lexical,vector,hybrid \
      --label "$chunker · $embedder" --embedder "$embedder"
  done
done

# Sourced by the evaluation scripts (from the repository's root): sets TRAWL (the debug
# binary, built, unless TRAWL names one) and work (EVAL_WORK, kept, or a temporary directory
# removed on exit).
# shellcheck shell=bash
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

# index_pair STORE NAIVE EMBEDDER REPO...: indexes the checkouts into STORE as trawl does by
# default, and into NAIVE as the naive baseline (1,000-character windows), each with EMBEDDER
# (`local` or `hash`); a store that holds a generation already is kept.
index_pair() {
  local store=$1 naive=$2 embedder=$3
  shift 3
  local s
  for s in "$store" "$naive"; do
    [ -e "$s/index/CURRENT" ] && continue
    local set=()
    [ "$s" = "$naive" ] && set=(--set chunk.strategy=windows)
    echo "== indexing $# repositories into $s ($embedder embedder)" >&2
    "$TRAWL" --store "$s" "${set[@]}" --set "fetch.cache_dir=$work/mirrors" \
      index "$@" --embedder "$embedder" >&2
  done
}

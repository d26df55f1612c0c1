#!/usr/bin/env bash
# The wait of a new user's first index. Each repository given is indexed with `trawl index`
# into a fresh store with the local model, once per run of settings in BENCH_RUNS (by default:
# the defaults, with the embedder below the chunker at `embed.local_nice = 10`; the embedder at
# normal priority; prose told apart by words instead of the model), sequentially on the same
# binary. Reported: the chunks, the time to the first searchable generation (words
# only for the chunks still waiting for vectors), a search run the moment it is live (its time,
# its hits, and whether it said that vectors are still missing), and the time to the full
# semantic generation. Prints a markdown table.
#
#   bash scripts/bench-first-index.sh [REPO...]     (default: this repository)
#
# REPO is a local path (work tree or bare repository) or a clone URL. TRAWL_BIN picks the
# binary (target/debug/trawl by default, built if absent); BENCH_RUNS the runs, separated by
# `;`, each a space-separated list of KEY=VALUE settings (`-` for none); BENCH_QUERY the
# search's words; BENCH_UNTIL=first stops each run once its first generation is live and
# searched (its time then read by this script's clock from the start; no semantic
# generation). The stores are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TRAWL_BIN:-target/debug/trawl}
[ -x "$bin" ] || cargo build -p trawl-cli
bin=$(realpath "$bin")
[ $# -gt 0 ] || set -- "$PWD"
IFS=';' read -r -a runs <<<"${BENCH_RUNS:-"-;embed.local_nice=0;chunk.meaning_model=words"}"
query=${BENCH_QUERY:-"where is the configuration read"}
bash scripts/fetch-model.sh >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# `search_now STORE OUT`: one search, its wall time, its hits and its notes, into OUT.
search_now() {
  local store=$1 out=$2 t0 t1 hits
  t0=$(date +%s.%N)
  hits=$("$bin" --store "$store" search "$query" -k 5 --json 2>"$out.notes" | wc -l) || hits=error
  t1=$(date +%s.%N)
  local waiting=no
  grep -q "still waiting for their vectors" "$out.notes" && waiting=yes
  printf '%.1f %s %s\n' "$(echo "$t1 - $t0" | bc)" "$hits" "$waiting" >"$out"
}

echo "| repository | commit | chunks | settings | first searchable | search then (s · hits · says vectors missing) | semantic generation | chunks/s overall |"
echo "|---|---|---:|---:|---:|---|---:|---:|"
for repo in "$@"; do
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo "?")
  name=$(basename "$(realpath -m "$repo")")
  [ "$name" = repo ] && name=$(basename "$(dirname "$(realpath -m "$repo")")")
  for run in "${runs[@]}"; do
    read -r -a pairs <<<"$run"
    sets=()
    for kv in "${pairs[@]}"; do
      [ "$kv" = - ] || sets+=(--set "$kv")
    done
    label=${run:-"-"}
    [ "$label" = - ] && label="the defaults"
    store="$work/store"
    rm -rf "$store"
    log="$work/log"
    : >"$log"
    rm -f "$work/search"
    echo "== $name at $commit, $label" >&2
    if [ "${BENCH_UNTIL:-}" = first ]; then
      t0=$(date +%s.%N)
      "$bin" --store "$store" "${sets[@]}" index "$repo" >"$log" 2>&1 &
      pid=$!
      until grep -q "is searchable now" "$log" || ! kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      t1=$(date +%s.%N)
      early="—"
      if grep -q "is searchable now" "$log"; then
        early=$(printf '%.1f' "$(echo "$t1 - $t0" | bc)")
        search_now "$store" "$work/search"
      fi
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      chunks=$("$bin" --store "$store" sql --csv "select count(*) from chunks" 2>/dev/null | tail -1 || echo "?")
      then="—"
      [ -f "$work/search" ] && then=$(awk '{print $1 " s · " $2 " · " $3}' "$work/search")
      echo "| $name | $commit | ${chunks:-?} (live then) | $label | $early s | $then | (stopped) | |"
      grep -E "searchable now" "$log" >&2 || true
      continue
    fi
    "$bin" --store "$store" "${sets[@]}" index "$repo" 2>&1 |
      while IFS= read -r line; do
        printf '%s\n' "$line" >>"$log"
        case $line in
          *"is searchable now"*) search_now "$store" "$work/search" & ;;
        esac
      done
    wait
    chunks=$(sed -n 's/.*chunk *[0-9]* files → \([0-9]*\) chunks.*/\1/p' "$log" | head -1)
    total=$(sed -n 's/^index: .* in \([0-9.]*\) s.*/\1/p' "$log" | head -1)
    early=$(sed -n 's/.*was searchable after \([0-9.]*\) s.*/\1/p' "$log" | head -1)
    then="—"
    [ -f "$work/search" ] && then=$(awk '{print $1 " s · " $2 " · " $3}' "$work/search")
    rate="—"
    [ -n "$total" ] && [ -n "$early" ] && [ -n "$chunks" ] &&
      rate=$(echo "scale=1; $chunks / $total" | bc)
    echo "| $name | $commit | ${chunks:-?} | $label | ${early:-—} s | $then | ${total:-?} s | $rate |"
    grep -E "^(index|  (chunk|embed|index|early))" "$log" >&2 || true
  done
done

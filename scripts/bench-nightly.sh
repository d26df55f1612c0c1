#!/usr/bin/env bash
# What a nightly run costs against what changed: N small local repositories (8 files of the
# Python standard library each), indexed with the hash embedder (so the model's speed is not
# what is measured), then indexed again unchanged, then with 1 % of the repositories changed.
# Each run's time and peak RSS (`/usr/bin/time -f %M`), and the compactor's alone rebuilding
# everything (`compact --full`); then the store's object count, the time
# and result of `trawl sql` counting the chunks (checked against the live generation's
# `counts.chunks`), one grouped query and one lexical search. Prints two markdown tables; ratios
# are against the first run, measured in the same run. The work directory is removed at exit.
#
#   bash scripts/bench-nightly.sh [N]        (default 200)
#
# TRAWL_BIN=path picks the binary (target/debug/trawl by default, built if absent);
# TRAWL_BASELINE_BIN=path adds another build's `compact --full` on the same store;
# BENCH_WORD=word is the search's query (default "connection"); BENCH_KEEP=dir builds the
# repositories and the store in dir and keeps them (to replay a night with TRAWL_LOG=debug).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
bin=${TRAWL_BIN:-target/debug/trawl}
[ -x "$bin" ] || cargo build -p trawl-cli
bin=$(realpath "$bin")
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
if [ -n "${BENCH_KEEP:-}" ]; then
  work=$(realpath -m "$BENCH_KEEP")
  [ ! -e "$work" ] || { echo "bench-nightly: $work exists; BENCH_KEEP wants a new directory" >&2; exit 1; }
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
# The store and the repositories take ~1.9 MB a repository (37.6 GB at N = 20,500, hash
# embedder): refuse to start where the run would fill the disk half-way (a 5M-chunk run did).
need_kb=$(( n * 2 * 1024 ))
free_kb=$(df -Pk "$work" | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt "$need_kb" ]; then
  echo "bench-nightly: $work has $(( free_kb / 1024 )) MB free; $n repositories need about $(( need_kb / 1024 )) MB" >&2
  [ -z "${BENCH_KEEP:-}" ] || rmdir "$work"
  exit 1
fi
mapfile -t files < <(find "$stdlib" -maxdepth 1 -name '*.py' -size -40k | sort | head -400)
echo "== $n repositories of 8 files each under $work" >&2
: >"$work/repos.toml"
make_repo() {
  local i=$1 r="$work/repos/r$1" j f
  mkdir -p "$r"
  for j in $(seq 0 7); do
    f=${files[$(( (i * 8 + j) % ${#files[@]} ))]}
    cp "$f" "$r/"
  done
  git -C "$r" init -q -b main
  git -C "$r" add -A
  git -C "$r" -c user.name=bench -c user.email=bench@example.com commit -q -m "r$i"
}
# Made a few at a time (10,000 take minutes one by one); listed in order.
for i in $(seq 1 "$n"); do
  make_repo "$i" &
  (( i % 16 == 0 )) && wait
  printf '[[repo]]\nurl = "%s"\n\n' "$work/repos/r$i" >>"$work/repos.toml"
done
wait

[ -x /usr/bin/time ] || { echo "bench-nightly: /usr/bin/time (GNU time) is needed for peak RSS" >&2; exit 1; }

# Runs "$@" in $work with stdout to $work/last.out; sets secs and rss (peak RSS, KiB). Not in
# a subshell, so that a failing command ends the script.
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$work" && /usr/bin/time -f "%M" -o "$work/last.rss" "$@" >"$work/last.out" 2>"$work/last.err") \
    || { cat "$work/last.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
  rss=$(tail -1 "$work/last.rss")
}

run() { timed "$bin" index --repos repos.toml --embedder hash; }

run; first=$secs first_rss=$rss
run; unchanged=$secs unchanged_rss=$rss
changed_n=$(( n / 100 > 0 ? n / 100 : 1 ))
for i in $(seq 1 "$changed_n"); do
  r="$work/repos/r$i"
  printf '\n\ndef bench_added_%s():\n    return %s\n' "$i" "$i" >>"$(ls "$r"/*.py | head -1)"
  git -C "$r" -c user.name=bench -c user.email=bench@example.com commit -q -am change
done
run; changed=$secs changed_rss=$rss

# The compactor alone, rebuilding everything: its peak RSS against the corpus. Shards are
# BENCH_SHARDS (default: one per 75 repositories, ~18,000 chunks each, so that the shard size
# stays fixed as N grows); it reads the live set in pieces of BENCH_SPILL_MB (compact.spill_memory_mb).
shards=${BENCH_SHARDS:-$(( n / 75 > 0 ? n / 75 : 1 ))}
spill_mb=${BENCH_SPILL_MB:-512}
timed "$bin" --set "compact.shards=$shards" --set "compact.spill_memory_mb=$spill_mb" compact --full --embedder hash
full=$secs full_rss=$rss
# TRAWL_BASELINE_BIN=path: another build (an earlier commit) rebuilds the same store beside,
# with the same shards (and its own defaults otherwise).
base_full=0 base_rss=0
if [ -n "${TRAWL_BASELINE_BIN:-}" ]; then
  timed "$(realpath "$TRAWL_BASELINE_BIN")" --set "compact.shards=$shards" compact --full --embedder hash
  base_full=$secs base_rss=$rss
fi

objects=$(find "$work/.trawl" -type f | wc -l)
live_chunks=$(python3 - "$work/.trawl" <<'EOF'
import json, os, sys
store = sys.argv[1]
cur = json.load(open(os.path.join(store, "index", "CURRENT")))
m = json.load(open(os.path.join(store, "index", f"gen={cur['generation']}", "manifest.json")))
print(m["counts"]["chunks"])
EOF
)
timed "$bin" sql --csv "select count(*), count(distinct repo_id) from chunks"; count_s=$secs
count_row=$(tail -1 "$work/last.out" | tr -d '\r')
timed "$bin" sql --csv "select language, count(*) from chunks group by language"; group_s=$secs
group_rows=$(( $(wc -l <"$work/last.out") - 1 ))
word=${BENCH_WORD:-connection}
timed "$bin" search "$word" --mode lexical -k 5; search_s=$secs
search_hits=$(grep -cE '^ *[0-9]+\. ' "$work/last.out" || true)

python3 - "$n" "$first" "$first_rss" "$unchanged" "$unchanged_rss" "$changed_n" "$changed" \
  "$changed_rss" "$objects" "$count_s" "$count_row" "$live_chunks" "$group_s" "$group_rows" \
  "$word" "$search_s" "$search_hits" "$shards" "$spill_mb" "$full" "$full_rss" "$base_full" \
  "$base_rss" <<'EOF'
import sys
a = sys.argv[1:]
n, first, first_rss, unchanged, unchanged_rss, k, changed, changed_rss = a[:8]
objects, count_s, count_row, live, group_s, group_rows, word, search_s, hits = a[8:17]
shards, spill_mb, full, full_rss, base_full, base_rss = a[17:]
first, unchanged, changed = float(first), float(unchanged), float(changed)
mb = lambda kib: f"{int(kib) / 1024:,.0f}"
print(f"| run ({n} repositories) | seconds | % of first | peak RSS MB |")
print("|---|---:|---:|---:|")
print(f"| first `trawl index --repos` | {first:.1f} | 100 % | {mb(first_rss)} |")
print(f"| again, nothing changed | {unchanged:.1f} | {100 * unchanged / first:.1f} % | {mb(unchanged_rss)} |")
print(f"| {k} repositories changed (one file each) | {changed:.1f} | {100 * changed / first:.1f} % | {mb(changed_rss)} |")
print(f"| `trawl compact --full`, {shards} shards, live set read in {spill_mb} MB pieces | {float(full):.1f} | {100 * float(full) / first:.0f} % | {mb(full_rss)} |")
if int(base_rss):
    print(f"| the same by the baseline build | {float(base_full):.1f} | {100 * float(base_full) / first:.0f} % | {mb(base_rss)} |")
print()
rows, repos = (count_row.split(",") + ["?"])[:2]
same = "equal" if rows.strip() == live.strip() else "**differs**"
print("| query | seconds | result |")
print("|---|---:|---|")
print(f"| objects under the store (`find .trawl -type f`) | | {int(objects):,} |")
print(f"| `trawl sql \"select count(*), count(distinct repo_id) from chunks\"` | {float(count_s):.2f} "
      f"| {int(rows):,} chunks in {repos} repositories; live generation's `counts.chunks` "
      f"{int(live):,}: {same} |")
print(f"| `trawl sql \"select language, count(*) from chunks group by language\"` | {float(group_s):.2f} | {group_rows} language{'' if group_rows == '1' else 's'} |")
print(f"| `trawl search \"{word}\" --mode lexical -k 5` | {float(search_s):.2f} | {hits} results |")
EOF

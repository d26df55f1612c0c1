#!/usr/bin/env bash
# What a nightly run costs against what changed: N small local repositories (8 files of the
# Python standard library each), indexed with the hash embedder (so the model's speed is not
# what is measured), then indexed again unchanged, then with 1 % of the repositories changed.
# Prints one table; ratios are against the first run, measured in the same run.
#
#   bash scripts/bench-nightly.sh [N]        (default 200; TRAWL_BIN=path picks the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
bin=${TRAWL_BIN:-target/debug/trawl}
[ -x "$bin" ] || cargo build -p trawl-cli
bin=$(realpath "$bin")
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mapfile -t files < <(find "$stdlib" -maxdepth 1 -name '*.py' -size -40k | sort | head -400)
echo "== $n repositories of 8 files each under $work" >&2
: >"$work/repos.toml"
for i in $(seq 1 "$n"); do
  r="$work/repos/r$i"
  mkdir -p "$r"
  for j in $(seq 0 7); do
    f=${files[$(( (i * 8 + j) % ${#files[@]} ))]}
    cp "$f" "$r/"
  done
  git -C "$r" init -q -b main
  git -C "$r" add -A
  git -C "$r" -c user.name=bench -c user.email=bench@example.com commit -q -m "r$i"
  printf '[[repo]]\nurl = "%s"\n\n' "$r" >>"$work/repos.toml"
done

run() {
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$work" && "$bin" index --repos repos.toml --embedder hash >/dev/null 2>"$work/last.err") \
    || { cat "$work/last.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}

first=$(run)
unchanged=$(run)
changed_n=$(( n / 100 > 0 ? n / 100 : 1 ))
for i in $(seq 1 "$changed_n"); do
  r="$work/repos/r$i"
  printf '\n\ndef bench_added_%s():\n    return %s\n' "$i" "$i" >>"$(ls "$r"/*.py | head -1)"
  git -C "$r" -c user.name=bench -c user.email=bench@example.com commit -q -am change
done
changed=$(run)

python3 - "$n" "$first" "$unchanged" "$changed_n" "$changed" <<'EOF'
import sys
n, first, unchanged, k, changed = sys.argv[1], *map(float, sys.argv[2:4]), sys.argv[4], float(sys.argv[5])
print(f"| run ({n} repositories) | seconds | of the first run |")
print("|---|---:|---:|")
print(f"| first `trawl index --repos` | {first:.1f} | 100 % |")
print(f"| again, nothing changed | {unchanged:.1f} | {100 * unchanged / first:.0f} % |")
print(f"| {k} repositories changed (one file each) | {changed:.1f} | {100 * changed / first:.0f} % |")
EOF

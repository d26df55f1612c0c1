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

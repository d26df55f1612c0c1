#!/usr/bin/env bash
# Checks out each repository of a list (`name<TAB>owner/name<TAB>commit<TAB>language` lines,
# `#` comments) at its pinned commit under WORK/repos/<name>, from the clones in MIRRORS
# (`<owner>+<name>` or `<owner>+<name>/repo`, bare or not); nothing is downloaded. A checkout
# already there is kept. Prints the checkouts' paths, one per line.
#
#   bash scripts/checkouts.sh MIRRORS WORK LIST.tsv...
set -euo pipefail
mirrors=${1:?usage: checkouts.sh MIRRORS WORK LIST.tsv...}
work=${2:?usage: checkouts.sh MIRRORS WORK LIST.tsv...}
shift 2
for list in "$@"; do
  while IFS=$'\t' read -r name repo commit _lang; do
    case "$name" in '#'*|'') continue ;; esac
    dest="$work/repos/$name"
    if [ ! -d "$dest/.git" ]; then
      src="$mirrors/${repo/\//+}"
      [ -d "$src/repo" ] && src="$src/repo"
      if [ ! -d "$src" ]; then
        echo "checkouts: no clone of $repo at $src (clone it there, with commit $commit)" >&2
        exit 2
      fi
      git clone -q --no-checkout "$src" "$dest"
      git -C "$dest" -c advice.detachedHead=false checkout -q "$commit"
    fi
    echo "$dest"
  done < "$list"
done

#!/usr/bin/env bash
# Fails when a stage includes the headers of a later one. Data flows one
# way: loader -> collect -> signals -> policy -> actuate -> export -> app,
# over the plain types of abi, util, model and config, which include no stage.
#
#   scripts/check-layers.sh [ROOT]     prints each wrong include; exit 1 if any
set -euo pipefail
root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}

declare -A rank=([abi]=0 [util]=0 [model]=1 [config]=2 [loader]=3 [collect]=4
                 [signals]=5 [policy]=6 [actuate]=7 [export]=8 [app]=9)
bad=0 files=0
for stage in "${!rank[@]}"; do
  for dir in "$root/include/khagent/$stage" "$root/userspace/$stage"; do
    [[ -d "$dir" ]] || continue
    while IFS= read -r -d '' f; do
      files=$((files + 1))
      while IFS= read -r line; do
        dep=${line#*khagent/}
        dep=${dep%%/*}
        if [[ -z "${rank[$dep]+x}" ]]; then
          echo "${f#"$root"/}: includes khagent/$dep/, which is no known stage" >&2
          bad=1
        elif ((rank[$dep] > rank[$stage])) || { ((rank[$dep] == rank[$stage])) && [[ "$dep" != "$stage" ]]; }; then
          echo "${f#"$root"/}: $stage includes $dep ($line)" >&2
          bad=1
        fi
      done < <(grep -oE '#include "khagent/[a-z_]+/[^"]+"' "$f" || true)
    done < <(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
  done
done
if ((files == 0)); then
  echo "check-layers: no sources under $root" >&2
  exit 1
fi
if ((bad)); then
  echo "check-layers: a stage includes a later one (order: loader collect signals policy actuate export app)" >&2
  exit 1
fi
echo "check-layers: $files files, every include points to its own or an earlier stage"

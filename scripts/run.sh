#!/usr/bin/env bash
# Sets up this machine, builds khagent and runs it as root with its built-in
# defaults.
#   scripts/run.sh              the agent (`khagent run`): protects online pods
#   scripts/run.sh observe ...  the live per-cgroup table (`khagent observe`)
#   scripts/run.sh CMD ARGS...  any other khagent command (try `help`)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "run.sh: khagent loads BPF programs and writes cgroups; it needs root (sudo $0 $*)" >&2
  exit 2
fi
"$root/scripts/setup.sh" --agent
# Only the agent is built here (scripts/test.sh builds the rest in the same
# folder), with the progress on one line per tenth.
mkdir -p "$root/build"
log="$root/build/run-build.log"
if [[ -x "$root/build/khagent" ]]; then
  echo "run.sh: bringing the build of khagent up to date (log: $log)" >&2
else
  echo "run.sh: building khagent, a few minutes the first time on 2 cores (log: $log)" >&2
fi
if ! KHAGENT_TARGET=khagent "$root/scripts/build.sh" "$root/build" 2>&1 | tee "$log" |
  awk '/^\[ *[0-9]+%\]/ { s = $0; sub(/^\[ */, "", s); sub(/%.*/, "", s); p = s + 0
         if (p >= last + 10) { printf "run.sh: built %d%%\n", p; last = p; fflush() } }' >&2; then
  echo "run.sh: the build failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
cmd="${1:-run}"
(($#)) && shift
[[ "$cmd" == help ]] && exec "$root/build/khagent" --help
exec "$root/build/khagent" "$cmd" "$@"

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
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build" >/dev/null
cmd="${1:-run}"
(($#)) && shift
[[ "$cmd" == help ]] && exec "$root/build/khagent" --help
exec "$root/build/khagent" "$cmd" "$@"

#!/usr/bin/env bash
# Sets up this machine, builds khagent and runs it as root with its built-in
# defaults: a live table of every cgroup v2's run-queue latency, its causes and
# who held the CPU. Extra arguments go to `khagent observe` (try --help).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "run.sh: khagent loads BPF programs and needs root; try: sudo $0 $*" >&2
  exit 2
fi
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build" >/dev/null
exec "$root/build/khagent" observe "$@"

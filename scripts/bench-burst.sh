#!/usr/bin/env bash
# CPU burst, side by side: each shape of self-throttling (work per request
# under, at and over quota + burst; request periods that are and are not
# multiples of the CFS period; two threads) alone in a pod with a 0.2 CPU
# quota on the pod and its container, as the kubelet writes it; its
# response p99 without khagent and with it (on its defaults), in
# interleaved rounds. Needs root; about 2.5 minutes with the defaults.
#
#   scripts/bench-burst.sh
#   ROUNDS=3 WINDOW_S=10 scripts/bench-burst.sh
#
# Environment: ROUNDS rounds of every shape [2]; WINDOW_S seconds measured
# without and with the agent, each [6]; BURST_SHARE the agent's
# online.burst_share [its default, 0.5]; BUILD_DIR [build/]. The last line
# states the goal's figures.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  echo "bench-burst.sh: the benchmark writes cgroups and runs the agent; it needs root" >&2
  exit 2
fi
dir="${BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh" >/dev/null
KHAGENT_TARGET=khagent_burst_bench "$root/scripts/build.sh" "$dir" >/dev/null
KHAGENT_TARGET=khagent "$root/scripts/build.sh" "$dir" >/dev/null
"$dir/tests/bench/khagent_burst_bench" --gtest_brief=1

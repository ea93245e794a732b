#!/usr/bin/env bash
# The agent acting, without a cluster: boots Debian's 6.1 kernel in QEMU and
# runs the end-to-end case there. An online wake-up latency probe (1 ms
# period, like cyclictest in SCHED_OTHER mode) sits in a cgroup laid out like
# a Kubernetes Burstable pod; four CPU hogs sit in a YARN NodeManager-style
# hadoop-yarn/container_* tree. Side by side: the hogs with khagent off, and
# with khagent on in four profiles (defaults: cpu.idle; quota: plus cpu.max;
# cpuset: plus cpuset.cpus; ladder: the cpuset rung climbed and judged),
# each showing the offline CPU the kernel let through, the waits the agent
# measured and what it wrote when. The probe's latencies are printed too,
# but the guest's clock is emulated: latency claims are the host tier's
# (tests/host) and scripts/bench-service.sh's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" >/dev/null
"$root/scripts/build.sh" "$root/build" >/dev/null
log="$root/build/demo-console.log"
set +e
out=$("$root/vmtest/run.sh" --log "$log" \
  --include "$root/build/khagent" --include "$root/build/tests/khagent_vm_tests" \
  -- "$root/build/tests/khagent_vm_tests" --gtest_filter='VmSuite.AgentLeversTakeEffectAndAreRestored' 2>&1)
rc=$?
set -e
# The test's own lines (not gtest's, not the agent's configuration dump).
echo "$out" | sed -n '/RUN .*AgentLeversTakeEffectAndAreRestored/,/OK \]\|FAILED \]/p' |
  grep -vE $'^(\e|\\[|20[0-9][0-9]-|[a-z_]+:( |$))' | grep -vE '^ ( [^+]|[^ ])' || true
if ((rc != 0)); then
  echo "demo: the run failed (exit $rc); the guest's console is in $log" >&2
  exit "$rc"
fi

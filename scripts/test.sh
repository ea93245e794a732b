#!/usr/bin/env bash
# Sets up this machine, builds khagent, checks the code's layout and runs
# clang-tidy (scripts/lint.sh), and runs every test tier:
#   unit  (no root)          tests/unit
#   yarn  (Java)             tests/yarn: a real ResourceManager and NodeManager
#                            (MiniYARNCluster from tests/yarn-mini), about a minute
#   kube  (Go-built)         tests/kube: the capacity publisher against a real
#                            kube-apiserver and etcd (scripts/kube-mini.sh), 10 s
#   host  (root, real BPF)   tests/host; the only tier that judges latency
#   vmtest (QEMU)            one boot per kernel (Debian's 6.1 and 6.12) runs the
#                            host tier and the in-guest suite, two more boots a
#                            hybrid layout and 128 possible CPUs; mechanisms only
# then builds again with clang-19, AddressSanitizer and
# UndefinedBehaviorSanitizer, runs the unit and host tiers once more, and
# fuzzes every parser of outside input (scripts/fuzz.sh: an optimized
# libFuzzer build of the parsers' libraries only, FUZZ_SECONDS a target).
# Exits non-zero on any failure.
# Each step's duration is printed as it ends, and all of them at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

names=()
secs=()
current=""
started=$SECONDS
step_start=$SECONDS
end_step() {
  [[ -n "$current" ]] || return 0
  local d=$((SECONDS - step_start))
  names+=("$current")
  secs+=("$d")
  printf '=== %s: %dm%02ds ===\n' "$current" $((d / 60)) $((d % 60))
  current=""
}
step() {
  end_step
  current="$1"
  step_start=$SECONDS
  printf '\n=== %s ===\n' "$*"
}
summary() {
  local rc=$?
  ((rc == 0)) || printf '\n=== FAILED in: %s ===\n' "${current:-?}"
  end_step
  printf '\n%-62s %8s\n' "step" "time"
  for i in "${!names[@]}"; do
    printf '%-62s %5dm%02ds\n' "${names[$i]}" $((secs[i] / 60)) $((secs[i] % 60))
  done
  local t=$((SECONDS - started))
  printf '%-62s %5dm%02ds\n' "total" $((t / 60)) $((t % 60))
  exit "$rc"
}
trap summary EXIT

step setup
scripts/setup.sh

step build
# The folder scripts/run.sh builds the agent in, with the same options
# (warnings are errors), so nothing it built is built again.
scripts/build.sh "$root/build"

step "lint: clang-format and clang-tidy (.clang-format, .clang-tidy)"
scripts/lint.sh "$root/build"

step "unit, yarn, kube and host tests"
ctest --test-dir "$root/build" --output-on-failure -L 'unit|yarn|kube|host' -j1
# The host tier's latency verdicts, and how noisy the host was, even when they passed.
echo "The protection test's figures (tests/host/protection_host_test.cpp):"
grep -hE '^(probe response p99|khagent against|host noise|offline CPU s per|rounds with cpu.idle)' \
  "$root/build/Testing/Temporary/LastTest.log" | sed 's/^/  /' || true

step "vmtest: host tier and suite in QEMU on Debian's 6.1 and 6.12 kernels"
ctest --test-dir "$root/build" --output-on-failure -L vmtest

step "sanitizer build (clang-19, ASan + UBSan)"
KHAGENT_SANITIZE=1 scripts/build.sh "$root/build-asan" -DKHAGENT_WERROR=ON

step "unit and host tests under ASan + UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The agent's RSS budget is checked in the plain build only: ASan's shadow
# memory and quarantine multiply RSS (about 500 MiB here) whatever the code.
# The yarn tier is not run again: the same client code runs under the
# sanitizers in the unit tier (against an in-process RM) and in the fuzz
# targets (the RM's answers).
ctest --test-dir "$root/build-asan" --output-on-failure -L 'unit|host' -j1 -E '^MemoryHost\.AgentRssWith4096Cgroups$'

step "fuzz: libFuzzer on every parser of outside input (${FUZZ_SECONDS:-20}s a target)"
# Its own build: the sanitizer build above is unoptimized, and libFuzzer
# gets 2-500x fewer inputs through it in the same time.
unset ASAN_OPTIONS UBSAN_OPTIONS
scripts/fuzz.sh
end_step
printf '\n=== all tiers passed ===\n'

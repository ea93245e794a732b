#!/usr/bin/env bash
# Sets up this machine, builds khagent, checks the code's layout and runs
# clang-tidy (scripts/lint.sh), and runs every test tier:
#   unit  (no root)          tests/unit
#   yarn  (Java)             tests/yarn: a real ResourceManager and NodeManager
#                            (MiniYARNCluster from tests/yarn-mini), about a minute
#   host  (root, real BPF)   tests/host
#   vmtest (QEMU)            the host tier and the in-guest suite in VMs on Debian's 6.1 and 6.12 kernels
# then builds again with AddressSanitizer + UndefinedBehaviorSanitizer and runs
# the unit and host tiers once more, and fuzzes every parser of outside input
# (scripts/fuzz.sh, FUZZ_SECONDS a target). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n=== %s ===\n' "$*"; }

step setup
scripts/setup.sh

step build
# Warnings are errors here (not in a user's build: KHAGENT_WERROR is off by default).
scripts/build.sh "$root/build" -DKHAGENT_WERROR=ON

step "lint: clang-format and clang-tidy (.clang-format, .clang-tidy)"
scripts/lint.sh "$root/build"

step "unit, yarn and host tests"
ctest --test-dir "$root/build" --output-on-failure -L 'unit|yarn|host' -j1

step "vmtest: host tier and suite in QEMU on Debian's 6.1 and 6.12 kernels"
ctest --test-dir "$root/build" --output-on-failure -L vmtest

step "sanitizer build (ASan + UBSan)"
KHAGENT_SANITIZE=1 scripts/build.sh "$root/build-asan" -DKHAGENT_WERROR=ON

step "unit, yarn and host tests under ASan + UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The agent's RSS budget is checked in the plain build only: ASan's shadow
# memory and quarantine multiply RSS (about 500 MiB here) whatever the code.
ctest --test-dir "$root/build-asan" --output-on-failure -L 'unit|yarn|host' -j1 -E '^MemoryHost\.AgentRssWith4096Cgroups$'

step "fuzz: libFuzzer on every parser of outside input (${FUZZ_SECONDS:-20}s a target)"
scripts/fuzz.sh

step "all tiers passed"

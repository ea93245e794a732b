#!/usr/bin/env bash
# Configures and builds khagent.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/. Set KHAGENT_TARGET to build one target (the
# agent alone: khagent), KHAGENT_SANITIZE=1 for an ASan+UBSan build
# (clang-19, unoptimized: it builds in about a third of the time gcc takes),
# KHAGENT_FUZZ=1 for the libFuzzer targets only (clang-19; scripts/fuzz.sh).
# Warnings are errors (KHAGENT_WERROR=ON) on the Debian 12 toolchain these
# scripts install, so that scripts/run.sh and scripts/test.sh share one
# build folder; a hand-made cmake build keeps the default OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
args=(-DKHAGENT_WERROR=ON)
if [[ "${KHAGENT_SANITIZE:-0}" == 1 ]]; then
  args+=(-DKHAGENT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19)
fi
if [[ "${KHAGENT_FUZZ:-0}" == 1 ]]; then
  args+=(-DKHAGENT_FUZZ=ON -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19)
fi
cmake -S "$root" -B "$dir" "${args[@]}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" ${KHAGENT_TARGET:+--target "$KHAGENT_TARGET"}

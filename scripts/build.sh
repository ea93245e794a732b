#!/usr/bin/env bash
# Configures and builds khagent.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/. Set KHAGENT_SANITIZE=1 for an ASan+UBSan build
# (clang-19, unoptimized: it builds in about a third of the time gcc takes),
# KHAGENT_FUZZ=1 for the libFuzzer targets only (clang-19; scripts/fuzz.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
args=()
if [[ "${KHAGENT_SANITIZE:-0}" == 1 ]]; then
  args+=(-DKHAGENT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19)
fi
if [[ "${KHAGENT_FUZZ:-0}" == 1 ]]; then
  args+=(-DKHAGENT_FUZZ=ON -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19)
fi
cmake -S "$root" -B "$dir" "${args[@]}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"

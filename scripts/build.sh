#!/usr/bin/env bash
# Configures and builds khagent.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/. Set KHAGENT_SANITIZE=1 for an ASan+UBSan build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
args=()
if [[ "${KHAGENT_SANITIZE:-0}" == 1 ]]; then
  args+=(-DKHAGENT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
fi
cmake -S "$root" -B "$dir" "${args[@]}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"

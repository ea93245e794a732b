#!/usr/bin/env bash
# Style and static checks of the project's C++ code, run by scripts/test.sh:
#   clang-format   the layout in .clang-format, on userspace/, include/khagent/
#                  and tests/ (not bpf/ nor include/khagent/abi/: C shared with
#                  the BPF side, in the kernel's style)
#   clang-tidy     the checks in .clang-tidy, on every source of userspace/,
#                  with the compile commands of a configured build
#
#   scripts/lint.sh [BUILD_DIR]    BUILD_DIR defaults to build/; exit 1 on any finding
#   scripts/lint.sh --fix          rewrites the files clang-format would change
#
# Needs clang-format-19 and clang-tidy-19 (scripts/setup.sh installs them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

fix=0
if [[ "${1:-}" == --fix ]]; then fix=1; shift; fi
build_dir="${1:-$root/build}"
format=clang-format-19
tidy=clang-tidy-19
for t in "$format" "$tidy"; do
  command -v "$t" >/dev/null || { echo "lint: $t is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

mapfile -t sources < <(find userspace include/khagent tests -type f \( -name '*.cpp' -o -name '*.h' \) \
                         -not -path 'include/khagent/abi/*' | sort)
((${#sources[@]})) || { echo "lint: no sources found" >&2; exit 1; }

if ((fix)); then
  "$format" -i "${sources[@]}"
  echo "lint: formatted ${#sources[@]} files"
  exit 0
fi

status=0
if ! "$format" --dry-run --Werror "${sources[@]}" 2>"$build_dir/lint-format.log"; then
  grep -E '^[^ ].*: error:' "$build_dir/lint-format.log" | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
  echo "lint: the files above differ from .clang-format (scripts/lint.sh --fix rewrites them)" >&2
  status=1
else
  echo "lint: clang-format: ${#sources[@]} files as .clang-format says"
fi

[[ -f "$build_dir/compile_commands.json" ]] ||
  { echo "lint: no $build_dir/compile_commands.json: configure the build first (scripts/build.sh)" >&2; exit 1; }
mapfile -t units < <(find userspace -type f -name '*.cpp' | sort)
log="$build_dir/lint-tidy.log"
# The compile commands are gcc's; as for the project's clang build, two clang
# warnings about system and libbpf headers are off: libstdc++ 12's
# get_temporary_buffer (deprecated) and libbpf's LIBBPF_OPTS (designated
# initializers that leave fields out on purpose). GCC-only options in them
# (-Wno-restrict for GCC 12) are unknown to clang: not an error here.
tidy_args=(--extra-arg=-Wno-deprecated-declarations --extra-arg=-Wno-missing-designated-field-initializers
           --extra-arg=-Wno-unknown-warning-option)
# One process per source, two at a time; each prints its findings.
if ! printf '%s\n' "${units[@]}" |
     xargs -P "$(nproc)" -n 1 "$tidy" -p "$build_dir" --quiet "${tidy_args[@]}" >"$log" 2>&1; then
  grep -E '(warning|error): ' "$log" | sort -u >&2 || cat "$log" >&2
  echo "lint: clang-tidy found the problems above (checks in .clang-tidy)" >&2
  status=1
else
  echo "lint: clang-tidy: ${#units[@]} sources clean"
fi
exit "$status"

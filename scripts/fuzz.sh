#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: one per parser of outside input)
# with clang-19, AddressSanitizer and UndefinedBehaviorSanitizer in
# build-fuzz/, then runs each one for a bounded time, starting from a copy
# of its seed corpus (tests/fuzz/corpus/<target>; the repository is never
# written to). Exits non-zero if any target crashed, leaked, tripped a
# sanitizer, a property check or the time or memory limit, naming the
# target and the input that did it.
#
#   scripts/fuzz.sh [TARGET...]     default: every target in tests/fuzz/corpus
#
# Environment:
#   FUZZ_SECONDS    fuzzing time per target (default 20)
#   FUZZ_RSS_MB     memory limit per target, -rss_limit_mb (default 512)
#   FUZZ_TIMEOUT    seconds one input may take, -timeout (default 10)
#   FUZZ_BUILD_DIR  build directory (default build-fuzz/)
#   FUZZ_OUT        where working corpora, logs and reproducers go (default:
#                   a new directory under $TMPDIR, removed when all passed)
#   FUZZ_BUILD=0    use the targets already built
#
# Reproduce a finding:  build-fuzz/tests/fuzz/fuzz_<target> <reproducer file>
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${FUZZ_SECONDS:-20}"
rss_mb="${FUZZ_RSS_MB:-512}"
timeout_s="${FUZZ_TIMEOUT:-10}"
build_dir="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
corpus_root="$root/tests/fuzz/corpus"

# The longest input each target is given while mutating, in bytes: room
# above the real documents' shapes, small enough to keep runs fast. A seed
# longer than this raises it (libFuzzer would cut the seed otherwise).
declare -A max_len=(
  [config]=16384 [kubelet_pods]=65536 [yarn_rest]=65536 [state_file]=8192
  [cpustat]=4096 [cpu_list]=4096 [mountinfo]=8192 [cpu_manager_state]=16384
  [cgroup_value]=8192 [kube_node]=16384
)

if (($# > 0)); then
  targets=("$@")
else
  targets=()
  for d in "$corpus_root"/*/; do targets+=("$(basename "$d")"); done
fi

if [[ "${FUZZ_BUILD:-1}" != 0 ]]; then
  echo "fuzz: building the targets in $build_dir"
  KHAGENT_FUZZ=1 scripts/build.sh "$build_dir"
fi

if [[ -n "${FUZZ_OUT:-}" ]]; then
  out="$FUZZ_OUT"
  mkdir -p "$out"
else
  out="$(mktemp -d "${TMPDIR:-/tmp}/khagent-fuzz.XXXXXX")"
fi

# Leaks are errors; UBSan stops at the first report (the build also sets
# -fno-sanitize-recover); a sanitizer report ends the run as a crash that
# libFuzzer saves the input of. ASan's quarantine of freed memory (256 MB by
# default) would count against the RSS limit as if the parser held it: a
# smaller one keeps the limit about what the code keeps.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:handle_abort=1:symbolize=1:quarantine_size_mb=32"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:symbolize=1"
llvm_symbolizer="$(command -v llvm-symbolizer-19 || command -v /usr/lib/llvm-19/bin/llvm-symbolizer || true)"
if [[ -n "$llvm_symbolizer" ]]; then
  export ASAN_SYMBOLIZER_PATH="$llvm_symbolizer"
  export UBSAN_SYMBOLIZER_PATH="$llvm_symbolizer"
fi

failed=()
for t in "${targets[@]}"; do
  bin="$build_dir/tests/fuzz/fuzz_$t"
  seeds="$corpus_root/$t"
  if [[ ! -x "$bin" || ! -d "$seeds" ]]; then
    echo "fuzz: no target '$t' (want $bin and $seeds)" >&2
    failed+=("$t")
    continue
  fi
  work="$out/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp -r "$seeds/." "$work/corpus/"
  len="${max_len[$t]:-4096}"
  biggest="$(find "$seeds" -type f -printf '%s\n' | sort -n | tail -1)"
  ((${biggest:-0} > len)) && len="$biggest"

  printf 'fuzz: %-18s %3ss, max_len %s, rss %s MB ... ' "$t" "$seconds" "$len" "$rss_mb"
  rc=0
  "$bin" "$work/corpus" \
    -max_total_time="$seconds" -max_len="$len" -rss_limit_mb="$rss_mb" -timeout="$timeout_s" \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    >"$work/log" 2>&1 || rc=$?
  # A report with exit status 0 cannot happen with these options; check the
  # log as well so that it could not pass unnoticed.
  if ((rc == 0)) && grep -qE '^==[0-9]+==ERROR|runtime error:|^SUMMARY: |fuzz property failed' "$work/log"; then
    rc=1
  fi
  runs="$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$work/log" | grep -oE '[0-9]+$' || true)"
  if ((rc == 0)); then
    echo "ok (${runs:-?} inputs)"
    continue
  fi
  echo "FAILED (exit $rc)"
  failed+=("$t")
  grep -E '^==[0-9]+==ERROR|runtime error:|^SUMMARY: |fuzz property failed|libFuzzer: (timeout|out-of-memory|deadly signal)' \
    "$work/log" | head -5 | sed 's/^/  /'
  found=0
  for f in "$work/artifacts"/*; do
    [[ -e "$f" ]] || continue
    found=1
    echo "  reproducer: $f"
    echo "  reproduce:  $bin $f"
  done
  ((found)) || echo "  no reproducer saved"
  echo "  log: $work/log"
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: FAILED: ${failed[*]} (logs and reproducers in $out)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each with no finding"
if [[ -z "${FUZZ_OUT:-}" ]]; then rm -rf "$out"; fi

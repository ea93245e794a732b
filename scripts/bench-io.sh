#!/usr/bin/env bash
# IO isolation, side by side, in a QEMU guest (vmtest/run.sh --modules
# null_blk; QEMU's TCG clock: ratios only): an online pod reading a null_blk
# device of known capacity (queue depth 4, 500 us a request) with 4 KiB
# O_DIRECT reads next to a YARN container writing 64 KiB O_DIRECT from 8
# threads. Rows, interleaved round after round: alone, free (nothing
# limited), weight (io.weight 10 on the YARN root by hand, only where the
# device's scheduler or iocost honours it), max (io.max by hand at half of
# the writer's free rate) and khagent (`khagent run`, a 200 ms tick). The
# last line states the goal's figures:
#   io: online p99 <x>x alone, offline kept <n>% of the device throughput online left, reaction <t> ms
# (the throughput online left: the writer's rate next to the unprotected
# reader, row free; reaction: from the writer's start to khagent's io.max).
#
#   scripts/bench-io.sh                      Debian's 6.1 kernel
#   VM=6.12 scripts/bench-io.sh              trixie's 6.12
#   scripts/bench-io.sh --write-docs         also put the result in docs/benchmarks.md
#
# Environment: ROUNDS [3], SECONDS_PER_ROW measured [4], SETTLE seconds
# before measuring [2], BUILD_DIR [build], VM=6.1|6.12 [6.1], SCHED=bfq (the
# device's scheduler: BFQ, for the weight row), IOCOST=1 (iocost enabled on
# the device with the kernel's default model, for the weight row).
set -euo pipefail
me=bench-io
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=lib/common.sh
. "$root/scripts/lib/common.sh"

write_docs=0
for a in "$@"; do
  case "$a" in
    --write-docs) write_docs=1 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) die "unknown argument '$a' (--write-docs, --help)" ;;
  esac
done
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" == /* ]] || build_dir="$root/$build_dir"
for f in khagent tests/khagent_vm_io_bench; do
  [[ -x "$build_dir/$f" ]] || die "no $build_dir/$f: build first (scripts/build.sh $build_dir)"
done
case "${VM:-6.1}" in
  6.1) kernel_args=() ;;
  6.12) kernel_args=(--debian-suite trixie) ;;
  *) die "VM must be 6.1 or 6.12, not '$VM'" ;;
esac
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
log "booting Debian's ${VM:-6.1} kernel with null_blk; about $(( ${ROUNDS:-3} * 5 * 9 / 60 + 1 )) minutes"
"$root/vmtest/run.sh" "${kernel_args[@]}" --modules "null_blk${SCHED:+ $SCHED}" --timeout "${VM_TIMEOUT:-1800}" \
  --include "$build_dir/khagent" --include "$build_dir/tests/khagent_vm_io_bench" \
  -- env "ROUNDS=${ROUNDS:-3}" "SECONDS_PER_ROW=${SECONDS_PER_ROW:-4}" "SETTLE=${SETTLE:-2}" \
  "SCHED=${SCHED:-}" "IOCOST=${IOCOST:-0}" \
  "$build_dir/tests/khagent_vm_io_bench" | tee "$out"
grep -q '^io: online p99 ' "$out" || die "the benchmark did not finish (see above)"
if [[ "$write_docs" == 1 ]]; then
  report="$(mktemp)"
  {
    echo "\`scripts/bench-io.sh\` on $(date -u +%Y-%m-%d), Debian's ${VM:-6.1} kernel in QEMU (TCG), ${ROUNDS:-3} rounds${SCHED:+, scheduler $SCHED}${IOCOST:+, IOCOST=$IOCOST}:"
    echo
    echo '```'
    sed -n '/^round 1 /,$p' "$out" | grep -v '^vmtest:'
    echo '```'
  } >"$report"
  doc_section_write "$root/docs/benchmarks.md" "bench-io-${VM:-6.1}${SCHED:+-$SCHED}${IOCOST:+-iocost}" "$report"
  rm -f "$report"
  log "wrote the section to docs/benchmarks.md"
fi

#!/usr/bin/env bash
# Does a CPU of this machine stall while another CPU is busy? On a VM whose
# host time-shares the vCPUs, a vCPU can lose its physical CPU for whole
# host ticks when the others are busy; cpu.idle keeps every CPU busy, so
# online tasks then wait through those stalls whatever the guest scheduler
# does (docs/benchmarks.md, service benchmark on the AMD EPYC guest).
#
#   scripts/bench-vcpu-stalls.sh            CPU 0 watched, CPU 1 idle then busy, 8 s each
#
# Environment: SECONDS_EACH=S [8], WATCH_CPU=N [0], BUSY_CPU=N [1],
# ROUNDS=N [2] (idle, busy, idle, busy, ...).
#
# A loop pinned to WATCH_CPU reads CLOCK_MONOTONIC back to back and counts
# the gaps between reads over 50 us (time the loop did not run). Printed per
# run: gaps over 50 us and over 1 ms, their total, the longest, and the
# guest's steal time (/proc/stat, all CPUs) over the run. Figures only: exit
# 0 unless the probe could not be built or run. Needs a C compiler (cc) and
# at least 2 CPUs; starts one busy loop, stopped by its pid on exit.
set -euo pipefail

secs="${SECONDS_EACH:-8}"
watch="${WATCH_CPU:-0}"
busy="${BUSY_CPU:-1}"
rounds="${ROUNDS:-2}"
[ "$(nproc)" -ge 2 ] || { echo "bench-vcpu-stalls: needs at least 2 CPUs" >&2; exit 1; }
command -v cc >/dev/null || { echo "bench-vcpu-stalls: no C compiler (cc)" >&2; exit 1; }

tmp="$(mktemp -d)"
hog=""
cleanup() {
  if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

cat > "$tmp/gaps.c" <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(atoi(argv[1]), &set);
  if (sched_setaffinity(0, sizeof set, &set)) { perror("sched_setaffinity"); return 1; }
  uint64_t start = now(), prev = start, end = start + (uint64_t)(atof(argv[2]) * 1e9);
  uint64_t gaps = 0, over_ms = 0, total = 0, longest = 0;
  for (;;) {
    uint64_t t = now(), d = t - prev;
    if (d > 50000) {
      gaps++;
      total += d;
      if (d > 1000000) over_ms++;
      if (d > longest) longest = d;
    }
    prev = t;
    if (t > end) break;
  }
  printf("%llu %llu %.1f %.2f\n", (unsigned long long)gaps, (unsigned long long)over_ms, total / 1e6, longest / 1e6);
  return 0;
}
EOF
cc -O2 -o "$tmp/gaps" "$tmp/gaps.c"

steal_ms() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print $9 * 1000 / hz}' /proc/stat; }

echo "CPU $watch watched for $secs s a run; CPU $busy idle or running a busy loop"
printf '%-10s %10s %10s %12s %12s %10s\n' "CPU $busy" "gaps>50us" "gaps>1ms" "lost ms" "longest ms" "steal ms"
for ((r = 0; r < rounds; r++)); do
  for mode in idle busy; do
    if [ "$mode" = busy ]; then
      taskset -c "$busy" sh -c 'while :; do :; done' &
      hog=$!
      sleep 0.5
    fi
    s0="$(steal_ms)"
    read -r gaps over lost longest < <("$tmp/gaps" "$watch" "$secs")
    s1="$(steal_ms)"
    if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null || true; hog=""; sleep 0.5; fi
    printf '%-10s %10s %10s %12s %12s %10.0f\n' "$mode" "$gaps" "$over" "$lost" "$longest" "$(awk -v a="$s0" -v b="$s1" 'BEGIN{print b - a}')"
  done
done

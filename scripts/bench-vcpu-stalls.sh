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
# ROUNDS=N [2] (idle, busy, idle, busy, ...), STALL_PERIOD_US=N [2000] (the
# detector's period and the reference timer's), KHAGENT=path to a built
# khagent [build/khagent if present; "none": no detector column].
#
# A loop pinned to WATCH_CPU reads CLOCK_MONOTONIC back to back and counts
# the gaps between reads over 50 us (time the loop did not run). Printed per
# run: gaps over 50 us and over 1 ms, their total, the longest, the total of
# the gaps over 250 us (what khagent's stall detector counts as a stall),
# and the steal time of the watched CPU (/proc/stat) over the run. With a
# khagent binary and root, `khagent observe` runs meanwhile with its maps
# pinned, and the last column is what its stall detector charged to the
# watched CPU (the stall_stats map): its agreement with the timer column is
# its stolen-time figure. Figures only: exit 0 unless the probe could not be
# built or run. Needs a C compiler (cc) and at least 2 CPUs; starts one
# busy loop (and khagent), stopped by their pids on exit.
set -euo pipefail

secs="${SECONDS_EACH:-8}"
watch="${WATCH_CPU:-0}"
busy="${BUSY_CPU:-1}"
rounds="${ROUNDS:-2}"
[ "$(nproc)" -ge 2 ] || { echo "bench-vcpu-stalls: needs at least 2 CPUs" >&2; exit 1; }
command -v cc >/dev/null || { echo "bench-vcpu-stalls: no C compiler (cc)" >&2; exit 1; }

here="$(cd "$(dirname "$0")/.." && pwd)"
khagent="${KHAGENT:-$here/build/khagent}"
tmp="$(mktemp -d)"
hog=""
agent=""
late_pid=""
pins="/sys/fs/bpf/khagent-stall-bench-$$"
cleanup() {
  if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; fi
  if [ -n "$late_pid" ]; then kill "$late_pid" 2>/dev/null || true; wait "$late_pid" 2>/dev/null || true; fi
  if [ -n "$agent" ]; then kill "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true; fi
  rm -rf "$tmp"
  rm -rf "$pins" 2>/dev/null || true  # pins the agent left, if it died
}
trap cleanup EXIT INT TERM

# One probe, two modes, pinned to a CPU for a number of seconds:
# "gaps": a loop reading CLOCK_MONOTONIC back to back, counting the gaps
# between reads (time the loop did not run); "late": the same CPU seen by a
# timer, as khagent's stall detector sees it: a SCHED_FIFO thread (where
# allowed) sleeping to absolute deadlines a detector period apart
# (STALL_PERIOD_US [2000], the agent's default), summing how late it wakes
# where that is over 250 us.
cat > "$tmp/probe.c" <<'EOF'
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int gaps(uint64_t end) {
  uint64_t prev = now(), gaps = 0, over_ms = 0, total = 0, longest = 0, over_stall = 0;
  for (;;) {
    uint64_t t = now(), d = t - prev;
    if (d > 50000) {
      gaps++;
      total += d;
      if (d > 1000000) over_ms++;
      if (d > 250000) over_stall += d;
      if (d > longest) longest = d;
    }
    prev = t;
    if (t > end) break;
  }
  printf("%llu %llu %.1f %.2f %.1f\n", (unsigned long long)gaps, (unsigned long long)over_ms, total / 1e6,
         longest / 1e6, over_stall / 1e6);
  return 0;
}

static int late(uint64_t end) {
  const char *p = getenv("STALL_PERIOD_US");
  uint64_t period = (uint64_t)atoll(p ? p : "2000") * 1000, late = 0;
  struct sched_param sp = {.sched_priority = 50};
  sched_setscheduler(0, SCHED_FIFO, &sp); /* best effort: not root, it stays SCHED_OTHER */
  while (now() < end) {
    uint64_t due = now() + period, l;
    struct timespec ts = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    l = now() - due;
    if (l > 250000) late += l;
  }
  printf("%.1f\n", late / 1e6);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(atoi(argv[2]), &set);
  if (sched_setaffinity(0, sizeof set, &set)) { perror("sched_setaffinity"); return 1; }
  uint64_t end = now() + (uint64_t)(atof(argv[3]) * 1e9);
  return strcmp(argv[1], "late") == 0 ? late(end) : gaps(end);
}
EOF
cc -O2 -o "$tmp/probe" "$tmp/probe.c"

steal_ms() { awk -v hz="$(getconf CLK_TCK)" -v c="cpu$watch" '$1 == c {print $9 * 1000 / hz}' /proc/stat; }

# The stall detector's stolen ns on the watched CPU, from the pinned map.
detector=no
if [ "$khagent" != none ] && [ -x "$khagent" ] && [ "$(id -u)" = 0 ] && command -v bpftool >/dev/null &&
  command -v jq >/dev/null; then
  "$khagent" --pin-dir "$pins" --stall-period "${STALL_PERIOD_US:-2000}us" observe -i 1s --limit 1 > "$tmp/agent.log" 2>&1 &
  agent=$!
  for _ in $(seq 50); do [ -e "$pins/stall_stats" ] && break; sleep 0.2; done
  if [ -e "$pins/stall_stats" ]; then
    detector=yes
  else
    echo "bench-vcpu-stalls: khagent did not pin stall_stats (no detector column):" >&2
    tail -5 "$tmp/agent.log" >&2
  fi
fi
stolen_ns() {
  bpftool -j map lookup pinned "$pins/stall_stats" key 0 0 0 0 |
    jq --argjson c "$watch" '.formatted.values[] | select(.cpu == $c) | .value.stolen_ns'
}

echo "CPU $watch watched for $secs s a run; CPU $busy idle or running a busy loop"
printf '%-10s %10s %10s %12s %12s %14s %14s %10s %13s\n' "CPU $busy" "gaps>50us" "gaps>1ms" "lost ms" \
  "longest ms" "lost>250us ms" "timer late ms" "steal ms" "detector ms"
for ((r = 0; r < rounds; r++)); do
  for mode in idle busy; do
    if [ "$mode" = busy ]; then
      taskset -c "$busy" sh -c 'while :; do :; done' &
      hog=$!
      sleep 0.5
    fi
    s0="$(steal_ms)"
    d0=0
    [ "$detector" = yes ] && d0="$(stolen_ns)"
    "$tmp/probe" late "$watch" "$secs" > "$tmp/late.out" &
    late_pid=$!
    read -r gaps over lost longest stall < <("$tmp/probe" gaps "$watch" "$secs")
    wait "$late_pid"
    late_pid=""
    late="$(cat "$tmp/late.out")"
    d1=0
    [ "$detector" = yes ] && d1="$(stolen_ns)"
    s1="$(steal_ms)"
    if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null || true; hog=""; sleep 0.5; fi
    det="-"
    [ "$detector" = yes ] && det="$(awk -v a="$d0" -v b="$d1" 'BEGIN{printf "%.1f", (b - a) / 1e6}')"
    printf '%-10s %10s %10s %12s %12s %14s %14s %10.0f %13s\n' "$mode" "$gaps" "$over" "$lost" "$longest" "$stall" "$late" \
      "$(awk -v a="$s0" -v b="$s1" 'BEGIN{print b - a}')" "$det"
  done
done

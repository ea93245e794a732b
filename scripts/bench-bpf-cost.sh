#!/usr/bin/env bash
# Per-event cost of khagent's BPF programs and the agent's own CPU and memory
# while it observes, under a context-switch-heavy load (perf bench sched pipe).
#   scripts/bench-bpf-cost.sh [LOOPS]     (default 200000 ping-pongs)
# Needs root. Figures only, no pass/fail: costs drift between machines.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loops="${1:-200000}"
[[ $(id -u) -eq 0 ]] || { echo "bench-bpf-cost: needs root" >&2; exit 2; }
"$root/scripts/setup.sh" >/dev/null
"$root/scripts/build.sh" "$root/build" >/dev/null
bpftool=$(command -v bpftool || echo /usr/sbin/bpftool)

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
agent=""
cleanup() {
  [[ -n "$agent" ]] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$old_stats"
}
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1

"$root/build/khagent" --no-pin --log-level warn observe --json --interval 1s >/dev/null &
agent=$!
for _ in $(seq 50); do
  "$bpftool" prog show name handle_sched_switch >/dev/null 2>&1 && break
  sleep 0.1
done

# prog name -> "run_time_ns run_cnt"
prog_stats() {
  "$bpftool" prog show 2>/dev/null | awk '
    /^[0-9]+: / { name=""; for (i=1;i<=NF;i++) if ($i=="name") name=$(i+1)
                  rt=0; rc=0
                  for (i=1;i<=NF;i++) { if ($i=="run_time_ns") rt=$(i+1); if ($i=="run_cnt") rc=$(i+1) }
                  if (name ~ /^handle_/) print name, rt, rc }'
}
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$agent/stat"; }

declare -A rt0 rc0
while read -r n rt rc; do rt0[$n]=$rt; rc0[$n]=$rc; done < <(prog_stats)
c0=$(ctxt); t0=$(cpu_ticks); s0=$(date +%s%N)
perf bench sched pipe -l "$loops" >/dev/null 2>&1
c1=$(ctxt); t1=$(cpu_ticks); s1=$(date +%s%N)

switches=$((c1 - c0))
wall_ns=$((s1 - s0))
hz=$(getconf CLK_TCK)
echo "load: perf bench sched pipe -l $loops, $switches context switches in $((wall_ns / 1000000)) ms"
printf '%-26s %12s %14s %10s\n' program runs run_time_ms ns/run
total=0
while read -r n rt rc; do
  drt=$((rt - ${rt0[$n]:-0})); drc=$((rc - ${rc0[$n]:-0}))
  total=$((total + drt))
  per=$( ((drc > 0)) && echo "$((drt / drc))" || echo "-")
  printf '%-26s %12d %14.1f %10s\n' "$n" "$drc" "$(echo "$drt / 1000000" | bc -l)" "$per"
done < <(prog_stats)
echo "all programs: $(echo "$total / $switches" | bc) ns of BPF time per context switch"
echo "agent: $(echo "scale=2; 100 * ($t1 - $t0) / $hz / ($wall_ns / 1000000000)" | bc)% of one CPU," \
     "peak RSS $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/$agent/status")," \
     "$(find "$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)" -type d | wc -l) cgroups on the machine"

# The stall detector's timers fire in softirq on busy CPUs, charged to
# whatever runs there, so their cost shows as work lost by a CPU-bound
# load: stress-ng bogo ops per second on every CPU with the detector on
# (STALL_PERIOD, default 2ms: the agent's default) against it turned off
# (--stall-period 0), interleaved. STALL_ROUNDS=N rounds [3]; 0 skips it.
rounds="${STALL_ROUNDS:-3}"
if ((rounds > 0)) && command -v stress-ng >/dev/null; then
  kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null || true
  agent=""
  bogo() {  # ops/s of stress-ng --cpu, $1 workers a CPU, for 5 s
    stress-ng --cpu "$(($(nproc) * $1))" --cpu-method int64 -t 5 --metrics-brief 2>&1 |
      awk '$4 == "cpu" && $5 ~ /^[0-9]+$/ && !done {print $9; done = 1}'
  }
  # One worker a CPU, and two (one always waiting): the timers run on
  # every busy CPU either way.
  for per in 1 2; do
  declare -A sum=([on]=0 [off]=0)
  echo "stall detector (period ${STALL_PERIOD:-2ms}): stress-ng --cpu $(($(nproc) * per)) ($per a CPU) bogo ops/s (real time), $rounds rounds interleaved"
  for ((r = 1; r <= rounds; r++)); do
    for mode in on off; do
      period=$([[ $mode == on ]] && echo "${STALL_PERIOD:-2ms}" || echo 0)
      "$root/build/khagent" --no-pin --log-level warn --stall-period "$period" observe --json --interval 1s \
        >/dev/null &
      agent=$!
      sleep 1
      kill -0 "$agent" 2>/dev/null || { echo "bench-bpf-cost: khagent (--stall-period $period) did not start" >&2; exit 1; }
      v=$(bogo "$per" || true)
      kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null || true
      agent=""
      echo "  round $r detector $mode: $v"
      sum[$mode]=$(echo "${sum[$mode]} + $v" | bc -l)
    done
  done
  echo "stall detector on/off, $per a CPU: $(echo "scale=4; ${sum[on]} / ${sum[off]}" | bc -l) of the throughput"
  done
fi

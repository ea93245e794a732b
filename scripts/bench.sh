#!/usr/bin/env bash
# khagent's cost, measured against Debian's runqlat (libbpf-tools) and against
# nothing at all, on this machine. Prints one table and writes it, with the
# machine and the command that reproduces it, to docs/benchmarks.md.
#
#   scripts/bench.sh            full run, ~5 minutes on 2 cores, plus the build
#   QUICK=1 scripts/bench.sh    fewer rounds and shorter windows, ~1.5 minutes
#
# 1. Per-event BPF cost: run_time_ns / run_cnt of each tool's programs
#    (kernel.bpf_stats_enabled=1) under perf bench sched pipe, each tool
#    attached alone, rounds alternating khagent, runqlat, khagent, ...
# 2. Whole-system overhead: usecs/op of the same load with nothing attached,
#    with khagent, with runqlat, rounds alternating none, khagent, runqlat, ...
# 3. Userspace cost at scale: khagent's CPU (its threads' run time) and peak RSS (VmHWM)
#    with 100, 1000 and 5000 busy cgroups at a 100 ms, 200 ms (the default)
#    and 1 s tick, as the agent (run --dry-run) and as observe --json.
# 4. Reaction time, in a QEMU VM on Debian's 6.1 kernel (vmtest/run.sh): CPU
#    hogs start in the YARN hierarchy next to an online probe, again and
#    again; the distribution of khagent's own reaction (first over-threshold
#    wait to the cpu.max write) and of hogs-start to cut on the guest clock.
#
# Every figure is a median over rounds (or windows); ratios and slowdowns are
# taken within a round, then their median is reported. The machine is noisy:
# read the min-max ranges next to the medians. A measurement waits while other
# BPF programs are attached to the scheduler tracepoints (tests, other tracers)
# and is taken again if one was loaded while it ran.
#
# Environment (defaults in brackets):
#   QUICK=1         the short version [0]
#   PARTS=13        run only these parts [1234]
#   PIN=0           do not pin the load to one CPU [1: taskset -c LOAD_CPU]
#   LOAD_CPU=N      CPU the pinned load runs on [the last one]
#   WAKE_MS=N       period of the process in each part 3 cgroup [1000]
#   CGROUPS="..."   part 3: numbers of cgroups [100 1000 5000]
#   TICKS="..."     part 3: ticks [100ms 200ms 1s]
#   MODES="..."     part 3: agent and/or observe [agent observe]
#   BUILD_DIR=DIR   where khagent is built [build-bench/]
#   BUILD=0         do not rebuild, use BUILD_DIR/khagent as it is [1]
#   OUT=FILE        the Markdown report [docs/benchmarks.md]; the text after the
#                   "end of generated part" line of an existing report is kept
# Needs root. Figures only, no pass/fail exit code: costs drift between machines.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $(id -u) -eq 0 ]] || { echo "bench: needs root" >&2; exit 2; }

quick="${QUICK:-0}"
parts="${PARTS:-1234}"
pin="${PIN:-1}"
load_cpu="${LOAD_CPU:-$(($(nproc) - 1))}"
wake_ms="${WAKE_MS:-1000}"
build="${BUILD_DIR:-$root/build-bench}"
build="$(realpath -m "$build")"  # part 4 hands its paths to the VM
out="${OUT:-$root/docs/benchmarks.md}"

if [[ "$quick" == 1 ]]; then
  cost_rounds=3 cost_loops=100000  # part 1: rounds per tool, ping-pongs per round
  tput_rounds=3 tput_loops=100000  # part 2: rounds of (none, khagent, runqlat)
  windows=2 window_s=4             # part 3: CPU windows per case, seconds each
  reaction_cycles=8                # part 4: hog bursts in the VM
else
  cost_rounds=10 cost_loops=150000
  tput_rounds=12 tput_loops=150000
  windows=3 window_s=10
  reaction_cycles=20
fi
read -ra cgroup_counts <<<"${CGROUPS:-100 1000 5000}"
read -ra ticks <<<"${TICKS:-100ms 200ms 1s}"
default_max_cgroups=4096  # cgroup_stats entries unless --max-cgroups is given
has_part() { [[ "$parts" == *"$1"* ]]; }

# The command that reproduces this run, for the report.
repro="scripts/bench.sh"
for v in QUICK:0 PARTS:1234 PIN:1 LOAD_CPU: WAKE_MS:1000 CGROUPS: TICKS: MODES:; do
  name=${v%%:*} default=${v#*:}
  if [[ -n "${!name:-}" && "${!name}" != "$default" ]]; then repro="$name=$(printf %q "${!name}") $repro"; fi
done

echo "bench: setup and build" >&2
"$root/scripts/setup.sh" >/dev/null
if [[ "${BUILD:-1}" == 1 ]]; then
  "$root/scripts/build.sh" "$build" >/dev/null
fi
khagent="$build/khagent"
[[ -x "$khagent" ]] || { echo "bench: no $khagent" >&2; exit 1; }
bpftool=$(command -v bpftool || echo /usr/sbin/bpftool)
runqlat=$(command -v runqlat || echo /usr/sbin/runqlat)
[[ -x "$runqlat" ]] || { echo "bench: runqlat (libbpf-tools) not found" >&2; exit 1; }
cg2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[[ -n "$cg2" ]] || { echo "bench: no cgroup2 mount" >&2; exit 1; }

load=(perf bench sched pipe)
load_desc="perf bench sched pipe"
if [[ "$pin" == 1 ]]; then
  load=(taskset -c "$load_cpu" "${load[@]}")
  load_desc="taskset -c $load_cpu $load_desc"
fi

# ---------------------------------------------------------------- cleanup
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
work="$build/bench"
mkdir -p "$work"
parent="$cg2/khagent-bench-$$"  # part 3 cgroups: $parent/cg<N>
tool_pid=""                     # the khagent or runqlat running now
helpers=()                      # cgsleeper processes (each owns its children)

# Kills what is left in the bench cgroups (processes this script started,
# orphaned if their helper died), by pid, until they are empty.
empty_cgroups() {
  local pids _
  for _ in $(seq 50); do
    pids=$(cat "$parent"/cg[0-9]*/cgroup.procs 2>/dev/null || true)
    [[ -n "$pids" ]] || return 0
    # shellcheck disable=SC2086 # one pid per word
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
}

cleanup() {
  local rc=$? h
  trap - EXIT INT TERM
  if [[ -n "$tool_pid" ]]; then kill "$tool_pid" 2>/dev/null || true; wait "$tool_pid" 2>/dev/null || true; fi
  for h in "${helpers[@]}"; do kill "$h" 2>/dev/null || true; done
  for h in "${helpers[@]}"; do wait "$h" 2>/dev/null || true; done
  if [[ -d "$parent" ]]; then
    empty_cgroups
    find "$parent" -mindepth 1 -maxdepth 1 -type d -name 'cg[0-9]*' -exec rmdir {} + 2>/dev/null || true
    rmdir "$parent" 2>/dev/null || echo "bench: could not remove $parent" >&2
  fi
  sysctl -qw kernel.bpf_stats_enabled="$old_stats"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers
median() {  # of the numbers on stdin, one per line
  awk NF | sort -g | awk '{ a[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print a[(NR + 1) / 2];
                                              else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
range() {  # "min-max" of the numbers on stdin, printf format $1
  awk NF | sort -g | awk -v f="$1" 'NR == 1 { lo = $1 } { hi = $1 } END { printf f "-" f, lo, hi }'
}
calc() { awk "BEGIN { printf \"$1\", $2 }"; }  # calc FORMAT EXPR
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
elapsed() { echo "$((SECONDS - $1)) s"; }

# Programs of each tool, by name. (runqlat falls back to raw_tp programs named
# handle_sched_* on kernels without tp_btf; khagent needs tp_btf anyway.)
declare -A tool_progs=(
  [khagent]="handle_sched_switch handle_sched_wakeup handle_sched_wakeup_new"
  [runqlat]="sched_switch sched_wakeup sched_wakeup_new"
)

# "id name run_time_ns run_cnt" of every loaded BPF program.
prog_table() {
  "$bpftool" prog show 2>/dev/null | awk '
    /^[0-9]+: / { id = $1; sub(":", "", id); name = ""; rt = 0; rc = 0
                  for (i = 1; i <= NF; i++) {
                    if ($i == "name") name = $(i + 1)
                    if ($i == "run_time_ns") rt = $(i + 1)
                    if ($i == "run_cnt") rc = $(i + 1) }
                  print id, name, rt, rc }'
}
# Ids of the programs that have a link (are attached).
linked_ids() { "$bpftool" link show 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "prog") print $(i + 1) }'; }

# Other programs on the scheduler tracepoints (this repository's tests,
# another tracer) would slow the load down, or make the tool attached after
# them look cheaper. Each measurement waits until none is attached, and is
# taken again if a program was loaded while it ran.
others_attached() {  # "name(id) ..." of attached sched programs not in $tool_ids
  prog_table | awk -v linked=" $(linked_ids | tr '\n' ' ') " -v ours=" $tool_ids " '
    $2 ~ /sched_(switch|wakeup)/ && index(linked, " " $1 " ") && !index(ours, " " $1 ":") {
      print $2 "(" $1 ")" }' | tr '\n' ' '
}
max_prog_id() { prog_table | awk '$1 > m { m = $1 } END { print m + 0 }'; }
foreign=""  # what was measured with other programs around anyway
redone=0    # measurements taken again
wait_alone() {
  local others i
  for i in $(seq 600); do  # 5 minutes
    others=$(others_attached)
    [[ -n "$others" ]] || return 0
    if ((i == 1)); then echo "bench: waiting for other BPF programs to leave the sched tracepoints: $others" >&2; fi
    sleep 0.5
  done
  echo "bench: WARNING: measuring with other programs attached: $others" >&2
}
# disturbed ID: another program is attached now, or one was loaded after id ID.
disturbed() { [[ -n "$(others_attached)" ]] || (($(max_prog_id) > $1)); }
# retry ATTEMPT WHAT: after a disturbed measurement, true if it is to be taken
# again (up to 3 attempts; then it is kept and the report says so).
retry() {
  if (($1 >= 3)); then foreign+="$2; "; echo "bench: WARNING: $2 kept although disturbed" >&2; return 1; fi
  redone=$((redone + 1))
  echo "  $2: other BPF programs were loaded meanwhile, measuring again" >&2
}

# start_tool khagent|runqlat [khagent global args] [-- khagent observe args]:
# starts it in the background, waits until its three programs are loaded and
# attached; sets tool_pid and tool_ids ("id:name ...").
tool_pid="" tool_ids=""
start_tool() {
  local tool="$1" before n want ids id name
  shift
  before=" $(prog_table | awk '{print $1}' | tr '\n' ' ') "
  if [[ "$tool" == khagent ]]; then
    # khagent [GLOBAL ARGS] [-- SUBCOMMAND ARGS]; the subcommand is
    # `observe --json --interval 1s` unless given.
    local global=() command=(observe --json --interval 1s)
    while (($#)); do
      if [[ "$1" == -- ]]; then shift; command=("$@"); break; fi
      global+=("$1"); shift
    done
    "$khagent" --no-pin --log-level warn "${global[@]}" "${command[@]}" >/dev/null &
  else
    "$runqlat" 1 >/dev/null &  # 1 s summaries, like khagent's default tick
  fi
  tool_pid=$!
  want=$(wc -w <<<"${tool_progs[$tool]}")
  for _ in $(seq 200); do
    ids="" n=0
    while read -r id name _; do
      [[ "$before" == *" $id "* ]] && continue
      [[ " ${tool_progs[$tool]} " == *" $name "* ]] || continue
      linked_ids | grep -qx "$id" || continue
      ids+="$id:$name " n=$((n + 1))
    done < <(prog_table)
    if ((n == want)); then tool_ids="$ids"; return 0; fi
    kill -0 "$tool_pid" 2>/dev/null || { echo "bench: $tool exited" >&2; exit 1; }
    sleep 0.05
  done
  echo "bench: $tool did not attach its programs" >&2
  exit 1
}

# Stops the tool and waits until its programs are gone.
stop_tool() {
  local id left
  kill "$tool_pid" 2>/dev/null || true
  wait "$tool_pid" 2>/dev/null || true
  tool_pid=""
  for _ in $(seq 100); do
    left=0
    for id in $tool_ids; do
      if "$bpftool" prog show id "${id%%:*}" >/dev/null 2>&1; then left=1; fi
    done
    ((left)) || break
    sleep 0.05
  done
  tool_ids=""
}

# "name run_time_ns run_cnt" of each program of the running tool.
tool_stats() {
  local id rt rc t
  prog_table | while read -r id _ rt rc; do
    for t in $tool_ids; do
      if [[ "${t%%:*}" == "$id" ]]; then echo "${t#*:} $rt $rc"; fi
    done
  done
}

# Runs the load once; prints usecs/op.
run_load() {
  "${load[@]}" -l "$1" 2>&1 | awk '/usecs\/op/ {print $1}'
}

# ---------------------------------------------------------------- machine
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
hyper=$(lscpu 2>/dev/null | awk -F': *' '/^Hypervisor vendor/ {print $2}')
machine="$cpu_model${hyper:+ ($hyper guest)}, $(nproc) cores, kernel $(uname -r)"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if ! git -C "$root" diff --quiet HEAD -- bpf userspace include 2>/dev/null; then
  commit+=" + uncommitted changes"
fi
if [[ "${BUILD:-1}" != 1 ]]; then commit+=" (BUILD=0: the binary was built earlier)"; fi
rq_version=$(dpkg-query -W -f='${Version}' libbpf-tools 2>/dev/null || echo "?")
load_start=$(cut -d' ' -f1 /proc/loadavg)
echo "bench: $machine; khagent $commit; runqlat from libbpf-tools $rq_version" >&2

# ---------------------------------------------------------------- 1. BPF cost
# Each round attaches one tool alone, runs the load, and reads the deltas of
# its programs' run_time_ns / run_cnt and of /proc/stat ctxt.
declare -A per_switch per_sw_run per_wake_run  # [tool,round] -> ns
part1() {
  local r tool attempt id0 ok name rt rc c0 c1 total sw_rt sw_rc wk_rt wk_rc drt drc t=$SECONDS
  echo "bench: 1/3 per-event BPF cost, $cost_rounds rounds x (khagent, runqlat), $load_desc -l $cost_loops" >&2
  sysctl -qw kernel.bpf_stats_enabled=1
  for r in $(seq "$cost_rounds"); do
    for tool in khagent runqlat; do
      for attempt in 1 2 3; do
        wait_alone
        start_tool "$tool"
        id0=$(max_prog_id)
        local -A rt0=() rc0=()
        while read -r name rt rc; do rt0[$name]=$rt rc0[$name]=$rc; done < <(tool_stats)
        c0=$(ctxt)
        run_load "$cost_loops" >/dev/null
        c1=$(ctxt)
        total=0 sw_rt=0 sw_rc=0 wk_rt=0 wk_rc=0
        while read -r name rt rc; do
          drt=$((rt - rt0[$name])) drc=$((rc - rc0[$name]))
          total=$((total + drt))
          if [[ "$name" == *switch ]]; then
            sw_rt=$drt sw_rc=$drc
          else
            wk_rt=$((wk_rt + drt)) wk_rc=$((wk_rc + drc))
          fi
        done < <(tool_stats)
        ok=1
        if disturbed "$id0"; then ok=0; fi
        stop_tool
        if ((ok)) || ! retry "$attempt" "part 1 round $r $tool"; then break; fi
      done
      per_switch[$tool,$r]=$(calc %.1f "$total / $((c1 - c0))")
      per_sw_run[$tool,$r]=$(calc %.1f "$sw_rt / ($sw_rc ? $sw_rc : 1)")
      per_wake_run[$tool,$r]=$(calc %.1f "$wk_rt / ($wk_rc ? $wk_rc : 1)")
      echo "  round $r $tool: ${per_switch[$tool,$r]} ns/context switch ($((c1 - c0)) switches)," \
           "switch program ${per_sw_run[$tool,$r]} ns/run ($sw_rc runs)," \
           "wakeup programs ${per_wake_run[$tool,$r]} ns/run ($wk_rc runs)" >&2
    done
  done
  sysctl -qw kernel.bpf_stats_enabled="$old_stats"
  echo "  ($(elapsed $t))" >&2
}

# "median (min-max) ns" of a tool's figures.
cost_cell() {  # ARRAY TOOL
  local -n a="$1"
  local vals
  vals=$(for r in $(seq "$cost_rounds"); do echo "${a[$2,$r]}"; done)
  printf '%.0f ns (%s)' "$(median <<<"$vals")" "$(range %.0f <<<"$vals")"
}
cost_ratio() {  # ARRAY -> median over rounds of khagent/runqlat
  local -n a="$1"
  for r in $(seq "$cost_rounds"); do calc '%.4f\n' "${a[khagent,$r]} / ${a[runqlat,$r]}"; done | median
}

# ---------------------------------------------------------------- 2. throughput
# bpf_stats stays off here: it adds two clock reads to every program run.
declare -A usecs  # [none|khagent|runqlat,round] -> usecs/op
part2() {
  local r what attempt id0 ok t=$SECONDS
  echo "bench: 2/3 whole-system overhead, $tput_rounds rounds x (none, khagent, runqlat), $load_desc -l $tput_loops" >&2
  for r in $(seq "$tput_rounds"); do
    for what in none khagent runqlat; do
      for attempt in 1 2 3; do
        wait_alone
        if [[ "$what" != none ]]; then start_tool "$what"; fi
        id0=$(max_prog_id)
        usecs[$what,$r]=$(run_load "$tput_loops")
        ok=1
        if disturbed "$id0"; then ok=0; fi
        if [[ "$what" != none ]]; then stop_tool; fi
        if ((ok)) || ! retry "$attempt" "part 2 round $r $what"; then break; fi
      done
    done
    echo "  round $r: usecs/op none ${usecs[none,$r]}, khagent ${usecs[khagent,$r]}, runqlat ${usecs[runqlat,$r]}" >&2
  done
  echo "  ($(elapsed $t))" >&2
}
tput_cell() {  # WHAT -> "median (min-max) us/op"
  local vals
  vals=$(for r in $(seq "$tput_rounds"); do echo "${usecs[$1,$r]}"; done)
  printf '%.2f us/op (%s)' "$(median <<<"$vals")" "$(range %.2f <<<"$vals")"
}
slowdown() {  # WHAT -> median over rounds of (usecs_what / usecs_none - 1), in %
  for r in $(seq "$tput_rounds"); do calc '%.3f\n' "100 * (${usecs[$1,$r]} / ${usecs[none,$r]} - 1)"; done | median
}

# ---------------------------------------------------------------- 3. userspace
# A tiny helper creates the cgroups DIR/cg<FROM..TO-1> and starts one process
# in each (clone3 CLONE_INTO_CGROUP: no migration), which wakes every
# PERIOD_MS, phases spread. SIGTERM kills its children by pid, then itself.
build_helper() {
  cat >"$work/cgsleeper.c" <<'EOF'
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t *kids;
static int nkids;

static void stop(int sig)
{
	(void)sig;
	for (int i = 0; i < nkids; i++)
		kill(kids[i], SIGKILL);
	while (wait(NULL) > 0)
		;
	_exit(0);
}

static void sleeper(uint64_t period, uint64_t phase)
{
	struct timespec t;
	uint64_t next;

	clock_gettime(CLOCK_MONOTONIC, &t);
	next = (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec + phase;
	for (;;) {
		t.tv_sec = next / 1000000000ull;
		t.tv_nsec = next % 1000000000ull;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
		next += period;
	}
}

int main(int argc, char **argv)
{
	char path[4096];
	int from, to;
	uint64_t period;

	if (argc != 5) {
		fprintf(stderr, "usage: %s DIR FROM TO PERIOD_MS\n", argv[0]);
		return 2;
	}
	from = atoi(argv[2]);
	to = atoi(argv[3]);
	period = strtoull(argv[4], NULL, 10) * 1000000ull;
	kids = calloc(to > from ? to - from : 1, sizeof(*kids));
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	for (int i = from; i < to; i++) {
		struct clone_args ca = { .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD };
		pid_t pid;
		int fd;

		snprintf(path, sizeof(path), "%s/cg%d", argv[1], i);
		if (mkdir(path, 0755) && errno != EEXIST) {
			perror(path);
			stop(0);
		}
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			perror(path);
			stop(0);
		}
		ca.cgroup = (uint64_t)fd;
		pid = syscall(SYS_clone3, &ca, sizeof(ca));
		if (pid < 0) {
			perror("clone3");
			stop(0);
		}
		if (pid == 0) {
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			sleeper(period, period * (uint64_t)(i % 97) / 97);
		}
		close(fd);
		kids[nkids++] = pid;
	}
	printf("ready %d\n", nkids);
	fflush(stdout);
	for (;;)
		pause();
}
EOF
gcc -O2 -Wall -o "$work/cgsleeper" "$work/cgsleeper.c"
}

# grow_to N: cgroups cg0..cg<N-1> exist, each with one sleeper.
have=0
grow_to() {
  local log="$work/cgsleeper.$1"
  : >"$log"
  "$work/cgsleeper" "$parent" "$have" "$1" "$wake_ms" >"$log" &
  helpers+=($!)
  for _ in $(seq 600); do
    if grep -q ready "$log"; then have=$1; return 0; fi
    kill -0 "${helpers[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: could not start $1 cgroups" >&2
  exit 1
}

# Cgroups under $parent that khagent reports as active (ran or waited) in the
# last of a few 1 s intervals: checks that the load is what the table says.
active_seen() {  # [khagent global args]
  local n=3
  if [[ "$quick" == 1 ]]; then n=2; fi
  timeout -k 5 60 "$khagent" --no-pin --log-level warn "$@" observe --json --interval 1s --count "$n" |
    tail -n 1 |
    { grep -o '"interval":{[^}]*},"path":"[^"]*"' || true; } |
    awk -v p="\"/${parent#"$cg2"/}/" 'index($0, p) {
        split($0, f, /[:,}]/); if (f[3] + 0 > 0 || f[7] + 0 > 0) n++ } END { print n + 0 }'
}

ticks_of() {  # 100ms / 1s -> seconds
  if [[ "$1" == *ms ]]; then calc %.3f "${1%ms} / 1000"; else echo "${1%s}"; fi
}
max_cgroups_args() {  # N -> the khagent arguments for N bench cgroups
  if (($1 + base_cgroups > default_max_cgroups)); then echo "--max-cgroups 8192"; fi
}

declare -A ucpu urange urss uactive umaps  # [mode,n,tick]
# MiB of BPF map memory (the kernel's memlock figure) of the maps the
# running tool's programs use.
tool_map_mib() {
  local id
  for id in $tool_ids; do "$bpftool" -j prog show id "${id%%:*}" | jq -r '.map_ids[]?'; done | sort -u |
    while read -r id; do "$bpftool" -j map show id "$id" | jq '.bytes_memlock // 0'; done |
    awk '{ s += $1 } END { printf "%.1f", s / 1048576 }'
}
base_cgroups=$(find "$cg2" -type d | wc -l)
# What part 3 runs: the agent itself (dry run: it reads, classifies, decides
# and logs, but writes nothing; /metrics served on loopback), and `observe
# --json`, which prints every active cgroup every tick.
read -ra modes <<<"${MODES:-agent observe}"
mode_command() {  # MODE TICK -> the khagent subcommand and its arguments
  if [[ "$1" == agent ]]; then
    printf 'tick: %s\ndry_run: true\nstate_file: %s\n' "$2" "$work/state.json" >"$work/agent.yaml"
    echo "run --config $work/agent.yaml --metrics-address 127.0.0.1 --metrics-port 0"
  else
    echo "observe --json --interval $2"
  fi
}
# CPU time of a process in ns, summed over its threads (the scheduler's
# own figure: clock ticks in /proc/PID/stat are 10 ms, a quarter of a
# percent over a window of 4 s).
cpu_ns_of() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'
}
part3() {
  local n tick mode global command active settle vals t0 t1 s0 s1 t=$SECONDS
  echo "bench: 3/3 userspace cost, ${modes[*]} x ${cgroup_counts[*]} cgroups x ticks ${ticks[*]}, $windows windows of ${window_s}s" >&2
  build_helper
  mkdir "$parent"
  for n in "${cgroup_counts[@]}"; do
    grow_to "$n"
    read -ra global <<<"$(max_cgroups_args "$n")"
    active=$(active_seen "${global[@]}")
    for tick in "${ticks[@]}"; do
      for mode in "${modes[@]}"; do
        wait_alone
        read -ra command <<<"$(mode_command "$mode" "$tick")"
        start_tool khagent "${global[@]}" -- "${command[@]}"
        # Two ticks, at least 2 s, to settle: first map read, cgroup tree walk.
        settle=$(ticks_of "$tick")
        sleep "$(calc %.2f "($settle * 2 < 2 ? 2 : $settle * 2)")"
        vals=""
        for _ in $(seq "$windows"); do
          t0=$(cpu_ns_of "$tool_pid") s0=$(date +%s%N)
          sleep "$window_s"
          t1=$(cpu_ns_of "$tool_pid") s1=$(date +%s%N)
          vals+="$(calc %.3f "100 * ($t1 - $t0) / ($s1 - $s0)")"$'\n'
        done
        ucpu[$mode,$n,$tick]=$(median <<<"$vals")
        urange[$mode,$n,$tick]=$(range %.1f <<<"$vals")
        urss[$mode,$n,$tick]=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$tool_pid/status")
        umaps[$mode,$n,$tick]=$(tool_map_mib)
        uactive[$mode,$n,$tick]=$active
        stop_tool
        echo "  $mode, $n cgroups ($active active), tick $tick: CPU ${ucpu[$mode,$n,$tick]}% (${urange[$mode,$n,$tick]})," \
             "peak RSS ${urss[$mode,$n,$tick]} MiB, BPF maps ${umaps[$mode,$n,$tick]} MiB ${global[*]}" >&2
      done
    done
  done
  echo "  ($(elapsed $t))" >&2
}

part4() {
  local t=$SECONDS vmtests="$build/tests/khagent_vm_tests" out
  echo "bench: 4/4 reaction time in a VM (Debian 6.1, TCG), $reaction_cycles hog bursts" >&2
  [[ -x "$vmtests" ]] || { echo "bench: no $vmtests" >&2; exit 1; }
  out=$("$root/vmtest/run.sh" --log "$work/vm-reaction-console.log" \
          --include "$khagent" --include "$vmtests" -- \
          env KHAGENT_VM_BENCH_CYCLES="$reaction_cycles" "$vmtests" --gtest_filter='VmBench.*' 2>&1) || {
    echo "$out" | tail -30 >&2
    echo "bench: the VM reaction run failed (console: $work/vm-reaction-console.log)" >&2
    exit 1
  }
  react_guest=$(grep -o 'BENCH reaction guest .*' <<<"$out" | head -1)
  react_own=$(grep -o 'BENCH reaction khagent .*' <<<"$out" | head -1)
  echo "  ${react_own#BENCH }" >&2
  echo "  ${react_guest#BENCH }" >&2
  echo "  ($(elapsed $t))" >&2
}
field() { grep -o "$1=[0-9.]*" <<<"$2" | cut -d= -f2; }  # field NAME LINE

if has_part 1; then part1; fi
if has_part 2; then part2; fi
if has_part 3; then part3; fi
if has_part 4; then part4; fi
load_end=$(cut -d' ' -f1 /proc/loadavg)

# ---------------------------------------------------------------- report
verdict() { awk "BEGIN { print ($1) ? \"met\" : \"**missed**\" }"; }
{
  echo "| part | measure | khagent | runqlat | khagent vs runqlat or nothing | goal | |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  if has_part 1; then
    r=$(cost_ratio per_switch)
    echo "| 1 | BPF time per context switch, all programs | $(cost_cell per_switch khagent) | $(cost_cell per_switch runqlat) | $(printf %.2f "$r")x | <= 0.8x | $(verdict "$r <= 0.8") |"
    r=$(cost_ratio per_sw_run)
    echo "| 1 | sched_switch program, per run | $(cost_cell per_sw_run khagent) | $(cost_cell per_sw_run runqlat) | $(printf %.2f "$r")x | | |"
    r=$(cost_ratio per_wake_run)
    echo "| 1 | sched_wakeup(_new) programs, per run (= per wakeup) | $(cost_cell per_wake_run khagent) | $(cost_cell per_wake_run runqlat) | $(printf %.2f "$r")x | | |"
  fi
  if has_part 2; then
    kh=$(slowdown khagent) rq=$(slowdown runqlat)
    echo "| 2 | load throughput; nothing attached: $(tput_cell none) | $(tput_cell khagent) | $(tput_cell runqlat) | khagent $(printf %+.1f "$kh")%, runqlat $(printf %+.1f "$rq")% | khagent <= +2% | $(verdict "$kh <= 2") |"
  fi
  if has_part 3; then
    for mode in "${modes[@]}"; do
      for n in "${cgroup_counts[@]}"; do
        for tick in "${ticks[@]}"; do
          goal="" met="" k="$mode,$n,$tick"
          if [[ "$n" == 1000 && "$tick" == 1s ]]; then
            goal="<= 1% CPU, <= 30 MB RSS"
            met=$(verdict "${ucpu[$k]} <= 1 && ${urss[$k]} * 1.048576 <= 30")
          fi
          # At the default tick, for the agent itself.
          if [[ "$mode" == agent && "$tick" == 200ms && ("$n" == 1000 || "$n" == 5000) ]]; then
            limit=1
            [[ "$n" == 5000 ]] && limit=2
            goal="<= $limit% CPU"
            met=$(verdict "${ucpu[$k]} <= $limit")
          fi
          args=$(max_cgroups_args "$n")
          what="\`run --dry-run\` (the agent)"
          [[ "$mode" == observe ]] && what="\`observe --json\`"
          echo "| 3 | $what, $n cgroups (${uactive[$k]} active in 1 s), $tick tick${args:+, \`$args\`} | $(printf %.2f "${ucpu[$k]}")% of a core (${urange[$k]}), peak RSS ${urss[$k]} MiB, BPF maps ${umaps[$k]} MiB | | | $goal | $met |"
        done
      done
    done
  fi
  if has_part 4; then
    p95=$(field p95 "$react_own")
    echo "| 4 | reaction in the VM, first over-threshold wait -> cpu.max write (khagent's clock), n = $(field n "$react_own") | p50 $(field p50 "$react_own") ms, p95 $p95 ms, max $(field max "$react_own") ms | | | p95 < 100 ms | $(verdict "${p95:-1e9} < 100") |"
    echo "| 4 | reaction in the VM, hogs start -> first cpu.max cut (guest clock), n = $(field n "$react_guest"), no cut within 5 s: $(field missed "$react_guest") | p50 $(field p50 "$react_guest") ms, p95 $(field p95 "$react_guest") ms, max $(field max "$react_guest") ms | | | | |"
  fi
} >"$work/table.md"

echo
echo "$machine; khagent $commit; runqlat from libbpf-tools $rq_version"
cat "$work/table.md"

# The Markdown report: description, table, then the kept hand-written part.
marker="<!-- end of generated part: the text below is kept when scripts/bench.sh runs again -->"
kept=""
if [[ -f "$out" ]] && grep -qxF "$marker" "$out"; then
  kept=$(awk -v m="$marker" 'f { print } $0 == m { f = 1 }' "$out")
fi
mkdir -p "$(dirname "$out")"
{
  cat <<EOF
# Benchmarks

Generated by \`scripts/bench.sh\` on $(date -u +%Y-%m-%d). To reproduce, as root, from the repository root:

\`\`\`sh
$repro
\`\`\`

* machine: $machine; 1-minute load average $load_start at the start, $load_end at the end
* khagent: commit $commit, \`khagent --no-pin --log-level warn observe --json --interval 1s > /dev/null\` unless said otherwise
* runqlat: Debian's libbpf-tools $rq_version, \`runqlat 1 > /dev/null\` (one histogram for the whole machine, printed every second)
* load of parts 1 and 2: \`$load_desc -l N\`$([[ "$pin" == 1 ]] && echo " (both ends of the pipe on one CPU: two context switches per op, no idle, no IPIs)")
EOF
  if has_part 1; then
    echo "* part 1: $cost_rounds rounds of (khagent alone, runqlat alone), N = $cost_loops, \`kernel.bpf_stats_enabled=1\`. BPF time per context switch = sum of the run_time_ns deltas of the tool's programs / the \`ctxt\` delta of /proc/stat; per run = run_time_ns / run_cnt deltas. The ratio is the median of the per-round ratios."
  fi
  if has_part 2; then
    echo "* part 2: $tput_rounds rounds of (nothing, khagent, runqlat), N = $tput_loops, bpf stats off. Slowdown = median over rounds of usecs/op / usecs/op with nothing attached in the same round, minus 1."
  fi
  if has_part 3; then
    echo "* part 3: cgroups \`khagent-bench-PID/cg<i>\` under the cgroup2 mount, one process each waking every $wake_ms ms. Two ways of running khagent: the agent, \`run --dry-run\` with a configuration giving the tick (it collects, classifies, rolls up, decides and updates /metrics, served on 127.0.0.1, but writes no cgroup), and \`observe --json --interval TICK\` (prints every active cgroup every tick to /dev/null). CPU = run time of khagent's threads (\`/proc/PID/task/*/schedstat\`, ns) over $windows windows of $window_s s after two ticks to settle (median, min-max in parentheses); RSS = VmHWM at the end; BPF maps = the kernel's memlock figure (\`bpftool map show\`) of the maps its programs use. \"Active\" = bench cgroups khagent reported with CPU time or waits in one 1 s interval (a short separate run before the measurement). cgroup_stats holds $default_max_cgroups cgroups by default, so the 5000 case passes \`--max-cgroups 8192\`."
  fi
  if has_part 4; then
    echo "* part 4: \`vmtest/run.sh\` boots Debian's 6.1 kernel in QEMU (TCG, 2 vCPUs, no KVM) and runs \`khagent_vm_tests --gtest_filter=VmBench.*\`: an online probe (1 ms wake-ups) in a Burstable-pod cgroup, the agent with a 200 ms tick, a 1 ms fast-path threshold and a budget that recovers within seconds, and $reaction_cycles cycles of four CPU hogs started in \`/hadoop-yarn/container_*\` for 0.5 s, waiting for the budget to come back between cycles. khagent's clock: the fast path's \"reaction X ms\" log line (BPF timestamp of the first over-threshold wait to the return of the cpu.max write). Guest clock: from the hogs' fork to the test seeing cpu.max change (1 ms polling). Emulation makes everything slower than on hardware."
  fi
  echo "* every figure: median (min-max) over rounds or windows"
  if ((redone)); then
    echo "* $redone measurements were taken again because other BPF programs were loaded while they ran"
  fi
  if [[ -n "$foreign" ]]; then
    echo "* **measured with other BPF programs around, figures suspect: ${foreign%; }**"
  fi
  echo
  cat "$work/table.md"
  echo
  echo "$marker"
  if [[ -n "$kept" ]]; then echo "$kept"; fi
} >"$out"
echo >&2
echo "bench: wrote $out" >&2

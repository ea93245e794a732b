#!/usr/bin/env bash
# An online service next to offline batch work, on this host's real kernel:
# nginx (one worker, gzip on every request) in a cgroup laid out like a
# Kubernetes Burstable pod, driven open-loop from a second pod by
# khagent_openloop (latency from each request's intended send time), next to
# stress-ng hogs in /hadoop-yarn/container_* cgroups. Rows: the service alone;
# with hogs and no restraint; with each lever forced on the /hadoop-yarn root
# by this script; with khagent running. Rows are interleaved (A B C ... A B C
# ...) and the median over rounds is reported.
#
#   scripts/bench-service.sh                  full run (~8 min on 2 CPUs)
#   QUICK=1 scripts/bench-service.sh          one short round of every row (~1 min)
#   scripts/bench-service.sh --write-docs     also put the table in docs/benchmarks.md
#
# Environment (defaults in brackets):
#   DURATION=S      measured seconds per run [8; QUICK: 2]
#   WARMUP=S        client warm-up seconds before that, not measured [2; QUICK: 1]
#   RATE=N          requests per second, open loop [200]
#   CONNECTIONS=N   client keep-alive connections [8]
#   ARRIVALS=A      uniform (a request every 1/RATE s) or poisson (exponential
#                   gaps, seeded by the round) [uniform]. Uniform arrivals keep
#                   a fixed phase to anything periodic: at 200 req/s (5 ms) the
#                   quota rows land in a good or a bad phase of the 10 ms or
#                   100 ms CFS period for a whole run, so their p99 is bimodal
#                   between rounds; poisson samples every phase.
#   ROUNDS=N        rounds of all rows [3; QUICK: 1]
#   ROWS="..."      rows to run, from: alone hogs idle shares quota100 quota10
#                   cpuset khagent cache:hogs cache:idle cache:shares
#                   cache:quota100 cache:quota10 cache:cpuset cache:khagent
#                   [all but cache:shares cache:quota100 cache:quota10]
#   HOGS=N          stress-ng --cpu workers, split over two YARN containers [2 x CPUs]
#   CACHE_HOG="..." stress-ng arguments of the cache/memory hog in a third
#                   container, rows cache:* [--stream 1]
#   FILE_KB=N       size of the served text file [32]; GZIP_LEVEL=N [6]
#   BUILD_DIR=DIR   where khagent and tests/bench/khagent_openloop are [build]
#   OPENLOOP=FILE   the load generator binary [BUILD_DIR/tests/bench/khagent_openloop,
#                   built with cmake or, without a configured BUILD_DIR, g++]
#   KHAGENT_ARGS    extra arguments of `khagent run` in the khagent rows (below)
#   KHAGENT_CONFIG  YAML text for `khagent run --config` in the khagent rows [none:
#                   built-in defaults]
#   AGENT_SETTLE=S  seconds khagent runs before the hogs start [3; QUICK: 2]
#   RESULTS=DIR     where per-run JSON and agent logs are kept [a new /tmp dir]
#   OTHER_MAX=F     a run is quiet when the CPU used outside the benchmark (and
#                   outside khagent) averaged at most F CPUs [0.1]; before each
#                   run the script waits (QUIET_WAIT s at most [300]) for the
#                   machine to be that quiet, and a run that was not is taken
#                   again (RETRIES times [2]), then kept and marked NOISY
#
# The goal reported for the khagent rows: online p99 within 1.2x of "alone"
# while offline keeps >= 80% of the CPU the online side leaves idle
# (CPUs x window - online CPU). Figures only: the exit code is 0 whether the
# goal is met or not, non-zero when the benchmark itself failed (a write
# refused, khagent exiting non-zero or leaving a file changed, ...).
#
# Everything this script starts is stopped by pid, every file it writes is
# restored and every cgroup it creates is removed (children first), also on
# Ctrl-C or failure. Needs root, stress-ng and nginx (installed with apt-get
# when missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
me="bench-service"
# shellcheck source=scripts/lib/common.sh
. "$root/scripts/lib/common.sh"
# shellcheck source=scripts/lib/bench_cgroup.sh
. "$root/scripts/lib/bench_cgroup.sh"

bench_args "${BASH_SOURCE[0]}" "$@"

quick="${QUICK:-0}"
if [[ "$quick" == 1 ]]; then
  def_duration=2 def_warmup=1 def_rounds=1 settle=0.5 def_agent_settle=2
else
  def_duration=8 def_warmup=2 def_rounds=3 settle=1 def_agent_settle=3
fi
duration="${DURATION:-$def_duration}"
warmup="${WARMUP:-$def_warmup}"
rounds="${ROUNDS:-$def_rounds}"
rate="${RATE:-200}"
connections="${CONNECTIONS:-8}"
arrivals="${ARRIVALS:-uniform}"
[[ "$arrivals" == uniform || "$arrivals" == poisson ]] || { echo "$me: ARRIVALS must be uniform or poisson" >&2; exit 2; }
file_kb="${FILE_KB:-32}"
gzip_level="${GZIP_LEVEL:-6}"
agent_settle="${AGENT_SETTLE:-$def_agent_settle}"
other_max="${OTHER_MAX:-0.1}"
retries="${RETRIES:-2}"
quiet_wait="${QUIET_WAIT:-300}"
cache_hog="${CACHE_HOG:---stream 1}"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" == /* ]] || build_dir="$root/$build_dir"
rows="${ROWS:-alone hogs idle shares quota100 quota10 cpuset khagent cache:hogs cache:idle cache:cpuset cache:khagent}"
read -r -a row_list <<<"$rows"

# ---------------------------------------------------------------------------
# khagent rows: `khagent run --no-metrics --state-file <tmp> [--config <tmp>]`
# plus these arguments. The built-in defaults are what the khagent rows
# measure unless KHAGENT_CONFIG (YAML text) or KHAGENT_ARGS say otherwise.
KHAGENT_ARGS="${KHAGENT_ARGS:-}"
KHAGENT_CONFIG="${KHAGENT_CONFIG:-}"
# ---------------------------------------------------------------------------

for v in duration warmup rate agent_settle other_max; do
  is_num "${!v}" || die "${v^^} must be a number, not '${!v}'"
done
for v in rounds connections file_kb gzip_level retries quiet_wait; do
  is_uint "${!v}" || die "${v^^} must be a whole number, not '${!v}'"
done
((rounds >= 1)) || die "ROUNDS must be >= 1"
((gzip_level >= 1 && gzip_level <= 9)) || die "GZIP_LEVEL must be 1..9"
valid_rows=" alone hogs idle shares quota100 quota10 cpuset khagent "
for r in "${row_list[@]}"; do
  base="${r#cache:}"
  [[ "$valid_rows" == *" $base "* && "$r" != "cache:alone" ]] || die "unknown row '$r' in ROWS"
done
((${#row_list[@]} > 0)) || die "ROWS is empty"
wants_agent=0
for r in "${row_list[@]}"; do [[ "${r#cache:}" == khagent ]] && wants_agent=1; done

# --- tools -------------------------------------------------------------------
command -v stress-ng >/dev/null || die "stress-ng is missing (apt-get install stress-ng)"
need_nginx

khagent="$build_dir/khagent"
if ((wants_agent)); then
  [[ -x "$khagent" ]] || die "no $khagent (build it, set BUILD_DIR, or leave the khagent rows out of ROWS)"
fi

ncpu="$(getconf _NPROCESSORS_ONLN)"
hogs="${HOGS:-$((2 * ncpu))}"
if ! is_uint "$hogs" || ((hogs < 1)); then die "HOGS must be a whole number >= 1"; fi

tmp="$(mktemp -d /tmp/bench-service.XXXXXX)"
results="${RESULTS:-$tmp.results}"
mkdir -p "$results"

# --- cleanup state -----------------------------------------------------------
agent_pid=""     # the running khagent, if any

cleaned=0
cleanup() {
  local rc=$? i
  ((cleaned)) && return
  cleaned=1
  set +e
  if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
    log "stopping khagent (pid $agent_pid)"
    kill -TERM "$agent_pid" 2>/dev/null
    for ((i = 0; i < 150; i++)); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$agent_pid" 2>/dev/null; then
      kill -KILL "$agent_pid" 2>/dev/null
      wait "$agent_pid" 2>/dev/null
      "$khagent" restore --state-file "$tmp/state.json" >>"$results/khagent-restore.log" 2>&1 \
        || warn "khagent restore failed, see $results/khagent-restore.log"
    fi
    wait "$agent_pid" 2>/dev/null
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}"; done
  restore_to 0
  remove_created
  rm -rf "$tmp"
  if ((rc != 0)); then log "failed (exit $rc); per-run files in $results"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# --- cgroup hierarchies, from /proc/self/mountinfo ---------------------------
find_hierarchies
v2ctl="$(cat "$v2/cgroup.controllers")"
if [[ -n "$v1cpu" ]]; then
  cpu_h="$v1cpu" cpu_mode=v1
elif [[ " $v2ctl " == *" cpu "* ]]; then
  cpu_h="$v2" cpu_mode=v2
else
  die "no cpu controller: neither a v1 cpu hierarchy nor cpu in $v2/cgroup.controllers"
fi
if [[ -n "$v1cpuset" ]]; then
  cpuset_h="$v1cpuset" cpuset_mode=v1
elif [[ " $v2ctl " == *" cpuset "* ]]; then
  cpuset_h="$v2" cpuset_mode=v2
else
  cpuset_h="" cpuset_mode=none
fi
hier=("$v2")
[[ "$cpu_mode" == v1 ]] && hier+=("$v1cpu")
[[ "$cpuset_mode" == v1 ]] && hier+=("$v1cpuset")
v2_controllers=""  # controllers to enable down our v2 paths (pure v2 only)
[[ "$cpu_mode" == v2 ]] && v2_controllers+=" +cpu"
[[ "$cpuset_mode" == v2 ]] && v2_controllers+=" +cpuset"
log "cgroup2 at $v2; cpu: $cpu_mode ($cpu_h); cpuset: $cpuset_mode${cpuset_h:+ ($cpuset_h)}"

if [[ "$cpuset_mode" == none ]]; then
  for r in "${row_list[@]}"; do [[ "${r#cache:}" == cpuset ]] && die "row $r needs a cpuset controller; leave it out of ROWS"; done
fi

# CPUs: all (from the root cpuset when there is one), the last for offline in the cpuset rows.
expand_cpus() {  # "0-2,5" -> "0 1 2 5"
  local part a b out=() IFS=,
  for part in $1; do
    if [[ "$part" == *-* ]]; then
      a="${part%-*}" b="${part#*-}"
      for ((; a <= b; a++)); do out+=("$a"); done
    elif [[ -n "$part" ]]; then
      out+=("$part")
    fi
  done
  printf '%s ' "${out[@]}"
}
if [[ "$cpuset_mode" == v1 ]]; then
  all_cpus="$(cat "$v1cpuset/cpuset.cpus")"
elif [[ "$cpuset_mode" == v2 ]]; then
  all_cpus="$(cat "$v2/cpuset.cpus.effective")"
else
  all_cpus="0-$((ncpu - 1))"
fi
read -r -a cpu_arr <<<"$(expand_cpus "$all_cpus")"
last_cpu="${cpu_arr[-1]}"
online_cpus="$(IFS=,; echo "${cpu_arr[*]:0:${#cpu_arr[@]}-1}")"
if ((${#cpu_arr[@]} < 2)); then
  for r in "${row_list[@]}"; do [[ "${r#cache:}" == cpuset ]] && die "row $r needs at least 2 CPUs"; done
fi

# --- cgroups -----------------------------------------------------------------
mkcg() {  # mkcg REL: create REL in every hierarchy, each level prepared
  local rel=$1 h cur comp parent
  for h in "${hier[@]}"; do
    cur=""
    IFS=/ read -r -a comps <<<"${rel#/}"
    for comp in "${comps[@]}"; do
      parent="$h$cur"
      cur="$cur/$comp"
      [[ -d "$h$cur" ]] && continue
      if [[ "$h" == "$v2" && -n "$v2_controllers" ]]; then
        local c need=""
        for c in $v2_controllers; do
          [[ " $(cat "$parent/cgroup.subtree_control") " == *" ${c#+} "* ]] || need+=" $c"
        done
        [[ -z "$need" ]] || wr "$parent/cgroup.subtree_control" "${need# }"
      fi
      mkdir "$h$cur" || die "mkdir $h$cur failed"
      created+=("$h"$'\t'"$cur")
      if [[ "$cpuset_mode" == v1 && "$h" == "$v1cpuset" ]]; then
        cat "$parent/cpuset.cpus" >"$h$cur/cpuset.cpus" || die "cpuset.cpus of $h$cur"
        cat "$parent/cpuset.mems" >"$h$cur/cpuset.mems" || die "cpuset.mems of $h$cur"
      fi
    done
  done
}
for h in "${hier[@]}"; do
  [[ ! -e "$h/hadoop-yarn" ]] || die "$h/hadoop-yarn exists already: is a NodeManager running here? Not touching it."
done
server_cg="$(pod_path)"
client_cg="$(pod_path)"
yarn_cg=(/hadoop-yarn/container_e01_1700000000000_0001_01_000001
  /hadoop-yarn/container_e01_1700000000000_0001_01_000002
  /hadoop-yarn/container_e01_1700000000000_0001_01_000003)
for cg in "$server_cg" "$client_cg" "${yarn_cg[@]}"; do mkcg "$cg"; done

spawned=""
spawn() {  # spawn REL LOG CMD...: run CMD in cgroup REL of every hierarchy; pid in $spawned
  local rel=$1 logf=$2 hh
  shift 2
  (
    for hh in "${hier[@]}"; do echo "$BASHPID" >"$hh$rel/cgroup.procs"; done
    exec "$@"
  ) >"$logf" 2>&1 &
  spawned=$!
  pids+=("$spawned")
}

usage_usec() { awk '$1 == "usage_usec" {print $2}' "$v2$1/cpu.stat"; }
# CPU ticks of the running khagent (0 when none), taken out of "other CPU".
agent_ticks() {
  if [[ -n "$agent_pid" && -r "/proc/$agent_pid/stat" ]]; then
    sed 's/.*) //' "/proc/$agent_pid/stat" | awk '{print $12 + $13}'
  else
    echo 0
  fi
}
# Busy CPU of the whole machine, as "now_ns busy_s steal_s": CPUs x elapsed
# minus idle, iowait and steal; and the steal time (a vCPU that runs but whose
# hypervisor ran something else, seen by every task on it as a stall). /proc/stat's idle time is exact
# (tickless idle), its user/system times are tick samples that miss short bursts.
busy_at() {
  local now
  now=$(date +%s%N)
  awk -v n="$ncpu" -v hz="$user_hz" -v now="$now" '$1 == "cpu" {printf "%s %.4f %.4f\n", now, n * now / 1e9 - ($5 + $6 + $9) / hz, $9 / hz; exit}' /proc/stat
}
user_hz="$(getconf CLK_TCK)"

# --- the online service ------------------------------------------------------
free_port
mkdir -p "$tmp/www" "$tmp/nginx-tmp"
chmod 755 "$tmp" "$tmp/www"
# Text that gzip has to work on: random words and numbers.
awk -v size=$((file_kb * 1024)) 'BEGIN {
  srand(7); n = split("alpha beta gamma delta kernel cgroup yarn pod online offline latency budget quota shares idle cpuset scheduler wakeup preempt throttle nginx request response service", w, " ")
  s = 0
  while (s < size) { line = ""; for (i = 0; i < 12; i++) line = line w[int(rand() * n) + 1] int(rand() * 1000) " "; print line; s += length(line) + 1 }
}' >"$tmp/www/index.txt"
truncate -s $((file_kb * 1024)) "$tmp/www/index.txt"
chmod 644 "$tmp/www/index.txt"
nginx_conf "$tmp/nginx.conf" "$tmp/www" "$port" "  gzip on;
  gzip_comp_level $gzip_level;
  gzip_types text/plain;
  gzip_min_length 0;"
spawn "$server_cg" "$results/nginx.out" "$nginx_bin" -c "$tmp/nginx.conf" -p "$tmp"
nginx_pid=$spawned
for ((i = 0; i < 50; i++)); do
  listening "$port" && break
  kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited: $(cat "$results/nginx.out" "$tmp/nginx-error.log" 2>/dev/null)"
  sleep 0.1
done
listening "$port" || die "nginx does not listen on 127.0.0.1:$port"
url="http://127.0.0.1:$port/index.txt"
nginx_version="$("$nginx_bin" -v 2>&1 | sed 's/.*version: //')"

# --- the load generator --------------------------------------------------------
openloop="${OPENLOOP:-}"
[[ -n "$openloop" ]] || openloop="$(bench_tool khagent_openloop openloop_http.cpp)"
[[ -x "$openloop" ]] || die "no load generator at $openloop"

# One check request through the whole path before measuring.
"$openloop" --url "$url" --rate 50 --duration 0.2 --warmup 0 --connections 1 \
  --header 'Accept-Encoding: gzip' >"$tmp/check.json" 2>&1 || die "check request failed: $(cat "$tmp/check.json")"

# --- levers ------------------------------------------------------------------
ycpu="$cpu_h/hadoop-yarn"
lever_files() {  # the CPU lever files of every cgroup we made, for before/after checks
  local e h rel d f
  for e in "${created[@]}"; do
    h="${e%%$'\t'*}" rel="${e#*$'\t'}" d="$h$rel"
    for f in cpu.max cpu.weight cpu.shares cpu.cfs_quota_us cpu.cfs_period_us cpuset.cpus cpu.idle; do
      [[ -f "$d/$f" ]] && echo "$d/$f"
    done
  done
  return 0
}
set_cpuset() {  # set_cpuset ONLINE_LIST OFFLINE_LIST: leaves first (v1: children within parents)
  local cg c
  if [[ "$cpuset_mode" == v1 ]]; then
    for cg in "$server_cg" "$client_cg"; do
      wr "$cpuset_h$cg/cpuset.cpus" "$1"
      wr "$cpuset_h$(pod_of "$cg")/cpuset.cpus" "$1"
    done
    for c in "${yarn_cg[@]}"; do wr "$cpuset_h$c/cpuset.cpus" "$2"; done
    wr "$cpuset_h/hadoop-yarn/cpuset.cpus" "$2"
  else
    for cg in "$server_cg" "$client_cg"; do wr "$cpuset_h$(pod_of "$cg")/cpuset.cpus" "$1"; done
    wr "$cpuset_h/hadoop-yarn/cpuset.cpus" "$2"
  fi
}
apply_lever() {
  case "$1" in
    alone | hogs | khagent) ;;
    idle) wr "$ycpu/cpu.idle" 1 ;;
    shares)
      if [[ "$cpu_mode" == v1 ]]; then wr "$ycpu/cpu.shares" 2; else wr "$ycpu/cpu.weight" 1; fi ;;
    quota100 | quota10)
      local period=100000
      [[ "$1" == quota10 ]] && period=10000
      if [[ "$cpu_mode" == v1 ]]; then
        wr "$ycpu/cpu.cfs_period_us" "$period"
        wr "$ycpu/cpu.cfs_quota_us" $((period / 5))
      else
        wr "$ycpu/cpu.max" "$((period / 5)) $period"
      fi
      ;;
    cpuset) set_cpuset "$online_cpus" "$last_cpu" ;;
  esac
}
lever_label() {
  case "$1" in
    alone) echo "alone (no hogs)" ;;
    hogs) echo "hogs, no restraint" ;;
    idle) echo "hogs + cpu.idle=1" ;;
    shares) if [[ "$cpu_mode" == v1 ]]; then echo "hogs + cpu.shares=2"; else echo "hogs + cpu.weight=1"; fi ;;
    quota100) echo "hogs + quota 0.2 CPU / 100 ms" ;;
    quota10) echo "hogs + quota 0.2 CPU / 10 ms" ;;
    cpuset) echo "hogs + cpuset (offline: CPU $last_cpu, online: $online_cpus)" ;;
    khagent) echo "hogs + khagent on${KHAGENT_CONFIG:+ (KHAGENT_CONFIG)}${KHAGENT_ARGS:+ ($KHAGENT_ARGS)}" ;;
  esac
}
row_label() {
  local r=$1
  if [[ "$r" == cache:* ]]; then
    lever_label "${r#cache:}" | sed "s/^hogs/hogs+cache/"
  else
    lever_label "$r"
  fi
}

# --- one run -------------------------------------------------------------------
hog_pids=()
start_hogs() {  # start_hogs cpu|cache
  local a=$((hogs / 2)) b=$((hogs - hogs / 2)) tmo
  tmo=$(awk -v d="$duration" -v w="$warmup" -v s="$agent_settle" 'BEGIN {printf "%d", d + w + s + 120}')
  hog_pids=()
  if ((a > 0)); then
    spawn "${yarn_cg[0]}" "$results/hog1.out" stress-ng --cpu "$a" --timeout "$tmo" --quiet
    hog_pids+=("$spawned")
  fi
  spawn "${yarn_cg[1]}" "$results/hog2.out" stress-ng --cpu "$b" --timeout "$tmo" --quiet
  hog_pids+=("$spawned")
  if [[ "$1" == cache ]]; then
    local -a ca
    read -r -a ca <<<"$cache_hog"
    spawn "${yarn_cg[2]}" "$results/hog3.out" stress-ng "${ca[@]}" --timeout "$tmo" --quiet
    hog_pids+=("$spawned")
  fi
}
stop_hogs() {  # SIGTERM, then SIGKILL for what is left after 2 s (stress-ng --stream can take longer)
  local p c i busy
  for p in "${hog_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for ((i = 0; i < 20; i++)); do
    busy=0
    for c in "${yarn_cg[@]}"; do [[ -z "$(cg_tasks "$v2$c")" ]] || busy=1; done
    ((busy)) || break
    sleep 0.1
  done
  for c in "${yarn_cg[@]}"; do
    for p in $(cg_tasks "$v2$c"); do kill -KILL "$p" 2>/dev/null || true; done
  done
  for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null || true; forget_pid "$p"; done
  hog_pids=()
  for c in "${yarn_cg[@]}"; do empty_cgroup "$v2$c"; done
}

agent_note=""
failures=0
start_agent() {
  local -a extra=() cfg=()
  [[ -z "$KHAGENT_ARGS" ]] || read -r -a extra <<<"$KHAGENT_ARGS"
  if [[ -n "$KHAGENT_CONFIG" ]]; then
    printf '%s\n' "$KHAGENT_CONFIG" >"$tmp/khagent.yaml"
    cfg=(--config "$tmp/khagent.yaml")
  fi
  rm -f "$tmp/state.json"*
  "$khagent" run --no-metrics --state-file "$tmp/state.json" "${cfg[@]}" "${extra[@]}" >"$1" 2>&1 &
  agent_pid=$!
  sleep "$agent_settle"
  kill -0 "$agent_pid" 2>/dev/null || { wait "$agent_pid" && rc=0 || rc=$?; agent_pid=""; die "khagent exited at start (exit $rc): $(tail -5 "$1")"; }
}
stop_agent() {  # stop_agent LOG SNAPSHOT: SIGTERM, exit code, files back to their originals?
  local i rc f want cur bad=""
  kill -TERM "$agent_pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$agent_pid" 2>/dev/null; then
    kill -KILL "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
    agent_pid=""
    agent_note="did not exit within 15 s of SIGTERM (killed)"
    failures=$((failures + 1))
    "$khagent" restore --state-file "$tmp/state.json" >>"$1" 2>&1 || true
    return
  fi
  if wait "$agent_pid"; then rc=0; else rc=$?; fi
  agent_pid=""
  while IFS=$'\t' read -r f want; do
    cur="$(cat "$f")"
    [[ "$cur" == "$want" ]] || bad+=" ${f#/sys/fs/cgroup/}='$cur'(was '$want')"
  done <"$2"
  agent_note="exit $rc"
  ((rc == 0)) || failures=$((failures + 1))
  if [[ -n "$bad" ]]; then
    agent_note+=", NOT restored:$bad"
    failures=$((failures + 1))
  else
    agent_note+=", files restored"
  fi
  if grep -q "write\|cpu.max\|cpu.idle\|cpuset" "$1"; then
    agent_note+=", $(grep -c "' -> '" "$1" || true) writes logged"
  fi
}

# results.tsv: row round p50 p99 p999 max off_s on_s window_s count errors lag_p99 note other_s steal_s
printf 'row\tround\tp50\tp99\tp999\tmax\toffline_s\tonline_s\twindow_s\tcount\terrors\tlag_p99\tnote\tother_s\tsteal_s\n' >"$results/results.tsv"

run_one() {  # run_one ROW ROUND
  local row=$1 round=$2 lever mix=cpu mark json note="" t0 t1 off0 off1 on0 on1 busy0 busy1 steal0 steal1 ag0 ag1 rc
  lever="${row#cache:}"
  [[ "$row" == cache:* ]] && mix=cache
  local tag="${row/:/-}-r$round"
  mark=${#rs_files[@]}
  apply_lever "$lever"
  if [[ "$lever" == khagent ]]; then
    lever_files | while read -r f; do printf '%s\t%s\n' "$f" "$(cat "$f")"; done >"$tmp/before.tsv"
    start_agent "$results/khagent-$tag.log"
  fi
  [[ "$lever" == alone ]] || start_hogs "$mix"
  sleep "$settle"
  # the same order at both ends, so that the CPU reads and the window line up
  read -r t0 busy0 steal0 < <(busy_at)
  off0=$(usage_usec /hadoop-yarn) on0=$(($(usage_usec "$(pod_of "$server_cg")") + $(usage_usec "$(pod_of "$client_cg")")))
  ag0=$(agent_ticks)
  json="$results/client-$tag.json"
  spawn "$client_cg" "$json" "$openloop" --url "$url" --rate "$rate" --duration "$duration" \
    --warmup "$warmup" --connections "$connections" --header 'Accept-Encoding: gzip' \
    --arrivals "$arrivals" --seed "$round"
  if wait "$spawned"; then rc=0; else rc=$?; fi
  forget_pid "$spawned"
  read -r t1 busy1 steal1 < <(busy_at)
  off1=$(usage_usec /hadoop-yarn) on1=$(($(usage_usec "$(pod_of "$server_cg")") + $(usage_usec "$(pod_of "$client_cg")")))
  ag1=$(agent_ticks)
  ((rc == 0)) || { failures=$((failures + 1)); note="client exit $rc: $(tail -1 "$json")"; }
  if [[ "$lever" == khagent ]]; then
    stop_agent "$results/khagent-$tag.log" "$tmp/before.tsv"
    note="${note:+$note; }khagent $agent_note, its CPU $(awk -v a="$ag0" -v b="$ag1" -v hz="$user_hz" 'BEGIN {printf "%.2f", (b - a) / hz}') s"
  fi
  [[ "$lever" == alone ]] || stop_hogs
  restore_to "$mark"
  if ! kill -0 "$nginx_pid" 2>/dev/null; then die "nginx died during $row: $(tail -5 "$tmp/nginx-error.log")"; fi
  local errs
  errs=$(jnum errors "$json")
  [[ -z "$errs" || "$errs" == 0 ]] || note="${note:+$note; }$errs request errors"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$round" \
    "$(jnum p50_us "$json")" "$(jnum p99_us "$json")" "$(jnum p999_us "$json")" "$(jnum max_us "$json")" \
    "$(awk -v a="$off0" -v b="$off1" 'BEGIN {printf "%.3f", (b - a) / 1e6}')" \
    "$(awk -v a="$on0" -v b="$on1" 'BEGIN {printf "%.3f", (b - a) / 1e6}')" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')" \
    "$(jnum count "$json")" "${errs:-?}" "$(jnum send_lag_p99_us "$json")" "$note" \
    "$(awk -v a="$busy0" -v b="$busy1" -v hz="$user_hz" -v f="$off0 $off1 $on0 $on1 $ag0 $ag1" 'BEGIN {
       split(f, u, " "); printf "%.3f", b - a - (u[6] - u[5]) / hz - (u[2] - u[1] + u[4] - u[3]) / 1e6}')" \
    "$(awk -v a="$steal0" -v b="$steal1" 'BEGIN {printf "%.3f", b - a}')" >"$tmp/line.tsv"
  last_other_frac="$(awk -F'\t' '{printf "%.3f", $14 / ($9 * 1)}' "$tmp/line.tsv")"
  awk -F'\t' '{printf "  %-14s round %s: p50 %6s  p99 %7s  p99.9 %7s us  CPU s: offline %5s  online %5s  other %5s  steal %5s  lag p99 %s us %s\n", $1, $2, $3, $4, $5, $7, $8, $14, $15, $12, $13}' "$tmp/line.tsv" >&2
}

# --- run -----------------------------------------------------------------------
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
log "nginx $nginx_version on 127.0.0.1:$port ($file_kb KiB text, gzip level $gzip_level), $rate req/s open loop, $connections connections"
log "rows: ${row_list[*]}; $rounds round(s) of ${warmup}+${duration} s; $hogs CPU hogs; $ncpu CPUs; results in $results"
wait_quiet() {  # until the machine (nginx idle, nothing else of ours running) is quiet, QUIET_WAIT s at most
  local waited=0 t0 b0 t1 b1 frac
  for (( ; ; )); do
    read -r t0 b0 _ < <(busy_at)
    sleep 1
    read -r t1 b1 _ < <(busy_at)
    frac=$(awk -v a="$b0" -v b="$b1" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.2f", (b - a) / ((t1 - t0) / 1e9)}')
    awk -v f="$frac" -v m="$other_max" 'BEGIN {exit !(f <= m)}' && return 0
    if ((waited >= quiet_wait)); then
      warn "still $frac CPUs busy outside the benchmark after ${quiet_wait} s; measuring anyway"
      return 0
    fi
    ((waited % 15 == 0)) && log "waiting for a quiet machine: $frac CPUs busy outside the benchmark (limit $other_max)"
    waited=$((waited + 1))
  done
}
noisy_runs=0
for ((round = 1; round <= rounds; round++)); do
  log "round $round/$rounds"
  for r in "${row_list[@]}"; do
    for ((attempt = 0; ; attempt++)); do
      wait_quiet
      run_one "$r" "$round"
      if awk -v f="$last_other_frac" -v m="$other_max" 'BEGIN {exit !(f <= m)}'; then
        cat "$tmp/line.tsv" >>"$results/results.tsv"
        break
      fi
      if ((attempt < retries)); then
        log "  again: $last_other_frac CPUs of other work ran during it (limit $other_max)"
        continue
      fi
      noisy_runs=$((noisy_runs + 1))
      awk -F'\t' -v OFS='\t' -v f="$last_other_frac" '{$13 = ($13 == "" ? "" : $13 "; ") "NOISY: " f " CPUs of other work ran during it"; print}' \
        "$tmp/line.tsv" >>"$results/results.tsv"
      break
    done
  done
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- report --------------------------------------------------------------------
# runs.tsv: results.tsv plus idle left by online (16), offline share of it (17), quiet (18: 1, NOISY: 0)
runs="$results/runs.tsv"
awk -F'\t' -v OFS='\t' -v n="$ncpu" 'NR > 1 {
    idle = n * $9 - $8
    print $0, sprintf("%.3f", idle), sprintf("%.4f", idle > 0 ? $7 / idle : 0), ($13 ~ /NOISY/ ? 0 : 1)
  }' "$results/results.tsv" >"$runs"
nruns() { awk -F'\t' -v r="$1" -v q="${2:-}" '$1 == r && (q == "" || $18 == q) {n++} END {print n + 0}' "$runs"; }
# col ROW COLUMN: that column of the row's quiet runs, or of all its runs when none was quiet
col() {
  local q=1
  (($(nruns "$1" 1) > 0)) || q=""
  awk -F'\t' -v r="$1" -v c="$2" -v q="$q" '$1 == r && (q == "" || $18 == q) {print $c}' "$runs"
}

table="$results/table.md"
goal_lines=()
alone_p99="nan"
[[ " ${row_list[*]} " != *" alone "* ]] || alone_p99="$(col alone 4 | med)"
{
  echo "| row | runs quiet/all | p50 µs | p99 µs | p99 range µs | p99.9 µs | p99 / alone | offline CPU s | online CPU s | idle left by online s | offline share of it | other CPU s | steal s | client send lag p99 µs | errors |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for r in "${row_list[@]}"; do
    p99s="$(col "$r" 4 | sort -g | tr '\n' ' ')"
    read -r -a p99a <<<"$p99s"
    p99="$(col "$r" 4 | med)"
    ratio="$(awk -v a="$p99" -v b="$alone_p99" 'BEGIN {if (a == "nan" || b == "nan" || b <= 0) print "nan"; else print a / b}')"
    share="$(col "$r" 17 | med)"
    errs="$(col "$r" 11 | awk '{s += $1} END {print s + 0}')"
    echo "| $(row_label "$r") | $(nruns "$r" 1)/$(nruns "$r") | $(fmt0 "$(col "$r" 3 | med)") | $(fmt0 "$p99") | $(fmt0 "${p99a[0]}")-$(fmt0 "${p99a[-1]}") | $(fmt0 "$(col "$r" 5 | med)") | $(fmt2 "$ratio") | $(fmt1 "$(col "$r" 7 | med)") | $(fmt1 "$(col "$r" 8 | med)") | $(fmt1 "$(col "$r" 16 | med)") | $(pct "$share") | $(fmt1 "$(col "$r" 14 | med)") | $(fmt2 "$(col "$r" 15 | med)") | $(fmt0 "$(col "$r" 12 | med)") | $errs |"
    if [[ "${r#cache:}" == khagent ]]; then
      caveat=""
      if (($(nruns "$r" 1) == 0)) || (($(nruns alone 1) == 0)); then
        caveat=" [from NOISY runs only (this row or \"alone\" had no quiet run): measure again on a quiet machine]"
      fi
      if [[ "$ratio" == nan ]]; then
        goal_lines+=("GOAL NOT EVALUATED ($(row_label "$r")): no \"alone\" row to compare with")
      elif awk -v q="$ratio" -v s="$share" 'BEGIN {exit !(q <= 1.2 && s >= 0.8)}'; then
        goal_lines+=("GOAL MET ($(row_label "$r")): p99 $(fmt2 "$ratio")x alone (<= 1.2), offline kept $(pct "$share") of the CPU online left idle (>= 80%)$caveat")
      else
        goal_lines+=("GOAL NOT MET ($(row_label "$r")): p99 $(fmt2 "$ratio")x alone (goal <= 1.2), offline kept $(pct "$share") of the CPU online left idle (goal >= 80%)$caveat")
      fi
    fi
  done
} >"$table"
((${#goal_lines[@]} > 0)) || goal_lines+=("GOAL NOT EVALUATED: no khagent row in ROWS")
notes="$(awk -F'\t' 'NR > 1 && $13 != "" {printf "* %s, round %s: %s\n", $1, $2, $13}' "$results/results.tsv")"

repro="scripts/bench-service.sh"
for v in QUICK DURATION WARMUP RATE CONNECTIONS ARRIVALS ROUNDS ROWS HOGS CACHE_HOG FILE_KB GZIP_LEVEL KHAGENT_ARGS KHAGENT_CONFIG AGENT_SETTLE OTHER_MAX; do
  [[ -z "${!v:-}" ]] || repro="$v=$(printf '%q' "${!v}") $repro"
done
cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
khagent_rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$root" status --porcelain -- userspace include bpf 2>/dev/null)" ]]; then khagent_rev+=" + uncommitted changes"; fi

report="$results/report.md"
{
  report_head "Service benchmark: nginx next to YARN hogs (scripts/bench-service.sh)" "$repro"
  echo "* machine: ${cpu_model:-unknown CPU}, $ncpu CPUs, kernel $(uname -r); 1-minute load average $load_start at the start, $load_end at the end"
  echo "* cgroups: cgroup2 at $v2, cpu lever files in $cpu_mode ($cpu_h), cpuset in $cpuset_mode${cpuset_h:+ ($cpuset_h)}"
  echo "* online: nginx $nginx_version, 1 worker, a $file_kb KiB text file gzipped (level $gzip_level) on every request, in a Burstable pod cgroup; the load generator (khagent_openloop, open loop: latency from each request's intended send time) in a second pod, $rate req/s ($arrivals arrivals) over $connections keep-alive connections"
  echo "* offline: stress-ng --cpu $hogs over two /hadoop-yarn/container_* cgroups; \"+cache\" rows add stress-ng $cache_hog in a third"
  echo "* levers are forced by the script on /hadoop-yarn (cpuset rows: also the pods' cpusets); khagent rows: \`khagent run --no-metrics\` (build $khagent_rev)${KHAGENT_CONFIG:+ with KHAGENT_CONFIG}${KHAGENT_ARGS:+ $KHAGENT_ARGS}, started $agent_settle s before the hogs"
  echo "* each run: ${warmup} s warm-up + ${duration} s measured; medians of $rounds interleaved round(s), over a row's quiet runs when it has any (else over all, see "runs quiet/all"); p99 / alone is the ratio of the two medians; CPU seconds over the whole client run; idle left by online = CPUs x window - online CPU (server and client pods); other CPU = busy CPU of the machine (/proc/stat) outside the pods, /hadoop-yarn and khagent: loopback softirq, this script, anything else on the host (the noise indicator; runs above $other_max CPUs on average were taken again, up to $retries times: $noisy_runs kept as NOISY); steal = the vCPUs' steal time (/proc/stat) during the run, CPU time the hypervisor gave to something else while a task of this machine was ready to run"
  echo
  cat "$table"
  echo
  for g in "${goal_lines[@]}"; do echo "**$g**"; echo; done
  if [[ -n "$notes" ]]; then echo "Notes:"; echo; echo "$notes"; echo; fi
} >"$report"

echo
cat "$report"
for g in "${goal_lines[@]}"; do echo "$g"; done
echo "(per-run JSON, agent logs and results.tsv in $results)"

if ((write_docs)); then
  doc="$root/docs/benchmarks.md"
  doc_section_write "$doc" bench-service "$report"
  log "wrote the section to $doc"
fi
((failures == 0)) || die "$failures run(s) failed, see the notes above"

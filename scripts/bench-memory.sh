#!/usr/bin/env bash
# Memory: an online service next to offline memory users, on this host's real
# kernel, inside a "node" modelled as a parent memory cgroup with a limit (the
# pressure stays inside it: the machine itself is never pushed into OOM).
#
# Online: a pod laid out like a Kubernetes Burstable pod holding nginx (one
# worker) that serves FILES files of FILE_KB KiB (its working set in the page
# cache, written by the pod itself so that the cache is the pod's), and
# khagent_memhog holding ONLINE_ANON_MB of anonymous memory in use (an
# in-memory cache, a heap). Both run with the oom_score_adj the kubelet gives
# a Burstable pod that requests REQUEST_MB of a node of NODE_MB. The load
# generator (khagent_openloop, open loop, a random file per request) runs in
# a second pod.
#
# Offline, in <node>/hadoop-yarn/container_* with oom_score_adj 0 as a YARN
# container's JVM has it: "anon" rows grow khagent_memhog to HOG_MB (a plain
# process; stress-ng raises its own workers' oom_score_adj, so it is no
# stand-in where the OOM order matters); "stream" rows read a STREAM_MB file
# in a loop through the page cache, as a YARN task reading its input does.
# "grow" rows run the streamer and, GROW_AT s into the client's run, let the
# online pod grow by GROW_MB of anonymous memory at GROW_RATE MiB/s (a burst
# of requests, a cache filling): the node is full of offline page cache when
# online needs room, and the rows time how soon the offline limit is cut.
# "growanon" rows do the same next to an anonymous hog of GROW_HOG_MB, which
# fits at first: the growth then leaves the node no memory the kernel can
# reclaim, and the OOM order decides who is killed.
#
# Rows (interleaved, round after round, each round starting one row later
# and every second one backwards;
# the median over rounds is reported):
#   alone            the online pod, no offline work
#   anon, stream     offline work, no restraint
#   grow             the streamer, and the online pod growing meanwhile
#   growanon         an anonymous hog that fits, and the online pod growing
#   X:limit          a hard limit of LIMIT_MB on <node>/hadoop-yarn
#                    (memory.limit_in_bytes on v1, memory.max on v2)
#   X:soft           v1 only: memory.soft_limit_in_bytes LIMIT_MB there
#   X:high           v2 only: memory.high LIMIT_MB there
#   X:adj            the offline processes at oom_score_adj 1000 (the OOM
#                    order fixed, nothing limited)
#   X:khagent        `khagent run` with its defaults (offline.yarn_hierarchy
#                    set to the node's, memory.node_cgroup to the node)
#   X:khagent-alt    the same with the binary KHAGENT_ALT (another build),
#                    for two builds side by side in one interleaved run
#   X:khagent-noreclaim  khagent with memory.reclaim: false (no proactive
#                    reclaim of offline page cache), beside X:khagent
#   X:khagent-norefault  khagent with memory.refault_halflife: 0 (online
#                    page cache it refaulted not counted with its working
#                    set, as before 2026-12-07), beside X:khagent
#   X:khagent-fixedreserve  khagent with the reserve of before 2026-12-06
#                    (memory.reserve_min over the fixed rule: nothing measured);
#                    the measured reserve needs 30 s of ticks: set SETTLE
#
#   scripts/bench-memory.sh                  full run
#   QUICK=1 scripts/bench-memory.sh          one short round of every row
#   scripts/bench-memory.sh --write-docs     also put the table in docs/benchmarks.md
#
# Environment (defaults in brackets):
#   NODE_MB=N        the node's memory: the limit of the parent cgroup [3072]
#   ONLINE_ANON_MB=N anonymous memory the online pod keeps in use [800]
#   FILES=N FILE_KB=N the online working set in the page cache [8192 x 64 KiB]
#   REQUEST_MB=N     the online pod's memory request, for its oom_score_adj [1024]
#   HOG_MB=N         the anonymous hog's size [2600]; HOG_RATE=N its growth, MiB/s [500]
#   STREAM_MB=N      the streamed file [4096]
#   GROW_MB=N GROW_RATE=N GROW_AT=S  the grow rows' online growth, MiB and
#                    MiB/s, and when it starts, s after the client [600 1000 WARMUP+2]
#   GROW_HOG_MB=N    the growanon rows' anonymous hog [1200]
#   LIMIT_MB=N       the offline limit of the limit/soft/high rows [900]
#   SETTLE=S         seconds offline runs before the measured window (alone waits
#                    as long) [HOG_MB / HOG_RATE + 2]
#   DURATION=S WARMUP=S  measured and warm-up seconds of the client [8 2; QUICK: 3 1]
#   RATE=N CONNECTIONS=N requests per second (open loop) and connections [200 8]
#   ROUNDS=N         rounds of all rows [3; QUICK: 1]
#   ROWS="..."       rows to run [alone anon anon:limit anon:adj anon:khagent
#                    stream stream:limit stream:soft|high stream:khagent
#                    grow grow:khagent growanon growanon:khagent]
#   BUILD_DIR=DIR    where khagent and the tools of tests/bench are [build]
#   KHAGENT_CONFIG   YAML text appended to the khagent rows' configuration
#   KHAGENT_ALT=FILE the khagent binary of the khagent-alt rows
#   RESULTS=DIR      where per-run files are kept [a new /tmp dir]
#   OFFLINE_IDLE=0|1 cpu.idle=1 on <node>/hadoop-yarn in every offline row but
#                    khagent's [1]: offline CPU restrained as khagent restrains
#                    it, so that the rows differ by memory alone (the hogs
#                    fault, reclaim and copy at full speed on 2 CPUs otherwise)
#   VM=6.1|6.12      run the whole benchmark in a QEMU guest (vmtest/run.sh) on
#                    Debian's 6.1 or 6.12 kernel, pure cgroup v2 (memory.high,
#                    the memory.max backstop, memory.reclaim), the files on a
#                    RAM disk with ext4 (page cache the kernel reclaims and
#                    refaults as on a disk). Smaller defaults there: NODE_MB
#                    1536, ONLINE_ANON_MB 400, FILES 4096, HOG_MB 1300,
#                    STREAM_MB 2048, GROW_MB 300, GROW_HOG_MB 600, LIMIT_MB 450,
#                    RATE 50, and the rows alone stream stream:khagent
#                    stream:khagent-noreclaim grow:khagent anon:khagent. TCG
#                    emulates the guest's clock: its latencies are not the
#                    host's; refaults, stall shares and memory are its kernel's.
#
# Each run reports the client's p50/p99/p99.9 and errors, OOM kills in the
# online pod (and whether its processes had to be started again), the online
# pod's memory stall (PSI "some" and "full" of its cgroup2 memory.pressure,
# ms over the window), the online pod's and offline's memory use (mean over
# the window, sampled every 0.25 s) and the share of the memory online left
# free that offline kept (offline mean / (NODE_MB - online mean)). The grow
# rows also time, from the start of the online growth, the onset of the
# online pod's memory stall (its PSI "some" total rising) and the first cut
# of the offline limit (memory.limit_in_bytes on v1, memory.high on v2), both
# sampled every 10 ms from outside the agent. Figures
# only: the exit code is non-zero only when the benchmark itself failed.
#
# Everything this script starts is stopped by pid, every file it writes is
# restored and every cgroup it creates is removed (children first), also on
# Ctrl-C or failure. Needs root, a memory controller (v1 or v2), nginx.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
me="bench-memory"
# shellcheck source=scripts/lib/common.sh
. "$root/scripts/lib/common.sh"
# shellcheck source=scripts/lib/bench_cgroup.sh
. "$root/scripts/lib/bench_cgroup.sh"

bench_args "${BASH_SOURCE[0]}" "$@"

# The settings above, by name: passed into the guest (VM=...) and written
# into the report's command line.
settings=(QUICK OFFLINE_IDLE NODE_MB ONLINE_ANON_MB FILES FILE_KB REQUEST_MB HOG_MB HOG_RATE STREAM_MB GROW_MB GROW_RATE
  GROW_AT GROW_HOG_MB LIMIT_MB SETTLE DURATION WARMUP RATE CONNECTIONS ROUNDS ROWS KHAGENT_CONFIG)

# VM=...: the same script again, in a guest (KHAGENT_VMTEST is set there).
if [[ -n "${VM:-}" && -z "${KHAGENT_VMTEST:-}" ]]; then
  case "$VM" in
    6.1) kernel_args=() ;;
    6.12) kernel_args=(--debian-suite trixie) ;;
    *) die "VM must be 6.1 or 6.12, not '$VM'" ;;
  esac
  : "${NODE_MB:=1536}" "${ONLINE_ANON_MB:=400}" "${FILES:=4096}" "${HOG_MB:=1300}" "${STREAM_MB:=2048}"
  : "${GROW_MB:=300}" "${GROW_HOG_MB:=600}" "${LIMIT_MB:=450}" "${RATE:=50}"
  : "${ROWS:=alone stream stream:khagent stream:khagent-noreclaim grow:khagent anon:khagent}"
  build_dir="${BUILD_DIR:-build}"
  [[ "$build_dir" == /* ]] || build_dir="$root/$build_dir"
  for f in khagent tests/bench/khagent_openloop tests/bench/khagent_memhog; do
    [[ -x "$build_dir/$f" ]] || die "no $build_dir/$f: build first (scripts/build.sh $build_dir)"
  done
  need_nginx
  # The disk holds the online files and the streamed one; the guest's
  # memory holds the node, the disk (a RAM disk) and 1 GiB for the rest.
  disk_mb=$((${FILES} * ${FILE_KB:-64} / 1024 + STREAM_MB + 256))
  includes=()
  for f in "$root"/scripts/bench-memory.sh "$root"/scripts/lib/*.sh "$build_dir/khagent" \
    "$build_dir/tests/bench/khagent_openloop" "$build_dir/tests/bench/khagent_memhog" \
    "$(command -v bash)" "$(command -v nginx || echo /usr/sbin/nginx)" "$(command -v awk)" \
    "$(command -v date)" "$(command -v sort)" "$(command -v timeout)" "$(command -v getconf)" "$(command -v mktemp)"; do
    includes+=(--include "$f")
  done
  passed=()
  for v in "${settings[@]}"; do
    [[ -z "${!v+set}" ]] || passed+=("$v=${!v}")
  done
  log "running in a QEMU guest on Debian's $VM kernel: a ${NODE_MB} MiB node, a ${disk_mb} MiB RAM disk at /var/tmp"
  exec "$root/vmtest/run.sh" "${kernel_args[@]}" --mem $((NODE_MB + disk_mb + 1024)) --disk "$disk_mb" \
    --timeout "${VM_TIMEOUT:-3600}" "${includes[@]}" \
    -- env TMPDIR=/var/tmp "BUILD_DIR=$build_dir" "${passed[@]}" "$(command -v bash)" "$root/scripts/bench-memory.sh"
fi

quick="${QUICK:-0}"
if [[ "$quick" == 1 ]]; then def_duration=3 def_warmup=1 def_rounds=1; else def_duration=8 def_warmup=2 def_rounds=3; fi
node_mb="${NODE_MB:-3072}"
online_anon_mb="${ONLINE_ANON_MB:-800}"
files="${FILES:-8192}"
file_kb="${FILE_KB:-64}"
request_mb="${REQUEST_MB:-1024}"
hog_mb="${HOG_MB:-2600}"
hog_rate="${HOG_RATE:-500}"
stream_mb="${STREAM_MB:-4096}"
grow_mb="${GROW_MB:-600}"
grow_rate="${GROW_RATE:-1000}"
grow_hog_mb="${GROW_HOG_MB:-1200}"
limit_mb="${LIMIT_MB:-900}"
duration="${DURATION:-$def_duration}"
warmup="${WARMUP:-$def_warmup}"
rounds="${ROUNDS:-$def_rounds}"
rate="${RATE:-200}"
connections="${CONNECTIONS:-8}"
for v in node_mb online_anon_mb files file_kb request_mb hog_mb hog_rate stream_mb grow_mb grow_rate grow_hog_mb limit_mb rounds connections; do
  is_uint "${!v}" && ((${!v} > 0)) || die "${v^^} must be a positive whole number, not '${!v}'"
done
for v in duration warmup rate; do is_num "${!v}" || die "${v^^} must be a number, not '${!v}'"; done
grow_at="${GROW_AT:-$(awk -v w="$warmup" 'BEGIN {print w + 2}')}"
is_num "$grow_at" || die "GROW_AT must be a number, not '$grow_at'"
settle="${SETTLE:-$(awk -v m="$hog_mb" -v r="$hog_rate" 'BEGIN {printf "%.1f", m / r + 2}')}"
is_num "$settle" || die "SETTLE must be a number, not '$settle'"
((online_anon_mb + files * file_kb / 1024 < node_mb)) || die "the online pod (ONLINE_ANON_MB + FILES x FILE_KB) must fit in NODE_MB"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" == /* ]] || build_dir="$root/$build_dir"
KHAGENT_CONFIG="${KHAGENT_CONFIG:-}"
offline_idle="${OFFLINE_IDLE:-1}"
[[ "$offline_idle" == 0 || "$offline_idle" == 1 ]] || die "OFFLINE_IDLE must be 0 or 1"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/bench-memory.XXXXXX")"
results="${RESULTS:-$tmp.results}"
mkdir -p "$results"

# --- cgroup hierarchies ----------------------------------------------------------
find_hierarchies
if [[ -n "$v1memory" ]]; then
  mem_mode=v1 mem_h="$v1memory"
elif [[ " $(cat "$v2/cgroup.controllers") " == *" memory "* ]]; then
  mem_mode=v2 mem_h="$v2"
else
  die "no memory controller: neither a v1 memory hierarchy nor memory in $v2/cgroup.controllers"
fi
if [[ "$mem_mode" == v1 ]]; then
  f_limit=memory.limit_in_bytes f_usage=memory.usage_in_bytes soft_row=soft
  f_cut=memory.limit_in_bytes # what khagent's memory lever writes
else
  f_limit=memory.max f_usage=memory.current soft_row=high
  f_cut=memory.high
fi
rows="${ROWS:-alone anon anon:limit anon:adj anon:khagent stream stream:limit stream:$soft_row stream:khagent grow grow:khagent growanon growanon:khagent}"
read -r -a row_list <<<"$rows"
for r in "${row_list[@]}"; do
  case "$r" in
    alone | anon | stream | grow | growanon) ;;
    anon:limit | stream:limit | grow:limit | growanon:limit | anon:adj | stream:adj | grow:adj | growanon:adj) ;;
    anon:khagent | stream:khagent | grow:khagent | growanon:khagent) ;;
    anon:khagent-noreclaim | stream:khagent-noreclaim | grow:khagent-noreclaim | growanon:khagent-noreclaim) ;;
    anon:khagent-fixedreserve | stream:khagent-fixedreserve | grow:khagent-fixedreserve | growanon:khagent-fixedreserve) ;;
    anon:khagent-norefault | stream:khagent-norefault | grow:khagent-norefault | growanon:khagent-norefault) ;;
    anon:khagent-alt | stream:khagent-alt | grow:khagent-alt | growanon:khagent-alt)
      [[ -x "${KHAGENT_ALT:-}" ]] || die "row $r needs KHAGENT_ALT, the khagent binary of another build" ;;
    anon:soft | stream:soft | grow:soft | growanon:soft) [[ "$mem_mode" == v1 ]] || die "row $r needs the v1 memory controller (use :high on v2)" ;;
    anon:high | stream:high | grow:high | growanon:high) [[ "$mem_mode" == v2 ]] || die "row $r needs the v2 memory controller (use :soft on v1)" ;;
    *) die "unknown row '$r' (see --help)" ;;
  esac
done
# Every hierarchy the processes are put in: cgroup2 (PSI, khagent's
# measuring), memory, and on hybrid hosts the v1 cpu and cpuset ones
# (khagent writes its CPU levers there at the same paths).
hier=("$v2")
for h in "$v1memory" "$v1cpu" "$v1cpuset"; do [[ -z "$h" ]] || hier+=("$h"); done
cpu_h="${v1cpu:-$v2}"

# The controllers each new v2 level needs: memory where it is on v2, and
# cpu (cpu.idle) on a pure v2 node.
v2_ctls=()
enabled=() # "<parent>/cgroup.subtree_control<TAB>controller" we enabled in a parent we did not make
[[ "$mem_mode" != v2 ]] || v2_ctls+=(memory)
[[ "$cpu_h" != "$v2" || " $(cat "$v2/cgroup.controllers") " != *" cpu "* ]] || v2_ctls+=(cpu)

node=/khagent-bench-node
for h in "${hier[@]}"; do [[ ! -e "$h$node" ]] || die "$h$node exists already (another run of this script?)"; done
mkcg() {  # mkcg REL: create REL in every hierarchy, each level prepared
  local rel=$1 h cur comp parent ctl
  local -a comps
  for h in "${hier[@]}"; do
    cur=""
    IFS=/ read -r -a comps <<<"${rel#/}"
    for comp in "${comps[@]}"; do
      parent="$h$cur" cur="$cur/$comp"
      [[ -d "$h$cur" ]] && continue
      if [[ "$h" == "$v2" ]]; then
        for ctl in "${v2_ctls[@]}"; do
          [[ " $(cat "$parent/cgroup.subtree_control") " != *" $ctl "* ]] || continue
          printf '+%s\n' "$ctl" >"$parent/cgroup.subtree_control" || die "could not enable $ctl in $parent"
          # A parent we found is given it back after our cgroups are gone.
          [[ " ${created[*]} " == *" $h"$'\t'"${cur%/*} "* ]] || enabled+=("$parent/cgroup.subtree_control"$'\t'"$ctl")
        done
      fi
      mkdir "$h$cur" || die "mkdir $h$cur failed"
      created+=("$h"$'\t'"$cur")
      if [[ "$h" == "$v1cpuset" ]]; then
        cat "$parent/cpuset.cpus" >"$h$cur/cpuset.cpus" || die "cpuset.cpus of $h$cur"
        cat "$parent/cpuset.mems" >"$h$cur/cpuset.mems" || die "cpuset.mems of $h$cur"
      fi
    done
  done
}
server_cg="$(pod_path "$node")"
client_cg="$(pod_path "$node")"
yarn_root="$node/hadoop-yarn"
anon_cg="$yarn_root/container_e01_1700000000000_0001_01_000002"
stream_cg="$yarn_root/container_e01_1700000000000_0001_01_000003"
for cg in "$server_cg" "$client_cg" "$anon_cg" "$stream_cg"; do mkcg "$cg"; done
if [[ "$mem_mode" == v1 && -f "$mem_h$node/memory.use_hierarchy" && "$(cat "$mem_h$node/memory.use_hierarchy")" != 1 ]]; then
  die "$mem_h$node/memory.use_hierarchy is 0: the node's limit would not cover its children"
fi
wr "$mem_h$node/$f_limit" $((node_mb * 1024 * 1024))

# The kubelet's oom_score_adj of a Burstable pod: 1000 - 1000 x request /
# capacity, clamped to 3..999.
online_adj=$(awk -v r="$request_mb" -v c="$node_mb" 'BEGIN {a = int(1000 - 1000 * r / c); if (a < 3) a = 3; if (a > 999) a = 999; print a}')

spawned=""
spawn() {  # spawn REL ADJ LOG CMD...: CMD in cgroup REL of every hierarchy at oom_score_adj ADJ; pid in $spawned
  local rel=$1 adj=$2 logf=$3 hh
  shift 3
  (
    for hh in "${hier[@]}"; do echo "$BASHPID" >"$hh$rel/cgroup.procs"; done
    echo "$adj" >/proc/self/oom_score_adj
    exec "$@"
  ) >"$logf" 2>&1 &
  spawned=$!
  pids+=("$spawned")
}

agent_pid=""
cleaned=0
cleanup() {
  local rc=$? i
  ((cleaned)) && return
  cleaned=1
  set +e
  if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid" 2>/dev/null
    for ((i = 0; i < 150; i++)); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}"; done
  restore_to 0
  remove_created
  for ((i = ${#enabled[@]} - 1; i >= 0; i--)); do
    printf -- '-%s\n' "${enabled[i]#*$'\t'}" >"${enabled[i]%%$'\t'*}" 2>/dev/null \
      || warn "could not disable ${enabled[i]#*$'\t'} in ${enabled[i]%%$'\t'*} again"
  done
  rm -rf "$tmp"
  if ((rc != 0)); then log "failed (exit $rc); per-run files in $results"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

need_nginx
openloop="$(bench_tool khagent_openloop openloop_http.cpp)"
memhog="$(bench_tool khagent_memhog memhog.cpp)"
khagent="$build_dir/khagent"
if [[ " ${row_list[*]} " == *":khagent "* || " ${row_list[*]} " == *":khagent" ]]; then
  [[ -x "$khagent" ]] || die "no $khagent: build it first (scripts/build.sh)"
fi

# --- the online pod -----------------------------------------------------------------
www="$tmp/www"
mkdir -p "$www/f" "$tmp/nginx-tmp"
chmod 755 "$tmp" "$www" "$www/f"
# Written from inside the pod, so that its page cache is the pod's.
spawn "$server_cg" "$online_adj" "$tmp/files.log" awk -v n="$files" -v kb="$file_kb" -v d="$www/f" 'BEGIN {
  line = sprintf("%1023s", "x"); gsub(/ /, "k", line)
  for (i = 0; i < n; i++) { f = d "/" i; for (j = 0; j < kb; j++) print line > f; close(f) }
}'
wait "$spawned" || die "writing the online files failed: $(cat "$tmp/files.log")"
forget_pid "$spawned"
free_port
nginx_conf "$tmp/nginx.conf" "$www" "$port"
url="http://127.0.0.1:$port/f/{}"
nginx_pid="" cache_pid="" online_starts=0
start_online() {  # nginx and the online memhog, each started again when gone (OOM-killed)
  local i
  if [[ -z "$nginx_pid" ]] || ! kill -0 "$nginx_pid" 2>/dev/null; then
    [[ -z "$nginx_pid" ]] || { wait "$nginx_pid" 2>/dev/null || true; forget_pid "$nginx_pid"; }
    spawn "$server_cg" "$online_adj" "$results/nginx.out" "$nginx_bin" -c "$tmp/nginx.conf" -p "$tmp"
    nginx_pid=$spawned online_starts=$((online_starts + 1))
    for ((i = 0; i < 50; i++)); do
      listening "$port" && break
      kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited: $(cat "$results/nginx.out" "$tmp/nginx-error.log" 2>/dev/null)"
      sleep 0.1
    done
    listening "$port" || die "nginx does not listen on 127.0.0.1:$port"
  fi
  if [[ -z "$cache_pid" ]] || ! kill -0 "$cache_pid" 2>/dev/null; then
    [[ -z "$cache_pid" ]] || { wait "$cache_pid" 2>/dev/null || true; forget_pid "$cache_pid"; }
    spawn "$server_cg" "$online_adj" "$tmp/online-memhog.out" "$memhog" --mb "$online_anon_mb" --rate 1000
    cache_pid=$spawned online_starts=$((online_starts + 1))
    for ((i = 0; i < 300; i++)); do
      grep -q grown "$tmp/online-memhog.out" 2>/dev/null && break
      kill -0 "$cache_pid" 2>/dev/null || die "the online memhog exited: $(cat "$tmp/online-memhog.out")"
      sleep 0.1
    done
  fi
}
start_online
online_starts=0

# The streamed file, written around the page cache (direct I/O) so that no
# one holds it in memory before the streamer reads it.
need_stream=0
for r in "${row_list[@]}"; do [[ "${r%%:*}" != stream && "${r%%:*}" != grow ]] || need_stream=1; done
if ((need_stream)); then
  log "writing the ${stream_mb} MiB file the stream rows read"
  dd if=/dev/zero of="$tmp/stream.dat" bs=4M count=$((stream_mb / 4)) oflag=direct status=none \
    || die "writing $tmp/stream.dat failed"
fi

# --- measuring ---------------------------------------------------------------------------
psi_us() {  # psi_us REL some|full: total stall time of the cgroup's memory.pressure, us
  awk -v k="$2" '$1 == k {for (i = 2; i <= NF; i++) if ($i ~ /^total=/) {sub(/total=/, "", $i); print $i}}' "$v2$1/memory.pressure"
}
refaults_file() {  # refaults_file REL: page cache the cgroup read back soon after it was reclaimed, pages
  awk -v k="$([[ "$mem_mode" == v1 ]] && echo total_)workingset_refault_file" '$1 == k {print $2; f = 1} END {if (!f) print 0}' "$mem_h$1/memory.stat"
}
oom_kills() {  # oom_kills REL: OOM kills charged to the cgroup (v1: its own; v2: it and below)
  if [[ "$mem_mode" == v1 ]]; then
    awk '$1 == "oom_kill" {print $2; f = 1} END {if (!f) print 0}' "$mem_h$1/memory.oom_control"
  else
    awk '$1 == "oom_kill" {print $2; f = 1} END {if (!f) print 0}' "$mem_h$1/memory.events"
  fi
}
[[ -r "$v2$(pod_of "$server_cg")/memory.pressure" ]] || die "no memory.pressure in cgroup2 (a kernel without PSI, or booted with psi=0)"

sampler_pid=""
start_sampler() {  # every 0.25 s: offline and online memory use, MiB (builtins: no process per sample but sleep)
  local off="$mem_h$yarn_root/$f_usage" on="$mem_h$(pod_of "$server_cg")/$f_usage" a b
  (
    while :; do
      read -r a <"$off" && read -r b <"$on" && printf '%s %s\n' $((a / 1048576)) $((b / 1048576))
      sleep 0.25
    done
  ) >"$1" 2>/dev/null &
  sampler_pid=$!
  pids+=("$sampler_pid")
}
stop_sampler() { stop_pid "$sampler_pid"; forget_pid "$sampler_pid"; sampler_pid=""; }
# Every 10 ms: the time (s, EPOCHREALTIME), the online pod's PSI "some" total
# (us) and the offline limit khagent writes. The wait is a read with a
# timeout on a FIFO no one writes: no process per sample.
mkfifo "$tmp/never"
fast_pid=""
start_fast_sampler() {
  local psi="$v2$(pod_of "$server_cg")/memory.pressure" lim="$mem_h$yarn_root/$f_cut" k a b c t l
  (
    exec 9<>"$tmp/never"
    while :; do
      read -r k a b c t <"$psi" && read -r l <"$lim" && printf '%s %s %s\n' "$EPOCHREALTIME" "${t#total=}" "$l"
      read -rt 0.01 -u 9 k || true
    done
  ) >"$1" 2>/dev/null &
  fast_pid=$!
  pids+=("$fast_pid")
}
stop_fast_sampler() { [[ -z "$fast_pid" ]] || { stop_pid "$fast_pid"; forget_pid "$fast_pid"; fast_pid=""; }; }
# reaction SAMPLES T_GROW: "onset_ms cut_ms" after T_GROW (nan: none seen)
reaction() {
  awk -v g="$2" '
    NR == 1 {base = int($1)}
    {t = $1 - base; l = ($3 == "max") ? 1e30 : $3 + 0}
    t < g - base || NR == 1 {p0 = $2 + 0; l0 = l; if (t < g - base) next}
    onset == "" && $2 + 0 > p0 {onset = t}
    cut == "" && l < l0 {cut = t}
    END {
      d = g - base
      printf "%s %s\n", (onset == "" ? "nan" : sprintf("%.0f", (onset - d) * 1000)), (cut == "" ? "nan" : sprintf("%.0f", (cut - d) * 1000))
    }' "$1"
}

hog_pids=()
start_offline() {  # start_offline anon|stream ADJ [MIB]: MIB of the anon hog [HOG_MB]
  if [[ "$1" == anon ]]; then
    spawn "$anon_cg" "$2" "$tmp/hog.out" "$memhog" --mb "${3:-$hog_mb}" --rate "$hog_rate"
  else
    spawn "$stream_cg" "$2" "$tmp/hog.out" sh -c 'while :; do dd if="$1" of=/dev/null bs=1M status=none || exit 1; done' sh "$tmp/stream.dat"
  fi
  hog_pids=("$spawned")
}
stop_offline() {
  local p c
  for p in "${hog_pids[@]}"; do stop_pid "$p"; forget_pid "$p"; done
  hog_pids=()
  for c in "$anon_cg" "$stream_cg"; do
    for p in $(cg_tasks "$v2$c"); do kill -KILL "$p" 2>/dev/null || true; done
    empty_cgroup "$v2$c"
  done
}
# The page cache offline leaves behind stays charged to it: emptied after
# each run, so that every row starts from the same node.
drop_offline_memory() {
  local c
  if [[ "$mem_mode" == v1 ]]; then
    for c in "$anon_cg" "$stream_cg" "$yarn_root"; do
      echo 0 >"$mem_h$c/memory.force_empty" 2>/dev/null || warn "could not empty $mem_h$c (memory.force_empty)"
    done
  elif [[ -f "$mem_h$yarn_root/memory.reclaim" ]]; then
    echo "$((node_mb * 2))M" >"$mem_h$yarn_root/memory.reclaim" 2>/dev/null || true  # EAGAIN: not all of it, fine
  fi
}
apply_lever() {  # apply_lever MIX LEVER
  if ((offline_idle)) && [[ "$1" != alone && "$2" != khagent* ]]; then
    [[ -f "$cpu_h$yarn_root/cpu.idle" ]] || die "no cpu.idle in $cpu_h$yarn_root (kernel 5.15+; or set OFFLINE_IDLE=0)"
    wr "$cpu_h$yarn_root/cpu.idle" 1
  fi
  case "$2" in
    limit) wr "$mem_h$yarn_root/$f_limit" $((limit_mb * 1024 * 1024)) ;;
    soft) wr "$mem_h$yarn_root/memory.soft_limit_in_bytes" $((limit_mb * 1024 * 1024)) ;;
    high) wr "$mem_h$yarn_root/memory.high" $((limit_mb * 1024 * 1024)) ;;
  esac
}
start_agent() {  # start_agent LOG [BINARY [MEMORY-KEYS]]
  # The node is a cgroup here: khagent's memory budget is taken from its limit.
  local extra=""
  [[ -z "${3:-}" ]] || extra="  $3"$'\n'
  printf 'offline:\n  yarn_hierarchy: %s\nmemory:\n  node_cgroup: %s\n%s%s\n' "${yarn_root#/}" "$node" \
    "$extra" "$KHAGENT_CONFIG" >"$tmp/khagent.yaml"
  rm -f "$tmp/state.json"*
  "${2:-$khagent}" run --no-metrics --state-file "$tmp/state.json" --config "$tmp/khagent.yaml" >"$1" 2>&1 &
  agent_pid=$!
  sleep 2
  kill -0 "$agent_pid" 2>/dev/null || die "khagent exited at start: $(tail -5 "$1")"
}
agent_note=""
stop_agent() {  # SIGTERM; its exit code in agent_note
  local rc
  kill -TERM "$agent_pid" 2>/dev/null || true
  if wait "$agent_pid"; then rc=0; else rc=$?; fi
  agent_pid=""
  ((rc == 0)) || failures=$((failures + 1))
  agent_note="khagent exit $rc"
}
row_label() {
  local mix=${1%%:*} lever=${1#*:} what
  [[ "$1" == *:* ]] || lever=""
  case "$mix" in
    alone) echo "alone (no offline work)"; return ;;
    anon) what="anon hog ${hog_mb} MiB" ;;
    stream) what="page-cache streamer (${stream_mb} MiB file)" ;;
    grow) what="streamer, online grows ${grow_mb} MiB at ${grow_rate} MiB/s" ;;
    growanon) what="anon hog ${grow_hog_mb} MiB, online grows ${grow_mb} MiB at ${grow_rate} MiB/s" ;;
  esac
  case "$lever" in
    "") echo "$what, no restraint" ;;
    limit) echo "$what + offline $f_limit ${limit_mb} MiB" ;;
    soft) echo "$what + offline memory.soft_limit_in_bytes ${limit_mb} MiB" ;;
    high) echo "$what + offline memory.high ${limit_mb} MiB" ;;
    adj) echo "$what + offline oom_score_adj 1000" ;;
    khagent) echo "$what + khagent (defaults)" ;;
    khagent-alt) echo "$what + khagent (defaults), the other build" ;;
    khagent-noreclaim) echo "$what + khagent, memory.reclaim off" ;;
    khagent-fixedreserve) echo "$what + khagent, the fixed reserve" ;;
    khagent-norefault) echo "$what + khagent, refaulted online cache not counted" ;;
  esac
}

failures=0
# results.tsv: row round p50 p99 p999 max count errors online_ooms online_restarted offline_ooms
#   psi_some_ms psi_full_ms offline_mb online_mb offline_peak_mb window_s note grow_onset_ms grow_cut_ms refault_mib
printf 'row\tround\tp50\tp99\tp999\tmax\tcount\terrors\tonline_ooms\tonline_restarted\toffline_ooms\tpsi_some_ms\tpsi_full_ms\toffline_mb\tonline_mb\toffline_peak_mb\twindow_s\tnote\tgrow_onset_ms\tgrow_cut_ms\trefault_mib\n' >"$results/results.tsv"
run_one() {  # run_one ROW ROUND
  local row=$1 round=$2 mix lever adj=0 mark tag json note="" rc t0 t1 s0 s1 f0 f1 rf0 rf1 on0 on1 off0 off1 i
  local grow_pid="" react="nan nan"
  mix=${row%%:*} lever=${row#*:}
  [[ "$row" == *:* ]] || lever=""
  [[ "$lever" == adj ]] && adj=1000
  tag="${row/:/-}-r$round"
  online_starts=0
  start_online
  # The pod's files back in its page cache (and charged to it) after a row
  # that pushed them out, read twice so that they are on the active list as
  # a server's files are: a row after an online restart must not start with
  # the online cache easier to reclaim than in the other rows.
  # In the guest (the whole machine is the benchmark's) the page cache is
  # dropped first: the kernel's LRU order is a row's legacy too. With MGLRU
  # (6.12), online files the row before pushed out and the warm-up read
  # back sit in the oldest generation, first to go again: whichever row
  # followed the unrestrained streamer refaulted 15-21 MiB, the same row
  # elsewhere 0.0. On a host the machine's cache is not ours to drop.
  if [[ -n "${KHAGENT_VMTEST:-}" ]]; then sync; echo 1 >/proc/sys/vm/drop_caches; fi
  spawn "$server_cg" "$online_adj" "$tmp/warm.log" sh -c 'cat "$1"/* >/dev/null; cat "$1"/* >/dev/null' sh "$www/f"
  wait "$spawned" || true
  forget_pid "$spawned"
  mark=${#rs_files[@]}
  apply_lever "$mix" "$lever"
  case "$lever" in
    khagent) start_agent "$results/khagent-$tag.log" ;;
    khagent-alt) start_agent "$results/khagent-$tag.log" "$KHAGENT_ALT" ;;
    khagent-noreclaim) start_agent "$results/khagent-$tag.log" "$khagent" "reclaim: false" ;;
    khagent-fixedreserve) start_agent "$results/khagent-$tag.log" "$khagent" "reserve_min: 1024Gi" ;;
    khagent-norefault) start_agent "$results/khagent-$tag.log" "$khagent" "refault_halflife: 0s" ;;
  esac
  on0=$(oom_kills "$server_cg") off0=$(($(oom_kills "$anon_cg") + $(oom_kills "$stream_cg")))
  if [[ "$mix" != alone ]]; then
    case "$mix" in
      grow) start_offline stream "$adj" ;;
      growanon) start_offline anon "$adj" "$grow_hog_mb" ;;
      *) start_offline "$mix" "$adj" ;;
    esac
    if [[ "$mix" == anon || "$mix" == growanon ]]; then
      for ((i = 0; i < ${settle%.*} * 10 + 10; i++)); do
        grep -q grown "$tmp/hog.out" 2>/dev/null && break
        kill -0 "${hog_pids[0]}" 2>/dev/null || break
        sleep 0.1
      done
      sleep 1
    else
      sleep "$settle"
    fi
  else
    # Alone waits as long: the online pod's files age the same time since
    # the warm-up read in every row, so that a node's own time-based
    # reclaim of cold page cache (DAMON's pageout scheme, as some VM hosts
    # run it; senpai, TMO) takes as much from it alone as beside offline.
    sleep "$settle"
  fi
  s0=$(psi_us "$(pod_of "$server_cg")" some) f0=$(psi_us "$(pod_of "$server_cg")" full)
  rf0=$(refaults_file "$(pod_of "$server_cg")")
  t0=$(date +%s%N)
  start_sampler "$tmp/mem-$tag.txt"
  if [[ "$mix" == grow* ]]; then
    rm -f "$tmp/grow.t"
    start_fast_sampler "$tmp/fast-$tag.txt"
    # The growth's start time is written just before the memhog starts.
    spawn "$server_cg" "$online_adj" "$tmp/grow.out" bash -c 'sleep "$1"; echo "$EPOCHREALTIME" >"$2"; exec "$3" --mb "$4" --rate "$5"' \
      grow "$grow_at" "$tmp/grow.t" "$memhog" "$grow_mb" "$grow_rate"
    grow_pid=$spawned
  fi
  json="$results/client-$tag.json"
  spawn "$client_cg" "$online_adj" "$json" "$openloop" --url "$url" --spread "$files" --rate "$rate" \
    --duration "$duration" --warmup "$warmup" --connections "$connections" --seed "$round"
  if wait "$spawned"; then rc=0; else rc=$?; fi
  forget_pid "$spawned"
  t1=$(date +%s%N)
  stop_sampler
  if [[ -n "$grow_pid" ]]; then
    stop_fast_sampler
    if [[ -s "$tmp/grow.t" ]]; then
      react="$(reaction "$tmp/fast-$tag.txt" "$(cat "$tmp/grow.t")")"
    else
      note="${note:+$note; }the online growth did not start within the run"
    fi
    kill -0 "$grow_pid" 2>/dev/null || note="${note:+$note; }the online growth exited: $(tail -1 "$tmp/grow.out")"
    stop_pid "$grow_pid"
    forget_pid "$grow_pid"
    cp "$tmp/fast-$tag.txt" "$results/" 2>/dev/null || true
  fi
  s1=$(psi_us "$(pod_of "$server_cg")" some) f1=$(psi_us "$(pod_of "$server_cg")" full)
  rf1=$(refaults_file "$(pod_of "$server_cg")")
  on1=$(oom_kills "$server_cg") off1=$(($(oom_kills "$anon_cg") + $(oom_kills "$stream_cg")))
  ((rc == 0)) || note="client exit $rc: $(tail -1 "$json")"
  if ! kill -0 "$nginx_pid" 2>/dev/null || ! kill -0 "$cache_pid" 2>/dev/null; then
    note="${note:+$note; }online process gone:$(kill -0 "$nginx_pid" 2>/dev/null || echo " nginx")$(kill -0 "$cache_pid" 2>/dev/null || echo " memhog")"
  fi
  [[ "$mix" == alone ]] || stop_offline
  drop_offline_memory
  if [[ "$lever" == khagent* ]]; then
    stop_agent
    note="${note:+$note; }$agent_note"
  fi
  restore_to "$mark"
  cp "$tmp/mem-$tag.txt" "$results/" 2>/dev/null || true
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$round" \
    "$(jnum p50_us "$json")" "$(jnum p99_us "$json")" "$(jnum p999_us "$json")" "$(jnum max_us "$json")" \
    "$(jnum count "$json")" "$(jnum errors "$json")" $((on1 - on0)) \
    "$(kill -0 "$nginx_pid" 2>/dev/null && kill -0 "$cache_pid" 2>/dev/null && echo 0 || echo 1)" $((off1 - off0)) \
    "$(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.1f", (b - a) / 1000}')" \
    "$(awk -v a="$f0" -v b="$f1" 'BEGIN {printf "%.1f", (b - a) / 1000}')" \
    "$(awk '{s += $1; n++} END {printf "%.0f", n ? s / n : 0}' "$tmp/mem-$tag.txt")" \
    "$(awk '{s += $2; n++} END {printf "%.0f", n ? s / n : 0}' "$tmp/mem-$tag.txt")" \
    "$(awk '$1 > m {m = $1} END {printf "%.0f", m}' "$tmp/mem-$tag.txt")" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}')" "$note" "${react% *}" "${react#* }" \
    "$(awk -v a="$rf0" -v b="$rf1" -v p="$(getconf PAGESIZE)" 'BEGIN {printf "%.1f", (b - a) * p / 1048576}')" >"$tmp/line.tsv"
  cat "$tmp/line.tsv" >>"$results/results.tsv"
  awk -F'\t' '{printf "  %-15s round %s: p50 %7s  p99 %8s  p99.9 %8s us  errors %s  online OOM kills %s  stall some/full %s/%s ms  refaults %s MiB  MiB offline %s online %s%s %s\n", $1, $2, $3, $4, $5, $8, $9, $12, $13, $21, $14, $15, ($1 ~ /^grow/ ? sprintf("  after the growth: stall %s ms, cut %s ms", $19, $20) : ""), $18}' "$tmp/line.tsv" >&2
}

# --- run -----------------------------------------------------------------------------
log "node $node: $node_mb MiB ($mem_mode memory controller in $mem_h); online: nginx on 127.0.0.1:$port with $files x $file_kb KiB files + $online_anon_mb MiB anonymous, oom_score_adj $online_adj; $rate req/s open loop"
log "rows: ${row_list[*]}; $rounds round(s) of ${warmup}+${duration} s after ${settle} s of offline; results in $results"
# Each round starts one row later than the one before (the rows rotate),
# and every second round runs them backwards: a rotation alone keeps each
# row after the same one, and a row inherits something of the row before
# (the node as the last one left it: online's cache pushed out, offline's
# not all given back).
for ((round = 1; round <= rounds; round++)); do
  log "round $round/$rounds"
  n=${#row_list[@]}
  for ((k = 0; k < n; k++)); do
    if ((round % 2)); then i=$(((k + round - 1) % n)); else i=$(((n - 1 - k + round - 1) % n)); fi
    run_one "${row_list[i]}" "$round"
  done
done

# --- report ----------------------------------------------------------------------------
col() { awk -F'\t' -v r="$1" -v c="$2" 'NR > 1 && $1 == r {print $c}' "$results/results.tsv"; }
sum() { col "$1" "$2" | awk '{s += $1} END {print s + 0}'; }
alone_p99="nan"
[[ " ${row_list[*]} " != *" alone "* ]] || alone_p99="$(col alone 4 | med)"
table="$results/table.md"
{
  echo "| row | p50 µs | p99 µs | p99.9 µs | p99 / alone | errors | online OOM kills (runs with an online process gone) | offline OOM kills | online stall some / full ms | online refaults MiB | online MiB | offline MiB (peak) | offline share of what online left |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for r in "${row_list[@]}"; do
    p99="$(col "$r" 4 | med)"
    ratio="$(awk -v a="$p99" -v b="$alone_p99" 'BEGIN {if (a == "nan" || b == "nan" || b <= 0) print "nan"; else print a / b}')"
    off="$(col "$r" 14 | med)" on="$(col "$r" 15 | med)"
    share="$(awk -v o="$off" -v n="$on" -v t="$node_mb" 'BEGIN {if (t - n <= 0) print "nan"; else print o / (t - n)}')"
    echo "| $(row_label "$r") | $(fmt0 "$(col "$r" 3 | med)") | $(fmt0 "$p99") | $(fmt0 "$(col "$r" 5 | med)") | $(fmt2 "$ratio") | $(sum "$r" 8) | $(sum "$r" 9) ($(sum "$r" 10)) | $(sum "$r" 11) | $(fmt0 "$(col "$r" 12 | med)") / $(fmt0 "$(col "$r" 13 | med)") | $(fmt1 "$(col "$r" 21 | med)") | $(fmt0 "$on") | $(fmt0 "$off") ($(fmt0 "$(col "$r" 16 | sort -g | tail -1)")) | $( [[ "$r" == alone ]] && echo - || pct "$share") |"
  done
} >"$table"
# The grow rows' timing: from the start of the online growth to the onset of
# the online pod's memory stall and to the first cut of the offline limit.
reaction_table="$results/reaction.md"
: >"$reaction_table"
if [[ " ${row_list[*]} " == *" grow"* ]]; then
  {
    echo "| row | online stall onset after the growth starts, ms (per round) | first cut of offline $f_cut after the growth starts, ms (per round) | cut after the stall's onset, ms (median) |"
    echo "| --- | --- | --- | ---: |"
    for r in "${row_list[@]}"; do
      [[ "$r" == grow* ]] || continue
      echo "| $(row_label "$r") | $(col "$r" 19 | paste -sd' ') | $(col "$r" 20 | paste -sd' ') | $(fmt0 "$(awk -F'\t' -v r="$r" 'NR > 1 && $1 == r && $19 != "nan" && $20 != "nan" {print $20 - $19}' "$results/results.tsv" | med)") |"
    done
  } >"$reaction_table"
fi
notes="$(awk -F'\t' 'NR > 1 && $18 != "" {printf "* %s, round %s: %s\n", $1, $2, $18}' "$results/results.tsv")"
repro="scripts/bench-memory.sh"
for v in "${settings[@]}"; do
  [[ -z "${!v:-}" ]] || repro="$v=$(printf '%q' "${!v}") $repro"
done
cpu_model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
report="$results/report.md"
{
  report_head "Memory benchmark: nginx and an in-memory cache next to YARN memory users (scripts/bench-memory.sh)" "$repro"
  echo "* machine: ${cpu_model:-unknown CPU}, $(nproc) CPUs, kernel $(uname -r), swap $(awk '/^SwapTotal/ {print $2 / 1024 " MiB"}' /proc/meminfo); the node is a $mem_mode memory cgroup limited to $node_mb MiB"
  echo "* online, a Burstable pod at oom_score_adj $online_adj (a $request_mb MiB request on a $node_mb MiB node): nginx serving $files files of $file_kb KiB (written by the pod: its page cache) and khagent_memhog keeping $online_anon_mb MiB of anonymous memory in use; khagent_openloop in a second pod, $rate req/s open loop over $connections connections, a random file per request"
  echo "* offline, oom_score_adj 0 unless said$( ((offline_idle)) && echo ", its CPU at cpu.idle=1 in every row (khagent's rows: as khagent sets it)"): khagent_memhog growing to $hog_mb MiB at $hog_rate MiB/s, or a loop of dd reading a $stream_mb MiB file; measured after ${settle} s of it (OOM kills counted from its start)"
  echo "* each run: ${warmup} s warm-up + ${duration} s measured; medians of $rounds interleaved round(s); OOM kills and restarts summed over rounds; stall = PSI of the online pod's cgroup2 memory.pressure over the window; memory = mean usage over the window (sampled every 0.25 s); offline share = offline MiB / ($node_mb - online MiB)"
  echo
  cat "$table"
  echo
  if [[ -s "$reaction_table" ]]; then
    echo "Online growth (grow rows: ${grow_mb} MiB at ${grow_rate} MiB/s, ${grow_at} s into the client's run; sampled every 10 ms; nan: none seen):"
    echo
    cat "$reaction_table"
    echo
  fi
  if [[ -n "$notes" ]]; then echo "Notes:"; echo; echo "$notes"; echo; fi
} >"$report"
# The goal's figures (issue: zero online OOM kills; next to a page-cache
# streamer, online refaults and stall within 1.1x of alone; offline keeps at
# least 80% of what online leaves), from the rows that were run.
goal="online OOM kills $(awk -F'\t' 'NR > 1 {s += $9} END {print s + 0}' "$results/results.tsv") in all rows"
if [[ " ${row_list[*]} " == *" alone "* && " ${row_list[*]} " == *" stream:khagent "* ]]; then
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b <= 0) print (a <= 0 ? "1.00x" : "no ratio: alone had none"); else printf "%.2fx", a / b}'; }
  goal="$goal; streamer + khagent: online refaults $(fmt1 "$(col stream:khagent 21 | med)") MiB vs alone $(fmt1 "$(col alone 21 | med)") ($(ratio "$(col stream:khagent 21 | med)" "$(col alone 21 | med)")), stall $(fmt0 "$(col stream:khagent 12 | med)") ms vs $(fmt0 "$(col alone 12 | med)") ($(ratio "$(col stream:khagent 12 | med)" "$(col alone 12 | med)"))"
  if [[ " ${row_list[*]} " == *" stream:khagent-noreclaim "* ]]; then
    goal="$goal; without reclaim: refaults $(fmt1 "$(col stream:khagent-noreclaim 21 | med)") MiB, stall $(fmt0 "$(col stream:khagent-noreclaim 12 | med)") ms"
  fi
  if [[ " ${row_list[*]} " == *" stream:khagent-norefault "* ]]; then
    goal="$goal; refaulted cache not counted: refaults $(fmt1 "$(col stream:khagent-norefault 21 | med)") MiB, stall $(fmt0 "$(col stream:khagent-norefault 12 | med)") ms"
  fi
fi
for r in stream:khagent stream:khagent-norefault; do  # the streamer uses all it is given (an anonymous hog that does not fit is killed)
  [[ " ${row_list[*]} " == *" $r "* ]] || continue
  goal="$goal; $r offline keeps $(pct "$(awk -v o="$(col "$r" 14 | med)" -v n="$(col "$r" 15 | med)" -v t="$node_mb" 'BEGIN {if (t - n <= 0) print "nan"; else print o / (t - n)}')") of what online leaves (goal 80%, ${node_mb} MiB node)"
done
echo "goal: $goal (targets: 0 kills; within 1.1x of alone; at least 80%)" >>"$report"
echo
cat "$report"
echo "(per-run JSON, memory samples and results.tsv in $results)"
if [[ -n "${KHAGENT_VMTEST:-}" ]]; then
  # The guest's files go with it: its agents' memory decisions go out on
  # the console (the VM's log) with the table.
  for f in "$results"/khagent-*.log; do
    [[ -e "$f" ]] || continue
    echo "== ${f##*/}: memory budget and reclaim lines"
    grep -E 'memory budget|memory reclaim' "$f" | cut -c1-400 || true
  done
fi
echo "goal: $goal"
if ((write_docs)); then
  doc_section_write "$root/docs/benchmarks.md" bench-memory "$report"
  log "wrote the section to docs/benchmarks.md"
fi
((failures == 0)) || die "$failures run(s) failed, see the notes above"

#!/usr/bin/env bash
# What a running khagent's BPF side holds, read with bpftool from the maps it
# pins (docs/bpftool.md explains every map and field):
#   1. its programs, with the time they cost per run over a short window
#      (kernel.bpf_stats_enabled is switched on for the window if it was off,
#      and switched back afterwards),
#   2. the counters map: events seen and what could not be recorded,
#   3. the cgroups with the most run-queue wait (cgroup_stats), by cause,
#   4. the (victim, aggressor) pairs with the most interference,
#   5. throttling seen by fentry (throttle_stats) and the protected cgroups.
# Totals count from when the agent created the entry (agent start, or the
# cgroup's first event), summed over CPUs.
#
#   scripts/bpftool-inspect.sh [-d PIN_DIR] [-s SECONDS] [-n TOP]
#     -d  where the agent pins its maps   [/sys/fs/bpf/khagent] (its --pin-dir)
#     -s  program cost window, seconds    [5]; 0 skips the window
#     -n  rows of the cgroup and pair tables [10]
#
# Needs root, bpftool and jq. In the container image it is installed as
# khagent-bpftool-inspect: kubectl exec -n khagent ds/khagent -- khagent-bpftool-inspect
set -euo pipefail

pin_dir=/sys/fs/bpf/khagent
window=5
top=10
while getopts "d:s:n:h" opt; do
  case "$opt" in
    d) pin_dir="${OPTARG%/}" ;;
    s) window="$OPTARG" ;;
    n) top="$OPTARG" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
done
[[ "$window" =~ ^[0-9]+$ ]] || { echo "bpftool-inspect: -s wants whole seconds, got '$window'" >&2; exit 2; }
[[ "$top" =~ ^[1-9][0-9]*$ ]] || { echo "bpftool-inspect: -n wants a positive number, got '$top'" >&2; exit 2; }

die() { echo "bpftool-inspect: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (bpftool reads BPF objects)"
bpftool=$(command -v bpftool || true)
[[ -z "$bpftool" && -x /usr/sbin/bpftool ]] && bpftool=/usr/sbin/bpftool
[[ -n "$bpftool" ]] || die "bpftool not found (Debian: apt-get install bpftool)"
command -v jq >/dev/null || die "jq not found (Debian: apt-get install jq)"
[[ -d "$pin_dir" ]] || die "$pin_dir does not exist: is khagent running, with pinning on (no --no-pin)? Its --pin-dir may differ (-d)."
for m in cgroup_stats interference counters; do
  [[ -e "$pin_dir/$m" ]] || die "$pin_dir/$m is missing: not a khagent pin directory, or the agent is stopping"
done

bt() { "$bpftool" "$@"; }
section() { printf '\n== %s\n' "$*"; }

# Entries of a pinned map as JSON with BTF field names: one "value" per key
# for shared maps, [{"key": ..., "values": [{"cpu": N, "value": {...}}]}] for
# per-CPU ones (counters). sum(f) adds f over both forms.
jq_sum='def sum(f): if has("values") then ([.values[].value | f] | add) else (.value | f) end; '
dump() {
  bt -j map dump pinned "$pin_dir/$1" |
    jq -e 'if length == 0 or (.[0] | has("formatted")) then map(.formatted) else error("no BTF") end' 2>/dev/null ||
    die "cannot dump $pin_dir/$1 with BTF field names (bpftool too old, or the map has no BTF)"
}

# cgroup id (inode of its directory) -> path in the cgroup2 mount, as "id<TAB>path" lines.
# The first cgroup2 mount, as the agent picks it (fields after " - ": type, source).
cg2=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break } }' \
        /proc/self/mountinfo)
idmap=$(mktemp)
trap 'rm -f "$idmap"' EXIT
if [[ -n "$cg2" ]]; then
  find "$cg2" -xdev -type d -printf '%i\t/%P\n' 2>/dev/null >"$idmap" || true
fi

# awk: the last n characters of s (long cgroup paths keep their informative end).
# (Counts are printed with %.0f, never %d: mawk, Debian's awk, caps %d at 2^31-1.)
awk_tail='function tail(s, n) { return length(s) <= n ? s : substr(s, length(s) - n + 1) } '

# Reads "id ..." lines and puts the cgroup path in front of the rest.
with_paths() {
  awk -F'\t' -v OFS='\t' -v map="$idmap" '
    BEGIN { while ((getline line < map) > 0) { split(line, f, "\t"); path[f[1]] = f[2] } }
    { $1 = ($1 in path) ? path[$1] : "(id " $1 ", gone)"; print }'
}

echo "khagent BPF state, pins in $pin_dir${cg2:+, cgroup2 at $cg2}"

# --- 1. Programs -----------------------------------------------------------------
section "programs (attached by the agent that owns these maps)"
# The agent's programs: those using its pinned maps (sched_* use cgroup_stats
# and counters, the fentry throttle programs throttle_stats).
map_ids=$(for m in cgroup_stats counters throttle_stats; do
            [[ -e "$pin_dir/$m" ]] && bt -j map show pinned "$pin_dir/$m"
          done | jq -s 'map(.id)')
progs() {  # "id name type run_time_ns run_cnt" lines
  bt -j prog show | jq -r --argjson ids "$map_ids" '
    .[] | select(any((.map_ids // [])[]; . as $m | $ids | index($m)))
    | [.id, .name, .type, (.run_time_ns // 0), (.run_cnt // 0)] | @tsv'
}
# kernel.bpf_stats_enabled is one global switch: it is turned on only if it
# was off, and turned off again on every way out (also if someone else turned
# it on meanwhile, which cannot be told apart).
stats_file=/proc/sys/kernel/bpf_stats_enabled
stats_changed=0
restore_stats() {
  if ((stats_changed)); then
    { echo 0 >"$stats_file"; } 2>/dev/null || echo "bpftool-inspect: could not reset $stats_file to 0" >&2
    stats_changed=0
  fi
}
trap 'restore_stats; rm -f "$idmap"' EXIT
trap 'exit 130' INT TERM
if ((window > 0)); then
  if [[ "$(cat "$stats_file" 2>/dev/null)" != 1 ]]; then
    if { echo 1 >"$stats_file"; } 2>/dev/null; then
      stats_changed=1
      echo "kernel.bpf_stats_enabled was 0: on for ${window}s, then back to 0"
    else
      echo "kernel.bpf_stats_enabled is 0 and $stats_file is not writable here (a container without" \
           "privileges?): run times stay 0; set it on the host to measure"
    fi
  fi
  ctxt() { awk '$1 == "ctxt" { print $2 }' /proc/stat; }
  c0=$(ctxt)
  before=$(progs)
  sleep "$window"
  after=$(progs)
  c1=$(ctxt)
  restore_stats
  # Per program: runs and run time in the window, ns per run.
  printf '%-8s %-26s %-8s %12s %14s %10s\n' id name type runs run_time_ms ns/run
  join -t $'\t' <(sort -t $'\t' -k1,1 <<<"$before") <(sort -t $'\t' -k1,1 <<<"$after") |
    awk -F'\t' -v switches=$((c1 - c0)) -v secs="$window" '
      { runs = $9 - $5; rt = $8 - $4; total += rt
        per = (runs > 0) ? sprintf("%.0f", rt / runs) : "-"
        printf "%-8s %-26s %-8s %12.0f %14.2f %10s\n", $1, $2, $3, runs, rt / 1e6, per }
      END { per = (switches > 0) ? sprintf("%.0f ns", total / switches) : "-"
            printf "over %ds: %.0f context switches, all programs together %s of BPF time per switch\n",
                   secs, switches, per }'
else
  printf '%-8s %-26s %-8s %14s %14s\n' id name type run_time_ns run_cnt
  progs | awk -F'\t' '{ printf "%-8s %-26s %-8s %14s %14s\n", $1, $2, $3, $4, $5 }'
  echo "(cumulative since kernel.bpf_stats_enabled was last switched on; 0 while it is off)"
fi
if ! grep -q 'handle_throttle_cfs_rq' <<<"$(progs)"; then
  echo "no fentry throttle programs: throttling is read from cpu.stat (fentry refused, or --no-fentry)"
fi

# --- 2. Counters -----------------------------------------------------------------
section "counters (summed over CPUs; enum kh_counter in include/khagent/abi/runq.h)"
dump counters | jq -r '
  ["switches", "wakeups", "storage_miss", "ring_overflow", "stats_full", "pairs_full",
   "events", "events_dropped", "removals_lost"] as $names
  | .[] | [($names[.key] // ("counter " + (.key | tostring))), ([.values[].value] | add)] | @tsv' |
  awk -F'\t' '{ printf "%-16s %16s\n", $1, $2 }'
echo "(storage_miss, stats_full, pairs_full and events_dropped should stay 0; ring_overflow counts waits" \
     "longer than the last 16 slices of their CPU, whose oldest part is then unattributed)"

# --- 3. Cgroups by run-queue wait --------------------------------------------------
section "top $top cgroups by run-queue wait (cgroup_stats)"
printf '%-48s %12s %10s %10s %6s %6s %6s %6s %12s %9s\n' \
  cgroup wait_ms waits mean_us thr% same% other% unat% cpu_ms preempt
dump cgroup_stats | jq -r --argjson top "$top" "$jq_sum"'
  map(select(.value.id != 0)) # slots in use: each names its cgroup
  | map({id: .value.id,
       wait: sum(.wait_ns), waits: sum(.waits), cpu: sum(.cpu_ns), pre: sum(.preemptions),
       cause: (if has("values") then ([.values[].value.cause_ns] | transpose | map(add)) else .value.cause_ns end)})
  | sort_by(-.wait) | .[:$top][]
  | def pct(x): if .wait > 0 then (100 * x / .wait | floor) else 0 end;
    [.id, (.wait / 1e6), .waits, (if .waits > 0 then .wait / .waits / 1e3 else 0 end),
     pct(.cause[0]), pct(.cause[1]), pct(.cause[2]), pct(.cause[3]), (.cpu / 1e6), .pre] | @tsv' |
  with_paths |
  awk -F'\t' "$awk_tail"'{ printf "%-48s %12.1f %10.0f %10.1f %6.0f %6.0f %6.0f %6.0f %12.1f %9.0f\n",
                                   tail($1, 48), $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
echo "(thr/same/other/unat: share of the wait spent CFS-throttled / behind the same cgroup /" \
     "behind another cgroup / not attributed)"

# --- 4. Interference pairs ------------------------------------------------------------
section "top $top interference pairs (victim waited while aggressor ran)"
printf '%-40s %-40s %12s %9s\n' victim aggressor wait_ms waits
dump interference | jq -r --argjson top "$top" "$jq_sum"'
  map(select(.value.victim != 0)) # slots in use
  | map({v: .value.victim, a: .value.aggressor, ns: sum(.wait_ns), n: sum(.count)})
  | sort_by(-.ns) | .[:$top][] | [.v, .a, (.ns / 1e6), .n] | @tsv' |
  with_paths |                                                  # victim id -> path
  awk -F'\t' -v OFS='\t' '{ print $2, $1, $3, $4 }' | with_paths |  # aggressor id -> path
  awk -F'\t' "$awk_tail"'{ printf "%-40s %-40s %12.1f %9.0f\n", tail($2, 40), tail($1, 40), $3, $4 }'

# --- 5. Throttling and protected cgroups -------------------------------------------------
section "throttling seen by fentry (throttle_stats)"
if [[ -e "$pin_dir/throttle_stats" ]]; then
  n=$(dump throttle_stats | jq 'length')
  if ((n == 0)); then
    echo "empty (throttling comes from cpu.stat, or no cgroup was throttled)"
  else
    printf '%-48s %10s %14s\n' cgroup periods throttled_ms
    dump throttle_stats | jq -r --argjson top "$top" "$jq_sum"'
      map({id: .key, e: sum(.events), ns: sum(.throttled_ns)})
      | sort_by(-.ns) | .[:$top][] | [.id, .e, (.ns / 1e6)] | @tsv' |
      with_paths | awk -F'\t' "$awk_tail"'{ printf "%-48s %10.0f %14.1f\n", tail($1, 48), $2, $3 }'
  fi
fi
section "protected cgroups (fast path: a single wait over the threshold is reported at once)"
if [[ -e "$pin_dir/protected_cgroups" ]]; then
  n=$(bt -j map dump pinned "$pin_dir/protected_cgroups" | jq 'length')
  echo "$n protected (only \`khagent run\` with fast_path.enabled fills this map)"
  if ((n > 0)); then
    dump protected_cgroups | jq -r --argjson top "$top" \
      '.[:$top][] | [.key, (.value.threshold_ns / 1e6)] | @tsv' |
      with_paths | awk -F'\t' "$awk_tail"'{ printf "  %-48s threshold %.1f ms\n", tail($1, 48), $2 }'
    if ((n > top)); then echo "  ..."; fi
  fi
fi

#!/usr/bin/env bash
# The BPF verifier's statistics for each program of khagent's runq object on
# this host's kernel: instructions processed (against the verifier's limit
# of 1,000,000 per program), verifier states, verification time, stack
# depth, and the size of the program the kernel kept (xlated instructions,
# JITed bytes). The object is loaded the way `khagent run` loads it with its
# built-in defaults (same rodata, map sizes and choice of programs for this
# kernel: the fentry programs only where the fentry probe succeeds, ...),
# nothing is attached, and it is unloaded at once. Programs the loader leaves
# out on this kernel are listed with the reason.
#
#   scripts/verifier-stats.sh                 print the table (Markdown)
#   scripts/verifier-stats.sh --json          print the tool's JSON instead
#   scripts/verifier-stats.sh --write-docs    also put the table in docs/bpftool.md
#
# Environment (defaults in brackets):
#   BUILD_DIR=DIR   the cmake build directory [build]; tests/bench/
#                   khagent_verifier_stats is built there when missing or
#                   older than its sources (configured first if needed)
#   BUILD=0         never build: use the binary as it is
#   TOOL_ARGS       extra arguments of khagent_verifier_stats (--no-fentry,
#                   --no-fast-path)
#
# Needs root (it loads BPF programs). Exits non-zero, with the reason and the
# failing program's verifier log, when the object does not load.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
me="verifier-stats"
# shellcheck source=scripts/lib/common.sh
. "$root/scripts/lib/common.sh"

write_docs=0
json=0
for arg in "$@"; do
  case "$arg" in
    --write-docs) write_docs=1 ;;
    --json) json=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "$me: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
((!(json && write_docs))) || { echo "$me: --json and --write-docs do not go together" >&2; exit 2; }

[[ $(id -u) -eq 0 ]] || die "needs root (it loads BPF programs)"

build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" == /* ]] || build_dir="$root/$build_dir"
tool="$build_dir/tests/bench/khagent_verifier_stats"
read -r -a tool_args <<<"${TOOL_ARGS:-}"

# --- the tool ----------------------------------------------------------------
stale=0
if [[ ! -x "$tool" ]]; then
  stale=1
elif [[ -n "$(find "$root/bpf" "$root/userspace/loader" "$root/include/khagent/loader" \
  "$root/tests/bench/khagent_verifier_stats.cpp" -newer "$tool" -print -quit)" ]]; then
  stale=1
fi
if ((stale)) && [[ "${BUILD:-1}" != 0 ]]; then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    log "configuring $build_dir"
    cmake -S "$root" -B "$build_dir" >/dev/null || die "cmake could not configure $build_dir"
  fi
  log "building khagent_verifier_stats in $build_dir (one job, low priority)"
  nice -n 19 cmake --build "$build_dir" -j1 --target khagent_verifier_stats >&2 \
    || die "building khagent_verifier_stats failed"
fi
[[ -x "$tool" ]] || die "no $tool (build it, set BUILD_DIR, or drop BUILD=0)"

# --- the load ----------------------------------------------------------------
tmp="$(mktemp -d /tmp/verifier-stats.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out"
fmt=()
((json)) && fmt=(--json)
if "$tool" "${fmt[@]}" "${tool_args[@]}" >"$out" 2>"$tmp/err"; then
  :
else
  rc=$?
  cat "$tmp/err" >&2
  case $rc in
    1) die "the runq BPF object did not load on kernel $(uname -r): the verifier's reason is above" ;;
    2) die "khagent_verifier_stats cannot run here (see above)" ;;
    *) die "khagent_verifier_stats failed (exit code $rc)" ;;
  esac
fi
if ((json)); then
  cat "$out"
  exit 0
fi

rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$root" status --porcelain -- bpf userspace/loader include/khagent/loader 2>/dev/null)" ]]; then
  rev+=" + uncommitted changes"
fi
closest="$(sed -n 's/^Closest to the limit: //p' "$out")"
repro="scripts/verifier-stats.sh"
[[ -z "${TOOL_ARGS:-}" ]] || repro="TOOL_ARGS=$(printf '%q' "$TOOL_ARGS") $repro"

report="$tmp/report.md"
{
  echo "Generated on $(date -u +%Y-%m-%d) by \`$repro$( ((write_docs)) && echo ' --write-docs')\`"
  echo "on kernel $(uname -r), khagent $rev: the object loaded as \`khagent run\` loads"
  echo "it with its built-in defaults${TOOL_ARGS:+ ($TOOL_ARGS)}, with the verifier's statistics asked for"
  echo "(log level 4, \`BPF_LOG_STATS\`), nothing attached."
  echo
  echo "\"insns processed\" is how many instructions the verifier walked, counting"
  echo "each path through a branch again: the verifier refuses a program past"
  echo "1,000,000 (\`BPF_COMPLEXITY_LIMIT_INSNS\`), and \"of the limit\" is how close"
  echo "each program is. States are the verifier states it kept to prune paths"
  echo "(total stored, peak alive at once); verification time is the kernel's own"
  echo "measurement; stack depth is per function (main program + subprograms)."
  echo "\"xlated insns\" and \"jited bytes\" are the size of the program the kernel"
  echo "kept after rewriting and JIT (\`bpftool prog show\`'s \`xlated\` is 8 bytes an"
  echo "instruction). The counts depend on the kernel: its verifier's pruning and"
  echo "which helpers it inlines."
  if [[ -n "$closest" ]]; then
    echo
    echo "Closest to the limit: $closest"
  fi
  echo
  sed '/^Closest to the limit: /d' "$out" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
} >"$report"

echo
cat "$report"

if ((write_docs)); then
  doc="$root/docs/bpftool.md"
  doc_section_write "$doc" verifier-stats "$report"
  log "wrote the section to $doc"
fi

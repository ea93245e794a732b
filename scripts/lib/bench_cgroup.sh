# Sourced by the benchmarks that make cgroups and start processes in them
# (bench-service.sh, bench-memory.sh), after common.sh and after they set
# `tmp` (their scratch directory). Every file written through wr() is put
# back by restore_to(); every pid spawned is in `pids`; every cgroup made by
# mkcg() is in `created` (hierarchy<TAB>relative path, in creation order).
# shellcheck shell=bash

pids=()     # every process started, by pid
created=()  # "hierarchy-mount<TAB>relative path", in creation order
rs_files=() # restore stack: file and its value before our first write
rs_vals=()

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_num() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }

restore_to() {  # restore_to N: put back every file written since the stack had N entries
  local n=$1 i cur
  for ((i = ${#rs_files[@]} - 1; i >= n; i--)); do
    if [[ -e "${rs_files[i]}" ]]; then
      cur="$(cat "${rs_files[i]}" 2>/dev/null || true)"
      if [[ "$cur" != "${rs_vals[i]}" ]]; then
        printf '%s\n' "${rs_vals[i]}" >"${rs_files[i]}" 2>/dev/null \
          || warn "could not restore ${rs_files[i]} to '${rs_vals[i]}' (it is '$cur')"
      fi
    fi
    unset 'rs_files[i]' 'rs_vals[i]'
  done
  rs_files=("${rs_files[@]}")
  rs_vals=("${rs_vals[@]}")
}

remember() {  # remember FILE: push its current value on the restore stack
  rs_files+=("$1")
  rs_vals+=("$(cat "$1")")
}

wr() {  # wr FILE VALUE: write, remembering the original first
  local f=$1 v=$2
  [[ -e "$f" ]] || die "$f does not exist"
  remember "$f"
  printf '%s\n' "$v" >"$f" 2>"$tmp/wr.err" || die "writing '$v' to $f failed: $(cat "$tmp/wr.err")"
}

stop_pid() {  # stop_pid PID [SIGNAL]: signal, wait up to 5 s, then SIGKILL
  local pid=$1 sig=${2:-TERM} i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    warn "pid $pid did not exit on SIG$sig, killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

forget_pid() {  # stop tracking an exited pid
  local i
  for i in "${!pids[@]}"; do [[ "${pids[i]}" == "$1" ]] && unset 'pids[i]'; done
  pids=("${pids[@]}")
}

cg_tasks() { cat "$1/cgroup.procs" 2>/dev/null || true; }

empty_cgroup() {  # empty_cgroup DIR: kill what is left in a cgroup we made, wait for it to empty
  local d=$1 i p
  for ((i = 0; i < 50; i++)); do
    [[ -z "$(cg_tasks "$d")" ]] && return 0
    if ((i == 20)); then
      for p in $(cg_tasks "$d"); do kill -KILL "$p" 2>/dev/null || true; done
    fi
    sleep 0.1
  done
  warn "tasks still in $d: $(cg_tasks "$d" | tr '\n' ' ')"
}

remove_created() {  # every cgroup we made, children first, emptied
  local i h rel d
  for ((i = ${#created[@]} - 1; i >= 0; i--)); do
    h="${created[i]%%$'\t'*}" rel="${created[i]#*$'\t'}" d="$h$rel"
    [[ -d "$d" ]] || continue
    empty_cgroup "$d"
    rmdir "$d" 2>/dev/null || { sleep 0.2; rmdir "$d" 2>/dev/null; } || warn "could not remove $d"
  done
}

# The cgroup hierarchies, from /proc/self/mountinfo: v2 (the cgroup2
# mount), and the v1 hierarchies of cpu, cpuset and memory ("" if none).
find_hierarchies() {
  local line pre post fstype opts mnt x
  local -a f o
  v2="" v1cpu="" v1cpuset="" v1memory=""
  while IFS= read -r line; do
    pre="${line%% - *}" post="${line#* - }"
    read -r -a f <<<"$pre"
    read -r fstype _ opts <<<"$post"
    [[ "${f[3]}" == / ]] || continue  # a bind mount of a sub-tree: not the hierarchy's root
    mnt="${f[4]}"
    case "$fstype" in
      cgroup2) [[ -n "$v2" ]] || v2="$mnt" ;;
      cgroup)
        IFS=, read -r -a o <<<"$opts"
        for x in "${o[@]}"; do
          [[ "$x" == cpu && -z "$v1cpu" ]] && v1cpu="$mnt"
          [[ "$x" == cpuset && -z "$v1cpuset" ]] && v1cpuset="$mnt"
          [[ "$x" == memory && -z "$v1memory" ]] && v1memory="$mnt"
        done
        ;;
    esac
  done </proc/self/mountinfo
  [[ -n "$v2" ]] || die "no cgroup2 mount in /proc/self/mountinfo"
}

hexid() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
pod_path() {  # pod_path [PREFIX]: a Burstable pod's container, systemd driver, containerd
  local uid
  uid="$(tr - _ </proc/sys/kernel/random/uuid)"
  echo "${1:-}/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${uid}.slice/cri-containerd-$(hexid 32).scope"
}
pod_of() { dirname "$1"; }

# Whether something listens on TCP port $1.
listening() { awk -v p="$(printf ':%04X' "$1")" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p {f=1} END {exit !f}' /proc/net/tcp /proc/net/tcp6; }
free_port() {  # a TCP port nothing listens on, in $port
  local i p
  port=""
  for ((i = 0; i < 50; i++)); do
    p=$((20000 + RANDOM % 40000))
    if ! listening "$p"; then port=$p; return 0; fi
  done
  die "no free port found"
}

# bench_tool NAME SOURCE: the path of a tool of tests/bench (khagent_openloop,
# khagent_memhog): built in BUILD_DIR with cmake, or with g++ into $tmp
# without a configured BUILD_DIR.
bench_tool() {
  local name=$1 src=$2 bin="$build_dir/tests/bench/$1"
  if [[ ! -x "$bin" ]]; then
    if [[ -f "$build_dir/CMakeCache.txt" ]]; then
      log "building $name in $build_dir"
      cmake --build "$build_dir" --target "$name" >"$tmp/build-$name.log" 2>&1 \
        || die "building $name failed: $(tail -20 "$tmp/build-$name.log")"
    else
      command -v g++ >/dev/null || die "no $name and no g++ to build it"
      bin="$tmp/$name"
      g++ -O2 -std=c++20 -Wall -Wextra -o "$bin" "$root/tests/bench/$src" || die "compiling tests/bench/$src failed"
    fi
  fi
  [[ -x "$bin" ]] || die "no $name at $bin"
  echo "$bin"
}

med() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) {print "nan"; exit}; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
jnum() { grep -o "\"$1\":[-0-9.e+]*" "$2" | head -1 | cut -d: -f2; }
fmt0() { awk -v x="$1" 'BEGIN {if (x == "nan" || x == "") print "-"; else printf "%.0f", x}'; }
fmt1() { awk -v x="$1" 'BEGIN {if (x == "nan" || x == "") print "-"; else printf "%.1f", (x < 0 && x > -0.05) ? 0 : x}'; }
fmt2() { awk -v x="$1" 'BEGIN {if (x == "nan" || x == "") print "-"; else printf "%.2f", x}'; }
pct() { awk -v x="$1" 'BEGIN {if (x == "nan" || x == "") print "-"; else printf "%.0f%%", 100 * x}'; }

# bench_args SCRIPT ARGS...: --write-docs sets write_docs=1; --help prints
# SCRIPT's header comment.
bench_args() {
  local script=$1 arg
  shift
  write_docs=0
  for arg in "$@"; do
    case "$arg" in
      --write-docs) write_docs=1 ;;
      -h | --help) sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) echo "$me: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
  done
  [[ $(id -u) -eq 0 ]] || die "needs root (it creates cgroups and writes cgroup files)"
}

# nginx_conf FILE WWW PORT [HTTP_LINES]: one worker serving WWW on
# 127.0.0.1:PORT, its pid, logs and temp files in $tmp; HTTP_LINES go into
# the http block. Checked with nginx -t ($nginx_bin).
nginx_conf() {
  mkdir -p "$tmp/nginx-tmp"
  cat >"$1" <<EOF
worker_processes 1;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  default_type text/plain;
  client_body_temp_path $tmp/nginx-tmp;
  proxy_temp_path $tmp/nginx-tmp;
  fastcgi_temp_path $tmp/nginx-tmp;
  uwsgi_temp_path $tmp/nginx-tmp;
  scgi_temp_path $tmp/nginx-tmp;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
${4:-}
  server {
    listen 127.0.0.1:$3;
    root $2;
  }
}
EOF
  "$nginx_bin" -t -q -c "$1" -p "$tmp" 2>"$tmp/nginx-t.log" || die "nginx rejects its config: $(cat "$tmp/nginx-t.log")"
}

# report_head TITLE REPRO: a report's first lines, with how to make it again.
report_head() {
  echo "## $1"
  echo
  echo "Generated on $(date -u +%Y-%m-%d) by"
  echo
  echo '```sh'
  echo "$2$( ((write_docs)) && echo ' --write-docs')"
  echo '```'
  echo
}

# need_nginx: nginx_bin, installing Debian's package when nginx is missing.
need_nginx() {
  if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
    log "nginx missing: installing the Debian package"
    command -v apt-get >/dev/null || die "nginx is missing and there is no apt-get"
    if ! apt-cache policy nginx 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      apt-get update -qq || die "apt-get update failed"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null \
      || die "apt-get install nginx failed"
  fi
  nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
  [[ -x "$nginx_bin" ]] || die "nginx is missing"
}

#!/usr/bin/env bash
# A real kube-apiserver with its etcd on loopback, for tests that need the
# Kubernetes API itself (authentication, RBAC, admission policies) rather
# than a fake. Both binaries are built from Go modules (tests/kube-mini:
# k8s.io/kubernetes at one version, and a small main around etcd's embed
# package), once, and cached by version.
#
#   scripts/kube-mini.sh build       build both binaries unless cached; prints
#                                    their directory
#   scripts/kube-mini.sh start DIR   start etcd and kube-apiserver on 127.0.0.1
#                                    (free ports), everything under DIR; builds
#                                    first if needed; prints DIR/env
#   scripts/kube-mini.sh stop DIR    stop them (SIGTERM, SIGKILL after 5 s)
#
# The cache is ${KHAGENT_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/khagent/kube-mini},
# one directory per key: the k8s.io/kubernetes version plus a hash of
# tests/kube-mini's go.mod, go.sum and Go files (and of the build recipe
# here), so that a changed module builds anew and a fresh clone reuses what
# an earlier one built. A build goes to a temporary directory renamed into
# place at the end: a killed build leaves nothing half-made under the key.
# Needs Go (the version in tests/kube-mini/go.mod; GO=/path/to/go to pick
# one) and reaches the Go module proxy on a cold module cache. A cold build
# takes several minutes on 2 cores.
#
# start writes into DIR (the caller owns it and removes it after stop):
#   ca.crt ca.key            a CA made for this run (openssl, P-256)
#   apiserver.crt .key       serving certificate for 127.0.0.1 and localhost
#   admin.crt admin.key      client certificate, CN=kube-mini-admin,
#                            O=system:masters (all rights, RBAC bypassed)
#   sa.key sa.pub            service account token signing key
#   kubeconfig               admin kubeconfig, for kubectl if one is at hand
#   etcd-data/ *.log *.pid   etcd's store, both logs, both pids
#   env                      KEY=VALUE lines, no quoting (DIR may not contain
#                            spaces): KUBE_URL, KUBE_CA, KUBE_ADMIN_CERT,
#                            KUBE_ADMIN_KEY, KUBECONFIG, KUBE_SA_ISSUER,
#                            KUBE_ETCD_URL, KUBE_VERSION, KUBE_BIN_DIR,
#                            KUBE_APISERVER_PID, KUBE_ETCD_PID
# The apiserver: RBAC authorization, the default admission plugins (which
# include ValidatingAdmissionPolicy), bound service account tokens, no
# endpoint reconciler (its address is loopback), no controller manager,
# scheduler or kubelet: pods stay Pending. KUBE_MINI_READY_TIMEOUT (seconds,
# default 60) bounds the wait for /readyz.
set -euo pipefail

me=kube-mini
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$root/scripts/lib/common.sh"

module="$root/tests/kube-mini"
cache_root="${KHAGENT_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/khagent/kube-mini}"
# Bump when the way the binaries are built changes (flags below): a new key.
recipe=1
sa_issuer=https://kubernetes.default.svc.cluster.local

usage() {
  echo "usage: scripts/kube-mini.sh build | start DIR | stop DIR" >&2
  exit 2
}

# The version a module is required at in tests/kube-mini/go.mod (in a
# require block, or on a require line of its own).
module_version() {
  awk -v m="$1" '$1 == "require" {$1 = ""; $0 = $0} $1 == m && $2 ~ /^v/ {print $2; exit}' \
    "$module/go.mod"
}

cache_key() {
  local version sum
  version="$(module_version k8s.io/kubernetes)"
  [[ -n "$version" ]] || die "no k8s.io/kubernetes version in $module/go.mod"
  sum="$(
    cd "$module"
    {
      echo "recipe $recipe"
      sha256sum go.mod go.sum
      find . -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    } | sha256sum | cut -c1-12
  )"
  echo "$version-$sum"
}

pretty_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

build_tmp=""
cleanup_build() { [[ -z "$build_tmp" ]] || rm -rf "$build_tmp"; }

# Prints the directory of the binaries, building them when missing.
cmd_build() {
  local key dir go version started secs ldflags v major minor built pkg
  key="$(cache_key)"
  dir="$cache_root/$key"
  if [[ -x "$dir/kube-apiserver" && -x "$dir/etcd" ]]; then
    log "cached in $dir (build skipped)"
    echo "$dir"
    return 0
  fi
  go="${GO:-go}"
  command -v "$go" >/dev/null ||
    die "'$go' not found: building kube-apiserver and etcd needs Go $(awk '$1 == "go" {print $2; exit}' "$module/go.mod") or newer on PATH (or GO=/path/to/go)"
  version="$(module_version k8s.io/kubernetes)"
  mkdir -p "$cache_root"
  build_tmp="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
  trap cleanup_build EXIT
  log "building kube-apiserver $version and etcd $(module_version go.etcd.io/etcd/server/v3) with $("$go" env GOVERSION) into $dir"
  started=$SECONDS
  # What the Kubernetes release build stamps into its binaries (its
  # hack/lib/version.sh), so that /version tells the real version.
  v="${version#v}"
  major="${v%%.*}"
  v="${v#*.}"
  minor="${v%%.*}"
  built="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ldflags="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$built"
  done
  (
    cd "$module"
    export CGO_ENABLED=0
    nice -n 10 "$go" build -trimpath -ldflags "$ldflags" -o "$build_tmp/kube-apiserver" \
      k8s.io/kubernetes/cmd/kube-apiserver
    nice -n 10 "$go" build -trimpath -ldflags "-s -w" -o "$build_tmp/etcd" ./etcd
  )
  secs=$((SECONDS - started))
  {
    echo "key=$key"
    echo "kubernetes=$version"
    echo "etcd=$(module_version go.etcd.io/etcd/server/v3)"
    echo "go=$("$go" env GOVERSION)"
    echo "built=$built"
    echo "build_seconds=$secs"
  } >"$build_tmp/BUILD-INFO"
  chmod 755 "$build_tmp"
  # rename(2): atomic. A build that ran alongside and finished first wins.
  if ! mv -T "$build_tmp" "$dir" 2>/dev/null; then
    [[ -x "$dir/kube-apiserver" && -x "$dir/etcd" ]] || die "could not move $build_tmp to $dir"
    log "another build of $key finished first; using it"
    rm -rf "$build_tmp"
  fi
  build_tmp=""
  log "built $key in $(pretty_secs "$secs") ($(du -sh "$dir" | cut -f1))"
  echo "$dir"
}

# TCP ports in use on this machine, any state, one a line.
used_ports() {
  local _ addr
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | while read -r _ addr _; do
    [[ "$addr" == *:* ]] && echo $((16#${addr##*:}))
  done | sort -un
}

# N ports, unused and distinct, below the usual ephemeral range (32768-)
# so that outgoing connections do not take them meanwhile. A race with
# another program remains: start retries when a bind fails.
free_ports() {
  local n=$1 used picked=() p
  used=" $(used_ports | tr '\n' ' ') "
  while ((${#picked[@]} < n)); do
    p=$((20000 + RANDOM % 12000))
    [[ "$used" == *" $p "* || " ${picked[*]} " == *" $p "* ]] && continue
    picked+=("$p")
  done
  echo "${picked[*]}"
}

# A process of this DIR's: alive (not a zombie) and started with DIR in its
# arguments, so a pid reused by something else is never signalled.
ours() {
  local pid=$1 d=$2 state
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ "$state" != Z ]] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$d/"
}

stop_pid() {
  local name=$1 d=$2 pidfile pid i
  pidfile="$d/$name.pid"
  [[ -f "$pidfile" ]] || return 0
  pid="$(<"$pidfile")"
  if ours "$pid" "$d"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      ours "$pid" "$d" || break
      sleep 0.1
    done
    if ours "$pid" "$d"; then
      warn "$name ($pid) still running 5 s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 20; i++)); do
        ours "$pid" "$d" || break
        sleep 0.1
      done
    fi
    log "stopped $name ($pid)"
  fi
  rm -f "$pidfile"
}

cmd_stop() {
  local d=$1
  [[ -d "$d" ]] || die "no directory $d"
  d="$(cd "$d" && pwd)"
  stop_pid kube-apiserver "$d"
  stop_pid etcd "$d"
}

# openssl with a configuration of our own (never the system's openssl.cnf).
# cnf FILE CN O EXTENSIONS...: writes a request configuration.
cnf() {
  local file=$1 cn=$2 o=$3
  shift 3
  {
    printf '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n'
    [[ -z "$o" ]] || echo "O = $o"
    echo "CN = $cn"
    echo "[ext]"
    printf '%s\n' "$@"
  } >"$file"
}

# leaf DIR NAME CN O EXTENSIONS...: NAME.key and NAME.crt signed by the CA.
leaf() {
  local d=$1 name=$2 cn=$3 o=$4
  shift 4
  cnf "$d/$name.cnf" "$cn" "$o" "$@"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/$name.key" 2>/dev/null
  openssl req -new -config "$d/$name.cnf" -key "$d/$name.key" -out "$d/$name.csr"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
    -set_serial "0x$(openssl rand -hex 12)" -days 3650 \
    -extfile "$d/$name.cnf" -extensions ext -out "$d/$name.crt" 2>/dev/null
  rm -f "$d/$name.csr" "$d/$name.cnf"
}

make_pki() {
  local d=$1
  (
    umask 077
    cnf "$d/ca.cnf" kube-mini-ca "" "basicConstraints = critical,CA:TRUE" \
      "keyUsage = critical,keyCertSign,cRLSign" "subjectKeyIdentifier = hash"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/ca.key" 2>/dev/null
    openssl req -x509 -new -config "$d/ca.cnf" -extensions ext -key "$d/ca.key" \
      -days 3650 -out "$d/ca.crt"
    rm -f "$d/ca.cnf"
    leaf "$d" apiserver kube-apiserver "" "basicConstraints = critical,CA:FALSE" \
      "keyUsage = critical,digitalSignature" "extendedKeyUsage = serverAuth" \
      "subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    leaf "$d" admin kube-mini-admin system:masters "basicConstraints = critical,CA:FALSE" \
      "keyUsage = critical,digitalSignature" "extendedKeyUsage = clientAuth"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/sa.key" 2>/dev/null
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub"
    chmod 644 "$d/ca.crt" "$d/apiserver.crt" "$d/admin.crt" "$d/sa.pub"
  )
}

# Waits until FILE has a line with TEXT while PID lives; 0 when it has.
wait_line() {
  local file=$1 text=$2 pid=$3 timeout=$4 i
  for ((i = 0; i < timeout * 10; i++)); do
    grep -qF -- "$text" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

show_logs() {
  local d=$1 f
  for f in "$d/etcd.log" "$d/kube-apiserver.log"; do
    [[ -f "$f" ]] || continue
    echo "--- last lines of $f:" >&2
    tail -n 25 "$f" >&2
  done
}

# One try at starting both on PORTS (etcd client, etcd peer, apiserver).
# Returns 0 when ready, 3 when a port was taken meanwhile, 1 otherwise.
start_once() {
  local d=$1 bin=$2 ec=$3 ep=$4 ap=$5 pid t0 deadline out
  rm -rf "$d/etcd-data"
  "$bin/etcd" --data-dir "$d/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ec" --listen-peer-urls "http://127.0.0.1:$ep" \
    --unsafe-no-fsync </dev/null >"$d/etcd.log" 2>&1 &
  pid=$!
  echo "$pid" >"$d/etcd.pid"
  if ! wait_line "$d/etcd.log" "kube-mini etcd ready" "$pid" 30; then
    grep -q 'address already in use' "$d/etcd.log" && { stop_pid etcd "$d"; return 3; }
    echo "$me: etcd did not become ready" >&2
    return 1
  fi

  t0=$(date +%s%N)
  "$bin/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$ap" \
    --etcd-servers="http://127.0.0.1:$ec" \
    --tls-cert-file="$d/apiserver.crt" --tls-private-key-file="$d/apiserver.key" \
    --cert-dir="$d/cert-dir" \
    --client-ca-file="$d/ca.crt" \
    --authorization-mode=RBAC \
    --enable-admission-plugins=ValidatingAdmissionPolicy \
    --service-account-issuer="$sa_issuer" \
    --service-account-key-file="$d/sa.pub" \
    --service-account-signing-key-file="$d/sa.key" \
    --api-audiences="$sa_issuer" \
    --endpoint-reconciler-type=none \
    --allow-privileged=true \
    --profiling=false \
    </dev/null >"$d/kube-apiserver.log" 2>&1 &
  pid=$!
  echo "$pid" >"$d/kube-apiserver.pid"
  deadline=$((SECONDS + ${KUBE_MINI_READY_TIMEOUT:-60}))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      grep -q 'address already in use' "$d/kube-apiserver.log" && { stop_pid etcd "$d"; return 3; }
      echo "$me: kube-apiserver exited before it was ready" >&2
      return 1
    fi
    out="$(curl -sS --max-time 2 --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" \
      "https://127.0.0.1:$ap/readyz" 2>/dev/null)" || true
    if [[ "$out" == ok ]]; then
      ready_ms=$((($(date +%s%N) - t0) / 1000000))
      return 0
    fi
    sleep 0.25
  done
  echo "$me: kube-apiserver not ready after ${KUBE_MINI_READY_TIMEOUT:-60} s; /readyz?verbose said:" >&2
  curl -sS --max-time 5 --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" \
    "https://127.0.0.1:$ap/readyz?verbose" 2>&1 | grep -v '\] ok$' | tail -n 15 >&2 || true
  return 1
}

cmd_start() {
  local d=$1 bin try rc ec ep ap ready_ms=0
  mkdir -p "$d"
  d="$(cd "$d" && pwd)"
  [[ "$d" =~ ^[A-Za-z0-9._/+-]+$ ]] || die "DIR must be a path of letters, digits and ._/+- only: $d"
  if ours "$(cat "$d/kube-apiserver.pid" 2>/dev/null)" "$d" || ours "$(cat "$d/etcd.pid" 2>/dev/null)" "$d"; then
    die "already running in $d (scripts/kube-mini.sh stop $d first)"
  fi
  command -v openssl >/dev/null || die "openssl not found (scripts/setup.sh installs it)"
  command -v curl >/dev/null || die "curl not found (scripts/setup.sh installs it)"
  bin="$(cmd_build)"
  rm -f "$d/env"
  make_pki "$d"
  for try in 1 2 3; do
    read -r ec ep ap <<<"$(free_ports 3)"
    rc=0
    start_once "$d" "$bin" "$ec" "$ep" "$ap" || rc=$?
    ((rc == 0)) && break
    if ((rc == 3 && try < 3)); then
      log "a port was taken meanwhile; again with others"
      continue
    fi
    show_logs "$d"
    cmd_stop "$d"
    die "start failed (logs in $d)"
  done
  log "kube-apiserver ready $((ready_ms / 1000)).$(printf '%03d' $((ready_ms % 1000))) s after its start, https://127.0.0.1:$ap"

  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: kube-mini
    cluster:
      server: https://127.0.0.1:$ap
      certificate-authority: $d/ca.crt
users:
  - name: admin
    user:
      client-certificate: $d/admin.crt
      client-key: $d/admin.key
contexts:
  - name: kube-mini
    context: {cluster: kube-mini, user: admin}
current-context: kube-mini
EOF
  cat >"$d/env.tmp" <<EOF
KUBE_URL=https://127.0.0.1:$ap
KUBE_CA=$d/ca.crt
KUBE_ADMIN_CERT=$d/admin.crt
KUBE_ADMIN_KEY=$d/admin.key
KUBECONFIG=$d/kubeconfig
KUBE_SA_ISSUER=$sa_issuer
KUBE_ETCD_URL=http://127.0.0.1:$ec
KUBE_VERSION=$(module_version k8s.io/kubernetes)
KUBE_BIN_DIR=$bin
KUBE_APISERVER_PID=$(<"$d/kube-apiserver.pid")
KUBE_ETCD_PID=$(<"$d/etcd.pid")
EOF
  mv "$d/env.tmp" "$d/env"
  cat "$d/env"
}

(($# >= 1)) || usage
case "$1" in
  build)
    (($# == 1)) || usage
    cmd_build
    ;;
  start)
    (($# == 2)) || usage
    cmd_start "$2"
    ;;
  stop)
    (($# == 2)) || usage
    cmd_stop "$2"
    ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# Installs every Debian package khagent's build, agent and tests need,
# fetches the Maven dependencies of the yarn tier's MiniYARNCluster launcher
# (tests/yarn-mini) into ~/.m2 (Maven Central), and builds the kube tier's
# kube-apiserver and etcd from Go modules (scripts/kube-mini.sh: the Go
# module proxy, Go 1.26 or newer on PATH; cached by version, about 7 minutes
# the first time on 2 cores, nothing after).
#   scripts/setup.sh           everything (scripts/test.sh)
#   scripts/setup.sh --agent   only what building and running the agent needs (scripts/run.sh)
# Idempotent: packages already installed are skipped, apt is only touched
# when something is missing, and Maven only when its cache lacks something.
set -euo pipefail

AGENT_PACKAGES=(
  # build
  cmake make g++ pkg-config git
  clang-19 llvm-19 lld-19
  libbpf-dev bpftool libelf-dev zlib1g-dev
  # userspace libraries
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev
  prometheus-cpp-dev libcurl4-openssl-dev
)
PACKAGES=(
  "${AGENT_PACKAGES[@]}"
  # tests
  libgtest-dev libgmock-dev libcpp-httplib-dev
  libclang-rt-19-dev  # libFuzzer and the sanitizer runtimes for clang-19 (scripts/fuzz.sh)
  clang-format-19 clang-tidy-19  # scripts/lint.sh
  bc stress-ng rt-tests libbpf-tools linux-perf hyperfine jq openssl
  # vmtest
  qemu-system-x86 busybox-static cpio curl gpgv xz-utils debian-archive-keyring
  # yarn tier: a real ResourceManager and NodeManager (Hadoop's MiniYARNCluster)
  openjdk-17-jdk-headless maven
)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
agent_only=0
if [[ "${1:-}" == --agent ]]; then
  agent_only=1
  PACKAGES=("${AGENT_PACKAGES[@]}")
elif (($#)); then
  echo "usage: scripts/setup.sh [--agent]" >&2
  exit 2
fi

# The launcher's dependencies (hadoop-client-minicluster and the Maven
# plugins that build it), so that builds need no network afterwards.
fetch_maven() {
  local out
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' RETURN
  if mvn -B -q -o -f "$root/tests/yarn-mini/pom.xml" "-Dyarnmini.out=$out" package >/dev/null 2>&1; then
    echo "setup: Maven dependencies of tests/yarn-mini present"
    return 0
  fi
  echo "setup: fetching the Maven dependencies of tests/yarn-mini (Hadoop $(
    sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$root/tests/yarn-mini/pom.xml"))"
  mvn -B -q -f "$root/tests/yarn-mini/pom.xml" "-Dyarnmini.out=$out" package
}

# The kube tier's API server, built once per version (scripts/kube-mini.sh).
build_kube() {
  "$root/scripts/kube-mini.sh" build >/dev/null
}

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  ((agent_only)) || { fetch_maven && build_kube; }
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
((agent_only)) || { fetch_maven && build_kube; }
echo "setup: done"

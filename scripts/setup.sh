#!/usr/bin/env bash
# Installs every Debian package khagent's build, agent and tests need.
# Idempotent: packages already installed are skipped, and apt is only
# touched when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  cmake make g++ pkg-config git
  clang-19 llvm-19 lld-19
  libbpf-dev bpftool libelf-dev zlib1g-dev
  # userspace libraries
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev
  prometheus-cpp-dev libcurl4-openssl-dev
  # tests
  libgtest-dev libgmock-dev libcpp-httplib-dev
  libclang-rt-19-dev  # libFuzzer and the sanitizer runtimes for clang-19 (scripts/fuzz.sh)
  bc stress-ng rt-tests libbpf-tools linux-perf hyperfine jq openssl
  # vmtest
  qemu-system-x86 busybox-static cpio
)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
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
echo "setup: done"

# syntax=docker/dockerfile:1
#
# khagent container image: a build stage with the Debian 12 toolchain, and a
# slim runtime stage with only the shared libraries the binary links, plus
# bpftool and jq for inspecting a running agent
# (`kubectl exec -n khagent ds/khagent -- khagent-bpftool-inspect`).
#
#   docker build -t example.org/khagent:0.1.0 .
#
# vmlinux.h (the kernel types the BPF programs are compiled against) is
# generated from a BTF file at build time. CO-RE relocates the programs to
# the running kernel when they load, so any BTF of a 5.14+ kernel with
# CONFIG_FAIR_GROUP_SCHED and CONFIG_CFS_BANDWIDTH (every distribution kernel)
# will do; it need not match the nodes (the binary built against the
# development host's 6.18 BTF is the one tested on Debian's 6.1 in vmtest/).
# Two ways to provide it:
#
#   1. Build on a machine whose kernel has BTF: the build reads the builder's
#      /sys/kernel/btf/vmlinux (the default; sysfs is usually visible in
#      build containers).
#   2. Copy a BTF file into the build context and name it:
#        cp /sys/kernel/btf/vmlinux btf/vmlinux       # on any BTF-enabled host
#        docker build --build-arg KHAGENT_BTF=/src/btf/vmlinux -t ... .
#
# The BPF side is compiled for x86-64 (-D__TARGET_ARCH_x86 in
# cmake/BpfSkeleton.cmake): build for linux/amd64 only.

ARG DEBIAN_RELEASE=bookworm

# --- build -------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE} AS build

# The build half of scripts/setup.sh: compilers, bpftool (vmlinux.h and the
# skeleton) and the -dev packages of the libraries khagent links. No test or
# benchmark tools: the tests are not built here (KHAGENT_TESTS=OFF).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake make g++ pkg-config binutils \
      clang-19 \
      libbpf-dev bpftool libelf-dev zlib1g-dev \
      libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev \
      prometheus-cpp-dev libcurl4-openssl-dev libcpp-httplib-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# BTF file vmlinux.h is generated from (see the top of this file).
ARG KHAGENT_BTF=/sys/kernel/btf/vmlinux
RUN if [ ! -r "$KHAGENT_BTF" ]; then \
      echo "BTF file $KHAGENT_BTF is not readable: build on a BTF-enabled kernel, or copy one" \
           "into the build context and pass --build-arg KHAGENT_BTF=/src/<path>" >&2; \
      exit 1; \
    fi \
 && cmake -S /src -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKHAGENT_TESTS=OFF \
          -DKHAGENT_BTF="$KHAGENT_BTF" \
 && cmake --build /build -j"$(nproc)" --target khagent \
 && strip --strip-debug -o /khagent /build/khagent

# --- runtime -----------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim

# The libraries `readelf -d khagent` lists as NEEDED, by Debian 12 package:
#   libbpf.so.1 libbpf1 (pulls libelf1), libcurl.so.4 libcurl4,
#   libz.so.1 zlib1g, libprometheus-cpp-core.so.1.0 libprometheus-cpp-core1.0,
#   libcpp-httplib.so.0.11 libcpp-httplib0.11, libspdlog.so.1.10
#   libspdlog1.10, libfmt.so.9 libfmt9, libyaml-cpp.so.0.7 libyaml-cpp0.7;
#   libstdc++, libgcc_s, libm and libc are in the base image.
# ca-certificates: for kubelet_ca_file "" (the system CAs) over HTTPS.
# bpftool, jq: scripts/bpftool-inspect.sh, installed as khagent-bpftool-inspect.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libbpf1 libelf1 zlib1g libcurl4 ca-certificates \
      libprometheus-cpp-core1.0 libcpp-httplib0.11 libspdlog1.10 libfmt9 libyaml-cpp0.7 \
      bpftool jq \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /khagent /usr/local/bin/khagent
COPY scripts/bpftool-inspect.sh /usr/local/bin/khagent-bpftool-inspect

# /metrics, /healthz, /readyz
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/khagent"]
CMD ["run"]

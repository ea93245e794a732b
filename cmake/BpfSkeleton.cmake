# Build support for BPF programs: vmlinux.h generation and libbpf skeletons.
#
#   KHAGENT_BPF_CLANG  clang used for -target bpf (default: clang-19; Debian's
#                      clang 14 crashes on CO-RE reads of some 6.x fields)
#   KHAGENT_BTF        BTF file vmlinux.h is generated from
#                      (default: /sys/kernel/btf/vmlinux)
#   KHAGENT_BPFTOOL    bpftool used for `btf dump` and `gen skeleton`

find_program(KHAGENT_BPF_CLANG NAMES clang-19 clang-18 clang-17 clang-16
             DOC "clang for -target bpf")
find_program(KHAGENT_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin DOC "bpftool")
set(KHAGENT_BTF "/sys/kernel/btf/vmlinux" CACHE FILEPATH "BTF to generate vmlinux.h from")

if(NOT KHAGENT_BPF_CLANG)
  message(FATAL_ERROR "no clang >= 16 found for BPF (install clang-19: scripts/setup.sh)")
endif()
if(NOT KHAGENT_BPFTOOL)
  message(FATAL_ERROR "bpftool not found (install bpftool: scripts/setup.sh)")
endif()
if(NOT EXISTS "${KHAGENT_BTF}")
  message(FATAL_ERROR "BTF file ${KHAGENT_BTF} not found: this kernel has no "
          "CONFIG_DEBUG_INFO_BTF; pass -DKHAGENT_BTF=<file with BTF>")
endif()

set(KHAGENT_BPF_GEN_DIR "${CMAKE_BINARY_DIR}/bpf")
file(MAKE_DIRECTORY "${KHAGENT_BPF_GEN_DIR}")

add_custom_command(
  OUTPUT "${KHAGENT_BPF_GEN_DIR}/vmlinux.h"
  COMMAND "${KHAGENT_BPFTOOL}" btf dump file "${KHAGENT_BTF}" format c
          > "${KHAGENT_BPF_GEN_DIR}/vmlinux.h.tmp"
  COMMAND ${CMAKE_COMMAND} -E rename "${KHAGENT_BPF_GEN_DIR}/vmlinux.h.tmp"
          "${KHAGENT_BPF_GEN_DIR}/vmlinux.h"
  DEPENDS "${KHAGENT_BTF}"
  COMMENT "Generating vmlinux.h from ${KHAGENT_BTF}"
  VERBATIM)
add_custom_target(khagent_vmlinux_h DEPENDS "${KHAGENT_BPF_GEN_DIR}/vmlinux.h")

# bpf_skeleton(<target> <source.bpf.c> [INCLUDES dir...])
# Compiles the program to <name>.bpf.o and generates <name>.skel.h; <target>
# is an INTERFACE library that puts the skeleton header on the include path.
function(bpf_skeleton target source)
  cmake_parse_arguments(ARG "" "" "INCLUDES;DEPENDS" ${ARGN})
  get_filename_component(src "${source}" ABSOLUTE)
  get_filename_component(name "${src}" NAME_WE)
  set(obj "${KHAGENT_BPF_GEN_DIR}/${name}.bpf.o")
  set(skel "${KHAGENT_BPF_GEN_DIR}/${name}.skel.h")
  set(incs -I${KHAGENT_BPF_GEN_DIR} -I${PROJECT_SOURCE_DIR}/bpf
           -I${PROJECT_SOURCE_DIR}/include)
  foreach(d ${ARG_INCLUDES})
    list(APPEND incs -I${d})
  endforeach()
  # Every header a BPF unit may include (runq.bpf.c is split into bpf/*.bpf.h):
  # an edit to any of them rebuilds the object. CONFIGURE_DEPENDS re-globs at
  # build time, so a header added later is one too, without re-running cmake.
  file(GLOB bpf_headers CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/bpf/*.bpf.h"
       "${PROJECT_SOURCE_DIR}/include/khagent/abi/*.h")
  add_custom_command(
    OUTPUT "${obj}"
    COMMAND "${KHAGENT_BPF_CLANG}" -g -O2 -target bpf -D__TARGET_ARCH_x86
            -Wall -Werror ${incs} -c "${src}" -o "${obj}"
    DEPENDS "${src}" ${bpf_headers} ${ARG_DEPENDS} "${KHAGENT_BPF_GEN_DIR}/vmlinux.h"
    COMMENT "BPF ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT "${skel}"
    COMMAND "${KHAGENT_BPFTOOL}" gen skeleton "${obj}" name "${name}_bpf"
            > "${skel}.tmp"
    COMMAND ${CMAKE_COMMAND} -E rename "${skel}.tmp" "${skel}"
    DEPENDS "${obj}"
    COMMENT "Skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS "${skel}")
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_gen)
  target_include_directories(${target} INTERFACE "${KHAGENT_BPF_GEN_DIR}")
endfunction()

// Internal to the loader: what the running kernel can take, read from its
// BTF and by loading trivial programs (runq_probe.cpp). The loader decides
// with these which programs of the object to load (runq_loader.cpp).
#pragma once

#include <bpf/btf.h>

#include <string>

namespace khagent {

// Parsing the kernel's BTF takes a while (seconds under emulation): one
// parse serves every check of a start.
struct VmlinuxBtf {
  struct btf* btf = btf__load_vmlinux_btf();
  ~VmlinuxBtf() { btf__free(btf); }
  VmlinuxBtf() = default;
  VmlinuxBtf(const VmlinuxBtf&) = delete;
  VmlinuxBtf& operator=(const VmlinuxBtf&) = delete;
};

// Whether the kernel keeps cfs_rq::throttled_clock_self_time (6.6+).
bool has_throttled_clock(const struct btf* vmlinux);

// Whether the kernel's BTF has an enumerator named `name` (a uapi flag the
// kernel knows, such as BPF_F_TIMER_CPU_PIN: 6.7+).
bool has_enum_value(const struct btf* vmlinux, const char* name);

// Why not, or "" when this kernel loads a BPF iterator program of `target`
// (task, bpf_map_elem, ...). Kernels and security policies differ: one 6.18
// host here loads task iterators but refuses map-element ones (EPERM).
std::string iterator_refusal(const struct btf* vmlinux, const std::string& target);

// Whether this kernel loads and attaches an fentry program on `func`; logs
// why not, and stores it in `why` when given.
bool probe_fentry_in(const struct btf* vmlinux, const std::string& func, std::string* why = nullptr);

}  // namespace khagent

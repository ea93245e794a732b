// What the running kernel can take, probed before the load: the preflight
// checks, the kernel's BTF, trivial fentry and iterator programs; and where
// libbpf's messages go.
#include "khagent/loader/runq_loader.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runq_probe.h"

namespace khagent {

namespace {

bool g_libbpf_verbose = false;

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && !g_libbpf_verbose) return 0;
  char buf[2048];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  std::string msg(buf, n > 0 ? std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1) : 0);
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  switch (level) {
    case LIBBPF_WARN: spdlog::warn("libbpf: {}", msg); break;
    case LIBBPF_INFO: spdlog::info("libbpf: {}", msg); break;
    default: spdlog::debug("libbpf: {}", msg); break;
  }
  return 0;
}

// Minimum kernel: task storage in tracing programs (commit a10787e6d58c,
// "bpf: Enable task local storage for tracing programs", v5.13); before it
// task storage was for BPF LSM programs only.
constexpr int kMinMajor = 5, kMinMinor = 13;

}  // namespace

void route_libbpf_logs(bool verbose) {
  g_libbpf_verbose = verbose;
  libbpf_set_print(libbpf_log);
}

Result<void> preflight(const std::string& btf_path) {
  if (geteuid() != 0)
    return make_error(EPERM, "khagent must run as root (it loads BPF programs and reads every cgroup)");
  struct utsname u{};
  if (uname(&u) == 0) {
    int major = 0, minor = 0;
    if (sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
        (major < kMinMajor || (major == kMinMajor && minor < kMinMinor)))
      return make_error(ENOTSUP, std::string("kernel ") + u.release + " is too old: khagent needs " +
                                     std::to_string(kMinMajor) + "." + std::to_string(kMinMinor) +
                                     " or newer (BPF task storage in tracing programs)");
  }
  if (access(btf_path.c_str(), R_OK) != 0)
    return make_error(errno, "kernel BTF " + btf_path +
                                 " is missing: khagent needs a kernel built with "
                                 "CONFIG_DEBUG_INFO_BTF=y");
  return {};
}

namespace {

// Loads `r0 = 0; exit` as a tracing program of `type` on the kernel's BTF
// function `btf_id`: its fd, or -1 with errno set.
int load_trivial_tracing(enum bpf_attach_type type, int btf_id) {
  struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = type, .attach_btf_id = static_cast<__u32>(btf_id));
  return bpf_prog_load(BPF_PROG_TYPE_TRACING, "kh_probe", "GPL", insns, 2, &opts);
}

// Why not, or "" when this kernel loads and attaches an fentry program on
// `func`.
std::string fentry_refusal(const struct btf* vmlinux, const std::string& func) {
  if (!vmlinux) return "the kernel's BTF could not be read";
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  if (id < 0) return func + " is not in the kernel's BTF";
  int fd = load_trivial_tracing(BPF_TRACE_FENTRY, id);
  if (fd < 0) return "loading fentry/" + func + " refused: " + std::strerror(errno);
  // Loading is not enough on every kernel: try to attach as well.
  int link = bpf_link_create(fd, 0, BPF_TRACE_FENTRY, nullptr);
  int attach_errno = errno;
  close(fd);
  if (link < 0) return "attaching fentry/" + func + " refused: " + std::strerror(attach_errno);
  close(link);
  return "";
}

}  // namespace

bool has_throttled_clock(const struct btf* vmlinux) {
  if (!vmlinux) return false;
  int id = btf__find_by_name_kind(vmlinux, "cfs_rq", BTF_KIND_STRUCT);
  if (id <= 0) return false;
  const struct btf_type* t = btf__type_by_id(vmlinux, static_cast<__u32>(id));
  const struct btf_member* m = btf_members(t);
  for (int i = 0; i < btf_vlen(t); i++, m++)
    if (std::strcmp(btf__name_by_offset(vmlinux, m->name_off), "throttled_clock_self_time") == 0) return true;
  return false;
}

// Whether the kernel's BTF has an enumerator named `name` (a uapi flag the
// kernel knows, such as BPF_F_TIMER_CPU_PIN: 6.7+).
bool has_enum_value(const struct btf* vmlinux, const char* name) {
  if (!vmlinux) return false;
  const __u32 n = btf__type_cnt(vmlinux);
  for (__u32 id = 1; id < n; id++) {
    const struct btf_type* t = btf__type_by_id(vmlinux, id);
    if (btf_is_enum(t)) {
      const struct btf_enum* e = btf_enum(t);
      for (int i = 0; i < btf_vlen(t); i++, e++)
        if (std::strcmp(btf__name_by_offset(vmlinux, e->name_off), name) == 0) return true;
    } else if (btf_is_enum64(t)) {
      const struct btf_enum64* e = btf_enum64(t);
      for (int i = 0; i < btf_vlen(t); i++, e++)
        if (std::strcmp(btf__name_by_offset(vmlinux, e->name_off), name) == 0) return true;
    }
  }
  return false;
}

// Why not, or "" when this kernel loads a BPF iterator program of `target`
// (task, bpf_map_elem, ...). Kernels and security policies differ: one 6.18
// host here loads task iterators but refuses map-element ones (EPERM).
std::string iterator_refusal(const struct btf* vmlinux, const std::string& target) {
  if (!vmlinux) return "the kernel's BTF could not be read";
  std::string func = "bpf_iter_" + target;
  int id = btf__find_by_name_kind(vmlinux, func.c_str(), BTF_KIND_FUNC);
  if (id < 0) return func + " is not in the kernel's BTF";
  int fd = load_trivial_tracing(BPF_TRACE_ITER, id);
  if (fd < 0) return "loading an iter/" + target + " program refused: " + std::strerror(errno);
  close(fd);
  return "";
}

bool probe_fentry_in(const struct btf* vmlinux, const std::string& func, std::string* why) {
  std::string refused = fentry_refusal(vmlinux, func);
  if (!refused.empty()) spdlog::info("fentry probe: {}", refused);
  if (why) *why = refused;
  return refused.empty();
}
bool kernel_has_throttled_clock() {
  VmlinuxBtf v;
  return has_throttled_clock(v.btf);
}

bool probe_fentry(const std::string& func) {
  VmlinuxBtf v;
  return probe_fentry_in(v.btf, func);
}

std::string iterator_refusal(const std::string& target) {
  VmlinuxBtf v;
  return iterator_refusal(v.btf, target);
}

}  // namespace khagent

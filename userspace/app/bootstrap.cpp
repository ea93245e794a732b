#include "khagent/app/bootstrap.h"

#include <spdlog/spdlog.h>

namespace khagent {

std::optional<int> checked_mounts(Mounts& out) {
  if (auto r = preflight(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }
  auto m = find_mounts();
  if (!m) {
    spdlog::error("{}", m.error().str());
    return 2;
  }
  out = *m;
  return std::nullopt;
}

std::optional<int> setup_node(const Mounts& m, bool memory, bool io, NodeSetup& out) {
  auto topo = read_topology();
  if (!topo) {
    spdlog::error("reading the CPU topology: {}", topo.error().str());
    return 1;
  }
  out.topo = *topo;
  spdlog::info("node: {} CPUs ({} threads per core), cgroup2 at {}", out.topo.cpus.size(), out.topo.threads_per_core(),
               m.cgroup2);
  const CgroupRoots roots = roots_of(m);
  auto be = detect_backend(roots);
  if (!be) {
    spdlog::error("{}", be.error().str());
    return 2;
  }
  out.backend = *be;
  out.idle_supported = kernel_has_cpu_idle(roots, out.backend);
  if (out.backend == CgroupBackend::V2)
    spdlog::info("cgroup backend: {}: measuring and writing in {}", backend_name(out.backend), m.cgroup2);
  else
    spdlog::info("cgroup backend: {}: measuring by cgroup2 ids in {}, writing cpu in {} and cpuset in {}",
                 backend_name(out.backend), m.cgroup2, m.cpu_v1, m.cpuset_v1.empty() ? "(none)" : m.cpuset_v1);
  if (memory) {
    auto ok = memory_controller_for(out.backend, roots);
    if (!ok) spdlog::warn("memory lever off: {}", ok.error().message);
    out.memory = ok.ok();
    out.memory_v2 = out.memory && out.backend == CgroupBackend::V2;
  }
  if (io) {
    auto ok = io_controller_for(out.backend, roots);
    if (!ok) spdlog::warn("IO limit off (IO still measured): {}", ok.error().message);
    out.io = ok.ok();
  }
  return std::nullopt;
}

std::optional<int> start_measuring(const Mounts& m, LoaderOptions lo, bool rescan, Measuring& out) {
  lo.cpu_controller_on_v1 = !m.cpu_v1.empty();
  auto bpf = RunqBpf::open_and_load(lo);
  if (!bpf) {
    spdlog::error("{}", bpf.error().str());
    return 1;
  }
  out.bpf = std::move(bpf.value());
  out.index = std::make_unique<CgroupIndex>(m.cgroup2);
  if (rescan) {
    auto n = out.index->rescan();
    if (!n) {
      spdlog::error("{}", n.error().str());
      return 1;
    }
    spdlog::info("{} cgroups under {}", *n, m.cgroup2);
  }
  out.maps = std::make_unique<BpfMapSource>(out.bpf->map_fds(true));
  out.cpu_stat = std::make_unique<CpuStatThrottleReader>(m.cgroup2, m.cpu_v1);
  out.collector = std::make_unique<Collector>(*out.maps, *out.index, out.cpu_stat.get(), out.bpf->throttle_source());
  return std::nullopt;
}

NodeReadRoots node_read_roots(const CgroupRoots& roots, CgroupBackend b, bool memory,
                              const std::string& cpu_manager_state) {
  NodeReadRoots r;
  r.unified = roots.unified;
  r.cpu_v1 = roots.cpu_v1;
  r.blkio_v1 = roots.blkio_v1;
  r.memory_v1 = b == CgroupBackend::V1Hybrid;
  if (memory) r.memory = r.memory_v1 ? roots.memory_v1 : roots.unified;
  r.cpu_manager_state = cpu_manager_state;
  return r;
}

std::unique_ptr<PsiTriggers> psi_triggers(const MemoryConfig& cfg, const CgroupRoots& roots) {
  if (!cfg.stall_window_ns) return nullptr;
  const uint64_t window_us = cfg.stall_window_ns / 1000;
  return std::make_unique<PsiTriggers>(
      roots.unified, static_cast<uint64_t>(static_cast<double>(window_us) * cfg.stall_limit), window_us);
}

}  // namespace khagent

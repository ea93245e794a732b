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

}  // namespace khagent

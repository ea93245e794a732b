#include "khagent/collect/snapshot.h"

#include "khagent/collect/cpustat.h"
#include "khagent/util/cgroup_path.h"
#include "khagent/util/file.h"

namespace khagent {

namespace {

class RealNodeReads : public NodeReads {
 public:
  explicit RealNodeReads(NodeReadRoots r)
      : roots_(std::move(r)), memory_(roots_.memory, roots_.memory_v1, roots_.proc) {}

  bool has_memory() const override { return !roots_.memory.empty(); }
  Result<MemoryUse> memory(const std::string& cgroup) const override {
    if (!has_memory()) return no_memory();
    return memory_.cgroup(cgroup);
  }
  Result<MemoryUse> node_memory(const std::string& node_cgroup) const override {
    if (!has_memory()) return no_memory();
    return memory_.node(node_cgroup);
  }
  Result<std::map<std::string, uint64_t>> oom_kill_counts(const std::string& cgroup) const override {
    if (!has_memory()) return no_memory();
    return memory_.oom_kill_counts(cgroup);
  }
  Result<std::string> at_own_limit(const std::string& cgroup, const std::string& stop) const override {
    if (!has_memory()) return no_memory();
    return memory_.at_own_limit(cgroup, stop);
  }
  Result<PsiTotals> memory_pressure(const std::string& cgroup) const override {
    return read_psi(roots_.unified + (cgroup == "/" ? "" : cgroup) + "/memory.pressure");
  }
  Result<PsiTotals> io_pressure(const std::string& cgroup) const override {
    return read_psi(roots_.unified + (cgroup == "/" ? "" : cgroup) + "/io.pressure");
  }
  Result<IoStat> io_stat(const std::string& cgroup) const override {
    const std::string rel = cgroup == "/" ? "" : cgroup;
    auto v2 = read_file(roots_.unified + rel + "/io.stat");
    if (v2) {
      auto s = parse_io_stat(*v2);
      if (!s) return make_error(s.error().err, roots_.unified + rel + "/io.stat: " + s.error().message);
      return s;
    }
    if (roots_.blkio_v1.empty() || v2.error().err != ENOENT) return v2.error();
    const std::string dir = roots_.blkio_v1 + rel;
    auto bytes = read_file(dir + "/blkio.throttle.io_service_bytes_recursive");
    if (!bytes) return bytes.error();
    auto ios = read_file(dir + "/blkio.throttle.io_serviced_recursive");
    if (!ios) return ios.error();
    auto s = parse_blkio_throttle(*bytes, *ios);
    if (!s) return make_error(s.error().err, dir + ": " + s.error().message);
    return s;
  }
  std::optional<CpuQuota> cpu_quota(const std::string& cgroup) const override {
    return read_cpu_quota(roots_.unified, roots_.cpu_v1, cgroup);
  }
  std::optional<uint64_t> cpu_burst(const std::string& cgroup) const override {
    return read_cpu_burst(roots_.unified, roots_.cpu_v1, cgroup);
  }
  std::vector<std::string> children(const std::string& cgroup) const override {
    return child_cgroups(roots_.unified, cgroup);
  }
  Result<CpuManagerState> cpu_manager_state() const override {
    return read_cpu_manager_state(roots_.cpu_manager_state);
  }

 private:
  static Error no_memory() { return make_error(ENOTSUP, "no memory hierarchy to read"); }
  NodeReadRoots roots_;
  MemoryReader memory_;
};

}  // namespace

std::unique_ptr<NodeReads> real_node_reads(const NodeReadRoots& roots) {
  return std::make_unique<RealNodeReads>(roots);
}

const Result<MemoryUse>& TickSnapshot::memory(const std::string& cgroup) const {
  return cached(memory_, cgroup, [&] { return reads_->memory(cgroup); });
}
const Result<MemoryUse>& TickSnapshot::node_memory(const std::string& node_cgroup) const {
  return cached(node_memory_, node_cgroup, [&] { return reads_->node_memory(node_cgroup); });
}
const Result<std::map<std::string, uint64_t>>& TickSnapshot::oom_kill_counts(const std::string& cgroup) const {
  return cached(oom_kills_, cgroup, [&] { return reads_->oom_kill_counts(cgroup); });
}
const Result<std::string>& TickSnapshot::at_own_limit(const std::string& cgroup, const std::string& stop) const {
  return cached(own_limit_, cgroup + '\n' + stop, [&] { return reads_->at_own_limit(cgroup, stop); });
}
const Result<PsiTotals>& TickSnapshot::memory_pressure(const std::string& cgroup) const {
  return cached(pressure_, cgroup, [&] { return reads_->memory_pressure(cgroup); });
}
const Result<PsiTotals>& TickSnapshot::io_pressure(const std::string& cgroup) const {
  return cached(io_pressure_, cgroup, [&] { return reads_->io_pressure(cgroup); });
}
const Result<IoStat>& TickSnapshot::io_stat(const std::string& cgroup) const {
  return cached(io_stat_, cgroup, [&] { return reads_->io_stat(cgroup); });
}
const std::optional<CpuQuota>& TickSnapshot::cpu_quota(const std::string& cgroup) const {
  return cached(quota_, cgroup, [&] { return reads_->cpu_quota(cgroup); });
}
const std::optional<uint64_t>& TickSnapshot::cpu_burst(const std::string& cgroup) const {
  return cached(burst_, cgroup, [&] { return reads_->cpu_burst(cgroup); });
}
const std::vector<std::string>& TickSnapshot::children(const std::string& cgroup) const {
  return cached(children_, cgroup, [&] { return reads_->children(cgroup); });
}
const Result<CpuManagerState>& TickSnapshot::cpu_manager_state() const {
  return cached(cpu_manager_, std::string(), [&] { return reads_->cpu_manager_state(); });
}

}  // namespace khagent

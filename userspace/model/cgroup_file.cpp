#include "khagent/model/cgroup_file.h"

namespace khagent {

const char* cgroup_file_name(CgroupFile f) {
  switch (f) {
    case CgroupFile::CpuMax: return "cpu.max";
    case CgroupFile::CpuWeight: return "cpu.weight";
    case CgroupFile::CpuIdle: return "cpu.idle";
    case CgroupFile::CpusetCpus: return "cpuset.cpus";
    case CgroupFile::V1CpuCfs: return "v1:cpu.cfs_quota_us+cpu.cfs_period_us";
    case CgroupFile::V1CpuShares: return "v1:cpu.shares";
    case CgroupFile::V1CpuIdle: return "v1:cpu.idle";
    case CgroupFile::V1CpusetCpus: return "v1:cpuset.cpus";
    case CgroupFile::MemoryHigh: return "memory.high";
    case CgroupFile::V1MemoryLimit: return "v1:memory.limit_in_bytes";
    case CgroupFile::CpuMaxBurst: return "cpu.max.burst";
    case CgroupFile::V1CpuCfsBurst: return "v1:cpu.cfs_burst_us";
  }
  return "";
}

std::optional<CgroupFile> cgroup_file_from_name(const std::string& name) {
  for (CgroupFile f : kAllCgroupFiles)
    if (name == cgroup_file_name(f)) return f;
  return std::nullopt;
}

Hierarchy hierarchy_of(CgroupFile f) {
  switch (f) {
    case CgroupFile::V1CpuCfs:
    case CgroupFile::V1CpuShares:
    case CgroupFile::V1CpuIdle:
    case CgroupFile::V1CpuCfsBurst: return Hierarchy::CpuV1;
    case CgroupFile::V1CpusetCpus: return Hierarchy::CpusetV1;
    case CgroupFile::V1MemoryLimit: return Hierarchy::MemoryV1;
    default: return Hierarchy::Unified;
  }
}

std::vector<std::string> kernel_files(CgroupFile f) {
  switch (f) {
    case CgroupFile::V1CpuCfs: return {"cpu.cfs_quota_us", "cpu.cfs_period_us"};
    case CgroupFile::V1CpuShares: return {"cpu.shares"};
    case CgroupFile::V1CpuIdle: return {"cpu.idle"};
    case CgroupFile::V1CpusetCpus: return {"cpuset.cpus"};
    case CgroupFile::V1MemoryLimit: return {"memory.limit_in_bytes"};
    case CgroupFile::V1CpuCfsBurst: return {"cpu.cfs_burst_us"};
    default: return {cgroup_file_name(f)};
  }
}

}  // namespace khagent

// Writing cgroup v2 control files safely: confinement to the cgroup2 mount,
// validation before writing, and a file-system interface tests can fake.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "khagent/util/cpuset.h"
#include "khagent/util/result.h"

namespace khagent {

enum class CgroupFile { CpuMax, CpuWeight, CpuIdle, CpusetCpus };
const char* cgroup_file_name(CgroupFile f);

// Checks a value before it is written: cpu.max "max|QUOTA [PERIOD]" with
// QUOTA >= 1000 and PERIOD in [1000, 1000000]; cpu.weight 1..10000; cpu.idle
// 0|1; cpuset.cpus a cpu list within `node_cpus` ("" = inherit).
Result<void> validate_cgroup_value(CgroupFile f, const std::string& value, const CpuSet& node_cpus);

// Turns a configured cgroup path into one relative to the cgroup2 mount
// ("/a/b"). Accepted: "/a/b" or "a/b" (relative to the mount) and an absolute
// path inside the mount. Rejected with a clear error: ".." components, an
// absolute path elsewhere, and (when the cgroup exists) a path whose real
// location, after symlinks, is outside the mount.
Result<std::string> confine_cgroup_path(const std::string& mount, const std::string& configured);

// The cgroup files khagent reads and writes, relative to a root directory
// (the cgroup2 mount, or a fixture directory in tests).
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  // Errors carry the errno: ENOENT when the cgroup is gone.
  virtual Result<std::string> read(const std::string& cgroup, CgroupFile f) = 0;
  virtual Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) = 0;
  virtual bool exists(const std::string& cgroup) = 0;
};

class RealCgroupFs : public CgroupFs {
 public:
  explicit RealCgroupFs(std::string root) : root_(std::move(root)) {}
  Result<std::string> read(const std::string& cgroup, CgroupFile f) override;
  Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) override;
  bool exists(const std::string& cgroup) override;
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// Values as the kernel prints them, for comparing what is there with what we
// want ("max" alone reads back as "max 100000"; cpu lists are canonicalised).
std::string normalize_cgroup_value(CgroupFile f, const std::string& value);

}  // namespace khagent

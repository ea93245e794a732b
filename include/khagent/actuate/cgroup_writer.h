// Writing cgroup control files safely: one confinement rule for every read
// and write (the file must resolve beneath its hierarchy's mount, with no
// "..", no symlink and no other mount on the way), a value grammar per file
// checked before writing, two backends (cgroup v2, and systemd's hybrid
// layout whose cpu and cpuset controllers sit on cgroup v1) and a
// file-system interface tests can fake.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "khagent/model/cgroup_file.h"
#include "khagent/util/cpuset.h"
#include "khagent/util/result.h"

namespace khagent {

// Where the controllers are written.
enum class CgroupBackend {
  V2,        // cpu.max, cpu.weight, cpu.idle, cpuset.cpus in the cgroup2 mount
  V1Hybrid,  // cpu.cfs_quota_us/cfs_period_us, cpu.shares, cpu.idle, cpuset.cpus in v1
};
const char* backend_name(CgroupBackend b);

struct CgroupRoots {
  std::string unified;    // cgroup2 mount (measurement; writes on V2)
  std::string cpu_v1;     // v1 cpu hierarchy ("" if none)
  std::string cpuset_v1;  // v1 cpuset hierarchy ("" if none)
  const std::string& of(Hierarchy h) const {
    return h == Hierarchy::Unified ? unified : h == Hierarchy::CpuV1 ? cpu_v1 : cpuset_v1;
  }
};

// Chooses the backend: V2 when the cgroup2 root offers the cpu controller
// (`controllers` is its cgroup.controllers), else V1Hybrid when a v1 cpu
// hierarchy is mounted, else an error that says why (ENOTSUP).
Result<CgroupBackend> choose_backend(const CgroupRoots& roots, const std::string& controllers);
// choose_backend() with the cgroup2 root's own cgroup.controllers.
Result<CgroupBackend> detect_backend(const CgroupRoots& roots);

// The v2 value of a file turned into the backend's own file and value
// (cpu.max "max 100000" -> v1 cfs "-1 100000"; cpu.weight w -> cpu.shares
// by the kubelet's conversion; cpu.idle and cpuset.cpus keep their values).
struct FileValue {
  CgroupFile file = CgroupFile::CpuMax;
  std::string value;
};
FileValue to_backend(CgroupBackend b, CgroupFile v2_file, const std::string& v2_value);
uint64_t weight_to_shares(uint64_t weight);
uint64_t shares_to_weight(uint64_t shares);

// Checks a value before it is written (and a recorded original before it is
// restored): cpu.max "max|QUOTA [PERIOD]" with QUOTA >= 1000 and PERIOD in
// [1000, 1000000]; v1 cfs "-1|QUOTA PERIOD" likewise; cpu.weight 1..10000;
// cpu.shares 2..262144; cpu.idle 0|1; cpuset.cpus a cpu list ("" = inherit)
// within `node_cpus` (or any well-formed list when node_cpus is empty).
Result<void> validate_cgroup_value(CgroupFile f, const std::string& value, const CpuSet& node_cpus);

// A cgroup path as khagent keeps it: "/" or "/a/b", every component a plain
// name (no "", ".", "..", no control characters, at most 255 bytes each).
bool is_clean_cgroup_path(const std::string& rel);

// Turns a configured cgroup path into one relative to the cgroup2 mount
// ("/a/b"). Accepted: "/a/b" or "a/b" (relative to the mount) and an absolute
// path inside the mount. Rejected with a clear error: ".." components, the
// root cgroup itself, an absolute path elsewhere, and (when the cgroup
// exists) a path whose real location, after symlinks, is outside the mount.
Result<std::string> confine_cgroup_path(const std::string& mount, const std::string& configured);

// The cgroup files khagent reads and writes.
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  // Errors carry the errno: ENOENT when the cgroup is gone.
  virtual Result<std::string> read(const std::string& cgroup, CgroupFile f) = 0;
  virtual Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) = 0;
  virtual bool exists(const std::string& cgroup) = 0;
};

// The real files. Every path is opened beneath the hierarchy's root with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV); where the kernel has no openat2 (before 5.6), one
// component at a time with O_NOFOLLOW from the root's descriptor. A path
// that is not clean (is_clean_cgroup_path) is refused (EINVAL) before any
// system call, and a symlink on the way fails (ELOOP/EXDEV).
class RealCgroupFs : public CgroupFs {
 public:
  explicit RealCgroupFs(CgroupRoots roots, bool use_openat2 = true);
  explicit RealCgroupFs(std::string unified_root) : RealCgroupFs(CgroupRoots{std::move(unified_root), "", ""}) {}
  ~RealCgroupFs() override;
  RealCgroupFs(const RealCgroupFs&) = delete;
  RealCgroupFs& operator=(const RealCgroupFs&) = delete;

  Result<std::string> read(const std::string& cgroup, CgroupFile f) override;
  Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) override;
  bool exists(const std::string& cgroup) override;
  const std::string& root() const { return roots_.unified; }
  const CgroupRoots& roots() const { return roots_; }

 private:
  Result<int> open_beneath(Hierarchy h, const std::string& rel, int flags);
  Result<std::string> read_one(Hierarchy h, const std::string& cgroup, const std::string& name);
  Result<void> write_one(Hierarchy h, const std::string& cgroup, const std::string& name, const std::string& value);

  CgroupRoots roots_;
  bool use_openat2_;
  std::array<int, 3> root_fd_ = {-1, -1, -1};
};

// Values as the kernel prints them, for comparing what is there with what we
// want ("max" alone reads back as "max 100000"; cpu lists are canonicalised).
std::string normalize_cgroup_value(CgroupFile f, const std::string& value);

}  // namespace khagent

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

#include "khagent/collect/cgroupfs.h"
#include "khagent/model/cgroup_file.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/model/knob_table.h"
#include "khagent/util/cgroup_path.h"
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
  std::string unified;         // cgroup2 mount (measurement; writes on V2)
  std::string cpu_v1;          // v1 cpu hierarchy ("" if none)
  std::string cpuset_v1;       // v1 cpuset hierarchy ("" if none)
  std::string memory_v1 = {};  // v1 memory hierarchy ("" if none)
  std::string blkio_v1 = {};   // v1 blkio hierarchy ("" if none)
  const std::string& of(Hierarchy h) const {
    switch (h) {
      case Hierarchy::CpuV1: return cpu_v1;
      case Hierarchy::CpusetV1: return cpuset_v1;
      case Hierarchy::MemoryV1: return memory_v1;
      case Hierarchy::BlkioV1: return blkio_v1;
      case Hierarchy::Unified: break;
    }
    return unified;
  }
};

// The hierarchies of a node's mounts.
inline CgroupRoots roots_of(const Mounts& m) { return {m.cgroup2, m.cpu_v1, m.cpuset_v1, m.memory_v1, m.blkio_v1}; }

// Chooses the backend: V2 when the cgroup2 root offers the cpu controller
// (`controllers` is its cgroup.controllers), else V1Hybrid when a v1 cpu
// hierarchy is mounted, else an error that says why (ENOTSUP).
Result<CgroupBackend> choose_backend(const CgroupRoots& roots, const std::string& controllers);
// choose_backend() with the cgroup2 root's own cgroup.controllers.
Result<CgroupBackend> detect_backend(const CgroupRoots& roots);

// Whether the kernel has cpu.idle (cgroup SCHED_IDLE, 5.15+): the v1 cpu
// root has the file; in v2 the root has no cpu files, so a child with the
// cpu controller is looked at (none yet: assumed, a failed write says otherwise).
bool kernel_has_cpu_idle(const CgroupRoots& roots, CgroupBackend b);

// Where the memory controller is: in the cgroup2 mount (its root's
// cgroup.controllers has "memory"), else the v1 memory hierarchy, else
// nowhere (an error that says so). On a hybrid host whose cgroup2 mount has
// the memory controller but not the cpu one, memory is still written in v1
// when mounted there: the backend decides, and this only says whether the
// backend's memory file exists.
Result<void> memory_controller_for(CgroupBackend b, const CgroupRoots& roots);
// Whether the backend has an IO limit to write: cgroup v2's io controller
// enabled at the root (io.max), or a hybrid host's v1 blkio hierarchy
// (blkio.throttle.*, direct IO only).
Result<void> io_controller_for(CgroupBackend b, const CgroupRoots& roots);

// The backend's file for a knob (cpu.max on v2, the v1 cfs pair on a
// hybrid host, memory.high on v2 and memory.limit_in_bytes on v1, ...): the
// knob table's (knob_file); a knob with no v1 file (memory.max) gets its
// v2 file, which render refuses on v1.
CgroupFile file_for(CgroupBackend b, Knob k);
// The one place a typed value becomes the text of a cgroup file, for the
// backend: cpu.max "QUOTA PERIOD" or "max PERIOD" (v1: "-1 PERIOD"),
// cpu.weight (v1: cpu.shares by the kubelet's conversion), cpu.idle 0|1, a
// cpu list, memory.high "max"|BYTES (v1 memory.limit_in_bytes "-1"|BYTES),
// BYTES rounded down to whole pages as the kernel keeps them, memory.reclaim BYTES (v1: the depth of a
// limit pulse), memory.max "max"|BYTES (v2 only: on v1 an ENOTSUP error). The text is what the kernel prints back
// (normalize_cgroup_value leaves it as it is). Values the kernel would refuse are EINVAL errors: a quota under 1000 us,
// a period outside [1000, 1000000] us, a weight outside 1..10000, CPUs not in `node_cpus` (when it is not empty), a
// memory limit or a reclaim under one page. The value carries the setting's lever.
Result<DesiredValue> render(CgroupBackend b, const Setting& s, const CpuSet& node_cpus);
uint64_t weight_to_shares(uint64_t weight);
uint64_t shares_to_weight(uint64_t shares);

// validate_cgroup_value and normalize_cgroup_value: model/knob_table.h.

// The cgroup files khagent reads and writes.
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  // Errors carry the errno: ENOENT when the cgroup is gone.
  virtual Result<std::string> read(const std::string& cgroup, CgroupFile f) = 0;
  virtual Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) = 0;
  virtual bool exists(const std::string& cgroup) = 0;
  // The child cgroups of `cgroup` in hierarchy `h`, as cgroup paths, sorted
  // (empty when it has none or is gone). Fakes without a tree have none.
  virtual std::vector<std::string> children(Hierarchy /*h*/, const std::string& /*cgroup*/) { return {}; }
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
  explicit RealCgroupFs(std::string unified_root) : RealCgroupFs(CgroupRoots{std::move(unified_root), "", "", ""}) {}
  ~RealCgroupFs() override;
  RealCgroupFs(const RealCgroupFs&) = delete;
  RealCgroupFs& operator=(const RealCgroupFs&) = delete;

  Result<std::string> read(const std::string& cgroup, CgroupFile f) override;
  Result<void> write(const std::string& cgroup, CgroupFile f, const std::string& value) override;
  bool exists(const std::string& cgroup) override;
  std::vector<std::string> children(Hierarchy h, const std::string& cgroup) override;
  const std::string& root() const { return roots_.unified; }
  const CgroupRoots& roots() const { return roots_; }

 private:
  Result<int> open_beneath(Hierarchy h, const std::string& rel, int flags);
  Result<std::string> read_one(Hierarchy h, const std::string& cgroup, const std::string& name);
  Result<void> write_one(Hierarchy h, const std::string& cgroup, const std::string& name, const std::string& value);
  // V1MemoryPulse: memory.limit_in_bytes lowered to the group's use less
  // `value` bytes (the kernel reclaims inside that write, as SCHED_IDLE;
  // EBUSY when it could not get that far is no error), then put back to what
  // it read before, at once.
  Result<void> pulse(const std::string& cgroup, const std::string& value);
  // V1BlkioThrottle: the four blkio.throttle.*_device files as io.max's
  // lines (read), one device's line written as up to four lines ("MAJ:MIN
  // N", 0 for no limit).
  Result<std::string> read_blkio_throttle(const std::string& cgroup);
  Result<void> write_blkio_throttle(const std::string& cgroup, const std::string& value);

  CgroupRoots roots_;
  bool use_openat2_;
  std::array<int, 5> root_fd_ = {-1, -1, -1, -1, -1};  // by Hierarchy
};

}  // namespace khagent

// The cgroup files khagent owns and the values it wants in them: plain data
// shared by the policy (which decides them) and the actuators (which write
// them).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/model/lever.h"
#include "khagent/util/cpuset.h"

namespace khagent {

// The files khagent owns. The first four are cgroup v2 files in the cgroup2
// mount; the V1 ones are their counterparts in the v1 cpu and cpuset
// hierarchies of a hybrid host, at the same relative path. V1CpuCfs is the
// pair cpu.cfs_quota_us + cpu.cfs_period_us, read and written as one value
// "QUOTA PERIOD" (QUOTA -1: no limit). MemoryHigh is v2's memory.high,
// V1MemoryLimit its counterpart in the v1 memory hierarchy. CpuMaxBurst is
// v2's cpu.max.burst, V1CpuCfsBurst v1's cpu.cfs_burst_us. MemoryReclaim is
// v2's memory.reclaim, written, never saved or restored; V1MemoryPulse its v1
// counterpart, a pulse of memory.limit_in_bytes (lowered to the group's use
// less the bytes asked, then put back in the same call: the kernel reclaims
// inside the first write and answers EBUSY, not an OOM kill, when it cannot
// get there). MemoryMax is v2's memory.max (the backstop; v1 has no second
// limit). MemoryOomGroup is v2's memory.oom.group (no v1 counterpart).
// IoMax is v2's io.max; V1BlkioThrottle its counterpart, the four files
// blkio.throttle.{read,write}_{bps,iops}_device read and written as one
// value in io.max's grammar. Both hold a line per device: their value is
// the line of one device ("MAJ:MIN rbps=.. wbps=.. riops=.. wiops=..",
// "max" for no limit), read out of the file by that device (the knob
// row's per_device), saved and restored line by line.
// Each has one row in the knob table (model/knob_table.h), in this
// order.
enum class CgroupFile {
  CpuMax,
  CpuWeight,
  CpuIdle,
  CpusetCpus,
  V1CpuCfs,
  V1CpuShares,
  V1CpuIdle,
  V1CpusetCpus,
  MemoryHigh,
  V1MemoryLimit,
  CpuMaxBurst,
  V1CpuCfsBurst,
  MemoryReclaim,
  V1MemoryPulse,
  MemoryMax,
  MemoryOomGroup,
  IoMax,
  V1BlkioThrottle,
};
inline constexpr std::array<CgroupFile, 18> kAllCgroupFiles = {
    CgroupFile::CpuMax,        CgroupFile::CpuWeight,      CgroupFile::CpuIdle,     CgroupFile::CpusetCpus,
    CgroupFile::V1CpuCfs,      CgroupFile::V1CpuShares,    CgroupFile::V1CpuIdle,   CgroupFile::V1CpusetCpus,
    CgroupFile::MemoryHigh,    CgroupFile::V1MemoryLimit,  CgroupFile::CpuMaxBurst, CgroupFile::V1CpuCfsBurst,
    CgroupFile::MemoryReclaim, CgroupFile::V1MemoryPulse,  CgroupFile::MemoryMax,   CgroupFile::MemoryOomGroup,
    CgroupFile::IoMax,         CgroupFile::V1BlkioThrottle};

// Lookups in the knob table (model/knob_table.h).
// The name in logs and in the state file: "cpu.max", ..., and for v1 files
// the hierarchy first: "v1:cpu.shares", "v1:cpu.cfs_quota_us+cpu.cfs_period_us".
const char* cgroup_file_name(CgroupFile f);
std::optional<CgroupFile> cgroup_file_from_name(const std::string& name);

enum class Hierarchy { Unified, CpuV1, CpusetV1, MemoryV1, BlkioV1 };
Hierarchy hierarchy_of(CgroupFile f);
// The kernel files behind one CgroupFile, in its hierarchy.
std::vector<std::string> kernel_files(CgroupFile f);

// One file's text to write. The actuator renders typed values into these
// (actuate/cgroup_writer.h: render), already valid and in the kernel's own
// form (`canonical`), a cpuset keeping its CPUs so that nothing parses the
// text back; tests and the restore path build them from text.
struct DesiredValue {
  DesiredValue() = default;
  DesiredValue(std::string cg, CgroupFile f, std::string v) : cgroup(std::move(cg)), file(f), value(std::move(v)) {}
  std::string cgroup;  // relative to the cgroup2 mount
  CgroupFile file = CgroupFile::CpuMax;
  std::string value;
  bool canonical = false;      // rendered: checked, and as the kernel prints it
  std::optional<CpuSet> cpus;  // rendered cpuset files: the CPUs of `value`
  std::optional<Lever> lever;  // the lever that asked for it (none: tests, restores)
};

}  // namespace khagent

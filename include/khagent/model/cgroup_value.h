// The values khagent sets on cgroups, typed. The policy decides them as
// numbers and CPU sets; only the actuator turns one into the text of a
// cgroup file, v2 or v1 (actuate/cgroup_writer.h: render).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "khagent/model/lever.h"
#include "khagent/util/cpuset.h"

namespace khagent {

// cpu.max (v2), cpu.cfs_quota_us + cpu.cfs_period_us (v1).
struct CpuQuota {
  std::optional<uint64_t> quota_us;  // none: no limit ("max", -1 on v1)
  uint64_t period_us = 100000;
  bool operator==(const CpuQuota&) const = default;
};
// cpu.weight on the v2 scale 1..10000 (cpu.shares on v1, by the kubelet's conversion).
struct CpuWeight {
  uint64_t weight = 100;
  bool operator==(const CpuWeight&) const = default;
};
// cpu.idle: the group's tasks run as SCHED_IDLE against its siblings (5.15+).
struct CpuIdle {
  bool idle = true;
  bool operator==(const CpuIdle&) const = default;
};
// cpuset.cpus; empty: the parent's CPUs.
struct CpuList {
  CpuSet cpus;
  bool operator==(const CpuList&) const = default;
};

// memory.high (v2), memory.limit_in_bytes (v1): the most memory the group
// may use before the kernel reclaims from it (v2: and throttles it; v1: and,
// with nothing left to reclaim, OOM-kills inside it). Rendered rounded down
// to whole pages, as the kernel keeps it.
struct MemoryLimit {
  std::optional<uint64_t> bytes;  // none: no limit ("max", -1 on v1)
  bool operator==(const MemoryLimit&) const = default;
};

// cpu.max.burst (v2), cpu.cfs_burst_us (v1), kernel 5.14+: quota a group
// may carry over from periods it did not use, on top of its quota in one
// period; the kernel refuses more than the quota.
struct CpuBurst {
  uint64_t burst_us = 0;
  bool operator==(const CpuBurst&) const = default;
};

// memory.reclaim (v2): ask the kernel to reclaim this much from the group
// now, once; an action, not a state (written each time it is asked, never
// restored). At least one page. On v1 the same ask is a limit pulse:
// memory.limit_in_bytes lowered to the group's use less this much, then put
// back at once (model/cgroup_file.h: V1MemoryPulse).
struct MemoryReclaim {
  uint64_t bytes = 0;
  bool operator==(const MemoryReclaim&) const = default;
};

// memory.max (v2 only): the hard limit above memory.high, where the kernel
// stops reclaiming and OOM-kills inside the group; v1's limit_in_bytes is
// hard already (MemoryLimit).
struct MemoryMax {
  std::optional<uint64_t> bytes;  // none: no limit ("max")
  bool operator==(const MemoryMax&) const = default;
};

// memory.oom.group (v2 only, 4.19+): an OOM kill inside the group (or
// below it) takes every process of the group at once, not one of them.
struct MemoryOomGroup {
  bool group = true;
  bool operator==(const MemoryOomGroup&) const = default;
};

// io.max (v2), blkio.throttle.{read,write}_{bps,iops}_device (v1, direct
// IO only: buffered writeback is issued by the flusher, charged to the
// root): the most one group may read and write on one device, per second.
// One device per value: a file holds a line per device, and khagent owns
// only the line of the device it limits.
struct IoLimit {
  std::string device;            // "MAJOR:MINOR"
  std::optional<uint64_t> rbps;  // none: no limit ("max")
  std::optional<uint64_t> wbps;
  std::optional<uint64_t> riops;
  std::optional<uint64_t> wiops;
  bool operator==(const IoLimit&) const = default;
};

// The knobs, in the order of KnobValue's alternatives.
enum class Knob { Quota, Weight, Idle, Cpus, Memory, Burst, Reclaim, Backstop, OomGroup, IoLimit };
using KnobValue = std::variant<CpuQuota, CpuWeight, CpuIdle, CpuList, MemoryLimit, CpuBurst, MemoryReclaim, MemoryMax,
                               MemoryOomGroup, IoLimit>;
static_assert(std::variant_size_v<KnobValue> == static_cast<size_t>(Knob::IoLimit) + 1);
inline Knob knob_of(const KnobValue& v) { return static_cast<Knob>(v.index()); }
// The v2 file name of a knob, for logs: "cpu.max", "cpu.weight", "cpu.idle",
// "cpuset.cpus", "memory.high", "cpu.max.burst", "memory.reclaim", "memory.max",
// "memory.oom.group", "io.max".
const char* knob_name(Knob k);

// One value wanted on one cgroup.
struct Setting {
  std::string cgroup;  // relative to the cgroup2 mount
  KnobValue value;
  std::optional<Lever> lever = std::nullopt;  // the lever that asks for it (none: tests, other callers)
  bool operator==(const Setting&) const = default;
};

}  // namespace khagent

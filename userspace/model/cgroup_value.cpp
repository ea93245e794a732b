#include "khagent/model/cgroup_value.h"

namespace khagent {

const char* knob_name(Knob k) {
  switch (k) {
    case Knob::Quota: return "cpu.max";
    case Knob::Weight: return "cpu.weight";
    case Knob::Idle: return "cpu.idle";
    case Knob::Cpus: return "cpuset.cpus";
    case Knob::Memory: return "memory.high";
    case Knob::Burst: return "cpu.max.burst";
  }
  return "";
}

}  // namespace khagent

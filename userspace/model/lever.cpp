#include "khagent/model/lever.h"

namespace khagent {

const char* lever_name(Lever l) {
  switch (l) {
    case Lever::Idle: return "idle";
    case Lever::Weight: return "weight";
    case Lever::Cpuset: return "cpuset";
    case Lever::Quota: return "quota";
    case Lever::Memory: return "memory";
    case Lever::Burst: return "burst";
    case Lever::Backstop: return "backstop";
    case Lever::Reclaim: return "reclaim";
    case Lever::OomGroup: return "oom_group";
    case Lever::IoLimit: return "io_limit";
  }
  return "";
}

std::optional<Lever> lever_from_name(std::string_view name) {
  for (Lever l : kAllLevers)
    if (name == lever_name(l)) return l;
  return std::nullopt;
}

bool lever_is_rung(Lever l) { return l == Lever::Cpuset || l == Lever::Quota; }

}  // namespace khagent

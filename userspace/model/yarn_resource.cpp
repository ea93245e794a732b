#include "khagent/model/yarn_resource.h"

#include <fmt/format.h>

namespace khagent {

bool yarn_resource_sane(const YarnResource& r) {
  return r.vcores >= 0 && r.vcores <= kYarnMaxVcores && r.memory_mb >= 0 && r.memory_mb <= kYarnMaxMemoryMb;
}

bool yarn_resource_within(const YarnResource& r, const YarnResource& limit) {
  return yarn_resource_sane(r) && r.vcores <= limit.vcores && r.memory_mb <= limit.memory_mb;
}

std::string yarn_resource_str(const YarnResource& r) { return fmt::format("{} vcores/{} MB", r.vcores, r.memory_mb); }

std::string yarn_nonzero_others(const std::map<std::string, int64_t>& others) {
  std::string out;
  for (const auto& [name, value] : others) {
    if (value > 0) out += (out.empty() ? "" : ", ") + name + "=" + std::to_string(value);
  }
  return out;
}

}  // namespace khagent

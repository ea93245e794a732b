// Resources of a YARN node or container (vcores and memory), as the RM and
// the NodeManager report them: read by collect, decided on by policy,
// written by actuate.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace khagent {

struct YarnResource {
  int64_t vcores = 0;
  int64_t memory_mb = 0;
  bool operator==(const YarnResource& o) const { return vcores == o.vcores && memory_mb == o.memory_mb; }
  bool operator!=(const YarnResource& o) const { return !(*this == o); }
};

// Sane bounds for the resources of one node (or one container) as the RM and
// NM report them: far above any real machine (~1000 vcores, ~100 TB), far
// enough below int64 that sums over a million containers and the products in
// yarn_target cannot overflow. Numbers outside are refused where they are
// read (collect/yarn_rest), before they are saved, and before a POST.
inline constexpr int64_t kYarnMaxVcores = 1'000'000;
inline constexpr int64_t kYarnMaxMemoryMb = 1'000'000'000;  // 1 PB

// 0 <= vcores <= kYarnMaxVcores and 0 <= memory_mb <= kYarnMaxMemoryMb.
bool yarn_resource_sane(const YarnResource& r);
// Sane, and no larger than `limit` in either dimension.
bool yarn_resource_within(const YarnResource& r, const YarnResource& limit);
// "8 vcores/16384 MB", for logs and errors.
std::string yarn_resource_str(const YarnResource& r);
// "yarn.io/gpu=4, ..." for the other resource types with a value above 0; ""
// if none.
std::string yarn_nonzero_others(const std::map<std::string, int64_t>& others);

}  // namespace khagent

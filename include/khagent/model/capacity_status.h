// The batch resources published to the node's status, and what the
// publisher (app/batch_publisher.h) did: used by policy/capacity, the
// publisher, the metrics and `khagent status`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace khagent {

// A value of the node's batch resources. memory_bytes < 0: not published
// (no memory budget); either < 0 in what a node shows: missing there.
struct BatchQuantity {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = -1;
  bool operator==(const BatchQuantity&) const = default;
};

struct CapacityStatus {
  std::string node;
  std::optional<BatchQuantity> wanted;   // what the node is to show (the last plan)
  std::optional<BatchQuantity> on_node;  // what it showed at the last read or patch
  std::string explanation;               // of `wanted`
  uint64_t patches_ok = 0;
  uint64_t patches_failed = 0;
  uint64_t reads_failed = 0;
  uint64_t reasserts = 0;      // patches because the node lost the value
  bool stale = false;          // no plan for capacity.stale_after: the node keeps the last value
  std::string last_error;      // "" once a request went through
  uint64_t last_patch_ns = 0;  // monotonic; 0 = never
};

}  // namespace khagent

// `khagent observe` output: a live table for people, JSON lines for scripts.
#pragma once

#include <cstddef>
#include <string>

#include "khagent/signals/signals.h"

namespace khagent {

struct ObserveView {
  std::string prefix;  // only cgroups whose path starts with this ("" = all)
  size_t limit = 25;   // table rows (JSON has every matching cgroup)
};

// True if `path` is `prefix` or below it (both relative to the cgroup2 mount).
bool path_matches(const std::string& path, const std::string& prefix);

// One JSON object, no trailing newline.
std::string observe_json(const Signals& s, const ObserveView& v);
// The table, ending with a newline; cgroups sorted by wait in the interval.
std::string observe_table(const Signals& s, const ObserveView& v);

}  // namespace khagent

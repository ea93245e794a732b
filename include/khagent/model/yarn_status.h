// The YARN downscaler's state and counters: a snapshot the downscaler
// (app/yarn_downscaler) fills for logs, metrics and `khagent status`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "khagent/model/yarn_resource.h"

namespace khagent {

struct YarnStatus {
  bool enabled = false;
  bool dry_run = false;
  std::string node_id;  // "" until found
  std::string rm;       // the RM base URL in use
  bool configured_known = false;
  YarnResource configured;  // the NodeManager's own resources
  bool advertised_known = false;
  YarnResource advertised;  // what the RM has for the node
  YarnResource target;      // what the budget asks for
  std::string last_action;  // yarn_action_name of the last capacity step
  size_t containers = 0;    // active on the node
  size_t victims = 0;       // over capacity, waiting for their grace
  uint64_t updates_ok = 0, updates_failed = 0, updates_dry_run = 0;
  uint64_t kills_ok = 0, kills_failed = 0, kills_dry_run = 0;
  uint64_t rm_requests = 0, rm_failures = 0, rm_failovers = 0;
  uint64_t nm_requests = 0, nm_failures = 0;
  std::string last_error;  // "" once the last round went through
};

}  // namespace khagent

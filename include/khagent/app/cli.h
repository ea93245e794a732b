// Command line of the khagent binary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "khagent/loader/runq_loader.h"
#include "khagent/util/result.h"

namespace khagent {

enum class Command { Observe, Run, Restore, ConfigCheck, Version, Top, Status, Doctor };

struct CliOptions {
  Command command = Command::Observe;
  // observe
  uint64_t interval_ns = 1000000000ULL;
  uint64_t count = 0;  // 0 = until interrupted
  std::string cgroup_prefix;
  bool json = false;
  size_t limit = 25;
  // top (also interval_ns, cgroup_prefix, config_path)
  bool online_only = false;  // start with online cgroups only
  // run, restore, config check; status and doctor take config_path and state_file
  std::string config_path;  // "" = built-in defaults
  bool dry_run = false;
  std::string state_file;  // overrides the configuration's
  std::string node_name;   // for per-node overrides ("" = $NODE_NAME, else hostname)
  std::map<std::string, std::string> node_labels;
  std::string metrics_address = "0.0.0.0";  // /metrics, /healthz, /readyz
  int metrics_port = 9464;
  bool metrics = true;
  // common
  std::string log_level = "info";
  LoaderOptions loader;
};

// Parses "250ms", "1s", "1.5s", "2m", or a plain number of seconds.
Result<uint64_t> parse_duration_ns(const std::string& text);

struct CliParse {
  std::optional<CliOptions> options;  // set when the program should go on
  int exit_code = 0;                  // otherwise exit with this
  std::string output;                 // help or error text to print
};

CliParse parse_cli(const std::vector<std::string>& args);

}  // namespace khagent

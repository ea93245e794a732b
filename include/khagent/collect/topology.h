// Reading the node's CPU topology and the kubelet's CPU manager state.
#pragma once

#include <string>

#include "khagent/util/cpuset.h"
#include "khagent/util/result.h"

namespace khagent {

// Reads /sys/devices/system/cpu (or a fixture directory with the same layout:
// `online`, cpuN/topology/{core_id,physical_package_id}) and the NUMA nodes
// from /sys/devices/system/node (nodeM/cpulist); without a node directory all
// CPUs are on node 0.
Result<Topology> read_topology(const std::string& sys_cpu_dir = "/sys/devices/system/cpu",
                               const std::string& sys_node_dir = "/sys/devices/system/node");

// The kubelet's cpu_manager_state (JSON; khagent only reads it):
// {"policyName":"static","defaultCpuSet":"0,5-7",
//  "entries":{"<pod uid>":{"<container name>":"1-4"}},"checksum":N}
struct CpuManagerState {
  std::string policy;  // "none" or "static"
  CpuSet default_set;  // the shared pool
  CpuSet exclusive;    // union of all entries: CPUs given to exclusive containers
};
// Malformed JSON and wrong shapes are EINVAL; a document over 4 MiB,
// nested deeper than 8 levels or with more than 1M values is E2BIG (found
// before it is built, util/json_bounded.h).
Result<CpuManagerState> parse_cpu_manager_state(const std::string& json_text);
// A missing file is not an error: policy "none", nothing exclusive. The file
// must be a regular one (a FIFO is EINVAL, read without blocking) of at most
// 4 MiB (EFBIG).
Result<CpuManagerState> read_cpu_manager_state(const std::string& path);

}  // namespace khagent

// `khagent status`: what a running agent sees and what it changed, as plain
// data, and its rendering as text or JSON. Pure: app/status.cpp gathers the
// report from the pinned maps, the state file and the cgroups.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace khagent {

// A state file entry with the value now in the cgroup.
struct StatusEntry {
  std::string cgroup;
  std::string file;
  std::string original;
  std::optional<std::string> current;  // nullopt: unreadable
  std::string current_error;           // why, when unreadable
};

// cpu.max of one offline target.
struct StatusTarget {
  std::string cgroup;
  std::optional<std::string> cpu_max;  // nullopt: unreadable
  std::string error;
  std::optional<double> cores;  // quota / period; nullopt for "max" or unreadable
};

// Memory of one offline target (the memory lever's limit, in the memory
// controller's hierarchy).
struct StatusMemoryTarget {
  std::string cgroup;
  std::optional<uint64_t> limit;  // memory.high (v1 memory.limit_in_bytes); none: no limit
  uint64_t working_set = 0;
  uint64_t oom_kills = 0;
  std::string error;  // unreadable: why
};

// Memory of one online pod: what the memory lever protects.
struct StatusOnlinePod {
  std::string cgroup;
  uint64_t usage = 0;             // page cache included
  uint64_t working_set = 0;       // usage less inactive page cache
  std::optional<uint64_t> limit;  // memory.max (v1 memory.limit_in_bytes); none: no limit
  // v2 memory.high, which the kubelet writes with MemoryQoS (a throttle
  // below the limit, on by default from Kubernetes 1.37); none: no such
  // file (v1), or "max".
  std::optional<uint64_t> high;
  bool psi = false;       // memory.pressure read: the two shares below are known
  double some_avg10 = 0;  // % of the last 10 s some task of the pod stalled on memory
  double full_avg10 = 0;  // % of it all of them did
  std::string own_limit;  // at its own limit (or one above it): "cgroup: use of limit"; "" not
  uint64_t oom_kills = 0;
  std::string error;  // memory unreadable: why
};

// The node's memory, the offline targets' and the online pods'.
struct StatusMemory {
  uint64_t capacity = 0;          // 0: unknown (node_error)
  uint64_t node_working_set = 0;  // usage less inactive page cache
  std::string node_error;
  std::vector<StatusMemoryTarget> targets;
  std::string pods_under;               // where online pods were looked for (memory.node_cgroup or "/")
  std::string pods_error;               // why none could be looked for there (a memory.node_cgroup that is no cgroup)
  std::vector<StatusOnlinePod> online;  // most stalled first, then the largest
  bool online_truncated = false;        // the walk for pods stopped early (too many cgroups)
  bool online_by_metadata = false;      // class rules on labels, annotations or priority classes exist
};

// One online pod as the agent's burst controller last judged it (from the
// report a running agent keeps beside its state file).
struct StatusBurstPod {
  std::string cgroup;
  double window_s = 0;  // the waits below are over this much time
  uint64_t waits = 0;
  double wait_ms = 0;
  double throttled_wait_ms = 0;  // of wait_ms, its own quota's
  uint64_t throttled_periods = 0;
  double wait_p99_ms = 0;
  std::string verdict;  // not-throttled | too-few | not-self-throttled | self-throttled
  std::string why;
  std::string burst;  // none | given | in-force | refused
  uint64_t burst_us = 0;
  uint64_t cgroups = 0;  // carrying the burst
  std::string refusal;   // refused: why
};

struct StatusBurst {
  std::string path;     // the report file
  std::string error;    // unreadable or malformed: why ("" read)
  int64_t time = 0;     // when the agent wrote it (Unix seconds)
  int64_t age_s = 0;    // how long ago, at the time status ran
  double share = 0;     // online.burst_share
  double window_s = 0;  // online.self_throttle_window
  std::vector<StatusBurstPod> pods;
};

// The capacity the agent publishes to Kubernetes (from the report it keeps
// beside its state file).
struct StatusCapacity {
  std::string path;   // the report file
  std::string error;  // unreadable or malformed: why ("" read)
  int64_t time = 0;   // when the agent wrote it (Unix seconds)
  int64_t age_s = 0;
  std::string node;
  int64_t cpu_milli = -1;          // what the node is to show; -1: nothing decided yet
  int64_t memory_bytes = -1;       // -1: not published
  int64_t on_node_cpu_milli = -1;  // what it showed at the last read or patch (-1: missing or unknown)
  int64_t on_node_memory_bytes = -1;
  std::string explanation;
  uint64_t patches_ok = 0;
  uint64_t patches_failed = 0;
  uint64_t reasserts = 0;
  bool stale = false;
  std::string last_error;
};

// A process holding the agent's maps open.
struct StatusProcess {
  int pid = 0;
  std::string comm;
};

struct StatusReport {
  std::string pin_dir;
  bool agent_found = false;              // maps pinned and used by loaded programs
  std::string agent_problem;             // why not, when !agent_found
  std::vector<std::string> pinned;       // map names found under pin_dir
  std::vector<std::string> programs;     // loaded BPF programs using the maps
  std::vector<StatusProcess> processes;  // holding the maps open (the agent)
  std::string throttle_source;           // fentry | cpu.stat ("" unknown)
  // The running agent's map layout (kh_abi_version in its BPF object's
  // rodata); 0 if it has none (older than version 2). The maps are read
  // only if it is the version this binary reads.
  uint32_t abi_version = 0;
  uint64_t cgroups_tracked = 0;
  uint64_t max_cgroups = 0;
  uint64_t protected_cgroups = 0;
  uint64_t interference_pairs = 0;
  std::map<std::string, uint64_t> counters;  // BPF-side counters, summed over CPUs
  // The state file
  std::string state_file;
  std::string state_note;   // StateStore::note()
  std::string state_error;  // load error ("" none)
  std::vector<StatusEntry> entries;
  // The offline budget
  std::vector<StatusTarget> targets;
  std::optional<StatusMemory> memory;      // none: no memory controller to read
  std::optional<StatusBurst> burst;        // none: no report file (no agent has written one)
  std::optional<StatusCapacity> capacity;  // none: no report file (capacity not published)
};

// The burst report file's text, as the agent writes it (time, share,
// window and pods of `b`), and its parser, as status reads it; `now_s` the
// current Unix time. A malformed report is an error, not an exception. One
// list of a pod's keys serves both and status --json.
std::string burst_report_text(const StatusBurst& b);
StatusBurst parse_burst_report(const std::string& path, const std::string& text, int64_t now_s);

// The capacity report file's text and its parser, as the burst report's.
std::string capacity_report_text(const StatusCapacity& c);
StatusCapacity parse_capacity_report(const std::string& path, const std::string& text, int64_t now_s);

// Names of the BPF-side counters, indexed by enum kh_counter.
const std::vector<std::string>& bpf_counter_names();

// The offline budget in cores as the targets' cpu.max say (sum of quota /
// period); nullopt when no target has a quota.
std::optional<double> status_budget_cores(const StatusReport& r);
// cpu.max text to cores: "20000 100000" -> 0.2; nullopt for "max" or junk.
std::optional<double> cpu_max_cores(const std::string& cpu_max);

std::string format_status(const StatusReport& r);
std::string status_json(const StatusReport& r);  // one JSON object, with a newline
int status_exit_code(const StatusReport& r);     // 0 agent found, 1 not

}  // namespace khagent

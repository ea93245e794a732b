// Loads, attaches and pins the runq BPF programs; owns every kernel object
// it creates (skeleton, links, pins) and releases them on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/sample.h"
#include "khagent/util/result.h"

struct runq_bpf;

namespace khagent {

struct LoaderOptions {
  std::string pin_dir = "/sys/fs/bpf/khagent";
  bool pin = true;
  bool interference = true;       // record (victim, aggressor) pairs
  uint32_t max_cgroups = 4096;    // entries of cgroup_stats / throttle_stats
  uint32_t max_pairs = 16384;     // entries of interference
  bool allow_fentry = true;       // false: always use cpu.stat for throttling
};

struct ProgStats {
  std::string name;
  uint64_t run_time_ns = 0;
  uint64_t run_cnt = 0;
};

// Checks that run before anything is loaded; the error says what is missing.
// Used by the agent to exit with code 2.
Result<void> preflight(const std::string& btf_path = "/sys/kernel/btf/vmlinux");

// True if this kernel loads an fentry program on `func` (loads and frees a
// trivial one).
bool probe_fentry(const std::string& func);

class RunqBpf {
 public:
  static Result<std::unique_ptr<RunqBpf>> open_and_load(const LoaderOptions& opts);
  ~RunqBpf();
  RunqBpf(const RunqBpf&) = delete;
  RunqBpf& operator=(const RunqBpf&) = delete;

  ThrottleSource throttle_source() const { return throttle_source_; }
  RunqMapFds map_fds() const;
  std::vector<ProgStats> prog_stats() const;
  const std::vector<std::string>& pinned() const { return pinned_; }

 private:
  RunqBpf() = default;
  Result<void> attach();
  Result<void> pin(const std::string& dir);

  runq_bpf* skel_ = nullptr;
  ThrottleSource throttle_source_ = ThrottleSource::CpuStat;
  std::vector<std::string> pinned_;
};

// Routes libbpf's messages to the agent's log (warnings and above by default,
// everything when `verbose`).
void route_libbpf_logs(bool verbose);

}  // namespace khagent

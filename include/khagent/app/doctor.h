// `khagent doctor`: is this node ready for khagent. The checks read the
// system (below a root directory that tests point at a fixture tree); their
// rendering is in export/doctor_report.h.
#pragma once

#include <string>
#include <vector>

#include "khagent/app/cli.h"
#include "khagent/config/config.h"
#include "khagent/export/doctor_report.h"

namespace khagent {

// Results of the BPF probes, gathered by probe_bpf() on the real kernel and
// made by hand in tests.
struct BpfProbe {
  bool attempted = false;     // false: not probed (e.g. not root)
  std::string skip_reason;    // why not attempted
  std::string load_error;     // tp_btf sched_* programs: "" = loaded and attached
  bool fentry = false;        // fentry on throttle_cfs_rq/unthrottle_cfs_rq
  bool ringbuf = false;       // BPF_MAP_TYPE_RINGBUF
  bool task_storage = false;  // BPF_MAP_TYPE_TASK_STORAGE
};

BpfProbe probe_bpf(const LoaderOptions& lo);

// Where the checks look. Every absolute path is read below `root` ("" on the
// node itself; a fixture directory in tests).
struct DoctorEnv {
  std::string root;
  std::string kernel_release;  // "" = uname(2)
  bool is_root = true;
  std::string bpffs_dir = "/sys/fs/bpf";
  std::string kubelet_dir = "/var/lib/kubelet";
  Config config;  // yarn hierarchy, state file, cpuset
};

std::vector<DoctorCheck> doctor_checks(const DoctorEnv& env, const BpfProbe& bpf);

int run_doctor(const CliOptions& o);

}  // namespace khagent

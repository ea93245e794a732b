// Operator tools: `khagent top` (a full-screen live view), `khagent status`
// (what a running agent sees and has changed) and `khagent doctor` (is this
// node ready for khagent). Each splits into a part that gathers facts from
// the system and a pure part that formats them, which the unit tests drive.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "khagent/app/cli.h"
#include "khagent/config/config.h"
#include "khagent/signals/signals.h"
#include "khagent/signals/workload.h"

namespace khagent {

// ---------------------------------------------------------------- top

enum class TopSort { P99, Wait, Cpu };
const char* top_sort_name(TopSort s);
TopSort next_top_sort(TopSort s);  // p99 -> wait -> cpu -> p99

// One cgroup that ran or waited in the last interval.
struct TopRow {
  std::string path;
  CgroupClass cls = CgroupClass::System;
  double cpu_pct = 0;          // of one CPU
  double wait_p50_us = 0;
  double wait_p99_us = 0;
  uint64_t wait_ns = 0;        // total run-queue wait in the interval
  uint64_t waits = 0;
  double other_share = 0;      // of wait_ns: behind other cgroups (interference)
  double throttled_share = 0;  // of wait_ns: its own CFS throttling
  std::string aggressor;       // held the CPU longest while this one waited ("" none)
  uint64_t aggressor_ns = 0;
};

struct TopClassSummary {
  double cpu_cores = 0;
  double wait_p99_us = 0;
  uint64_t waits = 0;
};

struct TopModel {
  size_t node_cpus = 0;
  std::string throttle_source;
  uint64_t interval_ns = 0;                      // 0: no interval measured yet
  std::array<TopClassSummary, 3> classes{};      // by CgroupClass
  std::vector<TopRow> rows;                      // any order; render_top sorts
  TopSort sort = TopSort::P99;
  bool online_only = false;
  std::string note;                              // shown in the footer (last warning)
};

// The model of one interval. `prefix` keeps cgroups at or below a path.
TopModel make_top_model(const Signals& sig, const NodeSignals& node, Classifier& classifier,
                        size_t node_cpus, const std::string& prefix);

// Sorted rows as displayed: online first, then by the sort column (largest
// first), then by path; only online ones when `online_only`.
std::vector<const TopRow*> top_sorted_rows(const TopModel& m);

// Line index (0-based) of the column header in render_top's output.
constexpr int kTopColumnHeaderLine = 5;

// The screen as plain text: at most `rows` lines, each ending in '\n' and at
// most `cols` columns wide (UTF-8 code points). No escape codes.
std::string render_top(const TopModel& m, int rows, int cols);

int run_top(const CliOptions& o);

// ---------------------------------------------------------------- status

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
  std::optional<double> cores;         // quota / period; nullopt for "max" or unreadable
};

// A process holding the agent's maps open.
struct StatusProcess {
  int pid = 0;
  std::string comm;
};

struct StatusReport {
  std::string pin_dir;
  bool agent_found = false;            // maps pinned and used by loaded programs
  std::string agent_problem;           // why not, when !agent_found
  std::vector<std::string> pinned;     // map names found under pin_dir
  std::vector<std::string> programs;   // loaded BPF programs using the maps
  std::vector<StatusProcess> processes;  // holding the maps open (the agent)
  std::string throttle_source;         // fentry | cpu.stat ("" unknown)
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
  std::string state_note;               // StateStore::note()
  std::string state_error;              // load error ("" none)
  std::vector<StatusEntry> entries;
  // The offline budget
  std::vector<StatusTarget> targets;
};

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

int run_status(const CliOptions& o);

// ---------------------------------------------------------------- doctor

enum class CheckLevel { Ok, Warn, Fail };

struct DoctorCheck {
  CheckLevel level = CheckLevel::Ok;
  std::string name;
  std::string detail;  // what was found (OK) or what to fix (WARN/FAIL)
};

// Results of the BPF probes, gathered by probe_bpf() on the real kernel and
// made by hand in tests.
struct BpfProbe {
  bool attempted = false;      // false: not probed (e.g. not root)
  std::string skip_reason;     // why not attempted
  std::string load_error;      // tp_btf sched_* programs: "" = loaded and attached
  bool fentry = false;         // fentry on throttle_cfs_rq/unthrottle_cfs_rq
  bool ringbuf = false;        // BPF_MAP_TYPE_RINGBUF
  bool task_storage = false;   // BPF_MAP_TYPE_TASK_STORAGE
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
  Config config;               // yarn hierarchy, state file, cpuset
};

std::vector<DoctorCheck> doctor_checks(const DoctorEnv& env, const BpfProbe& bpf);
// One line per check ("OK   name: detail", "WARN ...", "FAIL ..."), then a summary.
std::string format_doctor(const std::vector<DoctorCheck>& checks);
int doctor_exit_code(const std::vector<DoctorCheck>& checks);  // 1 if any FAIL

int run_doctor(const CliOptions& o);

}  // namespace khagent

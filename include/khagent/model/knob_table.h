// The knob table: one row per cgroup file khagent writes (per knob and
// cgroup version), with everything the rest of the code knows about that
// file: its name, where it lives, its value grammar, the order it is
// written and restored in, and how it relates to the others. The free
// functions of model/cgroup_file.h and model/cgroup_value.h are lookups in it.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "khagent/model/cgroup_file.h"
#include "khagent/model/cgroup_value.h"
#include "khagent/util/cpuset.h"
#include "khagent/util/result.h"

namespace khagent {

// Whether a file's value is a state or an action.
enum class Persistence {
  // A state: the original is saved before the first write and restored on
  // the way out; the actuator reads it first, writes only when it differs,
  // and notices when someone else changes it back.
  SaveRestore,
  // A state saved and restored as above until someone else changes it:
  // then it is theirs (cpu.max.burst on an online pod: the kubelet's
  // cgroup, khagent's burst only lent), forgotten, never written again
  // and not restored over their value.
  SaveRestoreUntilChanged,
  // An action (memory.reclaim): written every time it is asked, never read,
  // saved or restored.
  WriteOnly,
};

struct KnobRow {
  CgroupFile file;
  Knob knob;
  bool v1;                      // a v1 file (of a hybrid host), else cgroup v2
  const char* name;             // in logs and the state file: never change one
  Hierarchy hierarchy;          // where it lives
  const char* kernel_files[2];  // the files in the cgroup's directory (the second only for v1's cfs pair)
  int apply_rank;               // written in this order (lowest first) within one apply
  int restore_rank;             // restored in this order, cgroup by cgroup
  const char* controller;       // the controller it needs: "cpu", "cpuset", "memory"
  Persistence persistence;
  bool cpu_budget;  // carries the offline CPU budget (budget_written)
  // Clearing cpu.idle resets the weight to the default: on the idle rows,
  // the weight file, whose original is saved with the first idle write and
  // restored right after the idle.
  std::optional<CgroupFile> saved_with;
  // No quota without cpu.idle: on the quota rows, the idle file, which must
  // read 1 wherever khagent saved its original before a quota is written;
  // when the quota cannot be lifted on restore, that idle (and the weight
  // saved with it) is kept.
  std::optional<CgroupFile> requires_one;
  // What is wrong with a value (trimmed), "" when it is valid; node_cpus
  // empty: any CPU.
  std::string (*why_invalid)(const std::string& value, const CpuSet& node_cpus);
  // The value as the kernel prints it.
  std::string (*normalize)(const std::string& value);
  // A file with a line per device (io.max): a value is one device's line,
  // and what the file holds for it is that device's line alone
  // (model/knob_values.h: io_max_line_of), saved, compared and restored
  // as such; the other devices' lines are never touched.
  bool per_device = false;
};

// Every row, in CgroupFile order (row i is the file of value i).
std::span<const KnobRow> knob_table();
const KnobRow& knob_row(CgroupFile f);
// The file of a knob in cgroup v1 (`v1`) or v2; none when that version has
// no such file (memory.reclaim on v1).
std::optional<CgroupFile> knob_file(bool v1, Knob k);

// Checks a value before it is written (and a recorded original before it is
// restored), by the file's grammar: cpu.max "max|QUOTA [PERIOD]" with QUOTA
// >= 1000 and PERIOD in [1000, 1000000]; v1 cfs "-1|QUOTA PERIOD" likewise;
// cpu.weight 1..10000; cpu.shares 2..262144; cpu.idle 0|1; cpuset.cpus a cpu
// list ("" = inherit) within `node_cpus` (or any well-formed list when
// node_cpus is empty); memory.high "max" or bytes; v1 memory.limit_in_bytes
// "-1" or bytes (the kernel prints no limit as a large number, which is
// valid to write back); memory.reclaim bytes. One line, at most 4096 bytes.
Result<void> validate_cgroup_value(CgroupFile f, const std::string& value, const CpuSet& node_cpus);

// Values as the kernel prints them, for comparing what is there with what we
// want ("max" alone reads back as "max 100000"; cpu lists are canonicalised).
std::string normalize_cgroup_value(CgroupFile f, const std::string& value);

// What a file read as `file_text` holds for `value`: the whole text, or on
// a per_device row the line of `value`'s device.
std::string held_for(CgroupFile f, const std::string& file_text, const std::string& value);

}  // namespace khagent

// The knob table (model/knob_table.h): one row per cgroup file, and the
// lookups that answer from it.
#include "khagent/model/knob_table.h"

#include <array>

#include "khagent/model/knob_values.h"

namespace khagent {

namespace {

using P = Persistence;
using F = CgroupFile;

// Apply ranks: cpu.weight cannot be written while cpu.idle is 1 (the kernel
// says EINVAL and shows the minimum weight: 0 on 6.1, 1 since 6.12), so the
// weight goes before idle; a quota is only ever in force on an idle cgroup
// (a quota alone makes the online tail worse, see docs/controller.md), so
// idle goes before the quota. Restore ranks: the other way round, the quota
// lifted before idle, the weight after idle.
constexpr std::array kRows = {
    KnobRow{.file = F::CpuMax,
            .knob = Knob::Quota,
            .v1 = false,
            .name = "cpu.max",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"cpu.max", nullptr},
            .apply_rank = 2,
            .restore_rank = 0,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = true,
            .saved_with = std::nullopt,
            .requires_one = F::CpuIdle,
            .why_invalid = why_invalid_cpu_max,
            .normalize = normalize_quota_pair},
    KnobRow{.file = F::CpuWeight,
            .knob = Knob::Weight,
            .v1 = false,
            .name = "cpu.weight",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"cpu.weight", nullptr},
            .apply_rank = 0,
            .restore_rank = 2,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_weight,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::CpuIdle,
            .knob = Knob::Idle,
            .v1 = false,
            .name = "cpu.idle",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"cpu.idle", nullptr},
            .apply_rank = 1,
            .restore_rank = 1,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = F::CpuWeight,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_zero_one,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::CpusetCpus,
            .knob = Knob::Cpus,
            .v1 = false,
            .name = "cpuset.cpus",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"cpuset.cpus", nullptr},
            .apply_rank = 3,
            .restore_rank = 3,
            .controller = "cpuset",
            .persistence = P::SaveRestore,
            .cpu_budget = true,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_cpu_list,
            .normalize = normalize_cpu_list},
    KnobRow{.file = F::V1CpuCfs,
            .knob = Knob::Quota,
            .v1 = true,
            .name = "v1:cpu.cfs_quota_us+cpu.cfs_period_us",
            .hierarchy = Hierarchy::CpuV1,
            .kernel_files = {"cpu.cfs_quota_us", "cpu.cfs_period_us"},
            .apply_rank = 2,
            .restore_rank = 0,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = true,
            .saved_with = std::nullopt,
            .requires_one = F::V1CpuIdle,
            .why_invalid = why_invalid_v1_cfs,
            .normalize = normalize_quota_pair},
    KnobRow{.file = F::V1CpuShares,
            .knob = Knob::Weight,
            .v1 = true,
            .name = "v1:cpu.shares",
            .hierarchy = Hierarchy::CpuV1,
            .kernel_files = {"cpu.shares", nullptr},
            .apply_rank = 0,
            .restore_rank = 2,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_shares,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::V1CpuIdle,
            .knob = Knob::Idle,
            .v1 = true,
            .name = "v1:cpu.idle",
            .hierarchy = Hierarchy::CpuV1,
            .kernel_files = {"cpu.idle", nullptr},
            .apply_rank = 1,
            .restore_rank = 1,
            .controller = "cpu",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = F::V1CpuShares,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_zero_one,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::V1CpusetCpus,
            .knob = Knob::Cpus,
            .v1 = true,
            .name = "v1:cpuset.cpus",
            .hierarchy = Hierarchy::CpusetV1,
            .kernel_files = {"cpuset.cpus", nullptr},
            .apply_rank = 3,
            .restore_rank = 3,
            .controller = "cpuset",
            .persistence = P::SaveRestore,
            .cpu_budget = true,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_cpu_list,
            .normalize = normalize_cpu_list},
    KnobRow{.file = F::MemoryHigh,
            .knob = Knob::Memory,
            .v1 = false,
            .name = "memory.high",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"memory.high", nullptr},
            .apply_rank = 4,
            .restore_rank = 4,
            .controller = "memory",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_memory_high,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::V1MemoryLimit,
            .knob = Knob::Memory,
            .v1 = true,
            .name = "v1:memory.limit_in_bytes",
            .hierarchy = Hierarchy::MemoryV1,
            .kernel_files = {"memory.limit_in_bytes", nullptr},
            .apply_rank = 4,
            .restore_rank = 4,
            .controller = "memory",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_v1_memory,
            .normalize = normalize_v1_memory},
    KnobRow{.file = F::CpuMaxBurst,
            .knob = Knob::Burst,
            .v1 = false,
            .name = "cpu.max.burst",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"cpu.max.burst", nullptr},
            .apply_rank = 5,
            .restore_rank = 5,
            .controller = "cpu",
            .persistence = P::SaveRestoreUntilChanged,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_burst_us,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::V1CpuCfsBurst,
            .knob = Knob::Burst,
            .v1 = true,
            .name = "v1:cpu.cfs_burst_us",
            .hierarchy = Hierarchy::CpuV1,
            .kernel_files = {"cpu.cfs_burst_us", nullptr},
            .apply_rank = 5,
            .restore_rank = 5,
            .controller = "cpu",
            .persistence = P::SaveRestoreUntilChanged,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_burst_us,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::MemoryReclaim,
            .knob = Knob::Reclaim,
            .v1 = false,
            .name = "memory.reclaim",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"memory.reclaim", nullptr},
            .apply_rank = 6,
            .restore_rank = 6,
            .controller = "memory",
            .persistence = P::WriteOnly,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_bytes,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::V1MemoryPulse,
            .knob = Knob::Reclaim,
            .v1 = true,
            .name = "v1:memory.limit_in_bytes-pulse",
            .hierarchy = Hierarchy::MemoryV1,
            .kernel_files = {"memory.limit_in_bytes", nullptr},
            .apply_rank = 6,
            .restore_rank = 6,
            .controller = "memory",
            .persistence = P::WriteOnly,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_bytes,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::MemoryMax,
            .knob = Knob::Backstop,
            .v1 = false,
            .name = "memory.max",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"memory.max", nullptr},
            .apply_rank = 4,
            .restore_rank = 4,
            .controller = "memory",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_memory_high,
            .normalize = normalize_trimmed},
    KnobRow{.file = F::MemoryOomGroup,
            .knob = Knob::OomGroup,
            .v1 = false,
            .name = "memory.oom.group",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"memory.oom.group", nullptr},
            .apply_rank = 4,
            .restore_rank = 4,
            .controller = "memory",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_zero_one,
            .normalize = normalize_trimmed},
    // After the CPU and memory files, and restored last: nothing depends on it.
    KnobRow{.file = F::IoMax,
            .knob = Knob::IoLimit,
            .v1 = false,
            .name = "io.max",
            .hierarchy = Hierarchy::Unified,
            .kernel_files = {"io.max", nullptr},
            .apply_rank = 7,
            .restore_rank = 7,
            .controller = "io",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_io_max,
            .normalize = normalize_io_max,
            .per_device = true},
    KnobRow{.file = F::V1BlkioThrottle,
            .knob = Knob::IoLimit,
            .v1 = true,
            .name = "v1:blkio.throttle",
            .hierarchy = Hierarchy::BlkioV1,
            .kernel_files = {"blkio.throttle.read_bps_device", nullptr},
            .apply_rank = 7,
            .restore_rank = 7,
            .controller = "blkio",
            .persistence = P::SaveRestore,
            .cpu_budget = false,
            .saved_with = std::nullopt,
            .requires_one = std::nullopt,
            .why_invalid = why_invalid_io_max,
            .normalize = normalize_io_max,
            .per_device = true},
};

// One row per file, in CgroupFile order, so that a file is its row's index;
// v1 rows in the v1 hierarchies only; each knob has its v2 file.
constexpr bool rows_in_order() {
  if (kRows.size() != kAllCgroupFiles.size()) return false;
  for (size_t i = 0; i < kRows.size(); i++)
    if (kRows[i].file != kAllCgroupFiles[i] || static_cast<size_t>(kRows[i].file) != i) return false;
  return true;
}
constexpr bool versions_consistent() {
  for (const auto& r : kRows)
    if (r.v1 != (r.hierarchy != Hierarchy::Unified)) return false;
  return true;
}
constexpr bool every_knob_on_v2() {
  for (size_t k = 0; k < std::variant_size_v<KnobValue>; k++) {
    bool found = false;
    for (const auto& r : kRows) found = found || (!r.v1 && static_cast<size_t>(r.knob) == k);
    if (!found) return false;
  }
  return true;
}
static_assert(rows_in_order(), "kRows: one row per CgroupFile, in kAllCgroupFiles order");
static_assert(versions_consistent(), "kRows: v1 rows, and only they, live in a v1 hierarchy");
static_assert(every_knob_on_v2(), "kRows: every knob has a cgroup v2 file");

}  // namespace

std::span<const KnobRow> knob_table() { return kRows; }

const KnobRow& knob_row(CgroupFile f) {
  const auto i = static_cast<size_t>(f);
  return i < kRows.size() ? kRows[i] : kRows.front();  // out of range: not a CgroupFile
}

std::optional<CgroupFile> knob_file(bool v1, Knob k) {
  for (const auto& r : kRows)
    if (r.knob == k && r.v1 == v1) return r.file;
  return std::nullopt;
}

const char* cgroup_file_name(CgroupFile f) { return knob_row(f).name; }

std::optional<CgroupFile> cgroup_file_from_name(const std::string& name) {
  for (const auto& r : kRows)
    if (name == r.name) return r.file;
  return std::nullopt;
}

Hierarchy hierarchy_of(CgroupFile f) { return knob_row(f).hierarchy; }

std::vector<std::string> kernel_files(CgroupFile f) {
  std::vector<std::string> out;
  for (const char* n : knob_row(f).kernel_files)
    if (n) out.emplace_back(n);
  return out;
}

const char* knob_name(Knob k) { return cgroup_file_name(knob_file(false, k).value_or(CgroupFile::CpuMax)); }

Result<void> validate_cgroup_value(CgroupFile f, const std::string& value, const CpuSet& node_cpus) {
  const KnobRow& row = knob_row(f);
  const std::string what = std::string(row.name) + " value '" + value + "'";
  const std::string v = trim_blank(value);
  // One line: no control characters other than surrounding whitespace.
  for (char c : v)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return make_error(EINVAL, what + ": control characters are not allowed");
  if (value.size() > 4096) return make_error(EINVAL, std::string(row.name) + " value too long");
  if (std::string why = row.why_invalid(v, node_cpus); !why.empty()) return make_error(EINVAL, what + ": " + why);
  return {};
}

std::string normalize_cgroup_value(CgroupFile f, const std::string& value) { return knob_row(f).normalize(value); }

std::string held_for(CgroupFile f, const std::string& file_text, const std::string& value) {
  return knob_row(f).per_device ? io_max_line_of(file_text, io_max_device(value)) : file_text;
}

}  // namespace khagent

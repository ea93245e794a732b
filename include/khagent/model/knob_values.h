// The value grammars of the cgroup files khagent writes: for each, what a
// valid value looks like and how the kernel prints it back. Pure string
// work, used by the knob table (model/knob_table.h) rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "khagent/util/cpuset.h"

namespace khagent {

// `s` without surrounding spaces, tabs and newlines (other control
// characters stay, for the validators to refuse).
std::string trim_blank(const std::string& s);
// Splits "a b" into at most two words; false when there is none or more.
bool two_words(const std::string& v, std::string& a, std::string& b);

// Validators: a value already trimmed, and the node's CPUs (empty: any).
// Each returns what is wrong with the value, "" when it is valid.
std::string why_invalid_cpu_max(const std::string& v, const CpuSet& node_cpus);      // max|QUOTA [PERIOD]
std::string why_invalid_v1_cfs(const std::string& v, const CpuSet& node_cpus);       // -1|QUOTA PERIOD
std::string why_invalid_weight(const std::string& v, const CpuSet& node_cpus);       // 1..10000
std::string why_invalid_shares(const std::string& v, const CpuSet& node_cpus);       // 2..262144
std::string why_invalid_zero_one(const std::string& v, const CpuSet& node_cpus);     // 0|1
std::string why_invalid_cpu_list(const std::string& v, const CpuSet& node_cpus);     // a cpu list within node_cpus
std::string why_invalid_memory_high(const std::string& v, const CpuSet& node_cpus);  // max|BYTES
std::string why_invalid_v1_memory(const std::string& v, const CpuSet& node_cpus);    // -1|BYTES
std::string why_invalid_burst_us(const std::string& v, const CpuSet& node_cpus);     // US
std::string why_invalid_bytes(const std::string& v, const CpuSet& node_cpus);        // BYTES, not 0
// One device's line of io.max: "MAJ:MIN" then any of rbps= wbps= riops=
// wiops= with "max" or a number above 0, each at most once.
std::string why_invalid_io_max(const std::string& v, const CpuSet& node_cpus);

// Normalizers: a value as the kernel prints it.
std::string normalize_trimmed(const std::string& v);     // the value, trimmed
std::string normalize_quota_pair(const std::string& v);  // "QUOTA PERIOD", the period 100000 when absent
std::string normalize_cpu_list(const std::string& v);    // canonical cpu list (as given when malformed)
std::string normalize_v1_memory(const std::string& v);   // "-1" for v1's no-limit counter value
// "MAJ:MIN rbps=X wbps=X riops=X wiops=X", every key present ("max" when
// absent); the first line when given a whole file.
std::string normalize_io_max(const std::string& v);

// One device's limits in io.max's grammar; none when `line` is not valid.
struct IoMaxLine {
  std::string device;
  std::optional<uint64_t> rbps, wbps, riops, wiops;  // none: "max"
};
std::optional<IoMaxLine> parse_io_max_line(const std::string& line);
std::string format_io_max_line(const IoMaxLine& l);
// The device of a one-device value ("" when there is none).
std::string io_max_device(const std::string& value);
// The line of `device` in a whole io.max file (one line per device with a
// limit, as the kernel prints it), normalised; every key "max" when the
// device has no line.
std::string io_max_line_of(const std::string& file_text, const std::string& device);

}  // namespace khagent

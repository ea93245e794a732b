// The value grammars of the cgroup files khagent writes: for each, what a
// valid value looks like and how the kernel prints it back. Pure string
// work, used by the knob table (model/knob_table.h) rows.
#pragma once

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

// Normalizers: a value as the kernel prints it.
std::string normalize_trimmed(const std::string& v);     // the value, trimmed
std::string normalize_quota_pair(const std::string& v);  // "QUOTA PERIOD", the period 100000 when absent
std::string normalize_cpu_list(const std::string& v);    // canonical cpu list (as given when malformed)
std::string normalize_v1_memory(const std::string& v);   // "-1" for v1's no-limit counter value

}  // namespace khagent

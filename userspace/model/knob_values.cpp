// The value grammars of the cgroup files khagent writes (model/knob_values.h).
#include "khagent/model/knob_values.h"

#include <sstream>

#include "khagent/util/strings.h"

namespace khagent {

std::string trim_blank(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\n");
  return s.substr(a, b - a + 1);
}

bool two_words(const std::string& v, std::string& a, std::string& b) {
  std::istringstream in(v);
  std::string extra;
  in >> a >> b >> extra;
  return !a.empty() && extra.empty();
}

std::string why_invalid_cpu_max(const std::string& v, const CpuSet&) {
  std::string quota, period;
  if (!two_words(v, quota, period)) return "want 'max|QUOTA [PERIOD]'";
  uint64_t q = 0, p = 100000;
  if (quota != "max" && (!parse_u64(quota, q) || q < 1000)) return "quota must be 'max' or at least 1000 us";
  if (!period.empty() && (!parse_u64(period, p) || p < 1000 || p > 1000000)) return "period must be 1000..1000000 us";
  return "";
}

std::string why_invalid_v1_cfs(const std::string& v, const CpuSet&) {
  std::string quota, period;
  uint64_t q = 0, p = 0;
  if (!two_words(v, quota, period) || period.empty()) return "want '-1|QUOTA PERIOD'";
  if (quota != "-1" && (!parse_u64(quota, q) || q < 1000)) return "quota must be -1 or at least 1000 us";
  if (!parse_u64(period, p) || p < 1000 || p > 1000000) return "period must be 1000..1000000 us";
  return "";
}

std::string why_invalid_weight(const std::string& v, const CpuSet&) {
  uint64_t w = 0;
  return !parse_u64(v, w) || w < 1 || w > 10000 ? "want 1..10000" : "";
}

std::string why_invalid_shares(const std::string& v, const CpuSet&) {
  uint64_t s = 0;
  return !parse_u64(v, s) || s < 2 || s > 262144 ? "want 2..262144" : "";
}

std::string why_invalid_zero_one(const std::string& v, const CpuSet&) {
  return v != "0" && v != "1" ? "want 0 or 1" : "";
}

std::string why_invalid_cpu_list(const std::string& v, const CpuSet& node_cpus) {
  auto cpus = parse_cpu_list(v);
  if (!cpus) return cpus.error().message;
  if (node_cpus.empty()) return "";
  for (int c : *cpus)
    if (!node_cpus.count(c)) return "CPU " + std::to_string(c) + " is not online on this node";
  return "";
}

namespace {

// `none` (no limit) or a number of bytes, not 0.
std::string why_invalid_limit(const std::string& v, const char* none) {
  uint64_t b = 0;
  if (v != none && (!parse_u64(v, b) || b == 0)) return std::string("want '") + none + "' or a number of bytes";
  return "";
}

}  // namespace

std::string why_invalid_memory_high(const std::string& v, const CpuSet&) { return why_invalid_limit(v, "max"); }
std::string why_invalid_v1_memory(const std::string& v, const CpuSet&) { return why_invalid_limit(v, "-1"); }

std::string why_invalid_burst_us(const std::string& v, const CpuSet&) {
  uint64_t b = 0;
  return !parse_u64(v, b) ? "want a number of us" : "";
}

std::string why_invalid_bytes(const std::string& v, const CpuSet&) {
  uint64_t b = 0;
  return !parse_u64(v, b) || b == 0 ? "want a number of bytes" : "";
}

std::string normalize_trimmed(const std::string& v) { return trim_blank(v); }

std::string normalize_quota_pair(const std::string& v) {
  std::istringstream in(trim_blank(v));
  std::string q, p;
  in >> q >> p;
  return q + " " + (p.empty() ? "100000" : p);
}

std::string normalize_cpu_list(const std::string& v) {
  std::string t = trim_blank(v);
  auto c = parse_cpu_list(t);
  return c ? format_cpu_list(*c) : t;
}

std::string normalize_v1_memory(const std::string& v) {
  // v1 prints "no limit" as the largest page-aligned counter value.
  std::string t = trim_blank(v);
  if (uint64_t b = 0; parse_u64(t, b) && b >= (uint64_t{1} << 62)) return "-1";
  return t;
}

}  // namespace khagent

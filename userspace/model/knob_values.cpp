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

namespace {

bool is_device(const std::string& d) {
  const size_t colon = d.find(':');
  uint64_t a = 0, b = 0;
  return colon != std::string::npos && parse_u64(d.substr(0, colon), a) && parse_u64(d.substr(colon + 1), b);
}

}  // namespace

std::optional<IoMaxLine> parse_io_max_line(const std::string& line) {
  std::istringstream in(trim_blank(line));
  IoMaxLine out;
  if (!(in >> out.device) || !is_device(out.device)) return std::nullopt;
  bool seen[4] = {false, false, false, false};
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = tok.substr(0, eq), val = tok.substr(eq + 1);
    static const char* const kKeys[4] = {"rbps", "wbps", "riops", "wiops"};
    std::optional<uint64_t>* fields[4] = {&out.rbps, &out.wbps, &out.riops, &out.wiops};
    int i = 0;
    while (i < 4 && key != kKeys[i]) i++;
    if (i == 4 || seen[i]) return std::nullopt;
    seen[i] = true;
    uint64_t n = 0;
    if (val == "max") {
      *fields[i] = std::nullopt;
    } else if (parse_u64(val, n) && n > 0) {
      *fields[i] = n;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::string format_io_max_line(const IoMaxLine& l) {
  auto v = [](const std::optional<uint64_t>& x) { return x ? std::to_string(*x) : std::string("max"); };
  return l.device + " rbps=" + v(l.rbps) + " wbps=" + v(l.wbps) + " riops=" + v(l.riops) + " wiops=" + v(l.wiops);
}

std::string io_max_device(const std::string& value) {
  std::istringstream in(trim_blank(value));
  std::string d;
  in >> d;
  return is_device(d) ? d : "";
}

std::string io_max_line_of(const std::string& file_text, const std::string& device) {
  std::istringstream in(file_text);
  std::string line;
  while (std::getline(in, line))
    if (auto l = parse_io_max_line(line); l && l->device == device) return format_io_max_line(*l);
  IoMaxLine none;
  none.device = device;
  return format_io_max_line(none);
}

std::string why_invalid_io_max(const std::string& v, const CpuSet&) {
  return parse_io_max_line(v) ? "" : "want 'MAJ:MIN' then rbps= wbps= riops= wiops= each 'max' or a number above 0";
}

std::string normalize_io_max(const std::string& v) {
  const std::string t = trim_blank(v);
  auto l = parse_io_max_line(t.substr(0, t.find('\n')));
  return l ? format_io_max_line(*l) : t;
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

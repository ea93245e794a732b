#include "khagent/util/cpuset.h"

#include <charconv>
#include <map>

namespace khagent {

namespace {

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// The most CPUs the ranges of one list may name together. A list the kernel
// or the kubelet writes names each CPU once (at most 65537 here, see below);
// without a bound, "0-65536" repeated makes a few KB of text cost billions
// of set insertions. Twice that many leaves room for overlapping ranges.
constexpr long kMaxCpusNamed = 2L * ((1L << 16) + 1);

}  // namespace

Result<CpuSet> parse_cpu_list(const std::string& text) {
  CpuSet out;
  std::string_view s = trim(text);
  if (s.empty()) return out;
  long named = 0;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view item = trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    if (item.empty()) return make_error(EINVAL, "empty item in cpu list '" + text + "'");
    auto dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!parse_int(item, lo)) return make_error(EINVAL, "bad cpu '" + std::string(item) + "' in '" + text + "'");
      hi = lo;
    } else if (!parse_int(trim(item.substr(0, dash)), lo) || !parse_int(trim(item.substr(dash + 1)), hi)) {
      return make_error(EINVAL, "bad cpu range '" + std::string(item) + "' in '" + text + "'");
    }
    if (hi < lo) return make_error(EINVAL, "reversed cpu range '" + std::string(item) + "' in '" + text + "'");
    if (hi > 1 << 16) return make_error(ERANGE, "cpu number too large in '" + text + "'");
    named += hi - lo + 1;
    if (named > kMaxCpusNamed) {
      return make_error(ERANGE, "cpu list names more than " + std::to_string(kMaxCpusNamed) + " CPUs");
    }
    for (int c = lo; c <= hi; c++) out.insert(c);
  }
  return out;
}

std::string format_cpu_list(const CpuSet& cpus) {
  std::string out;
  auto it = cpus.begin();
  while (it != cpus.end()) {
    int lo = *it, hi = *it;
    ++it;
    while (it != cpus.end() && *it == hi + 1) hi = *it++;
    if (!out.empty()) out += ',';
    out += std::to_string(lo);
    if (hi > lo) out += '-' + std::to_string(hi);
  }
  return out;
}

int Topology::threads_per_core() const {
  std::map<int, int> per_core;
  int best = cpus.empty() ? 1 : 0;
  for (const auto& c : cpus) best = std::max(best, ++per_core[c.core]);
  return best;
}

CpuSet Topology::all() const {
  CpuSet s;
  for (const auto& c : cpus) s.insert(c.id);
  return s;
}

}  // namespace khagent

#include "khagent/collect/memory.h"

#include <cerrno>
#include <charconv>

#include "khagent/util/file.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

// The first line whose first word is `key`, without it.
std::optional<std::string_view> line_after(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == '\t'))
      return trimmed(line.substr(key.size() + 1));
  }
  return std::nullopt;
}

Result<uint64_t> number_file(const std::string& path) {
  auto t = read_file(path);
  if (!t) return t.error();
  uint64_t v = 0;
  if (!parse_u64(trimmed(*t), v))
    return make_error(EINVAL, path + ": not a number: '" + std::string(trimmed(*t)) + "'");
  return v;
}

}  // namespace

std::optional<uint64_t> stat_value(std::string_view text, std::string_view key) {
  auto rest = line_after(text, key);
  uint64_t v = 0;
  if (!rest) return std::nullopt;
  while (!rest->empty() && (rest->front() == ' ' || rest->front() == '\t')) rest->remove_prefix(1);
  if (!parse_u64(*rest, v)) return std::nullopt;
  return v;
}

Result<MemoryUse> parse_meminfo(std::string_view text) {
  // "MemTotal:       24555520 kB"
  auto kb = [&](std::string_view key) -> std::optional<uint64_t> {
    auto rest = line_after(text, key);
    if (!rest) return std::nullopt;
    std::string_view r = *rest;
    while (!r.empty() && r.front() == ' ') r.remove_prefix(1);
    if (r.size() > 3 && r.substr(r.size() - 3) == " kB") r.remove_suffix(3);
    uint64_t v = 0;
    if (!parse_u64(r, v)) return std::nullopt;
    return v << 10;
  };
  auto total = kb("MemTotal:");
  if (!total) return make_error(EINVAL, "meminfo without MemTotal");
  MemoryUse u;
  u.limit = total;
  // The kubelet's node working set: all but free memory and inactive page
  // cache, counted as a cgroup's (usage - inactive_file) is.
  auto free = kb("MemFree:");
  auto inactive_file = kb("Inactive(file):");
  if (free && inactive_file) {
    u.usage = *total > *free ? *total - *free : 0;
    u.inactive_file = *inactive_file;
    return u;
  }
  auto avail = kb("MemAvailable:");
  if (!avail) return make_error(EINVAL, "meminfo without MemFree and Inactive(file), or MemAvailable");
  u.usage = *total > *avail ? *total - *avail : 0;
  return u;
}

Result<PsiTotals> parse_psi(std::string_view text) {
  PsiTotals p;
  bool some = false;
  for (auto [key, dst] :
       {std::pair{std::string_view("some"), &p.some_us}, std::pair{std::string_view("full"), &p.full_us}}) {
    auto rest = line_after(text, key);
    if (!rest) continue;
    size_t at = rest->find("total=");
    if (at == std::string_view::npos || !parse_u64(rest->substr(at + 6), *dst))
      return make_error(EINVAL, "PSI line without a total: '" + std::string(*rest) + "'");
    if (key == "some") some = true;
  }
  if (!some) return make_error(EINVAL, "PSI text without a 'some' line");
  return p;
}

Result<PsiTotals> read_psi(const std::string& path) {
  auto t = read_file(path);
  if (!t) return t.error();
  auto p = parse_psi(*t);
  if (!p) return make_error(p.error().err, path + ": " + p.error().message);
  return p;
}

MemoryReader::MemoryReader(std::string root, bool v1, std::string proc_root)
    : root_(std::move(root)), v1_(v1), proc_root_(std::move(proc_root)) {}

Result<MemoryUse> MemoryReader::cgroup(const std::string& path) const {
  const std::string dir = root_ + (path == "/" ? "" : path) + "/";
  MemoryUse u;
  auto usage = number_file(dir + (v1_ ? "memory.usage_in_bytes" : "memory.current"));
  if (!usage) return usage.error();
  u.usage = *usage;
  auto stat = read_file(dir + "memory.stat");
  if (!stat) return stat.error();
  u.inactive_file = stat_value(*stat, v1_ ? "total_inactive_file" : "inactive_file").value_or(0);
  auto lim = read_file(dir + (v1_ ? "memory.limit_in_bytes" : "memory.max"));
  if (!lim) return lim.error();
  uint64_t l = 0;
  if (parse_u64(trimmed(*lim), l) && l < (uint64_t{1} << 62)) u.limit = l;
  return u;
}

Result<MemoryUse> MemoryReader::node(const std::string& node_cgroup) const {
  auto text = read_file(proc_root_ + "/meminfo");
  if (!text) return text.error();
  auto whole = parse_meminfo(*text);
  if (!whole || node_cgroup.empty()) return whole;
  auto u = cgroup(node_cgroup);
  if (!u) return u.error();
  MemoryUse out;
  out.usage = u->working_set();
  const uint64_t total = whole->limit.value_or(0);  // parse_meminfo always sets it
  const std::optional<uint64_t> own = u->limit;
  out.limit = own ? std::min(*own, total) : total;
  return out;
}

}  // namespace khagent

#include "khagent/collect/cpustat.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "khagent/util/file.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace fs = std::filesystem;

namespace {

// A task-less cgroup is mapped to v1 through at most this many descendants.
constexpr size_t kMaxDescendantsTried = 64;

// Small kernel files: one open and read(2), no streams (this runs for every
// active cgroup every tick).
std::optional<std::string> slurp(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  return std::move(text.value());
}

std::string join(const std::string& root, const std::string& rel) {
  if (rel.empty() || rel == "/") return root;
  if (rel.front() == '/') return root + rel;
  return root + "/" + rel;
}

// A v2 cgroup's v1 cpu cgroup changes only when its tasks are moved in v1
// alone; finding it costs two file reads. With thousands of cgroups, a
// shorter life was most of the agent's tick on hybrid hosts.
constexpr auto kV1MappingTtl = std::chrono::seconds(60);

}  // namespace

std::unordered_map<std::string, uint64_t> parse_flat_keyed(const std::string& text) {
  std::unordered_map<std::string, uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos || sp == 0) continue;
    std::string_view v(line);
    v.remove_prefix(sp + 1);
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size()) continue;
    out[line.substr(0, sp)] = n;
  }
  return out;
}

std::optional<std::string> v1_cpu_path(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto c1 = line.find(':');
    if (c1 == std::string::npos) continue;
    auto c2 = line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string ctrls = line.substr(c1 + 1, c2 - c1 - 1);
    std::istringstream cs(ctrls);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "cpu") return line.substr(c2 + 1);
    }
  }
  return std::nullopt;
}

std::optional<CpuQuota> parse_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string q, p, extra;
  uint64_t quota = 0, period = 0;
  if (!(in >> q >> p) || (in >> extra) || !parse_u64(p, period) || period == 0) return std::nullopt;
  if (q == "max") return CpuQuota{std::nullopt, period};
  if (!parse_u64(q, quota)) return std::nullopt;
  return CpuQuota{quota, period};
}

std::optional<CpuQuota> parse_v1_cfs(const std::string& quota_text, const std::string& period_text) {
  const std::string q = trim_space(quota_text), p = trim_space(period_text);
  uint64_t quota = 0, period = 0;
  if (!parse_u64(p, period) || period == 0) return std::nullopt;
  if (q == "-1") return CpuQuota{std::nullopt, period};
  if (!parse_u64(q, quota)) return std::nullopt;
  return CpuQuota{quota, period};
}

std::optional<CpuQuota> read_cpu_quota(const std::string& cgroup2_root, const std::string& cpu_v1_root,
                                       const std::string& path) {
  if (std::string t = read_text_file(cgroup2_root + path + "/cpu.max"); !t.empty()) return parse_cpu_max(t);
  if (cpu_v1_root.empty()) return std::nullopt;
  const std::string dir = cpu_v1_root + path;
  return parse_v1_cfs(read_text_file(dir + "/cpu.cfs_quota_us"), read_text_file(dir + "/cpu.cfs_period_us"));
}

std::optional<uint64_t> read_cpu_burst(const std::string& cgroup2_root, const std::string& cpu_v1_root,
                                       const std::string& path) {
  const bool v2 = !read_text_file(cgroup2_root + path + "/cpu.max").empty();
  if (!v2 && cpu_v1_root.empty()) return std::nullopt;
  const std::string t = trim_space(
      read_text_file(v2 ? cgroup2_root + path + "/cpu.max.burst" : cpu_v1_root + path + "/cpu.cfs_burst_us"));
  uint64_t v = 0;
  if (!parse_u64(t, v)) return std::nullopt;
  return v;
}

CpuStatThrottleReader::CpuStatThrottleReader(std::string cgroup2_root, std::string cpu_v1_root, std::string proc_root)
    : v2_root_(std::move(cgroup2_root)), v1_root_(std::move(cpu_v1_root)), proc_root_(std::move(proc_root)) {}

std::optional<std::string> CpuStatThrottleReader::v1_path_of_tasks(const std::string& path) const {
  auto procs = slurp(join(v2_root_, path) + "/cgroup.procs");
  if (!procs) return std::nullopt;
  std::istringstream in(*procs);
  std::string pid;
  while (std::getline(in, pid)) {
    if (pid.empty()) continue;
    auto cg = slurp(proc_root_ + "/" + pid + "/cgroup");
    if (!cg) continue;  // exited meanwhile: try the next one
    if (auto v1 = v1_cpu_path(*cg)) return v1;
  }
  return std::nullopt;
}

std::optional<std::string> CpuStatThrottleReader::v1_path_of(const std::string& path) const {
  if (auto v1 = v1_path_of_tasks(path)) return v1;
  // No task of its own (a pod, a QoS or YARN root): through the first
  // descendant that has one, where the two hierarchies have the same shape
  // below it (as the kubelet and the NodeManager make them).
  const std::string base = join(v2_root_, path);
  std::error_code ec;
  fs::recursive_directory_iterator it(base, fs::directory_options::skip_permission_denied, ec);
  size_t visited = 0;
  for (auto end = fs::recursive_directory_iterator(); !ec && it != end && visited < kMaxDescendantsTried;
       it.increment(ec)) {
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    visited++;
    const std::string& full = it->path().native();
    const std::string below = full.substr(base.size());  // "/c" or "/c/d"
    auto v1 = v1_path_of_tasks(path == "/" ? below : path + below);
    if (!v1) continue;
    if (v1->size() <= below.size() || v1->compare(v1->size() - below.size(), below.size(), below) != 0)
      return std::nullopt;  // shaped differently: no way to tell
    std::string up = v1->substr(0, v1->size() - below.size());
    return up.empty() ? "/" : up;
  }
  return std::nullopt;
}

CpuStatThrottleReader::V1File* CpuStatThrottleReader::v1_stat_file(uint64_t id, const std::string& path) {
  auto now = std::chrono::steady_clock::now();
  auto it = v1_cache_.find(id);
  if (it != v1_cache_.end() && now - it->second.when < kV1MappingTtl) return it->second.file.get();
  std::string file;
  if (auto v1 = v1_path_of(path)) file = join(v1_root_, *v1) + "/cpu.stat";
  std::shared_ptr<V1File> shared;
  if (!file.empty()) {
    auto& weak = v1_files_[file];
    shared = weak.lock();
    if (!shared) {
      shared = std::make_shared<V1File>();
      shared->path = file;
      weak = shared;
    }
  }
  // Files no cgroup maps to any more.
  if (v1_files_.size() > 2 * v1_cache_.size() + 64)
    std::erase_if(v1_files_, [](const auto& f) { return f.second.expired(); });
  V1Entry& e = v1_cache_[id];
  e = V1Entry{std::move(shared), now};
  return e.file.get();
}

void CpuStatThrottleReader::new_round() {
  if (++round_ % 256 != 0) return;
  auto now = std::chrono::steady_clock::now();
  std::erase_if(v1_cache_, [&](const auto& e) { return now - e.second.when >= 2 * kV1MappingTtl; });
}

std::optional<ThrottleCounters> CpuStatThrottleReader::read(uint64_t id, const std::string& path) {
  if (v2_has_cpu_ < 0) {
    // Hybrid hosts have no cpu controller on v2: then no v2 cpu.stat has
    // throttling keys, and reading them would be wasted work.
    v2_has_cpu_ = 0;
    if (auto ctrls = slurp(v2_root_ + "/cgroup.controllers")) {
      std::istringstream in(*ctrls);
      std::string c;
      while (in >> c)
        if (c == "cpu") v2_has_cpu_ = 1;
    }
  }
  if (v2_has_cpu_ || v1_root_.empty()) {
    if (auto text = slurp(join(v2_root_, path) + "/cpu.stat")) {
      auto kv = parse_flat_keyed(*text);
      auto n = kv.find("nr_throttled");
      auto t = kv.find("throttled_usec");
      if (n != kv.end() && t != kv.end()) return ThrottleCounters{n->second, t->second * 1000};
    }
  }
  if (v1_root_.empty()) return std::nullopt;
  V1File* file = v1_stat_file(id, path);  // owned by v1_cache_
  if (!file) return std::nullopt;
  if (file->round == round_) return file->value;
  std::optional<ThrottleCounters> out;
  auto text = slurp(file->path);
  if (text) {
    auto kv = parse_flat_keyed(*text);
    auto n = kv.find("nr_throttled");
    auto t = kv.find("throttled_time");
    if (n != kv.end() && t != kv.end()) out = ThrottleCounters{n->second, t->second};
  }
  file->round = round_;
  file->value = out;
  if (!text) v1_cache_.erase(id);  // gone: map it again next time (file may be freed by this)
  return out;
}

}  // namespace khagent

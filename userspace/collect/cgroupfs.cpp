#include "khagent/collect/cgroupfs.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace khagent {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t j = 1; j <= 3; j++) {
        char c = s[i + j];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

Mounts parse_mountinfo(const std::string& text) {
  Mounts m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mountpoint options [optional...] - fstype source superopts
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = split(line.substr(0, dash), ' ');
    auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    const std::string mountpoint = unescape(left[4]);
    const std::string& fstype = right[0];
    if (fstype == "cgroup2" && m.cgroup2.empty()) {
      m.cgroup2 = mountpoint;
    } else if (fstype == "cgroup" && m.cpu_v1.empty()) {
      for (const auto& opt : split(right[2], ',')) {
        if (opt == "cpu") {
          m.cpu_v1 = mountpoint;
          break;
        }
      }
    }
  }
  return m;
}

Result<Mounts> find_mounts(const std::string& mountinfo_path) {
  std::ifstream f(mountinfo_path);
  if (!f) return make_error(errno, "cannot read " + mountinfo_path);
  std::stringstream ss;
  ss << f.rdbuf();
  Mounts m = parse_mountinfo(ss.str());
  if (m.cgroup2.empty())
    return make_error(ENOENT, "no cgroup2 file system is mounted (see " + mountinfo_path + ")");
  return m;
}

Result<size_t> CgroupIndex::rescan() {
  std::unordered_map<uint64_t, std::string> found;
  struct stat st {};
  if (::stat(root_.c_str(), &st) != 0) return make_error(errno, "cannot stat " + root_);
  found[st.st_ino] = "/";

  std::error_code ec;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
  if (ec) return make_error(ec.value(), "cannot walk " + root_);
  for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) {
      // A cgroup removed while walking: skip it and go on.
      ec.clear();
      continue;
    }
    if (it->is_symlink(ec)) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_directory(ec)) continue;
    const std::string& full = it->path().native();
    if (::lstat(full.c_str(), &st) != 0) continue;
    // The iterator's paths start with root_: cut it off (no syscalls, unlike
    // fs::relative, which matters with thousands of cgroups).
    if (full.size() <= root_.size() || full.compare(0, root_.size(), root_) != 0) continue;
    std::string rel = full.substr(root_.size());
    if (rel.front() != '/') rel.insert(rel.begin(), '/');
    found[st.st_ino] = std::move(rel);
  }
  paths_ = std::move(found);
  return paths_.size();
}

std::optional<std::string> CgroupIndex::path_of(uint64_t id) const {
  auto it = paths_.find(id);
  if (it == paths_.end()) return std::nullopt;
  return it->second;
}

}  // namespace khagent

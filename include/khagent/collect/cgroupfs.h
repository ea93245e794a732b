// Finding the cgroup2 mount and resolving cgroup ids (directory inode numbers
// on cgroup v2) to paths relative to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "khagent/util/result.h"

namespace khagent {

struct Mounts {
  std::string cgroup2;  // cgroup2 mount point ("" if none)
  std::string cpu_v1;   // v1 hierarchy holding the cpu controller ("" if none)
};

// Parses /proc/self/mountinfo-formatted text.
Mounts parse_mountinfo(const std::string& text);
Result<Mounts> find_mounts(const std::string& mountinfo_path = "/proc/self/mountinfo");

// Maps cgroup ids to paths by walking the tree under a root directory.
class CgroupIndex {
 public:
  explicit CgroupIndex(std::string root) : root_(std::move(root)) {}

  // Walks the tree again; returns the number of cgroups found.
  Result<size_t> rescan();
  // Path relative to the root ("/" for the root itself).
  std::optional<std::string> path_of(uint64_t id) const;
  const std::string& root() const { return root_; }
  size_t size() const { return paths_.size(); }

 private:
  std::string root_;
  std::unordered_map<uint64_t, std::string> paths_;
};

}  // namespace khagent

// Finding the cgroup2 mount and resolving cgroup ids (directory inode numbers
// on cgroup v2) to paths relative to it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "khagent/util/result.h"

namespace khagent {

struct Mounts {
  std::string cgroup2;    // cgroup2 mount point ("" if none)
  std::string cpu_v1;     // v1 hierarchy holding the cpu controller ("" if none)
  std::string cpuset_v1;  // v1 hierarchy holding the cpuset controller ("" if none)
  std::string memory_v1;  // v1 hierarchy holding the memory controller ("" if none)
  std::string blkio_v1;   // v1 hierarchy holding the blkio controller ("" if none)
};

// One line of /proc/self/mountinfo.
struct MountEntry {
  std::string mountpoint;  // unescaped
  std::string fstype;
  std::vector<std::string> super_options;
};
// Every mount in /proc/self/mountinfo-formatted text, in order.
std::vector<MountEntry> parse_mount_entries(const std::string& text);
// The cgroup mounts khagent uses, from the same text.
Mounts parse_mountinfo(const std::string& text);
Result<Mounts> find_mounts(const std::string& mountinfo_path = "/proc/self/mountinfo");

// Cgroups under `root` + `start` (paths relative to `root`, starting with
// '/'), `max_depth` levels down at most, for which `take` says yes; a taken
// cgroup is not walked into. Symlinks are not followed, cgroups removed
// while walking (and unreadable ones) are skipped, and the walk ends after
// `max_dirs` directories (`truncated` then says so). Sorted.
struct FoundCgroups {
  std::vector<std::string> paths;
  bool truncated = false;
};
FoundCgroups find_cgroups(const std::string& root, const std::string& start, int max_depth,
                          const std::function<bool(const std::string& rel)>& take, size_t max_dirs = 100000);

// Maps cgroup ids to paths by walking the tree under a root directory.
class CgroupIndex {
 public:
  explicit CgroupIndex(std::string root) : root_(std::move(root)) {}
  ~CgroupIndex();
  CgroupIndex(const CgroupIndex&) = delete;
  CgroupIndex& operator=(const CgroupIndex&) = delete;

  // Walks the tree again; returns the number of cgroups found.
  Result<size_t> rescan();
  // Path relative to the root ("/" for the root itself).
  std::optional<std::string> path_of(uint64_t id) const;
  const std::string& root() const { return root_; }
  size_t size() const { return paths_.size(); }

  // Lookups by id without a walk, on a cgroup2 mount: the cgroup id is the
  // kernfs file handle, so open_by_handle_at(2) opens the cgroup directly
  // (root, CAP_DAC_READ_SEARCH). Probed once; false on other file systems
  // (test fixtures) or where the kernel refuses, and then only walks work.
  bool handles();
  // Opens the cgroup by its id and records its path; nullopt if it cannot.
  std::optional<std::string> resolve(uint64_t id);
  enum class Liveness { Alive, Gone, Unknown };
  // Whether the cgroup still exists (Gone: the handle is stale).
  Liveness alive(uint64_t id);
  // The id of the cgroup at `path` (relative to the root), recorded for
  // path_of; nullopt if it cannot be stat'ed. On cgroup2 the inode number
  // is the cgroup id.
  std::optional<uint64_t> id_of(const std::string& path);

 private:
  int open_id(uint64_t id, int& err);
  std::string root_;
  std::unordered_map<uint64_t, std::string> paths_;
  int mount_fd_ = -1;
  int handles_ = -1;  // -1 unknown, 0 no, 1 yes
};

}  // namespace khagent

#include "khagent/collect/cgroupfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

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

std::vector<MountEntry> parse_mount_entries(const std::string& text) {
  std::vector<MountEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // id parent maj:min root mountpoint options [optional...] - fstype source superopts
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = split(line.substr(0, dash), ' ');
    auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    out.push_back(MountEntry{unescape(left[4]), right[0], split(right[2], ',')});
  }
  return out;
}

Mounts parse_mountinfo(const std::string& text) {
  Mounts m;
  for (const auto& e : parse_mount_entries(text)) {
    if (e.fstype == "cgroup2" && m.cgroup2.empty()) {
      m.cgroup2 = e.mountpoint;
    } else if (e.fstype == "cgroup") {
      for (const auto& opt : e.super_options) {
        if (opt == "cpu" && m.cpu_v1.empty()) m.cpu_v1 = e.mountpoint;
        if (opt == "cpuset" && m.cpuset_v1.empty()) m.cpuset_v1 = e.mountpoint;
        if (opt == "memory" && m.memory_v1.empty()) m.memory_v1 = e.mountpoint;
        if (opt == "blkio" && m.blkio_v1.empty()) m.blkio_v1 = e.mountpoint;
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
  if (m.cgroup2.empty()) return make_error(ENOENT, "no cgroup2 file system is mounted (see " + mountinfo_path + ")");
  return m;
}

CgroupIndex::~CgroupIndex() {
  if (mount_fd_ >= 0) ::close(mount_fd_);
}

namespace {
constexpr int kFileIdKernfs = 0xfe;  // FILEID_KERNFS: an 8-byte kernfs node id
}  // namespace

int CgroupIndex::open_id(uint64_t id, int& err) {
  if (mount_fd_ < 0) {
    mount_fd_ = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mount_fd_ < 0) {
      err = errno;
      return -1;
    }
  }
  union {
    struct file_handle fh;
    char buf[sizeof(struct file_handle) + sizeof(uint64_t)];
  } h{};
  h.fh.handle_bytes = sizeof(uint64_t);
  h.fh.handle_type = kFileIdKernfs;
  std::memcpy(h.fh.f_handle, &id, sizeof id);
  int fd = ::open_by_handle_at(mount_fd_, &h.fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  err = fd < 0 ? errno : 0;
  return fd;
}

bool CgroupIndex::handles() {
  if (handles_ < 0) {
    struct stat st{};
    handles_ = 0;
    if (::stat(root_.c_str(), &st) == 0) {
      int err = 0;
      int fd = open_id(st.st_ino, err);
      if (fd >= 0) {
        struct stat st2{};
        handles_ = ::fstat(fd, &st2) == 0 && st2.st_ino == st.st_ino ? 1 : 0;
        ::close(fd);
      }
    }
  }
  return handles_ == 1;
}

std::optional<std::string> CgroupIndex::resolve(uint64_t id) {
  if (!handles()) return std::nullopt;
  int err = 0;
  int fd = open_id(id, err);
  if (fd < 0) return std::nullopt;
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[4096];
  ssize_t n = ::readlink(link, target, sizeof target - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  std::string full(target, static_cast<size_t>(n));
  if (full.compare(0, root_.size(), root_) != 0 || (full.size() > root_.size() && full[root_.size()] != '/'))
    return std::nullopt;  // not under this mount as this process sees it
  std::string rel = full.substr(root_.size());
  if (rel.empty()) rel = "/";
  paths_[id] = rel;
  return rel;
}

CgroupIndex::Liveness CgroupIndex::alive(uint64_t id) {
  if (!handles()) return Liveness::Unknown;
  int err = 0;
  int fd = open_id(id, err);
  if (fd >= 0) {
    ::close(fd);
    return Liveness::Alive;
  }
  return err == ESTALE || err == ENOENT ? Liveness::Gone : Liveness::Unknown;
}

std::optional<uint64_t> CgroupIndex::id_of(const std::string& path) {
  struct stat st{};
  if (path.empty() || path.front() != '/' || ::stat((path == "/" ? root_ : root_ + path).c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode))
    return std::nullopt;
  paths_[st.st_ino] = path;
  return st.st_ino;
}

FoundCgroups find_cgroups(const std::string& root, const std::string& start, int max_depth,
                          const std::function<bool(const std::string& rel)>& take, size_t max_dirs) {
  FoundCgroups out;
  std::string top = root;
  while (top.size() > 1 && top.back() == '/') top.pop_back();
  // Directories to read, with their depth below `start` (its children are
  // at 0). One opendir each: a cgroup removed meanwhile fails its own open
  // and is skipped, the walk goes on.
  std::vector<std::pair<std::string, int>> todo{{start == "/" ? std::string() : start, 0}};
  size_t seen = 0;
  while (!todo.empty() && !out.truncated) {
    auto [dir, depth] = std::move(todo.back());
    todo.pop_back();
    DIR* d = ::opendir((top + (dir.empty() ? "/" : dir)).c_str());
    if (!d) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string rel = dir + "/" + name;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {  // symlinks are not followed
        struct stat st{};
        is_dir = ::lstat((top + rel).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      }
      if (!is_dir) continue;
      if (++seen > max_dirs) {
        out.truncated = true;
        break;
      }
      if (take(rel)) out.paths.push_back(std::move(rel));
      else if (depth + 1 < max_depth) todo.emplace_back(std::move(rel), depth + 1);
    }
    ::closedir(d);
  }
  std::sort(out.paths.begin(), out.paths.end());
  return out;
}

Result<size_t> CgroupIndex::rescan() {
  std::unordered_map<uint64_t, std::string> found;
  struct stat st{};
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

#include "khagent/util/cgroup_path.h"

#include <dirent.h>

#include <algorithm>
#include <filesystem>

namespace khagent {

namespace fs = std::filesystem;

bool is_clean_cgroup_path(const std::string& rel) {
  if (rel == "/") return true;
  if (rel.empty() || rel.front() != '/' || rel.back() == '/' || rel.size() > 4096) return false;
  size_t start = 1;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) return false;
    for (char c : part)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    start = end + 1;
  }
  return true;
}

Result<std::string> confine_cgroup_path(const std::string& mount, const std::string& configured) {
  if (configured.empty()) return make_error(EINVAL, "empty cgroup path");
  fs::path m = fs::path(mount).lexically_normal();
  fs::path p(configured);
  std::string rel;
  for (const auto& part : p)
    if (part == "..") return make_error(EINVAL, "cgroup path '" + configured + "' contains '..'");
  std::string ms = m.string();
  while (ms.size() > 1 && ms.back() == '/') ms.pop_back();
  if (configured.rfind(ms + "/", 0) == 0 || configured == ms) {
    rel = configured.substr(ms.size());
  } else if (configured.front() == '/' && (configured.rfind("/sys/", 0) == 0 || configured.rfind("/proc/", 0) == 0 ||
                                           configured.rfind("/dev/", 0) == 0)) {
    return make_error(EINVAL, "cgroup path '" + configured + "' is outside the cgroup2 mount " + ms);
  } else {
    rel = configured;
  }
  // Drop "." components and repeated slashes: "/./a//b/" is "/a/b".
  std::string clean;
  for (const auto& part : fs::path(rel)) {
    std::string s = part.string();
    if (s.empty() || s == "/" || s == ".") continue;
    clean += "/" + s;
  }
  if (clean.empty())
    return make_error(EINVAL, "cgroup path '" + configured + "' is the root cgroup, which khagent never writes");
  if (!is_clean_cgroup_path(clean))
    return make_error(EINVAL, "cgroup path '" + configured + "' has an empty, over-long or non-printable component");
  rel = clean;
  // Symlinks: the real location must stay inside the mount.
  std::error_code ec;
  fs::path full = fs::path(ms + rel);
  if (fs::exists(full, ec)) {
    fs::path real = fs::canonical(full, ec);
    fs::path real_mount = fs::canonical(ms, ec);
    if (ec) return make_error(ec.value(), "cannot resolve " + full.string());
    auto r = real.lexically_relative(real_mount);
    if (r.empty() || *r.begin() == "..")
      return make_error(EINVAL, "cgroup path '" + configured + "' resolves to " + real.string() +
                                    ", outside the cgroup2 mount " + ms);
  }
  return rel;
}

std::vector<std::string> child_cgroups(const std::string& root, const std::string& cgroup) {
  std::vector<std::string> out;
  const std::string base = cgroup == "/" ? "" : cgroup;
  DIR* d = ::opendir((root + (base.empty() ? "/" : base)).c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    std::string p = base + "/" + e->d_name;
    if (is_clean_cgroup_path(p)) out.push_back(std::move(p));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace khagent

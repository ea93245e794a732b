// Cgroup paths as khagent keeps them, relative to a hierarchy's mount, and
// the directory walk that lists a cgroup's children.
#pragma once

#include <string>
#include <vector>

#include "khagent/util/result.h"

namespace khagent {

// A cgroup path as khagent keeps it: "/" or "/a/b", every component a plain
// name (no "", ".", "..", no control characters, at most 255 bytes each).
bool is_clean_cgroup_path(const std::string& rel);

// Turns a configured cgroup path into one relative to the cgroup2 mount
// ("/a/b"). Accepted: "/a/b" or "a/b" (relative to the mount) and an absolute
// path inside the mount. Rejected with a clear error: ".." components, the
// root cgroup itself, an absolute path elsewhere, and (when the cgroup
// exists) a path whose real location, after symlinks, is outside the mount.
Result<std::string> confine_cgroup_path(const std::string& mount, const std::string& configured);

// The child cgroups of `cgroup` (one level) in the hierarchy mounted at
// `root`, as cgroup paths, sorted; none when it has none or cannot be read.
std::vector<std::string> child_cgroups(const std::string& root, const std::string& cgroup);

}  // namespace khagent

// The original values of every cgroup file khagent changed, kept in a
// checksummed state file so they survive a crash (in the spirit of the
// kubelet's cpu_manager_state). Saved atomically (temporary file, fsync,
// rename); the previous generation is kept as <file>.prev.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/util/result.h"

namespace khagent {

struct OriginalValue {
  std::string cgroup;  // relative to the cgroup2 mount
  CgroupFile file = CgroupFile::CpuMax;
  std::string value;  // as read before khagent's first write
};

struct ParsedState {
  std::vector<OriginalValue> entries;
  std::vector<std::string> refused;  // entries that break the rules, and why
};

class StateStore {
 public:
  explicit StateStore(std::string path) : path_(std::move(path)) {}

  // Reads the file. A missing file is an empty state. A file that does not
  // parse or whose checksum does not match is an error (EBADMSG) that says
  // so; `load` then falls back to <file>.prev if that one is intact, and
  // reports which it used in `note()`.
  Result<void> load();
  Result<void> save() const;

  bool has(const std::string& cgroup, CgroupFile f) const;
  // The original recorded for a file (none: none is).
  std::optional<std::string> original(const std::string& cgroup, CgroupFile f) const;
  // Records `value` unless an original is already recorded (never overwrites).
  void record(const std::string& cgroup, CgroupFile f, const std::string& value);
  void forget(const std::string& cgroup, CgroupFile f);
  void forget_cgroup(const std::string& cgroup);
  std::vector<OriginalValue> entries() const;
  bool empty() const { return values_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& note() const { return note_; }

  // The text that would be saved (checksum included), and its parser.
  std::string serialize() const;
  // Entries that name a path outside the tree, a file khagent does not own
  // (or one it never saves: write-only) or a value outside that file's
  // grammar are refused (listed in `refused`), the rest kept. Files over
  // 4 MiB or nested deeper than 8 levels are errors, before any JSON is built.
  static Result<ParsedState> parse(const std::string& text);
  // What the last load() refused (to report).
  const std::vector<std::string>& refused() const { return refused_; }

 private:
  std::string path_;
  std::string note_;
  std::vector<std::string> refused_;
  std::map<std::pair<std::string, int>, std::string> values_;
};

// Loads the agent's state file, logging what it found. When both
// generations are damaged the file is moved aside (NAME.corrupt-TIME) for
// an operator and a new record starts, the values now in place taken as
// the originals; a dry run writes nothing and leaves it as it is.
void load_or_set_aside(StateStore& store, bool dry_run);

}  // namespace khagent

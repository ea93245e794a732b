// Brings the desired cgroup values about: records originals first, writes in
// an order the kernel accepts, treats vanished cgroups as gone, notices when
// someone else (the kubelet) reverted a value and backs off instead of
// flapping, and restores originals on the way out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/actuate/state_store.h"

namespace khagent {

enum class ActionOutcome { Written, Unchanged, DryRun, Gone, Rejected, Reverted, Backoff, Restored };
const char* outcome_name(ActionOutcome o);

struct ActionRecord {
  std::string cgroup;
  CgroupFile file = CgroupFile::CpuMax;
  std::string from;
  std::string to;
  ActionOutcome outcome = ActionOutcome::Unchanged;
  std::string message;
  // DryRun only: the same change (from, to) was already reported for this
  // file by an earlier call, with nothing in between; worth logging once.
  bool repeat = false;
  std::optional<Lever> lever = std::nullopt;  // the lever that asked for it (none: restores)
};

// Whether one of `recs` moved the offline CPU budget: a write to a file
// that carries it (cpu.max or cpuset.cpus, v2 or v1: the knob table's
// cpu_budget), or a dry run's first report of one.
bool budget_written(const std::vector<ActionRecord>& recs);

class Actuator {
 public:
  Actuator(CgroupFs& fs, StateStore& store, bool dry_run, CpuSet node_cpus,
           uint64_t revert_backoff_ns = 60'000'000'000ULL);

  // The typed values of one step turned into files for the backend
  // (render): one file per value, and on a hybrid host a cpuset goes on
  // every descendant in the v1 cpuset hierarchy too, because v1 refuses to
  // narrow a cpuset below a child's CPUs (EBUSY) and the kubelet's and the
  // runtimes' children copy their parent's. A value the kernel would refuse
  // becomes a Rejected record and is not written.
  struct Plan {
    std::vector<DesiredValue> files;
    std::vector<ActionRecord> refused;
  };
  Plan plan(CgroupBackend backend, const std::vector<Setting>& want);
  // The refused records, then apply(files).
  std::vector<ActionRecord> apply_plan(const Plan& p, uint64_t now_ns);

  // Applies every desired value; returns one record per value (Unchanged
  // included). Originals are saved to the state file before the first write
  // to each file; if they cannot be saved, nothing is written to that file.
  // A cgroup's weight is saved with its first cpu.idle write (clearing idle
  // resets the weight to the default) and restored after the idle. A
  // write-only file (memory.reclaim: Persistence::WriteOnly) is written
  // each time it is asked, without a read, a saved original or revert
  // detection: Written, DryRun, Gone or Rejected (EAGAIN included).
  std::vector<ActionRecord> apply(const std::vector<DesiredValue>& want, uint64_t now_ns);

  // Restores every original and forgets it.
  std::vector<ActionRecord> restore() { return restore_except({}); }
  // Restores (and forgets) the originals of cgroups not in `keep`.
  std::vector<ActionRecord> restore_except(const std::set<std::string>& keep);
  // Restores (and forgets) every original whose file is not wanted any
  // more: a lever released, a cgroup no longer a target.
  std::vector<ActionRecord> restore_unwanted(const std::vector<DesiredValue>& wanted);
  // The same for a step's plan: its refused values count as wanted (their
  // originals stay until the value is no longer wanted).
  std::vector<ActionRecord> restore_outside(const Plan& p);

 private:
  using Key = std::pair<std::string, int>;
  std::vector<ActionRecord> restore_if(const std::function<bool(const OriginalValue&)>& keep);
  ActionRecord apply_one(const DesiredValue& d, uint64_t now_ns, bool& state_dirty);
  ActionRecord apply_checked(const DesiredValue& d, uint64_t now_ns, bool& state_dirty);
  // The parts of apply_checked: a read that failed, the original saved
  // before the first write (false: refused, `rec` says why), and a
  // write-only file's write.
  void read_failed(ActionRecord& rec, const Error& e, bool& state_dirty);
  bool save_original(const DesiredValue& d, const std::string& cur, ActionRecord& rec);
  ActionRecord write_only(const DesiredValue& d, ActionRecord rec);
  // Why `d` may not be written yet (a quota on a cgroup whose cpu.idle is
  // not in force), "" when it may.
  std::string unmet_requirement(const DesiredValue& d);

  CgroupFs& fs_;
  StateStore& store_;
  bool dry_run_;
  CpuSet node_cpus_;
  uint64_t backoff_ns_;
  std::map<Key, std::string> last_written_;  // normalised
  std::map<Key, uint64_t> backoff_until_;
  // Dry run: the change last reported per file ("from\nto", normalised),
  // until the file is seen with another outcome.
  std::map<Key, std::string> dry_reported_;
  bool dry_repeat(const Key& key, const std::string& from, const std::string& to);
};

}  // namespace khagent

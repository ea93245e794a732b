#include "khagent/actuate/actuator.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

namespace khagent {

const char* outcome_name(ActionOutcome o) {
  switch (o) {
    case ActionOutcome::Written: return "written";
    case ActionOutcome::Unchanged: return "unchanged";
    case ActionOutcome::DryRun: return "dry-run";
    case ActionOutcome::Gone: return "gone";
    case ActionOutcome::Rejected: return "rejected";
    case ActionOutcome::Reverted: return "reverted";
    case ActionOutcome::Backoff: return "backoff";
    case ActionOutcome::Restored: return "restored";
  }
  return "unknown";
}

namespace {

size_t depth(const std::string& cgroup) { return static_cast<size_t>(std::count(cgroup.begin(), cgroup.end(), '/')); }

// cpu.weight cannot be written while cpu.idle is 1 (the kernel says EINVAL
// and shows the minimum weight: 0 on 6.1, 1 since 6.12): weight goes before
// idle when applying, and after it when restoring. A quota is only ever in
// force on an idle cgroup (a quota alone makes the online tail worse, see
// docs/controller.md): idle goes before the quota when applying, and the
// quota is lifted before idle when restoring.
int apply_rank(CgroupFile f) {
  switch (f) {
    case CgroupFile::CpuWeight:
    case CgroupFile::V1CpuShares: return 0;
    case CgroupFile::CpuIdle:
    case CgroupFile::V1CpuIdle: return 1;
    case CgroupFile::CpuMax:
    case CgroupFile::V1CpuCfs: return 2;
    case CgroupFile::CpusetCpus:
    case CgroupFile::V1CpusetCpus: return 3;
    case CgroupFile::MemoryHigh:
    case CgroupFile::V1MemoryLimit: return 4;
    case CgroupFile::CpuMaxBurst:
    case CgroupFile::V1CpuCfsBurst: return 5;
  }
  return 5;
}
int restore_rank(CgroupFile f) {
  switch (f) {
    case CgroupFile::CpuMax:
    case CgroupFile::V1CpuCfs: return 0;
    case CgroupFile::CpuIdle:
    case CgroupFile::V1CpuIdle: return 1;
    case CgroupFile::CpuWeight:
    case CgroupFile::V1CpuShares: return 2;
    case CgroupFile::CpusetCpus:
    case CgroupFile::V1CpusetCpus: return 3;
    case CgroupFile::MemoryHigh:
    case CgroupFile::V1MemoryLimit: return 4;
    case CgroupFile::CpuMaxBurst:
    case CgroupFile::V1CpuCfsBurst: return 5;
  }
  return 5;
}

bool is_cpuset(CgroupFile f) { return f == CgroupFile::CpusetCpus || f == CgroupFile::V1CpusetCpus; }
bool is_idle(CgroupFile f) { return f == CgroupFile::CpuIdle || f == CgroupFile::V1CpuIdle; }
bool is_quota(CgroupFile f) { return f == CgroupFile::CpuMax || f == CgroupFile::V1CpuCfs; }
bool is_weight(CgroupFile f) { return f == CgroupFile::CpuWeight || f == CgroupFile::V1CpuShares; }
CgroupFile idle_of_quota(CgroupFile quota) {
  return quota == CgroupFile::V1CpuCfs ? CgroupFile::V1CpuIdle : CgroupFile::CpuIdle;
}
// "max 100000" (v2) or "-1 100000" (v1): no quota.
bool lifts_quota(const std::string& value) { return value.rfind("max", 0) == 0 || value.rfind("-1", 0) == 0; }

// Clearing cpu.idle does not bring the weight back: the kernel sets the
// group's weight to the default (100, 1024 shares), whatever its owner had
// written. So the weight is saved with the first idle write and restored
// right after the idle.
CgroupFile weight_of_idle(CgroupFile idle) {
  return idle == CgroupFile::V1CpuIdle ? CgroupFile::V1CpuShares : CgroupFile::CpuWeight;
}

}  // namespace

Actuator::Actuator(CgroupFs& fs, StateStore& store, bool dry_run, CpuSet node_cpus, uint64_t revert_backoff_ns)
    : fs_(fs), store_(store), dry_run_(dry_run), node_cpus_(std::move(node_cpus)), backoff_ns_(revert_backoff_ns) {}

Actuator::Plan Actuator::plan(CgroupBackend backend, const std::vector<Setting>& want) {
  Plan p;
  for (const auto& s : want) {
    auto r = render(backend, s, node_cpus_);
    if (!r) {
      ActionRecord rec;
      rec.cgroup = s.cgroup;
      rec.file = file_for(backend, knob_of(s.value));
      rec.outcome = ActionOutcome::Rejected;
      rec.message = r.error().message;
      p.refused.push_back(std::move(rec));
      continue;
    }
    p.files.push_back(*r);
    if (r->file != CgroupFile::V1CpusetCpus) continue;
    std::vector<std::string> todo = fs_.children(Hierarchy::CpusetV1, s.cgroup);
    for (size_t i = 0; i < todo.size() && i < 4096; i++) {
      DesiredValue child = *r;
      child.cgroup = todo[i];
      p.files.push_back(std::move(child));
      auto more = fs_.children(Hierarchy::CpusetV1, todo[i]);
      todo.insert(todo.end(), more.begin(), more.end());
    }
  }
  return p;
}

std::vector<ActionRecord> Actuator::apply_plan(const Plan& p, uint64_t now_ns) {
  std::vector<ActionRecord> out = p.refused;
  auto done = apply(p.files, now_ns);
  out.insert(out.end(), std::make_move_iterator(done.begin()), std::make_move_iterator(done.end()));
  return out;
}

std::vector<ActionRecord> Actuator::apply(const std::vector<DesiredValue>& want, uint64_t now_ns) {
  // cpuset.cpus: widen before narrowing, parents before children when
  // widening, children before parents when narrowing, so that no step asks
  // the kernel for CPUs a parent does not have.
  std::vector<DesiredValue> widen, narrow, other;
  for (const auto& d : want) {
    if (!is_cpuset(d.file)) {
      other.push_back(d);
      continue;
    }
    auto cur = fs_.read(d.cgroup, d.file);
    auto now_set = cur ? parse_cpu_list(*cur) : Result<CpuSet>(CpuSet{});
    auto want_set = d.cpus ? Result<CpuSet>(*d.cpus) : parse_cpu_list(d.value);
    bool is_widen =
        now_set && want_set &&
        (now_set->empty() || std::includes(want_set->begin(), want_set->end(), now_set->begin(), now_set->end()));
    (is_widen ? widen : narrow).push_back(d);
  }
  std::stable_sort(widen.begin(), widen.end(),
                   [](const DesiredValue& a, const DesiredValue& b) { return depth(a.cgroup) < depth(b.cgroup); });
  std::stable_sort(narrow.begin(), narrow.end(),
                   [](const DesiredValue& a, const DesiredValue& b) { return depth(a.cgroup) > depth(b.cgroup); });

  std::stable_sort(other.begin(), other.end(), [](const DesiredValue& a, const DesiredValue& b) {
    return apply_rank(a.file) < apply_rank(b.file);
  });
  std::vector<ActionRecord> out;
  bool dirty = false;
  for (const auto* list : {&other, &widen, &narrow})
    for (const auto& d : *list) out.push_back(apply_one(d, now_ns, dirty));
  if (dirty && !dry_run_) {
    if (auto r = store_.save(); !r) spdlog::error("saving state: {}", r.error().str());
  }
  return out;
}

bool Actuator::dry_repeat(const Key& key, const std::string& from, const std::string& to) {
  std::string change = from + "\n" + to;
  auto [it, added] = dry_reported_.try_emplace(key, change);
  if (added) return false;
  if (it->second == change) return true;
  it->second = std::move(change);
  return false;
}

ActionRecord Actuator::apply_one(const DesiredValue& d, uint64_t now_ns, bool& dirty) {
  ActionRecord rec = apply_checked(d, now_ns, dirty);
  Key key{d.cgroup, static_cast<int>(d.file)};
  if (rec.outcome == ActionOutcome::DryRun) {
    rec.repeat = dry_repeat(key, normalize_cgroup_value(d.file, rec.from),
                            d.canonical ? d.value : normalize_cgroup_value(d.file, d.value));
  } else {
    dry_reported_.erase(key);
  }
  return rec;
}

ActionRecord Actuator::apply_checked(const DesiredValue& d, uint64_t now_ns, bool& dirty) {
  ActionRecord rec;
  rec.cgroup = d.cgroup;
  rec.file = d.file;
  rec.to = d.value;
  Key key{d.cgroup, static_cast<int>(d.file)};

  if (auto v = d.canonical ? Result<void>{} : validate_cgroup_value(d.file, d.value, node_cpus_); !v) {
    rec.outcome = ActionOutcome::Rejected;
    rec.message = v.error().message;
    return rec;
  }
  auto cur = fs_.read(d.cgroup, d.file);
  if (!cur) {
    rec.outcome = cur.error().err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
    rec.message = cur.error().str();
    if (rec.outcome == ActionOutcome::Gone && fs_.exists(d.cgroup)) {
      // The cgroup is there but not the file: its controller is not enabled.
      rec.outcome = ActionOutcome::Rejected;
      rec.message = hierarchy_of(d.file) == Hierarchy::Unified
                        ? std::string(cgroup_file_name(d.file)) + " missing in " + d.cgroup +
                              ": the controller is not enabled for it (cgroup.subtree_control of its parent)"
                        : d.cgroup + " exists in cgroup2 but not in the v1 hierarchy of " + cgroup_file_name(d.file) +
                              " (whoever made it did not create it there)";
      return rec;
    }
    if (rec.outcome == ActionOutcome::Gone && store_.has(d.cgroup, d.file)) {
      store_.forget_cgroup(d.cgroup);  // nothing left to restore
      dirty = true;
    }
    last_written_.erase(key);
    return rec;
  }
  rec.from = *cur;
  std::string now_norm = normalize_cgroup_value(d.file, *cur);
  std::string want_norm = d.canonical ? d.value : normalize_cgroup_value(d.file, d.value);

  auto bo = backoff_until_.find(key);
  if (bo != backoff_until_.end()) {
    if (now_ns < bo->second) {
      rec.outcome = ActionOutcome::Backoff;
      rec.message = "backing off after a revert by someone else";
      return rec;
    }
    backoff_until_.erase(bo);
    last_written_.erase(key);
  }
  if (now_norm == want_norm) {
    rec.outcome = ActionOutcome::Unchanged;
    last_written_[key] = want_norm;
    return rec;
  }
  auto lw = last_written_.find(key);
  if (lw != last_written_.end() && lw->second != now_norm) {
    // We wrote lw->second and it now reads differently: another writer (the
    // kubelet re-applying its settings, an operator). Report, do not fight.
    rec.outcome = ActionOutcome::Reverted;
    rec.message = "changed by someone else from '" + lw->second + "' to '" + now_norm + "'; not rewriting for " +
                  std::to_string(backoff_ns_ / 1'000'000'000ULL) + "s";
    backoff_until_[key] = now_ns + backoff_ns_;
    last_written_.erase(lw);
    return rec;
  }
  // A quota only where cpu.idle is in force, wherever khagent sets idle (it
  // saved that cgroup's original idle): never a quota on offline work that
  // an online waker would wait behind after each unthrottle, not even when
  // the idle write of this same call was refused or is backing off, nor on
  // the fast path, which writes quotas alone.
  if (is_quota(d.file) && !lifts_quota(d.value) && !dry_run_ && store_.has(d.cgroup, idle_of_quota(d.file))) {
    auto idle = fs_.read(d.cgroup, idle_of_quota(d.file));
    if (!idle || normalize_cgroup_value(idle_of_quota(d.file), *idle) != "1") {
      rec.outcome = ActionOutcome::Rejected;
      rec.message =
          "cpu.idle is not in force on this cgroup (" +
          (idle ? "it reads '" + normalize_cgroup_value(idle_of_quota(d.file), *idle) + "'" : idle.error().str()) +
          "): no quota without it";
      return rec;
    }
  }
  if (dry_run_) {
    rec.outcome = ActionOutcome::DryRun;
    return rec;
  }
  if (!store_.has(d.cgroup, d.file)) {
    store_.record(d.cgroup, d.file, *cur);
    bool with_weight = false;
    if (is_idle(d.file) && !store_.has(d.cgroup, weight_of_idle(d.file))) {
      auto w = fs_.read(d.cgroup, weight_of_idle(d.file));
      if (!w) {
        rec.outcome = ActionOutcome::Rejected;
        rec.message = "cannot read the weight that clearing cpu.idle would reset, so not writing: " + w.error().str();
        store_.forget(d.cgroup, d.file);
        return rec;
      }
      store_.record(d.cgroup, weight_of_idle(d.file), *w);
      with_weight = true;
    }
    if (auto r = store_.save(); !r) {
      store_.forget(d.cgroup, d.file);
      if (with_weight) store_.forget(d.cgroup, weight_of_idle(d.file));
      rec.outcome = ActionOutcome::Rejected;
      rec.message = "original value not saved, so not writing: " + r.error().str();
      return rec;
    }
  }
  if (auto w = fs_.write(d.cgroup, d.file, d.value); !w) {
    rec.outcome = w.error().err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
    rec.message = w.error().str();
    if (rec.outcome == ActionOutcome::Gone) {
      store_.forget_cgroup(d.cgroup);
      dirty = true;
    }
    return rec;
  }
  rec.outcome = ActionOutcome::Written;
  // Remember what the kernel shows for it (it may canonicalise the value).
  auto back = fs_.read(d.cgroup, d.file);
  last_written_[key] = back ? normalize_cgroup_value(d.file, *back) : want_norm;
  return rec;
}

std::vector<ActionRecord> Actuator::restore_except(const std::set<std::string>& keep) {
  return restore_if([&](const OriginalValue& e) { return keep.count(e.cgroup) > 0; });
}

std::vector<ActionRecord> Actuator::restore_unwanted(const std::vector<DesiredValue>& wanted) {
  std::set<Key> want;
  for (const auto& d : wanted) {
    want.insert({d.cgroup, static_cast<int>(d.file)});
    // The weight saved with an idle stays until the idle goes.
    if (is_idle(d.file)) want.insert({d.cgroup, static_cast<int>(weight_of_idle(d.file))});
  }
  return restore_if([&](const OriginalValue& e) { return want.count({e.cgroup, static_cast<int>(e.file)}) > 0; });
}

std::vector<ActionRecord> Actuator::restore_outside(const Plan& p) {
  std::vector<DesiredValue> wanted = p.files;
  for (const auto& r : p.refused) wanted.push_back({r.cgroup, r.file, r.to});
  return restore_unwanted(wanted);
}

std::vector<ActionRecord> Actuator::restore_if(const std::function<bool(const OriginalValue&)>& keep) {
  std::vector<ActionRecord> out;
  auto entries = store_.entries();
  // cpusets: restore children before parents would narrow-then-widen wrongly;
  // restoring originals widens in general, so parents first.
  std::stable_sort(entries.begin(), entries.end(), [](const OriginalValue& a, const OriginalValue& b) {
    if (depth(a.cgroup) != depth(b.cgroup)) return depth(a.cgroup) < depth(b.cgroup);
    return restore_rank(a.file) < restore_rank(b.file);
  });
  bool changed = false;
  // Cgroups whose quota could not be lifted: their idle (and the weight
  // that comes back with it) stays too, for the next attempt, so that the
  // quota is never left in force without idle.
  std::set<std::string> quota_stuck;
  for (const auto& e : entries) {
    if (keep(e)) continue;
    ActionRecord rec;
    rec.cgroup = e.cgroup;
    rec.file = e.file;
    rec.to = e.value;
    if ((is_idle(e.file) || is_weight(e.file)) && quota_stuck.count(e.cgroup)) {
      rec.outcome = ActionOutcome::Rejected;
      rec.message = "kept while this cgroup's quota could not be lifted (no quota without cpu.idle)";
      out.push_back(std::move(rec));
      continue;
    }
    // The state file was checked at load; check again right before writing.
    auto valid = validate_cgroup_value(e.file, e.value, {});
    auto cur = valid ? fs_.read(e.cgroup, e.file) : Result<std::string>(valid.error());
    if (!valid || !is_clean_cgroup_path(e.cgroup) || e.cgroup == "/") {
      rec.outcome = ActionOutcome::Rejected;
      rec.message = valid ? "refusing to restore outside the cgroup tree" : valid.error().message;
      store_.forget(e.cgroup, e.file);  // never retried: it can only be refused again
      changed = true;
      out.push_back(std::move(rec));
      continue;
    }
    if (!cur) {
      rec.outcome = cur.error().err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
      rec.message = cur.error().str();
    } else {
      rec.from = *cur;
      if (dry_run_) {
        rec.outcome = ActionOutcome::DryRun;
        rec.repeat = dry_repeat({e.cgroup, static_cast<int>(e.file)}, normalize_cgroup_value(e.file, *cur),
                                normalize_cgroup_value(e.file, e.value));
      } else if (normalize_cgroup_value(e.file, *cur) == normalize_cgroup_value(e.file, e.value)) {
        rec.outcome = ActionOutcome::Unchanged;
      } else if (auto w = fs_.write(e.cgroup, e.file, e.value); !w) {
        rec.outcome = w.error().err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
        rec.message = w.error().str();
      } else {
        rec.outcome = ActionOutcome::Restored;
      }
    }
    if (is_quota(e.file) && rec.outcome == ActionOutcome::Rejected) quota_stuck.insert(e.cgroup);
    // Rejected restores stay in the state file for the next attempt.
    if (rec.outcome != ActionOutcome::Rejected && !dry_run_) {
      store_.forget(e.cgroup, e.file);
      changed = true;
    }
    last_written_.erase({e.cgroup, static_cast<int>(e.file)});
    out.push_back(std::move(rec));
  }
  if (changed) {
    if (auto r = store_.save(); !r) spdlog::error("saving state: {}", r.error().str());
  }
  return out;
}

bool budget_written(const std::vector<ActionRecord>& recs) {
  return std::any_of(recs.begin(), recs.end(), [](const ActionRecord& r) {
    return (r.file == CgroupFile::CpuMax || r.file == CgroupFile::CpusetCpus || r.file == CgroupFile::V1CpuCfs ||
            r.file == CgroupFile::V1CpusetCpus) &&
           (r.outcome == ActionOutcome::Written || (r.outcome == ActionOutcome::DryRun && !r.repeat));
  });
}

}  // namespace khagent

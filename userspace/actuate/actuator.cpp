#include "khagent/actuate/actuator.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "khagent/model/knob_values.h"

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

// The order files are written and restored in: the knob table's ranks
// (model/knob_table.cpp says why weight, idle and quota go as they do).
int apply_rank(CgroupFile f) { return knob_row(f).apply_rank; }
int restore_rank(CgroupFile f) { return knob_row(f).restore_rank; }

bool is_cpuset(CgroupFile f) { return knob_row(f).knob == Knob::Cpus; }
// "max 100000" (v2) or "-1 100000" (v1): no quota.
bool lifts_quota(const std::string& value) { return value.rfind("max", 0) == 0 || value.rfind("-1", 0) == 0; }

// Whether `f` is kept while a cgroup's quota cannot be lifted: a file some
// row requires (cpu.idle, no quota without it), or the one saved with it
// (the weight that comes back with the idle).
bool held_by_quota(CgroupFile f) {
  for (const auto& r : knob_table()) {
    if (!r.requires_one) continue;
    if (f == *r.requires_one || f == knob_row(*r.requires_one).saved_with) return true;
  }
  return false;
}

// A file that is missing where its cgroup exists: its controller is not
// enabled there (v2), or the cgroup was not created in its v1 hierarchy.
std::string missing_file(const std::string& cgroup, CgroupFile f) {
  return hierarchy_of(f) == Hierarchy::Unified
             ? std::string(cgroup_file_name(f)) + " missing in " + cgroup +
                   ": the controller is not enabled for it (cgroup.subtree_control of its parent)"
             : cgroup + " exists in cgroup2 but not in the v1 hierarchy of " + cgroup_file_name(f) +
                   " (whoever made it did not create it there)";
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
      rec.lever = s.lever;
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
  // A write-only file's dry run is never a repeat: each ask is a write.
  if (rec.outcome == ActionOutcome::DryRun && knob_row(d.file).persistence != Persistence::WriteOnly) {
    rec.repeat = dry_repeat(key, normalize_cgroup_value(d.file, rec.from),
                            d.canonical ? d.value : normalize_cgroup_value(d.file, d.value));
  } else {
    dry_reported_.erase(key);
  }
  return rec;
}

void Actuator::read_failed(ActionRecord& rec, const Error& e, bool& dirty) {
  rec.outcome = e.err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
  rec.message = e.str();
  if (rec.outcome == ActionOutcome::Gone && fs_.exists(rec.cgroup)) {
    rec.outcome = ActionOutcome::Rejected;
    rec.message = missing_file(rec.cgroup, rec.file);
    return;
  }
  if (rec.outcome == ActionOutcome::Gone && store_.has(rec.cgroup, rec.file)) {
    store_.forget_cgroup(rec.cgroup);  // nothing left to restore
    dirty = true;
  }
  last_written_.erase({rec.cgroup, static_cast<int>(rec.file)});
}

bool Actuator::save_original(const DesiredValue& d, const std::string& cur, ActionRecord& rec) {
  store_.record(d.cgroup, d.file, cur);
  const std::optional<CgroupFile> with = knob_row(d.file).saved_with;
  bool saved_with = false;
  if (with && !store_.has(d.cgroup, *with)) {
    auto w = fs_.read(d.cgroup, *with);
    if (!w) {
      rec.outcome = ActionOutcome::Rejected;
      rec.message = "cannot read the weight that clearing cpu.idle would reset, so not writing: " + w.error().str();
      store_.forget(d.cgroup, d.file);
      return false;
    }
    store_.record(d.cgroup, *with, *w);
    saved_with = true;
  }
  if (auto r = store_.save(); !r) {
    store_.forget(d.cgroup, d.file);
    if (saved_with) store_.forget(d.cgroup, *with);
    rec.outcome = ActionOutcome::Rejected;
    rec.message = "original value not saved, so not writing: " + r.error().str();
    return false;
  }
  return true;
}

ActionRecord Actuator::write_only(const DesiredValue& d, ActionRecord rec) {
  if (dry_run_) {
    rec.outcome = ActionOutcome::DryRun;
    return rec;
  }
  if (auto w = fs_.write(d.cgroup, d.file, d.value); !w) {
    // memory.reclaim answers EAGAIN when it reclaimed less than asked (the
    // group held less, or a cut of its memory.high took it first): what it
    // got stays reclaimed, as with the v1 pulse's EBUSY, and the step is
    // judged by what it did. ENOENT is a gone cgroup or a missing file.
    if (d.file == CgroupFile::MemoryReclaim && w.error().err == EAGAIN) {
      rec.outcome = ActionOutcome::Written;
      rec.message = "the kernel reclaimed less than asked (EAGAIN)";
      return rec;
    }
    rec.outcome = w.error().err == ENOENT ? ActionOutcome::Gone : ActionOutcome::Rejected;
    rec.message = w.error().str();
    if (rec.outcome == ActionOutcome::Gone && fs_.exists(d.cgroup)) {
      rec.outcome = ActionOutcome::Rejected;
      rec.message = missing_file(d.cgroup, d.file);
    }
    return rec;
  }
  rec.outcome = ActionOutcome::Written;
  return rec;
}

// A quota only where cpu.idle is in force, wherever khagent sets idle (it
// saved that cgroup's original idle): never a quota on offline work that an
// online waker would wait behind after each unthrottle, not even when the
// idle write of this same call was refused or is backing off, nor on the
// fast path, which writes quotas alone.
std::string Actuator::unmet_requirement(const DesiredValue& d) {
  const auto need = knob_row(d.file).requires_one;
  if (!need || lifts_quota(d.value) || dry_run_ || !store_.has(d.cgroup, *need)) return "";
  auto idle = fs_.read(d.cgroup, *need);
  if (idle && normalize_cgroup_value(*need, *idle) == "1") return "";
  return std::string(knob_name(knob_row(*need).knob)) + " is not in force on this cgroup (" +
         (idle ? "it reads '" + normalize_cgroup_value(*need, *idle) + "'" : idle.error().str()) +
         "): no quota without it";
}

ActionRecord Actuator::apply_checked(const DesiredValue& d, uint64_t now_ns, bool& dirty) {
  ActionRecord rec;
  rec.cgroup = d.cgroup;
  rec.file = d.file;
  rec.to = d.value;
  rec.lever = d.lever;
  Key key{d.cgroup, static_cast<int>(d.file)};
  const KnobRow& row = knob_row(d.file);

  if (auto v = d.canonical ? Result<void>{} : validate_cgroup_value(d.file, d.value, node_cpus_); !v) {
    rec.outcome = ActionOutcome::Rejected;
    rec.message = v.error().message;
    return rec;
  }
  if (row.persistence == Persistence::WriteOnly) return write_only(d, std::move(rec));
  if (row.per_device) {
    // One device per cgroup and file: the saved original is that device's
    // line, and another device's would go unsaved.
    const auto saved = store_.original(d.cgroup, d.file);
    if (saved && io_max_device(*saved) != io_max_device(d.value)) {
      rec.outcome = ActionOutcome::Rejected;
      rec.message = std::string(row.name) + " of " + d.cgroup + " is held on device " + io_max_device(*saved) +
                    ": one device at a time, that one restored first";
      return rec;
    }
  }
  auto cur = fs_.read(d.cgroup, d.file);
  if (!cur) {
    read_failed(rec, cur.error(), dirty);
    return rec;
  }
  *cur = held_for(d.file, *cur, d.value);
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
    if (knob_row(d.file).persistence == Persistence::SaveRestoreUntilChanged && store_.has(d.cgroup, d.file)) {
      store_.forget(d.cgroup, d.file);  // theirs from now on: not restored over their value
      dirty = true;
      rec.message += "; theirs from now on, its original forgotten";
    }
    return rec;
  }
  if (std::string why = unmet_requirement(d); !why.empty()) {
    rec.outcome = ActionOutcome::Rejected;
    rec.message = std::move(why);
    return rec;
  }
  if (dry_run_) {
    rec.outcome = ActionOutcome::DryRun;
    return rec;
  }
  if (!store_.has(d.cgroup, d.file) && !save_original(d, *cur, rec)) return rec;
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
  last_written_[key] = back ? normalize_cgroup_value(d.file, held_for(d.file, *back, d.value)) : want_norm;
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
    if (auto with = knob_row(d.file).saved_with) want.insert({d.cgroup, static_cast<int>(*with)});
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
    if (held_by_quota(e.file) && quota_stuck.count(e.cgroup)) {
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
      *cur = held_for(e.file, *cur, e.value);
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
    if (knob_row(e.file).requires_one && rec.outcome == ActionOutcome::Rejected) quota_stuck.insert(e.cgroup);
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
    return knob_row(r.file).cpu_budget &&
           (r.outcome == ActionOutcome::Written || (r.outcome == ActionOutcome::DryRun && !r.repeat));
  });
}

}  // namespace khagent

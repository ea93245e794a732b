#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "khagent/collect/collector.h"
#include "khagent/signals/signals.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

namespace {

struct FakeMaps : MapSource {
  RawMaps next;
  std::vector<uint64_t> forgotten_ids;
  std::vector<std::pair<uint64_t, uint64_t>> forgotten_pairs;
  Result<void> read_into(RawMaps& into) override {
    into = next;
    return {};
  }
  void forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) override {
    forgotten_ids.insert(forgotten_ids.end(), ids.begin(), ids.end());
    forgotten_pairs.insert(forgotten_pairs.end(), pairs.begin(), pairs.end());
    for (auto id : ids) next.cgroups.erase(id);
    for (const auto& k : pairs)
      std::erase_if(next.pairs, [&](const RawPair& p) { return std::make_pair(p.victim, p.aggressor) == k; });
  }
};

struct FakeThrottle : ThrottleStatReader {
  std::map<std::string, ThrottleCounters> values;
  std::map<std::string, int> reads;
  std::optional<ThrottleCounters> read(uint64_t /*id*/, const std::string& path) override {
    reads[path]++;
    auto it = values.find(path);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

uint64_t ino(const fs::path& p) {
  struct stat st{};
  ::stat(p.c_str(), &st);
  return st.st_ino;
}

CgroupCounters counters(uint64_t waits, uint64_t wait_ns, uint64_t cpu_ns) {
  CgroupCounters c;
  c.waits = waits;
  c.wait_ns = wait_ns;
  c.cpu_ns = cpu_ns;
  c.cause_ns[KH_WAIT_OTHER_CGROUP] = wait_ns;
  c.hist[hist_bucket(wait_ns / (waits ? waits : 1))] = waits;
  return c;
}

// A cgroup tree of the given names under a temporary directory, with maps
// and a collector that reads no throttling.
struct OverTree {
  TempDir t;
  bool made;
  CgroupIndex idx;
  FakeMaps maps;
  Collector c;
  explicit OverTree(std::initializer_list<const char*> names)
      : made(make(t, names)), idx(t.path.string()), c(maps, idx, nullptr, ThrottleSource::None) {}
  uint64_t id(const char* name) const { return ino(t.path / name); }

 private:
  static bool make(const TempDir& t, std::initializer_list<const char*> names) {
    for (const char* n : names) fs::create_directories(t.path / n);
    return true;
  }
};

}  // namespace

TEST(Collector, TotalsAndIntervalDeltas) {
  TempDir t;
  fs::create_directories(t.path / "a");
  fs::create_directories(t.path / "b");
  uint64_t a = ino(t.path / "a"), b = ino(t.path / "b");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  FakeThrottle thr;
  thr.values["/a"] = {2, 1000};
  Collector c(maps, idx, &thr, ThrottleSource::CpuStat);

  maps.next.cgroups[a] = counters(10, 10'000, 1'000'000);
  maps.next.cgroups[b] = counters(0, 0, 5'000'000);
  maps.next.pairs.push_back({a, b, 9'000, 10});
  auto s1 = c.tick_at(1'000'000'000, 7);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->interval_ns, 0u);
  ASSERT_EQ(s1->cgroups.size(), 2u);

  maps.next.cgroups[a] = counters(30, 50'000, 3'000'000);
  maps.next.cgroups[a].cause_ns[KH_WAIT_THROTTLED] = 3'000;  // throttled waits: its cpu.stat is read
  maps.next.pairs[0] = {a, b, 40'000, 30};
  thr.values["/a"] = {5, 4000};
  auto s2 = c.tick_at(2'000'000'000, 8);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->interval_ns, 1'000'000'000u);
  const CgroupSample* sa = nullptr;
  for (const auto& cg : s2->cgroups)
    if (cg.id == a) sa = &cg;
  ASSERT_NE(sa, nullptr);
  EXPECT_EQ(sa->path, "/a");
  EXPECT_EQ(sa->total.waits, 30u);
  EXPECT_EQ(sa->interval.waits, 20u);
  EXPECT_EQ(sa->interval.wait_ns, 40'000u);
  EXPECT_EQ(sa->interval.cpu_ns, 2'000'000u);
  // cpu.stat: the first reading is the base, so only the growth counts.
  EXPECT_EQ(sa->throttle_total.events, 3u);
  EXPECT_EQ(sa->throttle_total.throttled_ns, 3000u);
  ASSERT_EQ(s2->pairs.size(), 1u);
  EXPECT_EQ(s2->pairs[0].wait_ns_total, 40'000u);
  EXPECT_EQ(s2->pairs[0].wait_ns_interval, 31'000u);

  Signals sig = compute_signals(*s2);
  for (const auto& g : sig.cgroups) {
    if (g.id != a) continue;
    EXPECT_NEAR(g.cpu_pct, 0.2, 1e-9);
    ASSERT_EQ(g.top_aggressors.size(), 1u);
    EXPECT_EQ(g.top_aggressors[0].path, "/b");
    EXPECT_EQ(g.top_aggressors[0].wait_ns_total, 40'000u);
  }
}

TEST(Collector, StallsSinceLoadAndInTheInterval) {
  TempDir t;
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  Collector c(maps, idx, nullptr, ThrottleSource::None);
  maps.next.stall.available = true;
  maps.next.stall.stolen_ns = 4'000'000;
  maps.next.stall.stalls = 2;
  auto s1 = c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->stall_total.stolen_ns, 4'000'000u);
  EXPECT_EQ(s1->stall_interval_ns, 0u);  // the first tick is the base
  maps.next.stall.stolen_ns = 10'000'000;
  maps.next.stall.stalls = 5;
  auto s2 = c.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->stall_interval_ns, 6'000'000u);
  EXPECT_EQ(s2->stall_interval_count, 3u);
  Signals sig = compute_signals(*s2);
  EXPECT_EQ(sig.stall_interval_ns, 6'000'000u);
  EXPECT_TRUE(sig.stall_total.available);
  // Maps loaded again: counts went back, this interval counts nothing.
  maps.next.stall.stolen_ns = 1'000;
  maps.next.stall.stalls = 1;
  auto s3 = c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(s3->stall_interval_ns, 0u);
  maps.next.stall.stolen_ns = 3'000;
  auto s4 = c.tick_at(4'000'000'000, 4);
  ASSERT_TRUE(s4.ok());
  EXPECT_EQ(s4->stall_interval_ns, 2'000u);
}

TEST(Collector, CounterResetCountsFromZero) {
  OverTree tree({"a"});
  FakeMaps& maps = tree.maps;
  Collector& c = tree.c;
  uint64_t a = tree.id("a");
  maps.next.cgroups[a] = counters(100, 100'000, 1'000);
  ASSERT_TRUE(c.tick_at(1, 1).ok());
  // Deleted and re-created (by another reader of the pins): smaller than before.
  maps.next.cgroups[a] = counters(5, 2'000, 10);
  auto s = c.tick_at(2, 2);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].interval.waits, 5u);
  EXPECT_EQ(s->cgroups[0].total.waits, 105u);
}

TEST(Collector, ForgetsCgroupsThatAreGone) {
  OverTree tree({"a", "gone"});
  FakeMaps& maps = tree.maps;
  Collector& c = tree.c;
  uint64_t a = tree.id("a"), gone = tree.id("gone");
  maps.next.cgroups[a] = counters(1, 1000, 1000);
  maps.next.cgroups[gone] = counters(1, 1000, 1000);
  maps.next.pairs.push_back({a, gone, 500, 1});
  ASSERT_TRUE(c.tick_at(1'000'000'000, 1).ok());
  fs::remove(tree.t.path / "gone");
  // An id nobody knows (never seen, not in the tree): forgotten as well.
  maps.next.cgroups[987654321] = counters(1, 1, 1);
  auto s = c.tick_at(3'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].id, a);
  std::sort(maps.forgotten_ids.begin(), maps.forgotten_ids.end());
  std::vector<uint64_t> want{gone, 987654321};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(maps.forgotten_ids, want);
  ASSERT_EQ(maps.forgotten_pairs.size(), 1u);
  EXPECT_EQ(maps.forgotten_pairs[0], std::make_pair(a, gone));
  EXPECT_EQ(c.forgotten(), 3u);
  EXPECT_TRUE(s->pairs.empty());
}

// The maps do not evict: when inserts fail (the BPF side counts them), gone
// cgroups are looked for at once (at most once a second), not at the next
// periodic walk, so that their entries make room.
TEST(Collector, FullMapsLookForGoneCgroupsAtOnce) {
  OverTree tree({"a", "gone"});
  FakeMaps& maps = tree.maps;
  Collector& c = tree.c;
  uint64_t a = tree.id("a"), gone = tree.id("gone");
  maps.next.cgroups[a] = counters(1, 1000, 1000);
  maps.next.cgroups[gone] = counters(1, 1000, 1000);
  maps.next.counters[KH_CNT_STATS_FULL] = 5;  // before the first tick: the base
  ASSERT_TRUE(c.tick_at(1'000'000'000, 1).ok());
  fs::remove(tree.t.path / "gone");

  // Nothing failed since: the next walk is seconds away.
  ASSERT_TRUE(c.tick_at(2'000'000'000, 2).ok());
  EXPECT_TRUE(maps.forgotten_ids.empty());

  // Inserts failed: walk now, delete the gone cgroup.
  maps.next.counters[KH_CNT_STATS_FULL] = 9;
  auto s = c.tick_at(2'500'000'000, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(maps.forgotten_ids, std::vector<uint64_t>{gone});
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].id, a);
}

// Removals the kernel reports (handle_cgroup_rmdir) are forgotten at the next
// tick, with their pairs, long before a walk, even where the cgroup is still
// in the index or was never named.
TEST(Collector, KernelReportedRemovalsAreForgottenAtOnce) {
  OverTree tree({"a", "b"});
  FakeMaps& maps = tree.maps;
  Collector& c = tree.c;
  uint64_t a = tree.id("a"), b = tree.id("b");
  maps.next.cgroups[a] = counters(1, 1000, 1000);
  maps.next.cgroups[b] = counters(1, 1000, 1000);
  maps.next.pairs.push_back({a, b, 500, 1});
  ASSERT_TRUE(c.tick_at(1'000'000'000, 1).ok());

  maps.next.removed = {b, 424242};  // 424242: removed before it was ever read
  auto s = c.tick_at(1'200'000'000, 2);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].id, a);
  EXPECT_EQ(maps.forgotten_ids, std::vector<uint64_t>{b});
  ASSERT_EQ(maps.forgotten_pairs.size(), 1u);
  EXPECT_EQ(maps.forgotten_pairs[0], std::make_pair(a, b));
  EXPECT_TRUE(s->pairs.empty());
}

// Without totals (the agent), samples carry the interval only; the interval
// is the same as with them.
TEST(Collector, TotalsOffLeavesTotalsEmptyAndIntervalsWhole) {
  TempDir t;
  fs::create_directories(t.path / "a");
  uint64_t a = ino(t.path / "a");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  Collector with(maps, idx, nullptr, ThrottleSource::None);
  Collector without(maps, idx, nullptr, ThrottleSource::None);
  without.set_totals(false);
  maps.next.cgroups[a] = counters(10, 10'000, 1'000'000);
  ASSERT_TRUE(with.tick_at(1'000'000'000, 1).ok());
  ASSERT_TRUE(without.tick_at(1'000'000'000, 1).ok());
  maps.next.cgroups[a] = counters(30, 50'000, 3'000'000);
  auto s1 = with.tick_at(2'000'000'000, 2);
  auto s2 = without.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_EQ(s1->cgroups.size(), 1u);
  ASSERT_EQ(s2->cgroups.size(), 1u);
  EXPECT_EQ(s1->cgroups[0].total.waits, 30u);
  EXPECT_EQ(s2->cgroups[0].total.waits, 0u);
  EXPECT_EQ(hist_count(s2->cgroups[0].total.hist), 0u);
  EXPECT_EQ(s2->cgroups[0].interval.waits, 20u);
  EXPECT_EQ(s2->cgroups[0].interval.wait_ns, s1->cgroups[0].interval.wait_ns);
  EXPECT_EQ(s2->cgroups[0].interval.hist, s1->cgroups[0].interval.hist);
}

// Changes only (the agent): a cgroup is listed when it is first named and
// when its counters or throttling move; idle, it is left out; removed, it
// is reported. A complete sample lists it every tick.
// A cgroup whose tasks only reclaimed memory in a tick (its run-queue
// counters idle) is listed with that reclaim; the totals are the map's.
TEST(Collector, ReclaimIsListedAsItMovesEvenWhenNothingElseDid) {
  OverTree o({"a", "b"});
  const uint64_t a = o.id("a"), b = o.id("b");
  o.c.set_changes_only(true);
  o.maps.next.cgroups[a] = counters(10, 10'000, 1'000'000);
  o.maps.next.cgroups[b] = counters(1, 1'000, 100'000);
  ReclaimCounters r;
  r.ns[KH_RECLAIM_MEMCG] = 5'000'000;
  r.count[KH_RECLAIM_MEMCG] = 3;
  r.pages[KH_RECLAIM_MEMCG] = 96;
  o.maps.next.reclaim[b] = r;
  auto s = o.c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s.ok());
  bool listed = false;
  for (const auto& cs : s->cgroups)
    if (cs.id == b) {
      listed = true;
      EXPECT_EQ(cs.reclaim_interval.ns[KH_RECLAIM_MEMCG], 5'000'000u) << "counted from the map's start";
    }
  EXPECT_TRUE(listed);

  r.ns[KH_RECLAIM_MEMCG] = 7'000'000;
  r.count[KH_RECLAIM_MEMCG] = 4;
  r.ns[KH_RECLAIM_NODE] = 1'000'000;
  r.count[KH_RECLAIM_NODE] = 1;
  o.maps.next.reclaim[b] = r;
  s = o.c.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u) << "a is idle, b only reclaimed";
  const CgroupSample& cb = s->cgroups[0];
  EXPECT_EQ(cb.id, b);
  EXPECT_EQ(cb.reclaim_interval.ns[KH_RECLAIM_MEMCG], 2'000'000u);
  EXPECT_EQ(cb.reclaim_interval.count[KH_RECLAIM_MEMCG], 1u);
  EXPECT_EQ(cb.reclaim_interval.ns[KH_RECLAIM_NODE], 1'000'000u);
  EXPECT_EQ(cb.reclaim_interval.total_ns(), 3'000'000u);
  EXPECT_EQ(cb.reclaim_total.ns[KH_RECLAIM_MEMCG], 7'000'000u);
  EXPECT_EQ(cb.reclaim_total.pages[KH_RECLAIM_MEMCG], 96u);

  s = o.c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->cgroups.empty()) << "nothing moved";
  // Time added before its count (the programs add one field at a time): a
  // change, listed and counted.
  r.ns[KH_RECLAIM_MEMCG] += 500;
  o.maps.next.reclaim[b] = r;
  s = o.c.tick_at(3'500'000'000, 3);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].reclaim_interval.ns[KH_RECLAIM_MEMCG], 500u);
  EXPECT_EQ(s->cgroups[0].reclaim_interval.count[KH_RECLAIM_MEMCG], 0u);
  // A source that says which entries moved: only those are looked at.
  o.maps.next.moved_only = true;
  o.maps.next.moved.clear();
  o.maps.next.reclaim_moved_known = true;
  o.maps.next.reclaim_moved.clear();
  r.ns[KH_RECLAIM_MEMCG] += 100;
  o.maps.next.reclaim[b] = r;
  s = o.c.tick_at(3'700'000'000, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->cgroups.empty()) << "not said to have moved: not looked at this tick";
  o.maps.next.reclaim_moved = {b};
  s = o.c.tick_at(3'800'000'000, 3);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].reclaim_interval.ns[KH_RECLAIM_MEMCG], 100u) << "nothing lost, only later";
  o.maps.next.reclaim_moved_known = false;
  o.maps.next.moved_only = false;
  // An entry made again (deleted and made anew) counts from zero.
  r = {};
  r.ns[KH_RECLAIM_MEMCG] = 10;
  r.count[KH_RECLAIM_MEMCG] = 1;
  o.maps.next.reclaim[b] = r;
  s = o.c.tick_at(4'000'000'000, 4);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cgroups.size(), 1u);
  EXPECT_EQ(s->cgroups[0].reclaim_interval.ns[KH_RECLAIM_MEMCG], 10u);
}

TEST(Collector, ChangesOnlyListsWhatMovedAndReportsRemovals) {
  TempDir t;
  fs::create_directories(t.path / "a");
  fs::create_directories(t.path / "b");
  uint64_t a = ino(t.path / "a"), b = ino(t.path / "b");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  Collector c(maps, idx, nullptr, ThrottleSource::Fentry);
  c.set_changes_only(true);
  maps.next.cgroups[a] = counters(10, 10'000, 1'000'000);
  maps.next.cgroups[b] = counters(1, 1'000, 100'000);
  auto ids = [](const Sample& s) {
    std::vector<uint64_t> v;
    for (const auto& cs : s.cgroups) v.push_back(cs.id);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto s = c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->complete);
  EXPECT_EQ(ids(*s), (std::vector<uint64_t>{std::min(a, b), std::max(a, b)}));  // named now

  maps.next.cgroups[a] = counters(30, 50'000, 3'000'000);
  maps.next.pairs = {{a, b, 9'000, 10}, {b, a, 1'000, 1}};
  s = c.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ids(*s), std::vector<uint64_t>{a});  // b is idle
  EXPECT_EQ(s->pairs.size(), 2u);                // new: both moved

  maps.next.pairs[0] = {a, b, 12'000, 12};  // (b, a) quiet: not listed
  s = c.tick_at(2'500'000'000, 2);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->pairs.size(), 1u);
  EXPECT_EQ(s->pairs[0].victim, a);
  EXPECT_EQ(s->pairs[0].wait_ns_interval, 3'000u);
  EXPECT_EQ(s->pairs[0].wait_ns_total, 12'000u);
  maps.next.cgroups[a] = counters(40, 60'000, 4'000'000);
  s = c.tick_at(2'700'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ids(*s), std::vector<uint64_t>{a});
  EXPECT_EQ(s->cgroups[0].interval.waits, 10u);
  EXPECT_TRUE(s->removed.empty());

  maps.next.throttle[b] = {2, 5'000'000};  // b idle, but throttled
  s = c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(ids(*s), std::vector<uint64_t>{b});
  EXPECT_EQ(s->cgroups[0].throttle_interval.throttled_ns, 5'000'000u);
  EXPECT_EQ(s->cgroups[0].interval.waits, 0u);

  s = c.tick_at(4'000'000'000, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->cgroups.empty());

  maps.next.cgroups.erase(b);  // deleted by another reader of the pins
  s = c.tick_at(5'000'000'000, 5);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->removed, std::vector<uint64_t>{b});

  Collector whole(maps, idx, nullptr, ThrottleSource::Fentry);
  ASSERT_TRUE(whole.tick_at(1'000'000'000, 1).ok());
  s = whole.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->complete);
  EXPECT_EQ(ids(*s), std::vector<uint64_t>{a});  // idle, listed
}

namespace {

// Like the BPF source with its moved reader: after a whole first read, each
// read brings only the entries that changed since the last one (and keeps
// the rest as they were); deletions show only at a whole read.
struct MovedOnlyMaps : MapSource {
  RawMaps next;
  std::map<uint64_t, CgroupCounters> last;  // what the reader last handed out
  Result<void> read_into(RawMaps& into) override {
    into.removed = next.removed;
    into.throttle = next.throttle;
    into.counters = next.counters;
    into.pairs = next.pairs;
    into.moved.clear();
    if (!into.primed) {
      into.cgroups = next.cgroups;
      into.moved_only = false;
      into.primed = true;
    } else {
      into.moved_only = true;
      for (const auto& [id, c] : next.cgroups) {
        auto l = last.find(id);
        if (l != last.end() && l->second.waits == c.waits && l->second.cpu_ns == c.cpu_ns) continue;
        into.cgroups[id] = c;
        into.moved.push_back(id);
      }
    }
    last.clear();
    for (const auto& [id, c] : next.cgroups) last[id] = c;
    return {};
  }
  void forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) override {
    for (auto id : ids) next.cgroups.erase(id);
    for (const auto& k : pairs) {
      forgotten_pairs.push_back(k);
      std::erase_if(next.pairs, [&](const RawPair& p) { return std::make_pair(p.victim, p.aggressor) == k; });
    }
  }
  bool reports_removals() const override { return true; }
  std::vector<std::pair<uint64_t, uint64_t>> forgotten_pairs;
};

// MovedOnlyMaps whose pairs, too, say which moved (as the slot reader's do).
struct MovedPairsMaps : MovedOnlyMaps {
  std::map<std::pair<uint64_t, uint64_t>, RawPair> last_pairs;
  bool pairs_primed = false;
  Result<void> read_into(RawMaps& into) override {
    if (auto r = MovedOnlyMaps::read_into(into); !r) return r;
    into.pairs_moved.clear();
    into.pairs_moved_only = pairs_primed;
    for (uint32_t i = 0; i < into.pairs.size(); i++) {
      const RawPair& p = into.pairs[i];
      auto l = last_pairs.find({p.victim, p.aggressor});
      if (!pairs_primed || l == last_pairs.end() || l->second.wait_ns != p.wait_ns || l->second.count != p.count)
        into.pairs_moved.push_back(i);
    }
    last_pairs.clear();
    for (const auto& p : into.pairs) last_pairs[{p.victim, p.aggressor}] = p;
    pairs_primed = true;
    return {};
  }
};

// Two collectors over the same counters, side by side: one over a source
// that hands out every entry, one over `Moved`, a source of what moved. Both
// list only what changed (as the agent's does).
template <typename Moved>
struct SideBySide {
  TempDir t;
  uint64_t a = mkdir("a"), b = mkdir("b");
  CgroupIndex idx{t.path.string()};
  FakeMaps whole_maps;
  Moved moved_maps;
  Collector whole{whole_maps, idx, nullptr, ThrottleSource::None};
  Collector moved{moved_maps, idx, nullptr, ThrottleSource::None};
  uint64_t tick = 0;

  SideBySide() {
    whole.set_changes_only(true);
    moved.set_changes_only(true);
  }
  uint64_t mkdir(const char* name) {
    fs::create_directories(t.path / name);
    return ino(t.path / name);
  }
  void set(uint64_t id, const CgroupCounters& c) {
    whole_maps.next.cgroups[id] = c;
    moved_maps.next.cgroups[id] = c;
  }
  void set_pair(uint64_t v, uint64_t ag, uint64_t ns, uint64_t n) {
    for (RawMaps* m : {&whole_maps.next, &moved_maps.next}) {
      std::erase_if(m->pairs, [&](const RawPair& p) { return p.victim == v && p.aggressor == ag; });
      m->pairs.push_back({v, ag, ns, n});
    }
  }
  void removed(const std::vector<uint64_t>& ids) {
    whole_maps.next.removed = ids;
    moved_maps.next.removed = ids;
  }
  // The next tick of both: (whole, moved).
  std::pair<Result<Sample>, Result<Sample>> next() {
    tick++;
    auto s1 = whole.tick_at(tick * 1'000'000'000, tick);
    auto s2 = moved.tick_at(tick * 1'000'000'000, tick);
    return {std::move(s1), std::move(s2)};
  }
};

}  // namespace

// Over a source whose pairs say which moved, the collector lists the same
// pairs with the same intervals as over one it must compare every pair of,
// keeps the state of quiet pairs, and forgets the pairs of a removed
// cgroup.
TEST(Collector, PairsThatSayWhichMovedGiveTheSameSamples) {
  SideBySide<MovedPairsMaps> x;
  const uint64_t a = x.a, b = x.b;
  using Row = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;  // victim, aggressor, interval, total
  auto listed = [](const Sample& s) {
    std::vector<Row> v;
    for (const auto& p : s.pairs) v.emplace_back(p.victim, p.aggressor, p.wait_ns_interval, p.wait_ns_total);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto both = [&](const std::vector<Row>& want) {
    auto [s1, s2] = x.next();
    ASSERT_TRUE(s1.ok() && s2.ok());
    EXPECT_EQ(listed(*s1), want) << "tick " << x.tick;
    EXPECT_EQ(listed(*s2), want) << "tick " << x.tick;
  };
  const uint64_t c = 987'654'321;  // no such cgroup: never named
  x.set(a, counters(1, 1'000, 1'000));
  x.set(b, counters(1, 1'000, 1'000));
  x.set_pair(a, b, 100, 1);
  x.set_pair(b, a, 50, 1);
  both({{a, b, 100, 100}, {b, a, 50, 50}});
  x.set_pair(a, b, 300, 2);
  both({{a, b, 200, 300}});
  both({});
  x.set_pair(b, a, 80, 2);  // quiet for two ticks, its state kept
  both({{b, a, 30, 80}});

  // b removed (the kernel says so): its pairs, as victim and as aggressor, forgotten.
  x.removed({b});
  both({});
  auto& f = x.moved_maps.forgotten_pairs;
  for (auto k : {std::make_pair(a, b), std::make_pair(b, a)})
    EXPECT_NE(std::find(f.begin(), f.end(), k), f.end()) << k.first << " <- " << k.second;
  x.removed({});
  x.set_pair(a, c, 10, 1);  // an aggressor with no name counts (only victims need one)
  x.set(a, counters(2, 2'000, 2'000));
  both({{a, c, 10, 10}});
}

// The agent's collector over a source that reads only what moved lists the
// same cgroups with the same intervals as over one that reads every entry:
// a cgroup is named once, listed when it moves, and reported removed when
// the kernel says so; one not named yet is tried again each tick.
TEST(Collector, AReaderOfWhatMovedGivesTheSameSamples) {
  SideBySide<MovedOnlyMaps> x;
  const uint64_t a = x.a, b = x.b;
  auto listed = [](const Sample& s) {
    std::map<uint64_t, uint64_t> v;  // id -> interval waits
    for (const auto& cs : s.cgroups) v[cs.id] = cs.interval.waits;
    return v;
  };
  auto both = [&](const std::map<uint64_t, uint64_t>& want, const std::vector<uint64_t>& removed = {}) {
    auto [s1, s2] = x.next();
    ASSERT_TRUE(s1.ok() && s2.ok());
    EXPECT_EQ(listed(*s1), want) << "tick " << x.tick;
    EXPECT_EQ(listed(*s2), want) << "tick " << x.tick;
    EXPECT_EQ(s1->removed, removed) << "tick " << x.tick;
    EXPECT_EQ(s2->removed, removed) << "tick " << x.tick;
  };
  x.set(a, counters(10, 10'000, 1'000'000));
  x.set(b, counters(1, 1'000, 100'000));
  both({{a, 10}, {b, 1}});  // both named at the first tick, counting from the start
  x.set(a, counters(30, 50'000, 3'000'000));
  both({{a, 20}});
  both({});
  x.set(b, counters(4, 4'000, 400'000));
  both({{b, 3}});

  // A cgroup whose directory comes later: tried again each tick until named.
  const uint64_t c = 987'654'321;  // no such inode yet
  x.set(c, counters(5, 5'000, 500'000));
  both({});
  both({});

  // Removed: the kernel's report removes it from both.
  x.removed({a});
  both({}, {a});
  EXPECT_EQ(x.moved_maps.next.cgroups.count(a), 0u);  // its entry deleted
  x.removed({});
  x.set(b, counters(5, 5'000, 500'000));
  both({{b, 1}});
}

namespace {

const CgroupSample* find_sample(const Sample& s, uint64_t id) {
  for (const auto& cs : s.cgroups)
    if (cs.id == id) return &cs;
  return nullptr;
}

}  // namespace

// A quota on a pod (or a QoS or YARN root, or a cap khagent writes there)
// throttles the pod's cfs_rq: fentry keys it to the pod, which has no map
// entry of its own. Its throttling is listed as the pod's sample, and the
// pod is let go of (reported removed, its entry deleted) with its last
// container.
TEST(Collector, AnAncestorsThrottlingIsListedAsItsOwn) {
  TempDir t;
  fs::create_directories(t.path / "pod" / "c1");
  fs::create_directories(t.path / "pod" / "c2");
  uint64_t pod = ino(t.path / "pod"), c1 = ino(t.path / "pod" / "c1"), c2 = ino(t.path / "pod" / "c2");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  Collector c(maps, idx, nullptr, ThrottleSource::Fentry);
  c.set_changes_only(true);
  maps.next.cgroups[c1] = counters(10, 10'000, 1'000'000);
  maps.next.cgroups[c2] = counters(1, 1'000, 100'000);
  maps.next.throttle[pod] = {3, 30'000'000};  // since the maps were made: this run's
  auto s = c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s.ok());
  const CgroupSample* p = find_sample(*s, pod);
  ASSERT_NE(p, nullptr) << "the pod's throttling was dropped";
  EXPECT_EQ(p->path, "/pod");
  EXPECT_EQ(p->throttle_interval.throttled_ns, 30'000'000u);
  EXPECT_EQ(p->throttle_interval.events, 3u);
  EXPECT_FALSE(counters_moved(p->interval));

  s = c.tick_at(2'000'000'000, 2);  // not throttled since: not listed
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(find_sample(*s, pod), nullptr);

  maps.next.throttle[pod] = {5, 50'000'000};
  s = c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s.ok());
  p = find_sample(*s, pod);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->throttle_interval.throttled_ns, 20'000'000u);
  EXPECT_EQ(p->throttle_total.throttled_ns, 50'000'000u);

  maps.next.removed = {c1};  // one container goes: the pod stays held
  maps.next.cgroups.erase(c1);
  s = c.tick_at(4'000'000'000, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->removed, std::vector<uint64_t>{c1});

  maps.next.removed = {c2};  // the last one: the pod goes with it
  maps.next.cgroups.erase(c2);
  s = c.tick_at(5'000'000'000, 5);
  ASSERT_TRUE(s.ok());
  auto removed = s->removed;
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<uint64_t>{std::min(c2, pod), std::max(c2, pod)}));
  EXPECT_NE(std::find(maps.forgotten_ids.begin(), maps.forgotten_ids.end(), pod), maps.forgotten_ids.end())
      << "the pod's throttle entry was kept: held again, it would count its past twice";
}

// With cpu.stat as the source, an ancestor's cpu.stat is read while a
// cgroup below it has waits that began throttled (by its quota or an
// ancestor's), and once more after; the first reading, when the ancestor is
// first seen, is the base. Active cgroups with no throttled wait cost no
// reads.
TEST(Collector, AnAncestorsCpuStatIsReadWhileCgroupsBelowWaitThrottled) {
  TempDir t;
  fs::create_directories(t.path / "yarn" / "c1");
  uint64_t yarn = ino(t.path / "yarn"), c1 = ino(t.path / "yarn" / "c1");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  FakeThrottle thr;
  thr.values["/yarn"] = {10, 1'000'000'000};
  thr.values["/yarn/c1"] = {0, 0};
  Collector c(maps, idx, &thr, ThrottleSource::CpuStat);
  c.set_changes_only(true);
  maps.next.cgroups[c1] = counters(10, 10'000, 1'000'000);
  auto s = c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(find_sample(*s, yarn), nullptr);  // the base

  maps.next.cgroups[c1] = counters(20, 20'000, 2'000'000);  // active, nothing throttled
  s = c.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(find_sample(*s, yarn), nullptr);
  EXPECT_EQ(thr.reads["/yarn"], 1);     // the base only
  EXPECT_EQ(thr.reads["/yarn/c1"], 1);  // the same

  maps.next.cgroups[c1] = counters(30, 30'000, 3'000'000);
  maps.next.cgroups[c1].cause_ns[KH_WAIT_THROTTLED] = 5'000;
  thr.values["/yarn"] = {12, 1'040'000'000};
  s = c.tick_at(2'500'000'000, 2);
  ASSERT_TRUE(s.ok());
  const CgroupSample* y = find_sample(*s, yarn);
  ASSERT_NE(y, nullptr) << "the YARN root's throttling was dropped";
  EXPECT_EQ(y->path, "/yarn");
  EXPECT_EQ(y->throttle_interval.throttled_ns, 40'000'000u);
  EXPECT_EQ(y->throttle_interval.events, 2u);

  // c1 went idle; the throttling that made it wait shows at the next read.
  thr.values["/yarn"] = {13, 1'050'000'000};
  s = c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s.ok());
  y = find_sample(*s, yarn);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->throttle_interval.throttled_ns, 10'000'000u);

  // It grew: read once more, unchanged.
  const int reads = thr.reads["/yarn"];
  s = c.tick_at(4'000'000'000, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(find_sample(*s, yarn), nullptr);
  EXPECT_EQ(thr.reads["/yarn"], reads + 1);

  // No throttled wait below it: not read (it cannot be throttled meanwhile).
  thr.values["/yarn"] = {99, 9'000'000'000};
  s = c.tick_at(5'000'000'000, 5);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(find_sample(*s, yarn), nullptr);
  EXPECT_EQ(thr.reads["/yarn"], reads + 1);
}

// A QoS root's only pod replaced in one tick: the root is let go of and held
// again at once, and keeps its throttling state (with fentry, reading its
// entry from zero again would count its past twice). A holder that later
// gets tasks of its own keeps one state too.
TEST(Collector, AHolderHeldAgainInTheSameTickKeepsItsState) {
  TempDir t;
  fs::create_directories(t.path / "qos" / "pod1");
  uint64_t qos = ino(t.path / "qos"), pod1 = ino(t.path / "qos" / "pod1");
  CgroupIndex idx(t.path.string());
  FakeMaps maps;
  Collector c(maps, idx, nullptr, ThrottleSource::Fentry);
  c.set_changes_only(true);
  maps.next.cgroups[pod1] = counters(1, 1'000, 1'000);
  maps.next.throttle[qos] = {2, 20'000'000};
  auto s = c.tick_at(1'000'000'000, 1);
  ASSERT_TRUE(s.ok());
  ASSERT_NE(find_sample(*s, qos), nullptr);

  fs::create_directories(t.path / "qos" / "pod2");
  uint64_t pod2 = ino(t.path / "qos" / "pod2");
  maps.next.removed = {pod1};  // its entry still there: deleted at this tick
  maps.next.cgroups[pod2] = counters(1, 1'000, 1'000);
  maps.next.throttle[qos] = {3, 30'000'000};
  s = c.tick_at(2'000'000'000, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->removed, std::vector<uint64_t>{pod1}) << "the QoS root was reported removed";
  const CgroupSample* q = find_sample(*s, qos);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->throttle_interval.throttled_ns, 10'000'000u) << "its past counted again";
  EXPECT_EQ(std::count(maps.forgotten_ids.begin(), maps.forgotten_ids.end(), qos), 0) << "its entry was deleted";

  // Tasks of its own show up (no cpu controller on v2 lets that be): it is
  // tracked as a cgroup now, with the same throttling state.
  maps.next.removed.clear();
  maps.next.cgroups[qos] = counters(1, 1'000, 1'000);
  maps.next.throttle[qos] = {4, 35'000'000};
  s = c.tick_at(3'000'000'000, 3);
  ASSERT_TRUE(s.ok());
  uint64_t listed = 0;
  for (const auto& cs : s->cgroups)
    if (cs.id == qos) listed += cs.throttle_interval.throttled_ns;
  EXPECT_EQ(listed, 5'000'000u);
}

// The same over a source that reads only what moved (the agent's): an
// ancestor's throttling is listed though nothing below it moved in the
// interval (fentry), and read from cpu.stat after a throttled wait below
// it, once more after, then not.
TEST(Collector, AnAncestorsThrottlingWithAReaderOfWhatMoved) {
  TempDir t;
  fs::create_directories(t.path / "pod" / "c1");
  uint64_t pod = ino(t.path / "pod"), c1 = ino(t.path / "pod" / "c1");
  CgroupIndex idx(t.path.string());
  {
    MovedOnlyMaps maps;
    Collector c(maps, idx, nullptr, ThrottleSource::Fentry);
    c.set_changes_only(true);
    maps.next.cgroups[c1] = counters(1, 1'000, 1'000);
    ASSERT_TRUE(c.tick_at(1'000'000'000, 1).ok());
    maps.next.throttle[pod] = {1, 7'000'000};  // c1 did not move
    auto s = c.tick_at(2'000'000'000, 2);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->cgroups.size(), 1u);
    EXPECT_EQ(s->cgroups[0].id, pod);
    EXPECT_TRUE(s->cgroups[0].ancestor);
    EXPECT_EQ(s->cgroups[0].throttle_interval.throttled_ns, 7'000'000u);
  }
  {
    MovedOnlyMaps maps;
    FakeThrottle thr;
    thr.values["/pod"] = {0, 0};
    thr.values["/pod/c1"] = {0, 0};
    Collector c(maps, idx, &thr, ThrottleSource::CpuStat);
    c.set_changes_only(true);
    maps.next.cgroups[c1] = counters(1, 1'000, 1'000);
    ASSERT_TRUE(c.tick_at(1'000'000'000, 1).ok());
    maps.next.cgroups[c1] = counters(2, 2'000, 2'000);
    maps.next.cgroups[c1].cause_ns[KH_WAIT_THROTTLED] = 1'000;
    thr.values["/pod"] = {1, 8'000'000};
    auto s = c.tick_at(2'000'000'000, 2);
    ASSERT_TRUE(s.ok());
    const CgroupSample* p = find_sample(*s, pod);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->throttle_interval.throttled_ns, 8'000'000u);
    thr.values["/pod"] = {2, 9'000'000};  // c1 no longer moves: read once more
    s = c.tick_at(3'000'000'000, 3);
    ASSERT_TRUE(s.ok());
    p = find_sample(*s, pod);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->throttle_interval.throttled_ns, 1'000'000u);
    const int reads = thr.reads["/pod"];
    s = c.tick_at(4'000'000'000, 4);  // unchanged: read once more
    ASSERT_TRUE(s.ok());
    s = c.tick_at(5'000'000'000, 5);  // then not
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(thr.reads["/pod"], reads + 1);
  }
}

// The BPF side adds a wait's bucket after its count: a reading can hold the
// count and not the bucket. The bucket must show at the cgroup's next wait,
// even if the cgroup only ran (no wait) in between.
TEST(Collector, ABucketReadAfterItsWaitCountShowsAtTheNextWait) {
  OverTree tree({"a"});
  FakeMaps& maps = tree.maps;
  Collector& c = tree.c;
  uint64_t a = tree.id("a");
  const uint32_t b5 = hist_bucket(5'000), b9 = hist_bucket(9'000'000);
  auto interval_of = [&](uint64_t ts) {
    auto s = c.tick_at(ts, ts);
    EXPECT_TRUE(s.ok());
    for (const auto& cg : s->cgroups)
      if (cg.id == a) return cg.interval;
    return CgroupCounters{};
  };
  CgroupCounters now = counters(10, 50'000, 1'000'000);  // 10 waits in b5
  maps.next.cgroups[a] = now;
  interval_of(1'000'000'000);

  now.waits = 11;  // an 9 ms wait, its bucket not yet added
  now.wait_ns += 9'000'000;
  now.cpu_ns += 1'000;
  maps.next.cgroups[a] = now;
  CgroupCounters d = interval_of(2'000'000'000);
  EXPECT_EQ(d.waits, 1u);
  EXPECT_EQ(hist_count(d.hist), 0u);

  now.hist[b9] = 1;  // the bucket lands; the cgroup only runs
  now.cpu_ns += 1'000;
  maps.next.cgroups[a] = now;
  d = interval_of(3'000'000'000);
  EXPECT_EQ(d.waits, 0u);
  EXPECT_EQ(d.cpu_ns, 1'000u);
  EXPECT_EQ(hist_count(d.hist), 0u);

  now.waits = 12;  // the next wait: both buckets now
  now.wait_ns += 5'000;
  now.hist[b5] += 1;
  maps.next.cgroups[a] = now;
  d = interval_of(4'000'000'000);
  EXPECT_EQ(d.waits, 1u);
  EXPECT_EQ(d.hist[b5], 1u);
  EXPECT_EQ(d.hist[b9], 1u);
}

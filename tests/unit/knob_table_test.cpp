// The knob table (model/knob_table.h): one complete row per cgroup file,
// today's names and orders; the write-only row (memory.reclaim) through the
// actuator; and the lever carried from a setting to its action record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "khagent/actuate/actuator.h"
#include "khagent/model/knob_table.h"
#include "khagent/model/knob_values.h"
#include "test_util.h"

using namespace khagent;

namespace {

// Cgroup files in memory, with errors to inject per file, as in
// actuate_test.cpp; memory.reclaim cannot be read, as in the kernel.
struct FakeFs : CgroupFs {
  std::map<std::pair<std::string, CgroupFile>, std::string> files;
  std::map<std::pair<std::string, CgroupFile>, int> write_errno;
  std::vector<std::string> writes;  // "cgroup file value" in order
  int reads = 0;
  Result<std::string> read(const std::string& cg, CgroupFile f) override {
    reads++;
    auto it = files.find({cg, f});
    if (it == files.end()) return make_error(ENOENT, cg + " gone");
    if (f == CgroupFile::MemoryReclaim) return make_error(EINVAL, "memory.reclaim is write-only");
    return it->second;
  }
  Result<void> write(const std::string& cg, CgroupFile f, const std::string& v) override {
    auto e = write_errno.find({cg, f});
    if (e != write_errno.end()) return make_error(e->second, "write refused");
    auto it = files.find({cg, f});
    if (it == files.end()) return make_error(ENOENT, cg + " gone");
    it->second = v;
    writes.push_back(cg + " " + cgroup_file_name(f) + " " + v);
    return {};
  }
  bool exists(const std::string& cg) override {
    for (const auto& [k, _] : files)
      if (k.first == cg) return true;
    return false;
  }
};

const CpuSet kCpus = {0, 1, 2, 3};
constexpr uint64_t kS = 1'000'000'000;
const uint64_t kPage = static_cast<uint64_t>(::getpagesize());

// The files of `files` sorted by a rank.
std::vector<CgroupFile> by_rank(std::vector<CgroupFile> files, int KnobRow::* rank) {
  std::stable_sort(files.begin(), files.end(),
                   [&](CgroupFile a, CgroupFile b) { return knob_row(a).*rank < knob_row(b).*rank; });
  return files;
}

}  // namespace

TEST(KnobTable, EveryFileHasExactlyOneRow) {
  ASSERT_EQ(knob_table().size(), kAllCgroupFiles.size());
  std::set<CgroupFile> seen;
  for (const auto& r : knob_table()) EXPECT_TRUE(seen.insert(r.file).second) << r.name;
  for (CgroupFile f : kAllCgroupFiles) {
    EXPECT_EQ(knob_row(f).file, f);
    EXPECT_FALSE(kernel_files(f).empty()) << cgroup_file_name(f);
    EXPECT_NE(knob_row(f).why_invalid, nullptr);
    EXPECT_NE(knob_row(f).normalize, nullptr);
  }
}

TEST(KnobTable, NamesRoundTripAndKeepTodaysStrings) {
  std::set<std::string> names;
  for (CgroupFile f : kAllCgroupFiles) {
    EXPECT_TRUE(names.insert(cgroup_file_name(f)).second) << cgroup_file_name(f);
    EXPECT_EQ(cgroup_file_from_name(cgroup_file_name(f)), f);
  }
  EXPECT_FALSE(cgroup_file_from_name("cpu.pressure").has_value());
  // The state file's names: never to change.
  EXPECT_STREQ(cgroup_file_name(CgroupFile::V1CpuCfs), "v1:cpu.cfs_quota_us+cpu.cfs_period_us");
  EXPECT_STREQ(cgroup_file_name(CgroupFile::V1MemoryLimit), "v1:memory.limit_in_bytes");
  EXPECT_STREQ(cgroup_file_name(CgroupFile::CpuMaxBurst), "cpu.max.burst");
  EXPECT_EQ(kernel_files(CgroupFile::V1CpuCfs), (std::vector<std::string>{"cpu.cfs_quota_us", "cpu.cfs_period_us"}));
  EXPECT_EQ(kernel_files(CgroupFile::V1CpuShares), std::vector<std::string>{"cpu.shares"});
  EXPECT_EQ(hierarchy_of(CgroupFile::V1CpusetCpus), Hierarchy::CpusetV1);
  EXPECT_EQ(hierarchy_of(CgroupFile::MemoryReclaim), Hierarchy::Unified);
  EXPECT_STREQ(knob_name(Knob::Memory), "memory.high");
  EXPECT_STREQ(knob_name(Knob::Reclaim), "memory.reclaim");
}

TEST(KnobTable, EachKnobHasOneFilePerBackend) {
  for (size_t k = 0; k < std::variant_size_v<KnobValue>; k++) {
    const auto knob = static_cast<Knob>(k);
    const CgroupFile v2 = file_for(CgroupBackend::V2, knob);
    EXPECT_EQ(knob_row(v2).knob, knob);
    EXPECT_FALSE(knob_row(v2).v1);
    if (auto v1 = knob_file(true, knob)) {
      EXPECT_EQ(file_for(CgroupBackend::V1Hybrid, knob), *v1);
      EXPECT_TRUE(knob_row(*v1).v1);
      // The same controller, by its v1 name (v2's io is v1's blkio).
      const std::string_view want = knob == Knob::IoLimit ? "blkio" : knob_row(v2).controller;
      EXPECT_EQ(std::string_view(knob_row(*v1).controller), want);
    }
  }
  EXPECT_EQ(file_for(CgroupBackend::V1Hybrid, Knob::Quota), CgroupFile::V1CpuCfs);
  EXPECT_EQ(file_for(CgroupBackend::V1Hybrid, Knob::Memory), CgroupFile::V1MemoryLimit);
  EXPECT_EQ(file_for(CgroupBackend::V1Hybrid, Knob::Reclaim), CgroupFile::V1MemoryPulse) << "v1: a limit pulse";
  EXPECT_FALSE(knob_file(true, Knob::Backstop).has_value()) << "memory.max: v1's limit is hard already";
  EXPECT_EQ(file_for(CgroupBackend::V2, Knob::Backstop), CgroupFile::MemoryMax);
}

TEST(KnobTable, RanksGiveTodaysOrders) {
  for (bool v1 : {false, true}) {
    auto f = [&](Knob k) { return *knob_file(v1, k); };
    const std::vector<CgroupFile> cpu = {f(Knob::Quota), f(Knob::Idle), f(Knob::Weight)};
    EXPECT_EQ(by_rank(cpu, &KnobRow::apply_rank),
              (std::vector<CgroupFile>{f(Knob::Weight), f(Knob::Idle), f(Knob::Quota)}));
    EXPECT_EQ(by_rank(cpu, &KnobRow::restore_rank),
              (std::vector<CgroupFile>{f(Knob::Quota), f(Knob::Idle), f(Knob::Weight)}));
    // Then cpuset, memory and burst, in both directions.
    for (auto rank : {&KnobRow::apply_rank, &KnobRow::restore_rank}) {
      EXPECT_LT(knob_row(f(Knob::Quota)).*rank, knob_row(f(Knob::Cpus)).*rank);
      EXPECT_LT(knob_row(f(Knob::Weight)).*rank, knob_row(f(Knob::Cpus)).*rank);
      EXPECT_LT(knob_row(f(Knob::Cpus)).*rank, knob_row(f(Knob::Memory)).*rank);
      EXPECT_LT(knob_row(f(Knob::Memory)).*rank, knob_row(f(Knob::Burst)).*rank);
    }
  }
}

TEST(KnobTable, RelationsBudgetAndPersistence) {
  EXPECT_EQ(knob_row(CgroupFile::CpuIdle).saved_with, CgroupFile::CpuWeight);
  EXPECT_EQ(knob_row(CgroupFile::V1CpuIdle).saved_with, CgroupFile::V1CpuShares);
  EXPECT_EQ(knob_row(CgroupFile::CpuMax).requires_one, CgroupFile::CpuIdle);
  EXPECT_EQ(knob_row(CgroupFile::V1CpuCfs).requires_one, CgroupFile::V1CpuIdle);
  std::set<CgroupFile> budget, write_only;
  for (const auto& r : knob_table()) {
    if (r.cpu_budget) budget.insert(r.file);
    if (r.persistence == Persistence::WriteOnly) write_only.insert(r.file);
    const bool idle = r.file == CgroupFile::CpuIdle || r.file == CgroupFile::V1CpuIdle;
    EXPECT_EQ(r.saved_with.has_value(), idle) << r.name;
    EXPECT_EQ(r.requires_one.has_value(), r.knob == Knob::Quota) << r.name;
  }
  EXPECT_EQ(budget, (std::set<CgroupFile>{CgroupFile::CpuMax, CgroupFile::CpusetCpus, CgroupFile::V1CpuCfs,
                                          CgroupFile::V1CpusetCpus}));
  EXPECT_EQ(write_only, (std::set<CgroupFile>{CgroupFile::MemoryReclaim, CgroupFile::V1MemoryPulse}));
  EXPECT_EQ(knob_row(CgroupFile::MemoryMax).persistence, Persistence::SaveRestore);
  EXPECT_EQ(knob_row(CgroupFile::V1MemoryPulse).hierarchy, Hierarchy::MemoryV1);
}

TEST(KnobTable, ReclaimGrammarAndRender) {
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryReclaim, "1048576", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryReclaim, "0", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryReclaim, "1G", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryReclaim, "max", {}).ok());
  EXPECT_EQ(normalize_cgroup_value(CgroupFile::MemoryReclaim, " 4096\n"), "4096");

  auto r = render(CgroupBackend::V2, {"/yarn", MemoryReclaim{64 * kPage + 1}, Lever::Memory}, {});
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->file, CgroupFile::MemoryReclaim);
  EXPECT_EQ(r->value, std::to_string(64 * kPage + 1));
  EXPECT_EQ(r->lever, Lever::Memory);
  auto small = render(CgroupBackend::V2, {"/yarn", MemoryReclaim{kPage - 1}}, {});
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().err, EINVAL);
  // On v1 the same ask is the depth of a limit pulse.
  auto v1 = render(CgroupBackend::V1Hybrid, {"/yarn", MemoryReclaim{8 * kPage}}, {});
  ASSERT_TRUE(v1.ok()) << v1.error().str();
  EXPECT_EQ(v1->file, CgroupFile::V1MemoryPulse);
  EXPECT_EQ(v1->value, std::to_string(8 * kPage));
}

TEST(KnobTable, OomGroupGrammarAndRenderOnV2Only) {
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryOomGroup, "0", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryOomGroup, "1", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryOomGroup, "2", {}).ok());
  EXPECT_EQ(cgroup_file_from_name("memory.oom.group"), CgroupFile::MemoryOomGroup);
  auto r = render(CgroupBackend::V2, {"/hadoop-yarn/container_1", MemoryOomGroup{}, Lever::OomGroup}, {});
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->file, CgroupFile::MemoryOomGroup);
  EXPECT_EQ(r->value, "1");
  auto v1 = render(CgroupBackend::V1Hybrid, {"/hadoop-yarn/container_1", MemoryOomGroup{}}, {});
  ASSERT_FALSE(v1.ok());
  EXPECT_EQ(v1.error().err, ENOTSUP);
}

TEST(KnobTable, BackstopGrammarAndRender) {
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryMax, "max", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::MemoryMax, "1048576", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryMax, "-1", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::MemoryMax, "1G", {}).ok());
  auto r = render(CgroupBackend::V2, {"/hadoop-yarn", MemoryMax{100 * kPage + 7}, Lever::Backstop}, {});
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->file, CgroupFile::MemoryMax);
  EXPECT_EQ(r->value, std::to_string(100 * kPage)) << "whole pages, as the kernel keeps it";
  EXPECT_EQ(render(CgroupBackend::V2, {"/hadoop-yarn", MemoryMax{}}, {})->value, "max");
  auto v1 = render(CgroupBackend::V1Hybrid, {"/hadoop-yarn", MemoryMax{kPage}}, {});
  ASSERT_FALSE(v1.ok());
  EXPECT_EQ(v1.error().err, ENOTSUP) << "v1's limit_in_bytes is hard already: no backstop file";
}

TEST(WriteOnlyKnob, WrittenEveryTimeWithoutReadOrOriginal) {
  TempDir t;
  FakeFs f;
  f.files[{"/yarn", CgroupFile::MemoryReclaim}] = "";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  const std::vector<Setting> want = {{"/yarn", MemoryReclaim{16 * kPage}}};
  for (int i = 0; i < 3; i++) {
    auto recs = a.apply_plan(a.plan(CgroupBackend::V2, want), kS * (i + 1));
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].outcome, ActionOutcome::Written) << recs[0].message;
    EXPECT_EQ(recs[0].from, "");
  }
  EXPECT_EQ(f.writes.size(), 3u) << "the same value is written again: an action, not a state";
  EXPECT_EQ(f.reads, 0);
  EXPECT_TRUE(st.empty()) << "no original saved";
  EXPECT_FALSE(budget_written(a.apply_plan(a.plan(CgroupBackend::V2, want), 4 * kS)));
  // Never restored: nothing to restore, nothing written on the way out.
  const size_t writes = f.writes.size();
  EXPECT_TRUE(a.restore_outside(a.plan(CgroupBackend::V2, {})).empty());
  EXPECT_TRUE(a.restore().empty());
  EXPECT_EQ(f.writes.size(), writes);
}

TEST(WriteOnlyKnob, DryRunWritesNothingAndIsNeverARepeat) {
  TempDir t;
  FakeFs f;
  f.files[{"/yarn", CgroupFile::MemoryReclaim}] = "";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, true, kCpus);
  for (int i = 0; i < 2; i++) {
    auto recs = a.apply_plan(a.plan(CgroupBackend::V2, {{"/yarn", MemoryReclaim{kPage}}}), kS);
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].outcome, ActionOutcome::DryRun);
    EXPECT_FALSE(recs[0].repeat);
  }
  EXPECT_TRUE(f.writes.empty());
  EXPECT_EQ(f.reads, 0);
}

TEST(WriteOnlyKnob, KernelRefusalsAndGoneCgroups) {
  TempDir t;
  FakeFs f;
  f.files[{"/yarn", CgroupFile::MemoryReclaim}] = "";
  f.files[{"/nomem", CgroupFile::CpuMax}] = "max 100000";  // a cgroup without the memory controller
  f.write_errno[{"/yarn", CgroupFile::MemoryReclaim}] = EAGAIN;
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  auto recs = a.apply({{"/yarn", CgroupFile::MemoryReclaim, "1048576"},
                       {"/gone", CgroupFile::MemoryReclaim, "1048576"},
                       {"/nomem", CgroupFile::MemoryReclaim, "1048576"},
                       {"/yarn", CgroupFile::MemoryReclaim, "1G"}},
                      kS);
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].outcome, ActionOutcome::Written) << "EAGAIN: it reclaimed less than asked, and that stays";
  EXPECT_NE(recs[0].message.find("less than asked (EAGAIN)"), std::string::npos) << recs[0].message;
  EXPECT_EQ(recs[1].outcome, ActionOutcome::Gone);
  EXPECT_EQ(recs[2].outcome, ActionOutcome::Rejected);
  EXPECT_NE(recs[2].message.find("controller is not enabled"), std::string::npos) << recs[2].message;
  EXPECT_EQ(recs[3].outcome, ActionOutcome::Rejected) << "not the file's grammar";
  EXPECT_TRUE(f.writes.empty());
  EXPECT_TRUE(st.empty());
}

TEST(WriteOnlyKnob, AStateFileEntryForItIsRefused) {
  StateStore st("/nonexistent/s.json");
  st.record("/yarn", CgroupFile::MemoryReclaim, "4096");
  st.record("/yarn", CgroupFile::MemoryHigh, "max");
  auto p = StateStore::parse(st.serialize());
  ASSERT_TRUE(p.ok()) << p.error().str();
  ASSERT_EQ(p->entries.size(), 1u);
  EXPECT_EQ(p->entries[0].file, CgroupFile::MemoryHigh);
  ASSERT_EQ(p->refused.size(), 1u);
  EXPECT_NE(p->refused[0].find("write-only"), std::string::npos) << p->refused[0];
}

TEST(ActionRecords, CarryTheLeverThatAsked) {
  TempDir t;
  FakeFs f;
  f.files[{"/yarn", CgroupFile::CpuIdle}] = "0";
  f.files[{"/yarn", CgroupFile::CpuWeight}] = "100";
  f.files[{"/yarn", CgroupFile::MemoryReclaim}] = "";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  auto p = a.plan(CgroupBackend::V2, {{"/yarn", CpuIdle{true}, Lever::Idle},
                                      {"/yarn", CpuQuota{10, 100000}, Lever::Quota},
                                      {"/yarn", MemoryReclaim{kPage}, Lever::Memory},
                                      {"/yarn", CpuWeight{50}}});
  ASSERT_EQ(p.refused.size(), 1u);
  EXPECT_EQ(p.refused[0].lever, Lever::Quota) << "a refused value names its lever too";
  auto recs = a.apply_plan(p, kS);
  std::map<CgroupFile, std::optional<Lever>> lever;
  for (const auto& r : recs) lever[r.file] = r.lever;
  EXPECT_EQ(lever[CgroupFile::CpuIdle], Lever::Idle);
  EXPECT_EQ(lever[CgroupFile::CpuMax], Lever::Quota);
  EXPECT_EQ(lever[CgroupFile::MemoryReclaim], Lever::Memory);
  EXPECT_FALSE(lever[CgroupFile::CpuWeight].has_value()) << "a setting without a lever";
  for (const auto& r : a.restore()) EXPECT_FALSE(r.lever.has_value()) << cgroup_file_name(r.file);
  // Settings still compare as before, the lever included.
  EXPECT_EQ((Setting{"/a", CpuIdle{true}}), (Setting{"/a", CpuIdle{true}}));
  EXPECT_NE((Setting{"/a", CpuIdle{true}, Lever::Idle}), (Setting{"/a", CpuIdle{true}}));
}

TEST(KnobTable, IoMaxLinesParseNormaliseAndPickOneDevice) {
  auto l = parse_io_max_line("259:0 wbps=1048576 riops=max");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->device, "259:0");
  EXPECT_EQ(l->wbps, 1048576u);
  EXPECT_FALSE(l->riops);
  EXPECT_EQ(format_io_max_line(*l), "259:0 rbps=max wbps=1048576 riops=max wiops=max");
  EXPECT_EQ(normalize_cgroup_value(CgroupFile::IoMax, " 259:0 wiops=9\n"), "259:0 rbps=max wbps=max riops=max wiops=9");
  for (const char* bad : {"", "sda wbps=1", "259:0 wbps=0", "259:0 wbps=1 wbps=2", "259:0 foo=1", "259:0 wbps",
                          "259 wbps=1", "259:0 wbps=-1"})
    EXPECT_FALSE(validate_cgroup_value(CgroupFile::IoMax, bad, {}).ok()) << bad;
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::IoMax, "8:16 rbps=max wbps=max riops=max wiops=max", {}).ok());
  const std::string file = "8:0 rbps=1 wbps=max riops=max wiops=max\n259:0 rbps=max wbps=7 riops=max wiops=max\n";
  EXPECT_EQ(io_max_line_of(file, "259:0"), "259:0 rbps=max wbps=7 riops=max wiops=max");
  EXPECT_EQ(io_max_line_of(file, "253:1"), "253:1 rbps=max wbps=max riops=max wiops=max");
  EXPECT_EQ(held_for(CgroupFile::IoMax, file, "8:0 rbps=max"), "8:0 rbps=1 wbps=max riops=max wiops=max");
  EXPECT_EQ(held_for(CgroupFile::CpuMax, "max 100000", "50000 100000"), "max 100000");
  EXPECT_EQ(io_max_device("259:0 rbps=1"), "259:0");
  EXPECT_EQ(io_max_device("max"), "");
  // Rendered from the typed value, v2 and v1 alike; a bad device is refused.
  Setting s{"/y", IoLimit{"259:0", 1u << 20, std::nullopt, std::nullopt, 64}, Lever::IoLimit};
  auto v2 = render(CgroupBackend::V2, s, {});
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->file, CgroupFile::IoMax);
  EXPECT_EQ(v2->value, "259:0 rbps=1048576 wbps=max riops=max wiops=64");
  auto v1 = render(CgroupBackend::V1Hybrid, s, {});
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->file, CgroupFile::V1BlkioThrottle);
  EXPECT_EQ(v1->value, v2->value);
  std::get<IoLimit>(s.value).device = "nvme0n1";
  EXPECT_FALSE(render(CgroupBackend::V2, s, {}));
  std::get<IoLimit>(s.value) = IoLimit{"259:0", 0u, std::nullopt, std::nullopt, std::nullopt};
  EXPECT_FALSE(render(CgroupBackend::V2, s, {})) << "0 is not a limit the kernel takes";
}

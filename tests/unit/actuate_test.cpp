#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "khagent/actuate/actuator.h"
#include "khagent/model/knob_values.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

namespace {

// Cgroup files in memory, with errors to inject per file.
struct FakeFs : CgroupFs {
  std::map<std::pair<std::string, CgroupFile>, std::string> files;
  std::map<std::pair<std::string, CgroupFile>, int> write_errno;
  std::vector<std::string> writes;  // "cgroup file value" in order
  Result<std::string> read(const std::string& cg, CgroupFile f) override {
    auto it = files.find({cg, f});
    if (it == files.end()) return make_error(ENOENT, cg + " gone");
    return it->second;
  }
  Result<void> write(const std::string& cg, CgroupFile f, const std::string& v) override {
    auto e = write_errno.find({cg, f});
    if (e != write_errno.end()) return make_error(e->second, "write refused");
    auto it = files.find({cg, f});
    if (it == files.end()) return make_error(ENOENT, cg + " gone");
    if (knob_row(f).per_device) {  // as io.max: one device's line changes, a line of all "max" goes
      auto want = parse_io_max_line(v);
      if (!want) return make_error(EINVAL, "bad io.max line");
      std::istringstream in(it->second);
      std::string line, out;
      while (std::getline(in, line))
        if (auto l = parse_io_max_line(line); l && l->device != want->device) out += line + "\n";
      if (want->rbps || want->wbps || want->riops || want->wiops) out += format_io_max_line(*want) + "\n";
      it->second = out;
      writes.push_back(cg + " " + cgroup_file_name(f) + " " + v);
      return {};
    }
    // As the kernel does: no weight while idle; setting idle shows the
    // weight as 0 (v2) or 3 shares (v1); clearing it resets the weight to
    // the default, not to what it was.
    const bool v1 = f == CgroupFile::V1CpuIdle || f == CgroupFile::V1CpuShares;
    const CgroupFile idle_f = v1 ? CgroupFile::V1CpuIdle : CgroupFile::CpuIdle;
    const CgroupFile weight_f = v1 ? CgroupFile::V1CpuShares : CgroupFile::CpuWeight;
    auto idle = files.find({cg, idle_f});
    if (f == weight_f && idle != files.end() && idle->second == "1") return make_error(EINVAL, "weight while idle");
    if (f == idle_f && files.count({cg, weight_f}) && normalize_cgroup_value(f, v) != it->second)
      files[{cg, weight_f}] = v == "1" ? (v1 ? "3" : "0") : (v1 ? "1024" : "100");
    it->second = normalize_cgroup_value(f, v);
    writes.push_back(cg + " " + cgroup_file_name(f) + " " + v);
    return {};
  }
  std::map<std::string, std::vector<std::string>> cpuset_v1_children;
  std::vector<std::string> children(Hierarchy h, const std::string& cg) override {
    auto it = cpuset_v1_children.find(cg);
    return h == Hierarchy::CpusetV1 && it != cpuset_v1_children.end() ? it->second : std::vector<std::string>{};
  }
  bool exists(const std::string& cg) override {
    for (const auto& [k, _] : files)
      if (k.first == cg) return true;
    return false;
  }
  void add(const std::string& cg) {
    files[{cg, CgroupFile::CpuMax}] = "max 100000";
    files[{cg, CgroupFile::CpuWeight}] = "100";
    files[{cg, CgroupFile::CpuIdle}] = "0";
    files[{cg, CgroupFile::CpusetCpus}] = "";
  }
  void remove(const std::string& cg) {
    for (auto it = files.begin(); it != files.end();) it = it->first.first == cg ? files.erase(it) : std::next(it);
  }
};

const CpuSet kCpus = {0, 1, 2, 3, 4, 5, 6, 7};
constexpr uint64_t kS = 1'000'000'000;

}  // namespace

TEST(CgroupValue, Validation) {
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpuMax, "max", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpuMax, "250000 100000", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuMax, "500 100000", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuMax, "1000 100", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuMax, "lots", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuMax, "1000 100000 x", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpuWeight, "1", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuWeight, "0", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuWeight, "10001", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpuIdle, "1", kCpus).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuIdle, "2", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpusetCpus, "4-7", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::CpusetCpus, "", kCpus).ok());
  auto bad = validate_cgroup_value(CgroupFile::CpusetCpus, "6-9", kCpus);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("CPU 8"), std::string::npos);
}

TEST(CgroupPath, Confinement) {
  TempDir t;
  fs::create_directories(t.path / "cg/a");
  fs::create_directories(t.path / "elsewhere");
  fs::create_directory_symlink(t.path / "elsewhere", t.path / "cg/link-out");
  fs::create_directory_symlink(t.path / "cg/a", t.path / "cg/link-in");
  std::string m = (t.path / "cg").string();
  EXPECT_EQ(*confine_cgroup_path(m, "/a"), "/a");
  EXPECT_EQ(*confine_cgroup_path(m, "a/"), "/a");
  EXPECT_EQ(*confine_cgroup_path(m, m + "/a"), "/a");
  EXPECT_EQ(*confine_cgroup_path(m, "/not/yet/there"), "/not/yet/there");
  EXPECT_TRUE(confine_cgroup_path(m, "/link-in").ok());
  auto dots = confine_cgroup_path(m, "/a/../../etc");
  ASSERT_FALSE(dots.ok());
  EXPECT_NE(dots.error().message.find(".."), std::string::npos);
  auto out = confine_cgroup_path(m, "/link-out");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("outside the cgroup2 mount"), std::string::npos);
  EXPECT_FALSE(confine_cgroup_path(m, "/sys/kernel/mm").ok());
  EXPECT_FALSE(confine_cgroup_path(m, "").ok());
}

TEST(StateStore, RoundTripAndPrevGeneration) {
  TempDir t;
  std::string p = (t.path / "state/state.json").string();
  StateStore s(p);
  ASSERT_TRUE(s.load().ok());
  EXPECT_TRUE(s.empty());
  s.record("/a", CgroupFile::CpuMax, "max 100000");
  s.record("/a", CgroupFile::CpuMax, "5000 100000");  // never overwrites an original
  s.record("/b", CgroupFile::CpusetCpus, "0-7");
  ASSERT_TRUE(s.save().ok());
  StateStore r(p);
  ASSERT_TRUE(r.load().ok()) << r.note();
  auto e = r.entries();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].cgroup, "/a");
  EXPECT_EQ(e[0].value, "max 100000");
  EXPECT_EQ(e[1].file, CgroupFile::CpusetCpus);

  // A second save keeps the first as .prev; damage the main file.
  r.record("/c", CgroupFile::CpuIdle, "0");
  ASSERT_TRUE(r.save().ok());
  ASSERT_TRUE(fs::exists(p + ".prev"));
  std::string text;
  {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  text.replace(text.find("max 100000"), 10, "max 100001");
  std::ofstream(p) << text;
  StateStore c(p);
  ASSERT_TRUE(c.load().ok());
  EXPECT_NE(c.note().find("checksum mismatch"), std::string::npos) << c.note();
  EXPECT_NE(c.note().find(".prev"), std::string::npos);
  EXPECT_EQ(c.entries().size(), 2u);  // the previous generation
  EXPECT_EQ(c.entries()[0].value, "max 100000");
}

TEST(StateStore, CorruptWithoutPrevIsAnError) {
  TempDir t;
  std::string p = (t.path / "state.json").string();
  std::ofstream(p) << "{\"version\":1,\"entries\":[{\"cgroup\":\"/a\"";
  StateStore s(p);
  auto r = s.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EBADMSG);
  EXPECT_NE(r.error().message.find("not valid JSON"), std::string::npos) << r.error().message;
  EXPECT_FALSE(StateStore::parse("{\"version\":2,\"entries\":[],\"checksum\":0}").ok());
}

TEST(Actuator, PlansTypedValuesForTheBackendAndAV1CpusetForEveryDescendant) {
  TempDir t;
  FakeFs f;
  for (const char* cg : {"/yarn", "/yarn/a", "/yarn/a/b", "/yarn/c"}) f.files[{cg, CgroupFile::V1CpusetCpus}] = "0-7";
  f.files[{"/yarn", CgroupFile::V1CpuCfs}] = "-1 100000";
  f.files[{"/yarn", CgroupFile::V1CpuIdle}] = "0";
  f.files[{"/yarn", CgroupFile::V1CpuShares}] = "1024";
  f.cpuset_v1_children = {{"/yarn", {"/yarn/a", "/yarn/c"}}, {"/yarn/a", {"/yarn/a/b"}}};
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  auto p = a.plan(CgroupBackend::V1Hybrid,
                  {{"/yarn", CpuIdle{true}}, {"/yarn", CpuList{{6, 7}}}, {"/yarn", CpuQuota{999, 100000}}});
  ASSERT_EQ(p.refused.size(), 1u) << "a quota under the kernel's minimum is refused before any write";
  EXPECT_EQ(p.refused[0].file, CgroupFile::V1CpuCfs);
  EXPECT_EQ(p.refused[0].outcome, ActionOutcome::Rejected);
  ASSERT_EQ(p.files.size(), 5u);  // the idle, and the cpuset on the root and its three descendants
  auto recs = a.apply_plan(p, kS);
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_EQ(recs[0].outcome, ActionOutcome::Rejected);
  for (const char* cg : {"/yarn", "/yarn/a", "/yarn/a/b", "/yarn/c"})
    EXPECT_EQ((f.files[{cg, CgroupFile::V1CpusetCpus}]), "6-7") << cg;
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::V1CpuIdle}]), "1");
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::V1CpuCfs}]), "-1 100000");
  // Narrowing: children before their parents.
  auto at = [&](const std::string& w) { return std::find(f.writes.begin(), f.writes.end(), w) - f.writes.begin(); };
  EXPECT_LT(at("/yarn/a/b v1:cpuset.cpus 6-7"), at("/yarn/a v1:cpuset.cpus 6-7"));
  EXPECT_LT(at("/yarn/a v1:cpuset.cpus 6-7"), at("/yarn v1:cpuset.cpus 6-7"));
  // Everything in the plan is wanted, the refused value included.
  EXPECT_TRUE(a.restore_outside(p).empty());
  // The same values on v2: v2 files, no descendants.
  auto p2 = a.plan(CgroupBackend::V2, {{"/yarn", CpuList{{6, 7}}}, {"/yarn", CpuQuota{20000, 100000}}});
  ASSERT_EQ(p2.files.size(), 2u);
  EXPECT_EQ(p2.files[0].file, CgroupFile::CpusetCpus);
  EXPECT_EQ(p2.files[1].file, CgroupFile::CpuMax);
  EXPECT_EQ(p2.files[1].value, "20000 100000");
}

TEST(Actuator, RecordsOriginalsBeforeWritingAndRestores) {
  TempDir t;
  FakeFs f;
  f.add("/be");
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  auto r = a.apply({{"/be", CgroupFile::CpuMax, "200000 100000"}, {"/be", CgroupFile::CpuIdle, "1"}}, 1 * kS);
  ASSERT_EQ(r.size(), 2u);
  ASSERT_EQ(r[1].file, CgroupFile::CpuMax);  // idle first: see QuotaOnlyEverWithIdle
  EXPECT_EQ(r[1].outcome, ActionOutcome::Written);
  EXPECT_EQ(r[1].from, "max 100000");
  EXPECT_EQ((f.files[{"/be", CgroupFile::CpuMax}]), "200000 100000");
  // The originals are on disk already.
  StateStore disk((t.path / "s.json").string());
  ASSERT_TRUE(disk.load().ok());
  EXPECT_EQ(disk.entries().size(), 3u);  // with the weight saved with the idle
  // Same again: unchanged, no write.
  f.writes.clear();
  auto again = a.apply({{"/be", CgroupFile::CpuMax, "200000 100000"}}, 2 * kS);
  EXPECT_EQ(again[0].outcome, ActionOutcome::Unchanged);
  EXPECT_TRUE(f.writes.empty());
  // Restore puts the originals back and empties the state.
  auto rr = a.restore();
  ASSERT_EQ(rr.size(), 3u);
  for (const auto& x : rr)  // the default weight comes back with the idle
    EXPECT_EQ(x.outcome, x.file == CgroupFile::CpuWeight ? ActionOutcome::Unchanged : ActionOutcome::Restored)
        << x.message;
  EXPECT_EQ((f.files[{"/be", CgroupFile::CpuMax}]), "max 100000");
  EXPECT_EQ((f.files[{"/be", CgroupFile::CpuIdle}]), "0");
  StateStore after((t.path / "s.json").string());
  ASSERT_TRUE(after.load().ok());
  EXPECT_TRUE(after.empty());
}

// A quota is never in force on a cgroup without cpu.idle, not even between
// two writes of one tick: idle is written before the quota, and the quota
// lifted before idle is cleared (seen in the VM suite before this order).
TEST(Actuator, QuotaOnlyEverWithIdle) {
  for (bool v1 : {false, true}) {
    SCOPED_TRACE(v1 ? "v1" : "v2");
    TempDir t;
    FakeFs f;
    const CgroupFile idle = v1 ? CgroupFile::V1CpuIdle : CgroupFile::CpuIdle;
    const CgroupFile quota = v1 ? CgroupFile::V1CpuCfs : CgroupFile::CpuMax;
    const CgroupFile weight = v1 ? CgroupFile::V1CpuShares : CgroupFile::CpuWeight;
    f.files[{"/yarn", idle}] = "0";
    f.files[{"/yarn", quota}] = v1 ? "-1 100000" : "max 100000";
    f.files[{"/yarn", weight}] = v1 ? "8192" : "800";
    StateStore st((t.path / "s.json").string());
    Actuator a(f, st, false, kCpus);
    // Given in the order a caller might list them: the quota first.
    a.apply({{"/yarn", quota, "20000 100000"}, {"/yarn", idle, "1"}}, 1 * kS);
    const std::string idle_on = std::string("/yarn ") + cgroup_file_name(idle) + " 1";
    const std::string quota_on = std::string("/yarn ") + cgroup_file_name(quota) + " 20000 100000";
    ASSERT_EQ(f.writes.size(), 2u);
    EXPECT_EQ(f.writes[0], idle_on);
    EXPECT_EQ(f.writes[1], quota_on);
    f.writes.clear();
    a.restore();
    ASSERT_GE(f.writes.size(), 2u);
    EXPECT_EQ(f.writes[0].rfind(std::string("/yarn ") + cgroup_file_name(quota), 0), 0u) << f.writes[0];
    EXPECT_EQ(f.writes[1], std::string("/yarn ") + cgroup_file_name(idle) + " 0");
    EXPECT_EQ((f.files[{"/yarn", weight}]), v1 ? "8192" : "800") << "the owner's weight after the idle";
  }
}

// Where idle cannot be in force (its write refused, or cleared by someone
// else afterwards), no quota goes on; and a quota that cannot be lifted
// keeps its idle on restore.
TEST(Actuator, NoQuotaWhereIdleIsNotInForce) {
  TempDir t;
  FakeFs f;
  f.add("/yarn");
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  f.write_errno[{"/yarn", CgroupFile::CpuIdle}] = EINVAL;
  auto r = a.apply({{"/yarn", CgroupFile::CpuIdle, "1"}, {"/yarn", CgroupFile::CpuMax, "20000 100000"}}, 1 * kS);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Rejected);
  EXPECT_EQ(r[1].outcome, ActionOutcome::Rejected);
  EXPECT_NE(r[1].message.find("cpu.idle is not in force"), std::string::npos) << r[1].message;
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::CpuMax}]), "max 100000");
  // Idle accepted: the quota follows. Then someone clears idle, and the
  // fast path (quotas alone) must not put a quota back on.
  f.write_errno.clear();
  r = a.apply({{"/yarn", CgroupFile::CpuIdle, "1"}, {"/yarn", CgroupFile::CpuMax, "20000 100000"}}, 2 * kS);
  EXPECT_EQ(r[1].outcome, ActionOutcome::Written) << r[1].message;
  f.files[{"/yarn", CgroupFile::CpuIdle}] = "0";
  r = a.apply({{"/yarn", CgroupFile::CpuMax, "10000 100000"}}, 3 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Rejected) << r[0].message;
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::CpuMax}]), "20000 100000");
  // Lifting a quota is always allowed.
  r = a.apply({{"/yarn", CgroupFile::CpuMax, "max 100000"}}, 4 * kS);
  EXPECT_NE(r[0].outcome, ActionOutcome::Rejected) << r[0].message;
  // Restore with a quota the kernel will not lift: idle stays with it.
  f.files[{"/yarn", CgroupFile::CpuIdle}] = "1";
  f.files[{"/yarn", CgroupFile::CpuMax}] = "10000 100000";
  f.write_errno[{"/yarn", CgroupFile::CpuMax}] = EBUSY;
  auto back = a.restore();
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::CpuIdle}]), "1") << "idle cleared under a quota that stayed";
  for (const auto& b : back)
    if (b.file == CgroupFile::CpuIdle) {
      EXPECT_EQ(b.outcome, ActionOutcome::Rejected);
    }
  // The next attempt, with the quota liftable, restores both.
  f.write_errno.clear();
  a.restore();
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::CpuMax}]), "max 100000");
  EXPECT_EQ((f.files[{"/yarn", CgroupFile::CpuIdle}]), "0");
}

TEST(Actuator, RestartReadoptsWithoutLosingOriginals) {
  TempDir t;
  FakeFs f;
  f.add("/be");
  std::string p = (t.path / "s.json").string();
  {
    StateStore st(p);
    Actuator a(f, st, false, kCpus);
    a.apply({{"/be", CgroupFile::CpuMax, "200000 100000"}}, 1 * kS);
  }  // SIGKILL: nothing restored
  StateStore st(p);
  ASSERT_TRUE(st.load().ok());
  Actuator b(f, st, false, kCpus);
  auto r = b.apply({{"/be", CgroupFile::CpuMax, "100000 100000"}}, 1 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Written);
  ASSERT_EQ(st.entries().size(), 1u);
  EXPECT_EQ(st.entries()[0].value, "max 100000");  // the real original, not our 2 cores
  b.restore();
  EXPECT_EQ((f.files[{"/be", CgroupFile::CpuMax}]), "max 100000");
}

TEST(Actuator, VanishedAndRejected) {
  TempDir t;
  FakeFs f;
  f.add("/a");
  f.add("/b");
  f.add("/c");
  f.add("/d");
  f.write_errno[{"/b", CgroupFile::CpuMax}] = EINVAL;
  f.write_errno[{"/c", CgroupFile::CpusetCpus}] = EBUSY;
  f.write_errno[{"/d", CgroupFile::CpuIdle}] = EACCES;
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  f.remove("/a");
  auto r = a.apply({{"/a", CgroupFile::CpuMax, "100000 100000"},
                    {"/b", CgroupFile::CpuMax, "100000 100000"},
                    {"/c", CgroupFile::CpusetCpus, "4-7"},
                    {"/d", CgroupFile::CpuIdle, "1"},
                    {"/d", CgroupFile::CpuWeight, "0"}},
                   1 * kS);
  std::map<std::string, ActionRecord> by;
  for (const auto& x : r) by[x.cgroup + cgroup_file_name(x.file)] = x;
  EXPECT_EQ(by["/acpu.max"].outcome, ActionOutcome::Gone);
  EXPECT_EQ(by["/bcpu.max"].outcome, ActionOutcome::Rejected);
  EXPECT_NE(by["/bcpu.max"].message.find("Invalid argument"), std::string::npos);
  EXPECT_EQ(by["/ccpuset.cpus"].outcome, ActionOutcome::Rejected);
  EXPECT_NE(by["/ccpuset.cpus"].message.find("busy"), std::string::npos);
  EXPECT_EQ(by["/dcpu.idle"].outcome, ActionOutcome::Rejected);
  EXPECT_EQ(by["/dcpu.weight"].outcome, ActionOutcome::Rejected);  // invalid: never written
  EXPECT_NE(by["/dcpu.weight"].message.find("1..10000"), std::string::npos);
  EXPECT_TRUE(f.writes.empty());
  // The cgroup disappears after khagent changed it: its original is dropped.
  f.write_errno.clear();
  ASSERT_EQ(a.apply({{"/b", CgroupFile::CpuMax, "100000 100000"}}, 2 * kS)[0].outcome, ActionOutcome::Written);
  f.remove("/b");
  EXPECT_EQ(a.apply({{"/b", CgroupFile::CpuMax, "50000 100000"}}, 3 * kS)[0].outcome, ActionOutcome::Gone);
  EXPECT_FALSE(st.has("/b", CgroupFile::CpuMax));
}

TEST(Actuator, MissingControllerFileIsRejectedNotGone) {
  TempDir t;
  FakeFs f;
  f.add("/nocpu");
  f.files.erase({"/nocpu", CgroupFile::CpuMax});
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  auto r = a.apply({{"/nocpu", CgroupFile::CpuMax, "100000 100000"}}, 1 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Rejected);
  EXPECT_NE(r[0].message.find("controller is not enabled"), std::string::npos);
}

TEST(Actuator, RevertByAnotherWriterIsReportedNotFought) {
  TempDir t;
  FakeFs f;
  f.add("/qos");
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus, 60 * kS);
  a.apply({{"/qos", CgroupFile::CpuWeight, "1"}}, 1 * kS);
  f.files[{"/qos", CgroupFile::CpuWeight}] = "2";  // the kubelet re-applies its shares
  f.writes.clear();
  auto r = a.apply({{"/qos", CgroupFile::CpuWeight, "1"}}, 2 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Reverted);
  EXPECT_NE(r[0].message.find("someone else"), std::string::npos);
  EXPECT_EQ(a.apply({{"/qos", CgroupFile::CpuWeight, "1"}}, 30 * kS)[0].outcome, ActionOutcome::Backoff);
  EXPECT_TRUE(f.writes.empty());
  EXPECT_EQ(a.apply({{"/qos", CgroupFile::CpuWeight, "1"}}, 62 * kS)[0].outcome, ActionOutcome::Written);
}

// CPU burst: cpu.max.burst on v2, cpu.cfs_burst_us in the v1 cpu
// hierarchy; saved and restored; another writer's value is not fought.
TEST(Actuator, BurstOnBothBackendsSavedRestoredAndNotFought) {
  TempDir t;
  FakeFs f;
  const std::string pod = "/kubepods/burstable/pod1";
  f.files[{pod, CgroupFile::CpuMaxBurst}] = "0";
  f.files[{pod, CgroupFile::V1CpuCfsBurst}] = "0";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus, 60 * kS);
  auto p1 = a.plan(CgroupBackend::V1Hybrid, {{pod, CpuBurst{10000}}});
  ASSERT_EQ(p1.files.size(), 1u);
  EXPECT_EQ(p1.files[0].file, CgroupFile::V1CpuCfsBurst);
  EXPECT_EQ(p1.files[0].value, "10000");
  auto p2 = a.plan(CgroupBackend::V2, {{pod, CpuBurst{10000}}});
  ASSERT_EQ(p2.files.size(), 1u);
  EXPECT_EQ(p2.files[0].file, CgroupFile::CpuMaxBurst);
  auto r = a.apply_plan(p2, kS);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Written);
  EXPECT_EQ(r[0].from, "0");
  EXPECT_EQ((f.files[{pod, CgroupFile::CpuMaxBurst}]), "10000");
  EXPECT_TRUE(a.plan(CgroupBackend::V2, {{pod, CpuBurst{2'000'000}}}).refused.empty()) << "the kernel checks the quota";
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpuMaxBurst, "-1", kCpus).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::V1CpuCfsBurst, "0", kCpus).ok());
  // Restored to what was there first.
  a.restore();
  EXPECT_EQ((f.files[{pod, CgroupFile::CpuMaxBurst}]), "0");
  // Someone else set another burst: reported, not fought, and theirs from
  // then on: its original forgotten, not restored over their value.
  EXPECT_EQ(a.apply_plan(p2, 4 * kS)[0].outcome, ActionOutcome::Written);
  f.files[{pod, CgroupFile::CpuMaxBurst}] = "5000";
  auto rev = a.apply_plan(p2, 5 * kS);
  EXPECT_EQ(rev[0].outcome, ActionOutcome::Reverted);
  EXPECT_FALSE(st.has(pod, CgroupFile::CpuMaxBurst));
  EXPECT_EQ(a.apply_plan(p2, 6 * kS)[0].outcome, ActionOutcome::Backoff);
  a.restore();
  EXPECT_EQ((f.files[{pod, CgroupFile::CpuMaxBurst}]), "5000");
}

TEST(Actuator, CpusetOrderWidenParentsFirstNarrowChildrenFirst) {
  TempDir t;
  FakeFs f;
  f.add("/p");
  f.add("/p/c");
  f.files[{"/p", CgroupFile::CpusetCpus}] = "4-5";
  f.files[{"/p/c", CgroupFile::CpusetCpus}] = "4-5";
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, false, kCpus);
  a.apply({{"/p/c", CgroupFile::CpusetCpus, "4-7"}, {"/p", CgroupFile::CpusetCpus, "4-7"}}, 1 * kS);
  ASSERT_EQ(f.writes.size(), 2u);
  EXPECT_EQ(f.writes[0], "/p cpuset.cpus 4-7");
  EXPECT_EQ(f.writes[1], "/p/c cpuset.cpus 4-7");
  f.writes.clear();
  a.apply({{"/p", CgroupFile::CpusetCpus, "6-7"}, {"/p/c", CgroupFile::CpusetCpus, "6-7"}}, 2 * kS);
  ASSERT_EQ(f.writes.size(), 2u);
  EXPECT_EQ(f.writes[0], "/p/c cpuset.cpus 6-7");
  EXPECT_EQ(f.writes[1], "/p cpuset.cpus 6-7");
}

TEST(Actuator, DryRunWritesNothing) {
  TempDir t;
  FakeFs f;
  f.add("/be");
  StateStore st((t.path / "s.json").string());
  Actuator a(f, st, true, kCpus);
  auto r = a.apply({{"/be", CgroupFile::CpuMax, "100000 100000"}}, 1 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::DryRun);
  EXPECT_TRUE(f.writes.empty());
  EXPECT_FALSE(fs::exists(t.path / "s.json"));
}

TEST(Actuator, UnsavableStateMeansNoWrite) {
  FakeFs f;
  f.add("/be");
  StateStore st("/proc/khagent-cannot-write-here/state.json");
  Actuator a(f, st, false, kCpus);
  auto r = a.apply({{"/be", CgroupFile::CpuMax, "100000 100000"}}, 1 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Rejected);
  EXPECT_NE(r[0].message.find("original value not saved"), std::string::npos);
  EXPECT_TRUE(f.writes.empty());
}

// io.max holds a line per device: khagent saves, compares and restores
// the line of the device it limits, never another device's, and refuses a
// second device on the same cgroup while it holds the first (its original
// would go unsaved).
TEST(Actuator, IoMaxIsOneDevicesLineSavedAndRestoredAlone) {
  TempDir t;
  FakeFs fs;
  const auto key = std::make_pair(std::string("/hadoop-yarn"), CgroupFile::IoMax);
  fs.files[key] = "8:0 rbps=max wbps=1048576 riops=max wiops=max\n";  // an operator's limit on another disk
  StateStore store((t.path / "s.json").string());
  Actuator act(fs, store, false, kCpus);
  Setting s{"/hadoop-yarn", IoLimit{"259:0", std::nullopt, 50u << 20, std::nullopt, 400}, Lever::IoLimit};
  auto plan = act.plan(CgroupBackend::V2, {s});
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].value, "259:0 rbps=max wbps=52428800 riops=max wiops=400");
  auto r = act.apply_plan(plan, 0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Written);
  EXPECT_EQ(r[0].from, "259:0 rbps=max wbps=max riops=max wiops=max");
  EXPECT_EQ(store.original("/hadoop-yarn", CgroupFile::IoMax), "259:0 rbps=max wbps=max riops=max wiops=max");
  EXPECT_NE(fs.files[key].find("8:0 rbps=max wbps=1048576"), std::string::npos);
  // Unchanged at the next tick, though the file holds two lines.
  r = act.apply_plan(plan, 1 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Unchanged);
  // Another device on the same cgroup: refused while the first is held.
  Setting other = s;
  std::get<IoLimit>(other.value).device = "253:0";
  r = act.apply_plan(act.plan(CgroupBackend::V2, {other}), 2 * kS);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Rejected);
  EXPECT_NE(r[0].message.find("held on device 259:0"), std::string::npos) << r[0].message;
  // Released: the device's line goes, the operator's stays.
  r = act.restore_outside(Actuator::Plan{});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].outcome, ActionOutcome::Restored);
  EXPECT_EQ(fs.files[key], "8:0 rbps=max wbps=1048576 riops=max wiops=max\n");
  EXPECT_FALSE(store.has("/hadoop-yarn", CgroupFile::IoMax));
}

// The v1 counterpart reads the four blkio.throttle files as io.max lines
// and writes one device's line as a line in each ("0": no limit).
TEST(RealCgroupFs, V1BlkioThrottleReadsAndWritesAsIoMax) {
  TempDir t;
  t.write("blkio/yarn/blkio.throttle.read_bps_device", "");
  t.write("blkio/yarn/blkio.throttle.write_bps_device", "8:0 1048576\n259:0 2097152\n");
  t.write("blkio/yarn/blkio.throttle.read_iops_device", "");
  t.write("blkio/yarn/blkio.throttle.write_iops_device", "259:0 100\n");
  CgroupRoots roots;
  roots.unified = t.path.string();
  roots.blkio_v1 = (t.path / "blkio").string();
  RealCgroupFs rfs(roots);
  auto text = rfs.read("/yarn", CgroupFile::V1BlkioThrottle);
  ASSERT_TRUE(text) << text.error().str();
  EXPECT_EQ(*text, "259:0 rbps=max wbps=2097152 riops=max wiops=100\n8:0 rbps=max wbps=1048576 riops=max wiops=max");
  EXPECT_EQ(held_for(CgroupFile::V1BlkioThrottle, *text, "259:0 rbps=5"),
            "259:0 rbps=max wbps=2097152 riops=max wiops=100");
  ASSERT_TRUE(rfs.write("/yarn", CgroupFile::V1BlkioThrottle, "259:0 rbps=max wbps=4096 riops=max wiops=max").ok());
  // (A plain file keeps the last line written; the kernel merges them.)
  std::ifstream wb(t.path / "blkio/yarn/blkio.throttle.write_bps_device"),
      wi(t.path / "blkio/yarn/blkio.throttle.write_iops_device");
  std::string l;
  std::getline(wb, l);
  EXPECT_EQ(l, "259:0 4096");
  std::getline(wi, l);
  EXPECT_EQ(l, "259:0 0");
  EXPECT_FALSE(rfs.write("/yarn", CgroupFile::V1BlkioThrottle, "sda rbps=1").ok());
}

// An IO limit only where io.max is hierarchical: cgroup v2 with the io
// controller; a hybrid host's v1 blk-throttle is flat, and says so.
TEST(IoController, AvailableOnCgroupV2WithIoOnly) {
  TempDir t;
  t.write("cgroup.controllers", "cpuset cpu io memory pids\n");
  CgroupRoots roots;
  roots.unified = t.path.string();
  EXPECT_TRUE(io_controller_for(CgroupBackend::V2, roots).ok());
  t.write("cgroup.controllers", "cpuset cpu memory pids\n");
  auto none = io_controller_for(CgroupBackend::V2, roots);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("io controller is not available"), std::string::npos);
  roots.blkio_v1 = (t.path / "blkio").string();
  auto v1 = io_controller_for(CgroupBackend::V1Hybrid, roots);
  ASSERT_FALSE(v1.ok());
  EXPECT_NE(v1.error().message.find("flat"), std::string::npos) << v1.error().message;
  t.write("cgroup.controllers", "io\n");
  auto mixed = io_controller_for(CgroupBackend::V1Hybrid, roots);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.error().message.find("pure cgroup v2"), std::string::npos) << mixed.error().message;
}

TEST(RealCgroupFs, FixtureDirectory) {
  TempDir t;
  t.write("be/cpu.max", "max 100000\n");
  RealCgroupFs rfs(t.path.string());
  EXPECT_EQ(*rfs.read("/be", CgroupFile::CpuMax), "max 100000");
  ASSERT_TRUE(rfs.write("/be", CgroupFile::CpuMax, "50000 100000").ok());
  EXPECT_EQ(*rfs.read("/be", CgroupFile::CpuMax), "50000 100000");
  // Written as echo(1) writes: an empty value still reaches the kernel.
  t.write("be/cpuset.cpus", "1\n");
  ASSERT_TRUE(rfs.write("/be", CgroupFile::CpusetCpus, "").ok());
  std::ifstream in(t.path / "be/cpuset.cpus");
  EXPECT_EQ(in.get(), '\n');
  auto gone = rfs.write("/nope", CgroupFile::CpuMax, "max");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().err, ENOENT);
  EXPECT_TRUE(rfs.exists("/be"));
  EXPECT_FALSE(rfs.exists("/nope"));
}

// Clearing cpu.idle resets the weight to the default in the kernel: the
// owner's weight (the kubelet's 2 shares on a BestEffort pod, a YARN root's
// configured shares) comes back with the restore, v2 and v1, at exit and
// when the idle is released.
TEST(Actuator, IdleRestoreBringsTheOwnersWeightBack) {
  for (bool v1 : {false, true}) {
    SCOPED_TRACE(v1 ? "v1" : "v2");
    TempDir t;
    FakeFs fs;
    const CgroupFile idle = v1 ? CgroupFile::V1CpuIdle : CgroupFile::CpuIdle;
    const CgroupFile weight = v1 ? CgroupFile::V1CpuShares : CgroupFile::CpuWeight;
    const std::string owners = v1 ? "2" : "1";
    fs.files[std::make_pair(std::string("/be-pod"), idle)] = "0";
    fs.files[std::make_pair(std::string("/be-pod"), weight)] = owners;
    StateStore store((t.path / "s.json").string());
    Actuator act(fs, store, false, kCpus);
    auto r = act.apply({{"/be-pod", idle, "1"}}, 0);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].outcome, ActionOutcome::Written);
    EXPECT_TRUE(store.has("/be-pod", weight)) << "the weight was not saved with the idle";
    // Still wanted: the weight stays saved and untouched.
    act.restore_unwanted({{"/be-pod", idle, "1"}});
    EXPECT_EQ(fs.files[std::make_pair(std::string("/be-pod"), idle)], "1");
    // A restart re-reads the state file and restores from it.
    StateStore again((t.path / "s.json").string());
    ASSERT_TRUE(again.load().ok());
    Actuator after(fs, again, false, kCpus);
    auto back = after.restore();
    EXPECT_EQ(fs.files[std::make_pair(std::string("/be-pod"), idle)], "0");
    EXPECT_EQ(fs.files[std::make_pair(std::string("/be-pod"), weight)], owners);
    for (const auto& b : back) EXPECT_NE(b.outcome, ActionOutcome::Rejected) << b.message;
    EXPECT_TRUE(again.entries().empty());
    // Released while running: both come back.
    Actuator live(fs, again, false, kCpus);
    live.apply({{"/be-pod", idle, "1"}}, 0);
    live.restore_unwanted({});
    EXPECT_EQ(fs.files[std::make_pair(std::string("/be-pod"), idle)], "0");
    EXPECT_EQ(fs.files[std::make_pair(std::string("/be-pod"), weight)], owners);
  }
}

// Writes never leave the cgroup tree: the state file, the configuration and
// symlinks cannot point a write elsewhere (regression tests for the
// hardening review), and the v1 backend writes the right kernel files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "khagent/actuate/actuator.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A state file as an attacker writes it: any entries, a valid checksum.
std::string forged_state(const nlohmann::json& entries) {
  std::string dump = entries.dump();
  auto crc =
      static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(dump.data()), static_cast<uInt>(dump.size())));
  return nlohmann::json{{"version", 1}, {"entries", entries}, {"checksum", crc}}.dump();
}

}  // namespace

TEST(Confinement, ForgedStateFileCannotWriteOutsideTheTree) {
  TempDir t;
  fs::create_directories(t.path / "cg/victim-inside");
  t.write("cg/victim-inside/cpu.max", "max 100000\n");
  fs::create_directories(t.path / "V");
  t.write("V/cpu.max", "max 100000\n");
  std::string abs_v = (t.path / "V").string();
  nlohmann::json entries = nlohmann::json::array();
  entries.push_back({{"cgroup", "/../../../../" + abs_v}, {"file", "cpu.max"}, {"original", "PWNED 100000"}});
  entries.push_back({{"cgroup", "/../V"}, {"file", "cpu.max"}, {"original", "50000 100000"}});
  entries.push_back({{"cgroup", "/victim-inside"}, {"file", "cpu.max"}, {"original", "max 100000\nPWNED"}});
  entries.push_back({{"cgroup", "/victim-inside"}, {"file", "../../V/cpu.max"}, {"original", "max 100000"}});
  entries.push_back({{"cgroup", "/"}, {"file", "cpu.max"}, {"original", "max 100000"}});
  entries.push_back({{"cgroup", "/victim-inside"}, {"file", "cpu.max"}, {"original", "50000 100000"}});
  t.write("state.json", forged_state(entries));

  StateStore st((t.path / "state.json").string());
  ASSERT_TRUE(st.load().ok()) << st.note();
  EXPECT_EQ(st.refused().size(), 5u) << st.note();
  ASSERT_EQ(st.entries().size(), 1u);  // only the well-formed entry inside the tree
  RealCgroupFs cgfs((t.path / "cg").string());
  Actuator a(cgfs, st, false, {});
  auto recs = a.restore();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].outcome, ActionOutcome::Restored) << recs[0].message;
  EXPECT_EQ(slurp(t.path / "V/cpu.max"), "max 100000\n");
  EXPECT_EQ(slurp(t.path / "cg/victim-inside/cpu.max"), "50000 100000\n");
}

TEST(Confinement, SymlinksOnTheWayAreNotFollowed) {
  for (bool openat2 : {true, false}) {
    SCOPED_TRACE(openat2 ? "openat2" : "component walk");
    TempDir t;
    fs::create_directories(t.path / "cg/real");
    fs::create_directories(t.path / "outside");
    t.write("outside/cpu.max", "max 100000\n");
    t.write("cg/real/cpu.max", "max 100000\n");
    fs::create_directory_symlink(t.path / "outside", t.path / "cg/link-out");
    fs::create_symlink(t.path / "outside/cpu.max", t.path / "cg/real/cpu.weight");
    RealCgroupFs cgfs(CgroupRoots{(t.path / "cg").string(), "", ""}, openat2);
    auto w = cgfs.write("/link-out", CgroupFile::CpuMax, "2000 100000");
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(w.error().err == ELOOP || w.error().err == EXDEV || w.error().err == ENOTDIR) << w.error().str();
    EXPECT_FALSE(cgfs.write("/real", CgroupFile::CpuWeight, "1").ok());  // a symlinked file
    EXPECT_FALSE(cgfs.write("/real/../../outside", CgroupFile::CpuMax, "2000 100000").ok());
    EXPECT_FALSE(cgfs.read("/link-out", CgroupFile::CpuMax).ok());
    EXPECT_FALSE(cgfs.exists("/link-out"));
    EXPECT_EQ(slurp(t.path / "outside/cpu.max"), "max 100000\n");
    ASSERT_TRUE(cgfs.write("/real", CgroupFile::CpuMax, "2000 100000").ok());
    EXPECT_EQ(slurp(t.path / "cg/real/cpu.max"), "2000 100000\n");
  }
}

TEST(Confinement, CleanPathsOnly) {
  EXPECT_TRUE(is_clean_cgroup_path("/"));
  EXPECT_TRUE(is_clean_cgroup_path("/a/b.slice/..c"));
  for (const char* bad : {"", "a", "/a/", "//a", "/a//b", "/.", "/a/./b", "/..", "/a/../b", "/a\nb"})
    EXPECT_FALSE(is_clean_cgroup_path(bad)) << bad;
  TempDir t;
  std::string m = t.path.string();
  EXPECT_FALSE(confine_cgroup_path(m, "/.").ok());
  EXPECT_FALSE(confine_cgroup_path(m, "/").ok());
  EXPECT_FALSE(confine_cgroup_path(m, m).ok());
  EXPECT_EQ(*confine_cgroup_path(m, "/./a//b/"), "/a/b");
}

TEST(StateHardening, DeepNestingIsAnErrorNotACrash) {
  std::string deep =
      "{\"version\":1,\"entries\":" + std::string(100000, '[') + std::string(100000, ']') + ",\"checksum\":0}";
  auto r = StateStore::parse(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nested deeper"), std::string::npos) << r.error().message;
  // Brackets inside strings do not count.
  nlohmann::json entries = nlohmann::json::array();
  entries.push_back({{"cgroup", "/a[[[[[[[[[[[["}, {"file", "cpu.idle"}, {"original", "0"}});
  auto ok = StateStore::parse(forged_state(entries));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->entries.size(), 1u);
}

TEST(StateHardening, SavingNeverFollowsPlantedSymlinks) {
  TempDir t;
  t.write("precious", "keep me\n");
  std::string p = (t.path / "state.json").string();
  StateStore s(p);
  s.record("/a", CgroupFile::CpuIdle, "0");
  ASSERT_TRUE(s.save().ok());
  fs::create_symlink(t.path / "precious", p + ".tmp");
  fs::create_symlink(t.path / "precious", p + ".prev");
  s.record("/b", CgroupFile::CpuIdle, "0");
  ASSERT_TRUE(s.save().ok());
  s.record("/c", CgroupFile::CpuIdle, "0");
  ASSERT_TRUE(s.save().ok());
  EXPECT_EQ(slurp(t.path / "precious"), "keep me\n");
  EXPECT_FALSE(fs::is_symlink(p + ".prev"));
  StateStore r(p);
  ASSERT_TRUE(r.load().ok());
  EXPECT_EQ(r.entries().size(), 3u);
}

TEST(StateHardening, SymlinkOrDirectoryStateFileIsDamagedNotFollowed) {
  TempDir t;
  nlohmann::json entries = nlohmann::json::array();
  entries.push_back({{"cgroup", "/x"}, {"file", "cpu.idle"}, {"original", "0"}});
  t.write("elsewhere.json", forged_state(entries));
  std::string p = (t.path / "state.json").string();
  fs::create_symlink(t.path / "elsewhere.json", p);
  StateStore s(p);
  auto r = s.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EBADMSG);
}

TEST(V1Backend, RendersTypedValuesForEachBackend) {
  auto r = [](CgroupBackend b, KnobValue v, const CpuSet& node = {}) { return render(b, {"/x", std::move(v)}, node); };
  const auto V1 = CgroupBackend::V1Hybrid, V2 = CgroupBackend::V2;
  auto fv = r(V1, CpuQuota{std::nullopt, 100000});
  ASSERT_TRUE(fv.ok());
  EXPECT_EQ(fv->file, CgroupFile::V1CpuCfs);
  EXPECT_EQ(fv->value, "-1 100000");
  EXPECT_EQ(r(V2, CpuQuota{std::nullopt, 100000})->value, "max 100000");
  EXPECT_EQ(r(V1, CpuQuota{20000, 10000})->value, "20000 10000");
  EXPECT_EQ(r(V2, CpuQuota{20000, 10000})->value, "20000 10000");
  fv = r(V1, CpuWeight{1});
  EXPECT_EQ(fv->file, CgroupFile::V1CpuShares);
  EXPECT_EQ(fv->value, "2");
  EXPECT_EQ(r(V2, CpuWeight{1})->value, "1");
  EXPECT_EQ(weight_to_shares(100), 2 + (99u * 262142u) / 9999u);
  EXPECT_EQ(shares_to_weight(1024), 39u);  // the kubelet's figure for 1 CPU of requests
  EXPECT_EQ(r(V1, CpuIdle{true})->file, CgroupFile::V1CpuIdle);
  EXPECT_EQ(r(V2, CpuIdle{false})->value, "0");
  fv = r(V1, CpuList{{1, 2, 3, 5}});
  EXPECT_EQ(fv->file, CgroupFile::V1CpusetCpus);
  EXPECT_EQ(fv->value, "1-3,5");
  EXPECT_EQ(fv->cpus, (CpuSet{1, 2, 3, 5}));
  EXPECT_EQ(r(V2, CpuList{})->value, "");
  EXPECT_EQ(r(V2, CpuQuota{1000, 100000})->file, CgroupFile::CpuMax);
  // What the kernel would refuse is an error, not a write.
  EXPECT_FALSE(r(V2, CpuQuota{999, 100000}).ok());
  EXPECT_FALSE(r(V1, CpuQuota{5000, 999}).ok());
  EXPECT_FALSE(r(V2, CpuQuota{std::nullopt, 1000001}).ok());
  EXPECT_FALSE(r(V2, CpuWeight{0}).ok());
  EXPECT_FALSE(r(V1, CpuWeight{10001}).ok());
  EXPECT_FALSE(r(V2, CpuList{{4}}, {0, 1, 2, 3}).ok());
  EXPECT_TRUE(r(V2, CpuList{{3}}, {0, 1, 2, 3}).ok());
  // Rendered text is valid and already in the kernel's form.
  for (auto b : {V1, V2})
    for (const KnobValue& v :
         std::vector<KnobValue>{CpuQuota{std::nullopt, 50000}, CpuQuota{123456, 100000}, CpuWeight{7}, CpuWeight{10000},
                                CpuIdle{true}, CpuList{{0, 2, 3}}}) {
      auto d = r(b, v);
      ASSERT_TRUE(d.ok());
      EXPECT_TRUE(d->canonical);
      EXPECT_TRUE(validate_cgroup_value(d->file, d->value, {}).ok()) << d->value;
      EXPECT_EQ(normalize_cgroup_value(d->file, d->value), d->value);
    }
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::V1CpuCfs, "-1 100000", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::V1CpuCfs, "-1", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::V1CpuCfs, "999 100000", {}).ok());
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::V1CpuShares, "1", {}).ok());
  EXPECT_TRUE(validate_cgroup_value(CgroupFile::V1CpuShares, "262144", {}).ok());
  for (CgroupFile f : kAllCgroupFiles) EXPECT_EQ(cgroup_file_from_name(cgroup_file_name(f)), f);
}

TEST(V1Backend, ChoosesByTheControllersOnOffer) {
  CgroupRoots hybrid{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuset"};
  EXPECT_EQ(*choose_backend(hybrid, ""), CgroupBackend::V1Hybrid);
  EXPECT_EQ(*choose_backend(hybrid, "cpuset cpu io memory\n"), CgroupBackend::V2);
  EXPECT_EQ(*choose_backend({"/sys/fs/cgroup", "", ""}, "cpuset cpu io"), CgroupBackend::V2);
  auto pure_v1 = choose_backend({"", "/sys/fs/cgroup/cpu", ""}, "");
  ASSERT_FALSE(pure_v1.ok());
  EXPECT_NE(pure_v1.error().message.find("pure cgroup v1"), std::string::npos);
  EXPECT_FALSE(choose_backend({"/sys/fs/cgroup/unified", "", ""}, "memory").ok());
}

TEST(V1Backend, WritesQuotaAndPeriodInAnOrderV1Accepts) {
  TempDir t;
  fs::create_directories(t.path / "cpu/hadoop-yarn");
  fs::create_directories(t.path / "cpuset/hadoop-yarn");
  t.write("cpu/hadoop-yarn/cpu.cfs_quota_us", "-1\n");
  t.write("cpu/hadoop-yarn/cpu.cfs_period_us", "100000\n");
  t.write("cpu/hadoop-yarn/cpu.shares", "1024\n");
  t.write("cpu/hadoop-yarn/cpu.idle", "0\n");
  t.write("cpuset/hadoop-yarn/cpuset.cpus", "0-1\n");
  t.write("memory/hadoop-yarn/memory.limit_in_bytes", "9223372036854771712\n");
  RealCgroupFs cgfs(CgroupRoots{(t.path / "unified").string(), (t.path / "cpu").string(), (t.path / "cpuset").string(),
                                (t.path / "memory").string()});
  EXPECT_EQ(*cgfs.read("/hadoop-yarn", CgroupFile::V1CpuCfs), "-1 100000");
  ASSERT_TRUE(cgfs.write("/hadoop-yarn", CgroupFile::V1CpuCfs, "2000 10000").ok());
  EXPECT_EQ(slurp(t.path / "cpu/hadoop-yarn/cpu.cfs_quota_us"), "2000\n");
  EXPECT_EQ(slurp(t.path / "cpu/hadoop-yarn/cpu.cfs_period_us"), "10000\n");
  ASSERT_TRUE(cgfs.write("/hadoop-yarn", CgroupFile::V1CpuIdle, "1").ok());
  EXPECT_EQ(slurp(t.path / "cpu/hadoop-yarn/cpu.idle"), "1\n");
  ASSERT_TRUE(cgfs.write("/hadoop-yarn", CgroupFile::V1CpusetCpus, "1").ok());
  EXPECT_EQ(slurp(t.path / "cpuset/hadoop-yarn/cpuset.cpus"), "1\n");
  EXPECT_EQ(*cgfs.read("/hadoop-yarn", CgroupFile::V1CpuShares), "1024");
  // Every hierarchy, the memory one included, through its own root.
  EXPECT_EQ(*cgfs.read("/hadoop-yarn", CgroupFile::V1MemoryLimit), "9223372036854771712");
  ASSERT_TRUE(cgfs.write("/hadoop-yarn", CgroupFile::V1MemoryLimit, "1073741824").ok());
  EXPECT_EQ(slurp(t.path / "memory/hadoop-yarn/memory.limit_in_bytes"), "1073741824\n");
}

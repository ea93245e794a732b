#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "khagent/collect/cgroupfs.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

TEST(Mountinfo, Hybrid) {
  const char* text =
      "25 24 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
      "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
      "28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct\n"
      "29 25 0:26 / /sys/fs/cgroup/cpuset rw shared:13 - cgroup cgroup rw,cpuset\n";
  Mounts m = parse_mountinfo(text);
  EXPECT_EQ(m.cgroup2, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m.cpu_v1, "/sys/fs/cgroup/cpu,cpuacct");
}

TEST(Mountinfo, PureV2AndEscapes) {
  const char* text =
      "30 1 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
      "31 1 0:28 / /mnt/with\\040space rw - cgroup cgroup rw,cpuset\n";
  Mounts m = parse_mountinfo(text);
  EXPECT_EQ(m.cgroup2, "/sys/fs/cgroup");
  EXPECT_EQ(m.cpu_v1, "");
  Mounts e = parse_mountinfo("32 1 0:29 / /a\\040b rw - cgroup2 none rw\n");
  EXPECT_EQ(e.cgroup2, "/a b");
}

TEST(Mountinfo, MissingFileIsAnError) {
  auto r = find_mounts("/nonexistent/mountinfo");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
}

static uint64_t ino(const fs::path& p) {
  struct stat st{};
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return st.st_ino;
}

TEST(CgroupIndex, ResolvesInodesToRelativePaths) {
  TempDir t;
  fs::create_directories(t.path / "kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope");
  fs::create_directories(t.path / "hadoop-yarn/container_1");
  CgroupIndex idx(t.path.string());
  auto n = idx.rescan();
  ASSERT_TRUE(n.ok()) << n.error().str();
  EXPECT_EQ(*n, 6u);
  EXPECT_EQ(idx.path_of(ino(t.path)), "/");
  EXPECT_EQ(idx.path_of(ino(t.path / "hadoop-yarn/container_1")), "/hadoop-yarn/container_1");
  EXPECT_EQ(idx.path_of(ino(t.path / "kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope")),
            "/kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope");
  EXPECT_FALSE(idx.path_of(123456789).has_value());
}

TEST(CgroupIndex, RescanForgetsRemovedAndFindsNew) {
  TempDir t;
  fs::create_directories(t.path / "a");
  CgroupIndex idx(t.path.string());
  ASSERT_TRUE(idx.rescan().ok());
  uint64_t a = ino(t.path / "a");
  EXPECT_TRUE(idx.path_of(a));
  fs::remove(t.path / "a");
  fs::create_directories(t.path / "b");
  ASSERT_TRUE(idx.rescan().ok());
  EXPECT_EQ(idx.path_of(ino(t.path / "b")), "/b");
  EXPECT_EQ(idx.size(), 2u);
}

TEST(CgroupIndex, MissingRootIsAnError) {
  CgroupIndex idx("/nonexistent/cgroup");
  auto r = idx.rescan();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().str().find("/nonexistent/cgroup"), std::string::npos);
}

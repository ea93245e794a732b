#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <regex>

#include "khagent/collect/cgroupfs.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

TEST(Mountinfo, Hybrid) {
  const char* text =
      "25 24 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
      "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
      "28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct\n"
      "29 25 0:26 / /sys/fs/cgroup/cpuset rw shared:13 - cgroup cgroup rw,cpuset\n"
      "30 25 0:27 / /sys/fs/cgroup/blkio rw shared:14 - cgroup cgroup rw,blkio\n";
  Mounts m = parse_mountinfo(text);
  EXPECT_EQ(m.cgroup2, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m.cpu_v1, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(m.blkio_v1, "/sys/fs/cgroup/blkio");
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

TEST(FindCgroups, TakesWithoutDescendingAndStopsAtTheDepthAndTheCount) {
  TempDir t;
  fs::create_directories(t.path / "node/kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope");
  fs::create_directories(t.path / "node/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2.slice");
  fs::create_directories(t.path / "node/deep/a/b/c/pod9");
  fs::create_directories(t.path / "other/pod3");
  fs::create_symlink(t.path / "other", t.path / "node/link");
  auto pod = [](const std::string& rel) {  // a last segment with "pod" and a digit
    return std::regex_search(rel.substr(rel.rfind('/') + 1), std::regex("pod[0-9]"));
  };
  auto all = find_cgroups(t.path.string(), "/node", 3, pod);
  EXPECT_FALSE(all.truncated);
  // pod9 is 5 levels down, past the depth; the symlink is not followed; a
  // taken pod's children are not looked at.
  EXPECT_EQ(all.paths,
            (std::vector<std::string>{"/node/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2.slice",
                                      "/node/kubepods.slice/kubepods-pod1.slice"}));
  EXPECT_EQ(find_cgroups(t.path.string(), "/node", 6, pod).paths.size(), 3u);
  EXPECT_EQ(find_cgroups(t.path.string(), "/", 6, pod).paths.size(), 4u);
  EXPECT_EQ(find_cgroups(t.path.string() + "/", "/", 6, pod).paths, find_cgroups(t.path.string(), "/", 6, pod).paths)
      << "a root with a trailing slash gives the same paths";
  auto few = find_cgroups(t.path.string(), "/node", 6, pod, 2);
  EXPECT_TRUE(few.truncated);
  EXPECT_TRUE(find_cgroups(t.path.string(), "/missing", 6, pod).paths.empty());
}

// Reclaiming a YARN container locally: real processes in a real cgroup v2,
// killed through cgroup.kill and through the cgroup.procs fallback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "host_util.h"
#include "khagent/actuate/cgroup_kill.h"

using namespace khagent;
using namespace hosttest;

namespace {

// Reaps the child and says how it ended.
int end_signal(Child& c) {
  int st = 0;
  pid_t p = c.pid;
  c.pid = -1;
  if (waitpid(p, &st, 0) != p) return -1;
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

// A body that forks a grandchild (which the test cannot reap: it is killed
// with its parent's cgroup) and then sleeps.
[[noreturn]] void forking_sleeper() {
  if (fork() == 0) sleep_loop(50'000'000);
  sleep_loop(50'000'000);
}

class YarnKillHost : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    m_ = mounts();
    ASSERT_FALSE(m_.cgroup2.empty()) << "no cgroup2 mount";
    root_ = std::make_unique<TestCgroup>(m_.cgroup2, "/" + unique("khagent-yarn-kill"));
    // A YARN-like layout: <hierarchy>/container_<id>, with a nested cgroup.
    container_ = std::make_unique<TestCgroup>(m_.cgroup2, root_->rel + "/container_e17_1700000000000_0001_01_000002");
    nested_ = std::make_unique<TestCgroup>(m_.cgroup2, container_->rel + "/task");
    other_ = std::make_unique<TestCgroup>(m_.cgroup2, root_->rel + "/container_e17_1700000000000_0001_01_000003");
  }
  void TearDown() override {
    children_.clear();
    other_.reset();
    nested_.reset();
    container_.reset();
    root_.reset();
  }
  Child& spawn(const TestCgroup& cg, const std::function<void()>& body) {
    children_.emplace_back(std::vector<std::string>{cg.dir() + "/cgroup.procs"}, -1, 0, body);
    return children_.back();
  }
  size_t procs(const TestCgroup& cg) {
    std::string s = read_file(cg.dir() + "/cgroup.procs");
    return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
  }

  Mounts m_;
  std::unique_ptr<TestCgroup> root_, container_, nested_, other_;
  std::vector<Child> children_;
};

}  // namespace

TEST_F(YarnKillHost, CgroupKillEndsEveryProcessOfTheContainerOnly) {
  ASSERT_EQ(::access((container_->dir() + "/cgroup.kill").c_str(), F_OK), 0)
      << "this kernel has no cgroup.kill (needs 5.14); the fallback test covers older kernels";
  children_.reserve(4);
  Child& a = spawn(*container_, [] { forking_sleeper(); });
  Child& b = spawn(*nested_, [] { sleep_loop(50'000'000); });
  Child& keep = spawn(*other_, [] { sleep_loop(50'000'000); });
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  ASSERT_GT(keep.pid, 0);
  sleep_s(0.1);
  EXPECT_EQ(procs(*container_), 2u) << "the sleeper and its forked child";

  auto r = kill_cgroup(m_.cgroup2, container_->rel);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_TRUE(r->used_cgroup_kill);
  EXPECT_TRUE(r->empty);
  EXPECT_EQ(end_signal(a), SIGKILL);
  EXPECT_EQ(end_signal(b), SIGKILL);
  EXPECT_EQ(procs(*container_), 0u);
  EXPECT_EQ(procs(*nested_), 0u);
  EXPECT_EQ(procs(*other_), 1u) << "a neighbouring container was touched";
  EXPECT_EQ(::kill(keep.pid, 0), 0);
}

TEST_F(YarnKillHost, FallbackSignalsEveryListedProcessIncludingDescendants) {
  children_.reserve(4);
  Child& a = spawn(*container_, [] { forking_sleeper(); });
  Child& b = spawn(*nested_, [] { forking_sleeper(); });
  Child& keep = spawn(*other_, [] { sleep_loop(50'000'000); });
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  sleep_s(0.1);

  CgroupKillOptions o;
  o.allow_cgroup_kill = false;
  auto r = kill_cgroup(m_.cgroup2, container_->rel, o);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_FALSE(r->used_cgroup_kill);
  EXPECT_GE(r->signalled, 4u) << "two processes in each cgroup";
  EXPECT_TRUE(r->empty);
  EXPECT_EQ(end_signal(a), SIGKILL);
  EXPECT_EQ(end_signal(b), SIGKILL);
  EXPECT_EQ(procs(*other_), 1u);
  EXPECT_EQ(::kill(keep.pid, 0), 0);
}

TEST_F(YarnKillHost, RefusesTheRootEscapesAndMissingCgroups) {
  auto root = kill_cgroup(m_.cgroup2, "/");
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.error().err, EPERM) << root.error().str();
  auto escape = kill_cgroup(m_.cgroup2, root_->rel + "/../..");
  EXPECT_FALSE(escape.ok());
  auto missing = kill_cgroup(m_.cgroup2, root_->rel + "/container_gone");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, ENOENT) << missing.error().str();
}

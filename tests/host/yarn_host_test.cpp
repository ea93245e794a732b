// The YARN downscaler with real processes and the real agent binary, against
// the in-process RM/NM emulator on loopback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "../unit/yarn_emulator.h"
#include "host_util.h"
#include "khagent/app/yarn_downscaler.h"

using namespace khagent;
using namespace hosttest;
using yarntest::EmuApp;
using yarntest::EmuContainer;
using yarntest::Faults;
using yarntest::Srv;
using yarntest::YarnEmulator;

namespace {

constexpr uint64_t kS = 1'000'000'000ULL;
const std::string kNode = "worker1.example.com:45454";
const std::string kApp = "application_1700000000000_0007";
const std::string kAm = "container_e03_1700000000000_0007_01_000001";
const std::string kOld = "container_e03_1700000000000_0007_01_000002";
const std::string kYoung = "container_e03_1700000000000_0007_01_000003";

int end_signal(Child& c) {
  int st = 0;
  pid_t p = c.pid;
  c.pid = -1;
  if (waitpid(p, &st, 0) != p) return -1;
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

}  // namespace

// Three containers of one application, 1 vcore each, on a node shrunk to 2
// vcores: the youngest non-AM container is the victim, and once its grace is
// over its processes die by SIGKILL; the others keep running.
TEST(YarnReclaimHost, KillsTheYoungestContainerPastItsGrace) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const std::string h = "/" + unique("khagent-hadoop-yarn");
  TestCgroup root(m.cgroup2, h);
  TestCgroup am(m.cgroup2, h + "/" + kAm);
  TestCgroup old_c(m.cgroup2, h + "/" + kOld);
  sleep_s(0.05);  // distinct creation times: the cgroup's mtime orders them
  TestCgroup young(m.cgroup2, h + "/" + kYoung);
  std::vector<Child> kids;
  kids.reserve(3);
  kids.emplace_back(std::vector<std::string>{am.dir() + "/cgroup.procs"}, -1, 0, [] { sleep_loop(50'000'000); });
  kids.emplace_back(std::vector<std::string>{old_c.dir() + "/cgroup.procs"}, -1, 0, [] { sleep_loop(50'000'000); });
  kids.emplace_back(std::vector<std::string>{young.dir() + "/cgroup.procs"}, -1, 0, [] { sleep_loop(50'000'000); });
  for (auto& k : kids) ASSERT_GT(k.pid, 0);

  YarnEmulator emu;
  emu.add_this_node(kNode, "worker1.example.com", {3, 3072});
  EmuApp app;
  app.id = kApp;
  app.am_container = kAm;
  app.am_node = kNode;
  emu.add_app(app);
  for (const auto& id : {kAm, kOld, kYoung}) {
    EmuContainer c;
    c.id = id;
    emu.add_container(c);
  }

  YarnConfig cfg;
  cfg.enabled = true;
  cfg.rm_urls = emu.rm_urls();
  cfg.user = "khagent";
  cfg.retries = 0;
  cfg.refresh_interval_ns = kS;
  cfg.reclaim_grace_ns = 2 * kS;
  YarnDownscaler ds(cfg, false, m.cgroup2, {"worker1"});
  YarnOffer o;
  o.budget_cores = 2;
  for (const auto& id : {kAm, kOld, kYoung}) o.containers[id] = {h + "/" + id, 0};
  const uint64_t t0 = 5000 * kS;

  o.now_ns = t0;
  ds.round(o);
  YarnStatus st = ds.status();
  EXPECT_EQ(st.last_error, "");
  EXPECT_EQ(st.advertised.vcores, 2);
  EXPECT_EQ(st.victims, 1u);
  EXPECT_EQ(::kill(kids[2].pid, 0), 0) << "killed inside its grace";

  o.now_ns = t0 + 2 * kS;
  ds.round(o);
  st = ds.status();
  EXPECT_EQ(st.kills_ok, 1u) << st.last_error;
  EXPECT_EQ(st.kills_failed, 0u);
  EXPECT_EQ(end_signal(kids[2]), SIGKILL);
  EXPECT_EQ(::kill(kids[0].pid, 0), 0) << "the ApplicationMaster was killed";
  EXPECT_EQ(::kill(kids[1].pid, 0), 0) << "the older container was killed";
}

// The agent binary with yarn enabled and a ResourceManager that takes 2 s to
// answer anything: the offline squeeze is logged before the RM's first
// answer (the RM never delays cgroup actions), the dry run logs the POST it
// would make once the RM answered, and SIGINT still ends the agent promptly.
TEST(AgentYarn, SlowResourceManagerNeverDelaysTheSqueeze) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  std::string k = unique("kh");
  std::string pod =
      "/" + k + "-kubepods.slice/" + k + "-kubepods-burstable.slice/" + k + "-kubepods-burstable-pod1111_2222.slice";
  std::string yarn = "/" + k + "-yarn";

  YarnEmulator emu;
  emu.add_this_node(kNode, "worker1.example.com", {8, 16384});
  Faults slow;
  slow.delay_ms = 2000;
  emu.set_faults(Srv::RM0, slow);

  LaidOutCgroup top(m, "/" + k + "-kubepods.slice");
  LaidOutCgroup qos(m, "/" + k + "-kubepods.slice/" + k + "-kubepods-burstable.slice");
  LaidOutCgroup p(m, pod);
  LaidOutCgroup c(m, pod + "/cri-containerd-0123456789ab.scope");
  LaidOutCgroup yr(m, yarn);
  LaidOutCgroup yc(m, yarn + "/container_1700000000000_0001_01_000002");
  Child hog(yc.procs(), 0, 0, [] { busy_loop(); });
  Child online(c.procs(), 0, 0, [] { sleep_loop(1000000); });

  std::string cfg = "/tmp/" + k + ".yaml";
  std::ofstream(cfg) << "tick: 200ms\noffline:\n  yarn_hierarchy: " << k
                     << "-yarn\nonline:\n  wait_p99_target: 20us\nfast_path:\n  wait_threshold: 50us\n"
                     << "yarn:\n  enabled: true\n  rm_urls: [" << emu.rm_urls()[0] << "]\n  node_id: " << kNode
                     << "\n  request_timeout: 10s\n  retries: 0\n";
  std::string log = "/tmp/" + k + ".log";
  std::string cmd = std::string(KHAGENT_BINARY) + " --no-pin run --dry-run --no-metrics --config " + cfg +
                    " --state-file /tmp/" + k + "-state.json > " + log + " 2>&1";
  pid_t agent = fork();
  if (agent == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  // Until the dry run logs its POST: four slow RM calls come before it (the
  // node, the node again with the NM's reads, the running applications, the
  // POST itself).
  std::string out;
  for (int i = 0; i < 300 && out.find("would POST") == std::string::npos; i++) {
    sleep_s(0.1);
    out = read_file(log);
  }
  auto t0 = std::chrono::steady_clock::now();
  ::kill(agent, SIGINT);
  int st = 0;
  waitpid(agent, &st, 0);
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out = read_file(log);
  ::unlink(cfg.c_str());
  ::unlink(log.c_str());

  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  // The log is in time order: the squeeze comes before the RM's first
  // answer (after which the NodeManager's address is logged).
  size_t squeeze = out.find("dry run: would write " + yarn + " ");
  size_t first_answer = out.find("yarn: NodeManager web address");
  ASSERT_NE(squeeze, std::string::npos) << out;
  ASSERT_NE(first_answer, std::string::npos) << out;
  EXPECT_LT(squeeze, first_answer) << "the squeeze waited for the RM:\n" << out;
  EXPECT_NE(out.find("dry-run: would POST"), std::string::npos) << out;
  // The default reclaimer is khagent: the RM is told never to reclaim (-1).
  EXPECT_NE(out.find("\"overCommitTimeout\":-1"), std::string::npos) << out;
  EXPECT_TRUE(emu.rm_posts().empty()) << "a dry run posted to the RM";
  EXPECT_LT(stop_s, 5.0) << "stopping waited on the slow RM";
}

// Block IO signals on a real kernel, in the guest (vmtest/run.sh --modules
// null_blk): a null_blk device of known capacity (queue depth 4, 500 us a
// request: about 8k IOPS), an online cgroup reading it with 4 KiB O_DIRECT
// reads and an offline one writing it with 64 KiB O_DIRECT writes from 8
// threads. The signals must show the online stall (io.pressure) and the
// offline writes on that device (io.stat), and the IO controller must name
// the offline cgroup on the online pod's device.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../host/host_util.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/snapshot.h"
#include "khagent/policy/io_controller.h"
#include "khagent/signals/io.h"
#include "khagent/util/clock.h"
#include "vm_io_util.h"

using namespace khagent;
using namespace vmio;
using hosttest::CgroupStack;
using hosttest::sleep_s;
using hosttest::write_file;

namespace {

TEST(VmIo, SignalsShowTheOnlineStallAndNameTheOfflineWriterOnItsDevice) {
  ASSERT_EQ(geteuid(), 0u) << "the VM suite runs as root inside the guest";
  NullBlk nb;
  ASSERT_EQ(nb.problem, "");
  ASSERT_NE(hosttest::read_file(kCg + "/cgroup.controllers").find("io"), std::string::npos) << "no io controller";
  write_file(kCg + "/cgroup.subtree_control", "+io");
  ASSERT_NE(hosttest::read_file(kCg + "/cgroup.subtree_control").find("io"), std::string::npos)
      << "the io controller could not be enabled at the root";
  CgroupStack cgs;
  cgs.add(kCg, "/io-online");
  cgs.add(kCg, "/io-offline");
  auto reads = real_node_reads({kCg, "", "", false, "", "/proc"});
  IoTracker tracker;
  const std::vector<std::string> online = {"/io-online"}, offline = {"/io-offline"};
  (void)tracker.step(TickSnapshot(*reads, mono_ns()), online, offline);

  pid_t writer = io_loop(kCg + "/io-offline", nb.dev, true, 64 << 10, 8);
  pid_t reader = io_loop(kCg + "/io-online", nb.dev, false, 4096, 1);
  sleep_s(2.0);
  IoSignals s = tracker.step(TickSnapshot(*reads, mono_ns()), online, offline);
  stop(reader);
  stop(writer);

  ASSERT_EQ(s.online.size(), 1u) << (s.unreadable.empty() ? "" : s.unreadable[0]);
  const IoPodStall& pod = s.online[0];
  std::printf(
      "online: stalled %.0f%% (some), %llu us full; read %llu KiB on %s; offline: %s\n", pod.some_share * 100,
      static_cast<unsigned long long>(pod.full_us),
      static_cast<unsigned long long>(pod.devices.count(nb.majmin) ? pod.devices.at(nb.majmin).rbytes >> 10 : 0),
      nb.majmin.c_str(),
      s.offline.empty() ? "nothing"
                        : (s.offline[0].cgroup + " wrote " + std::to_string(s.offline[0].delta.wbytes >> 20) +
                           " MiB on " + s.offline[0].device)
                              .c_str());
  EXPECT_GT(pod.some_us, 0u) << "io.pressure showed no stall of the online reader";
  ASSERT_TRUE(pod.devices.count(nb.majmin)) << "the online reads are not in its io.stat";
  EXPECT_GT(pod.devices.at(nb.majmin).rios, 0u);
  ASSERT_FALSE(s.offline.empty()) << "no offline IO in io.stat";
  EXPECT_EQ(s.offline[0].cgroup, "/io-offline");
  EXPECT_EQ(s.offline[0].device, nb.majmin);
  EXPECT_GT(s.offline[0].delta.wbytes, uint64_t{1} << 20);

  IoConfig cfg;
  cfg.stall_limit = std::min(0.05, pod.some_share / 2);
  IoReport r = io_judge(s, cfg);
  ASSERT_TRUE(r.aggressor);
  EXPECT_EQ(r.aggressor->cgroup, "/io-offline");
  EXPECT_TRUE(r.aggressor_on_pods_device);
}

// The closed loop on a real kernel: an online pod reading the null_blk
// device (4 KiB O_DIRECT) next to a YARN container writing it from 8
// threads. The agent limits the YARN root on that device (io.max) once the
// pod stalls (the writer runs before the agent starts, so the reader has
// no baseline yet), lifts the limit when the writer is gone and online is
// calm, and restores the original io.max at exit, whatever it holds then.
// Whether a step helped is the kernel's to say (a useless first step is
// lifted at once), and so is whether the writer's return slows the reader
// past 1.25x of the baseline it measured meanwhile (then it is limited
// again; the hold-off is short here): rates, verdicts and that are
// printed, not asserted, as the guest's clock is emulated.
TEST(VmIo, TheAgentLimitsTheOfflineWriterOnThePodsDeviceAndLiftsItWhenCalm) {
  ASSERT_EQ(geteuid(), 0u) << "the VM suite runs as root inside the guest";
  NullBlk nb;
  ASSERT_EQ(nb.problem, "");
  write_file(kCg + "/cgroup.subtree_control", "+io");
  ASSERT_NE(hosttest::read_file(kCg + "/cgroup.subtree_control").find("io"), std::string::npos)
      << "the io controller could not be enabled at the root";
  Mounts m = hosttest::mounts();
  const std::string k = hosttest::unique("khvio");
  const std::string yarn = "/" + k + "-yarn", kube = "/" + k + "-kubepods.slice";
  const std::string burstable = kube + "/kubepods-burstable.slice";
  const std::string pod = burstable + "/kubepods-burstable-pod3333_4444.slice";
  hosttest::LaidOutCgroup c_yarn(m, yarn), c_cont(m, yarn + "/container_e01_1700000000000_0001_01_000002", false, true),
      c_kube(m, kube), c_burst(m, burstable), c_pod(m, pod),
      c_ctr(m, pod + "/cri-containerd-0123456789ab.scope", false, true);
  // io down to the pod, as systemd (IOAccounting) and the kubelet enable it.
  for (const auto& p : {kube, burstable}) write_file(kCg + p + "/cgroup.subtree_control", "+io");
  ASSERT_TRUE(::access((kCg + pod + "/io.stat").c_str(), F_OK) == 0) << "no io.stat in the pod: io not enabled down";
  IoShared* done = new_shared();
  ASSERT_NE(done, nullptr);

  pid_t reader = io_loop(kCg + pod + "/cri-containerd-0123456789ab.scope", nb.dev, false, 4096, 1, done);
  const double alone = rate_over(done, 2.0);
  pid_t writer = io_loop(kCg + yarn + "/container_e01_1700000000000_0001_01_000002", nb.dev, true, 64 << 10, 8);
  const double free_rate = rate_over(done, 2.0);

  const std::string cfg = "/tmp/" + k + ".yaml", state = "/tmp/" + k + "-state.json", log = "/tmp/" + k + ".log";
  std::ofstream(cfg) << "tick: 500ms\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  enabled: false\nio:\n  stall_limit: 0.1\n  verdict_after: 1s\n"
                     << "  calm_after: 3s\n  hold_off: 2s\n"
                     // The reader's CPU waits on a loaded host must not move
                     // the YARN root's cpuset (this test is about IO).
                     << "ladder:\n  rungs: [quota]\n";
  pid_t agent = hosttest::start_agent(cfg, state, log);
  const uint64_t running = mono_ns();
  std::string limit;
  for (int i = 0; i < 300 && (limit = io_max_line(yarn, nb.majmin)).empty(); i++) sleep_s(0.05);
  const double limited_after = static_cast<double>(mono_ns() - running) / 1e9;
  sleep_s(3.0);  // its verdicts and tighter steps
  const double limited_rate = rate_over(done, 2.0);
  const std::string limit_then = io_max_line(yarn, nb.majmin);
  // The writer goes: the pod is calm, the limit is raised and lifted.
  stop(writer);
  bool lifted = false;
  for (int i = 0; i < 600 && !(lifted = io_max_line(yarn, nb.majmin).empty()); i++) sleep_s(0.05);
  const double lifted_after = static_cast<double>(mono_ns() - running) / 1e9;
  // It comes back: limited again, unless the reader's wait per IO stays
  // within 1.25x of the baseline it measured while the writer was gone
  // (printed, not asserted: how much the writer slows it is the
  // kernel's); the agent must restore whatever it holds at exit.
  writer = io_loop(kCg + yarn + "/container_e01_1700000000000_0001_01_000002", nb.dev, true, 64 << 10, 8);
  bool again = false;
  for (int i = 0; i < 300 && !(again = !io_max_line(yarn, nb.majmin).empty()); i++) sleep_s(0.05);
  ::kill(agent, SIGTERM);
  int st = 0;
  waitpid(agent, &st, 0);
  const std::string restored = io_max_line(yarn, nb.majmin);
  stop(writer);
  stop(reader);
  const std::string text = hosttest::read_file(log);
  for (const auto& f : {cfg, state, state + ".prev", log}) ::unlink(f.c_str());
  free_shared(done);

  std::printf(
      "online 4 KiB reads/s: alone %.0f, next to the free writer %.0f, with the agent's limit %.0f (%s); limited "
      "%.2f s after the agent was running, lifted after %.1f s; limited again when the writer came back: %s\n",
      alone, free_rate, limited_rate, limit_then.empty() ? "no limit in force then" : limit_then.c_str(), limited_after,
      lifted_after, again ? "yes" : "no");
  // The agent's IO lines: its steps and warnings (its writes repeat them).
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if ((line.find(" io limit") != std::string::npos || line.find(" io: ") != std::string::npos) &&
        line.find("io.max:") == std::string::npos)
      std::printf("  %s\n", line.c_str());
  ASSERT_FALSE(limit.empty()) << "no io.max on " << yarn << " for " << nb.majmin << "\n" << text;
  EXPECT_NE(limit.find("wbps="), std::string::npos) << limit;
  EXPECT_EQ(limit.find("wbps=max"), std::string::npos) << "the writes are not limited: " << limit;
  EXPECT_TRUE(lifted) << "the limit stayed after the writer was gone\n" << text;
  EXPECT_TRUE(restored.empty()) << "io.max not restored at exit: " << restored << "\n" << text;
  EXPECT_NE(text.find("io limit: "), std::string::npos) << text;
  EXPECT_TRUE(text.find("io limit helped") != std::string::npos || text.find("io limit useless") != std::string::npos)
      << "no verdict\n"
      << text;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << text;
}

}  // namespace

// Block IO signals on a real kernel, in the guest (vmtest/run.sh --modules
// null_blk): a null_blk device of known capacity (queue depth 4, 500 us a
// request: about 8k IOPS), an online cgroup reading it with 4 KiB O_DIRECT
// reads and an offline one writing it with 64 KiB O_DIRECT writes from 8
// threads. The signals must show the online stall (io.pressure) and the
// offline writes on that device (io.stat), and the IO controller must name
// the offline cgroup on the online pod's device.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../host/host_util.h"
#include "khagent/collect/snapshot.h"
#include "khagent/policy/io_controller.h"
#include "khagent/signals/io.h"
#include "khagent/util/clock.h"

using namespace khagent;
using hosttest::CgroupStack;
using hosttest::sleep_s;
using hosttest::write_file;

namespace {

const std::string kCg = "/sys/fs/cgroup";
const std::string kNullb = "/sys/kernel/config/nullb/khagent-io";

// A null_blk device made through configfs; removed at the end.
struct NullBlk {
  std::string dev;      // /dev/nullbN
  std::string majmin;   // "major:minor"
  std::string problem;  // why there is none
  NullBlk() {
    if (::access("/sys/kernel/config/nullb", F_OK) != 0) {
      std::filesystem::create_directories("/sys/kernel/config");
      ::mount("none", "/sys/kernel/config", "configfs", 0, nullptr);
    }
    if (::access("/sys/kernel/config/nullb", F_OK) != 0) {
      problem = "no /sys/kernel/config/nullb: null_blk is not loaded (vmtest/run.sh --modules null_blk)";
      return;
    }
    std::filesystem::create_directories(kNullb);
    for (auto [k, v] : {std::pair{"size", "256"},
                        {"blocksize", "4096"},
                        {"hw_queue_depth", "4"},
                        {"submit_queues", "1"},
                        {"irqmode", "2"},
                        {"completion_nsec", "500000"},
                        {"memory_backed", "0"},
                        {"power", "1"}})
      if (!write_file(kNullb + "/" + k, v)) problem += std::string("cannot set ") + k + "; ";
    // The disk is nullb<index>, or, on kernels that name it after its
    // configfs directory, khagent-io.
    const std::string index = hosttest::read_file(kNullb + "/index");
    const std::string names[] = {"/dev/nullb" + std::to_string(std::atoi(index.c_str())), "/dev/khagent-io"};
    struct stat st{};
    for (int i = 0; i < 100 && dev.empty(); i++) {
      for (const auto& n : names)
        if (::stat(n.c_str(), &st) == 0) dev = n;
      if (dev.empty()) usleep(20000);
    }
    if (dev.empty()) {
      std::string seen;
      for (const auto& e : std::filesystem::directory_iterator("/sys/block"))
        seen += " " + e.path().filename().string();
      problem += "no " + names[0] + " or " + names[1] + " (/sys/block:" + seen + ")";
      return;
    }
    majmin = std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
  }
  ~NullBlk() {
    write_file(kNullb + "/power", "0");
    ::rmdir(kNullb.c_str());
  }
};

// A process in `cgroup` doing O_DIRECT IO on `dev` from `threads` threads
// until killed: reads of `bs` at random offsets, or writes.
pid_t io_loop(const std::string& cgroup, const std::string& dev, bool write, size_t bs, int threads) {
  pid_t p = fork();
  if (p == 0) {
    if (!write_file(cgroup + "/cgroup.procs", "0")) _exit(90);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++)
      ts.emplace_back([&, t] {
        int fd = ::open(dev.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT);
        if (fd < 0) _exit(91);
        void* buf = nullptr;
        if (posix_memalign(&buf, 4096, bs) != 0) _exit(92);
        std::memset(buf, 0x5a, bs);
        const uint64_t span = (uint64_t{200} << 20) / bs;
        uint64_t x = 88172645463325252ULL + static_cast<uint64_t>(t);
        for (;;) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          const off_t off = static_cast<off_t>((x % span) * bs);
          const ssize_t n = write ? ::pwrite(fd, buf, bs, off) : ::pread(fd, buf, bs, off);
          if (n != static_cast<ssize_t>(bs)) _exit(93);
        }
      });
    for (auto& t : ts) t.join();
    _exit(0);
  }
  return p;
}

void stop(pid_t p) {
  if (p <= 0) return;
  kill(p, SIGKILL);
  int st = 0;
  waitpid(p, &st, 0);
}

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

}  // namespace

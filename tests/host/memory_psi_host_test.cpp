// PSI triggers on the running kernel: the memory lever's event path wakes
// on a cgroup that stalls on memory (collect/memory.h, PsiTriggers).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "host_util.h"
#include "khagent/collect/memory.h"

using namespace hosttest;
using khagent::Mounts;
using khagent::PsiTriggers;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Makes `cg`'s tasks stall on memory until killed: on v2, 64 MiB of anonymous
// memory over a 32 MiB memory.high (the kernel throttles the allocations,
// counted as a memory stall); on a hybrid host's v1 memory hierarchy, which
// has no memory.high, a 128 MiB file on disk written and read again and
// again under a 48 MiB limit (reclaim of its own dirty and clean cache).
pid_t staller(const Mounts& m, bool v1, const LaidOutCgroup& cg, const std::string& file) {
  if (v1) write_file(m.memory_v1 + cg.v2().rel + "/memory.limit_in_bytes", std::to_string(48 * kMiB));
  else write_file(cg.v2().dir() + "/memory.high", std::to_string(32 * kMiB));
  pid_t p = fork();
  if (p != 0) return p;
  for (const auto& f : cg.procs())
    if (!write_file(f, std::to_string(getpid()))) _exit(5);
  if (!v1) {
    for (int i = 0; i < 64; i++) {  // new anonymous memory, page by page
      auto* b = static_cast<char*>(std::malloc(kMiB));
      if (!b) _exit(3);
      for (uint64_t o = 0; o < kMiB; o += 4096) b[o] = 1;
    }
    ::pause();
    _exit(0);
  }
  std::vector<char> buf(kMiB, 'x');
  for (;;) {
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) _exit(6);
    for (int i = 0; i < 128; i++)
      if (::write(fd, buf.data(), buf.size()) < 0) _exit(7);
    for (int pass = 0; pass < 2; pass++) {
      ::lseek(fd, 0, SEEK_SET);
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
    }
    ::close(fd);
  }
}

}  // namespace

// The event path of the memory lever: a PSI trigger on a cgroup's
// memory.pressure wakes poll() once its tasks stalled on memory, and stays
// quiet on a cgroup whose tasks do not.
TEST(MemoryPsiTrigger, FiresOnACgroupStallingOnMemoryAndNotOnAnIdleOne) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (v1 && m.memory_v1.empty()) FAIL() << "hybrid host without a v1 memory hierarchy: cannot make a memory stall";
  if (!v1 && read_file(m.cgroup2 + "/cgroup.subtree_control").find("memory") == std::string::npos)
    FAIL() << "the memory controller is not enabled in cgroup2: cannot make a memory stall";
  if (read_file(m.cgroup2 + "/memory.pressure").empty())
    FAIL() << "no memory.pressure in cgroup2: a kernel without PSI (or booted with psi=0)";
  const std::string k = unique("khagent-psi");
  LaidOutCgroup busy(m, "/" + k + "-busy", true, true), idle(m, "/" + k + "-idle", true, true);
  // The threshold is low (2 ms in 500 ms) so that the host's reclaim of
  // clean page cache, which is fast, reaches it too.
  PsiTriggers trig(m.cgroup2, 2000, 500000);
  EXPECT_EQ(trig.spec(), "some 2000 500000");
  auto problems = trig.sync({busy.v2().rel, idle.v2().rel, "/" + k + "-missing"});
  // Without CAP_SYS_RESOURCE (some container runtimes drop it) the kernel
  // takes only windows of whole 2 s: the same share over 2 s.
  if (!trig.note().empty()) {
    std::printf("%s\n", trig.note().c_str());
    EXPECT_EQ(trig.spec(), "some 8000 2000000");
  }
  ASSERT_EQ(problems.size(), 1u) << "the missing cgroup's trigger, and only it, fails: "
                                 << (problems.empty() ? "" : problems.front());
  EXPECT_NE(problems[0].find(k + "-missing/memory.pressure"), std::string::npos) << problems[0];
  ASSERT_EQ(trig.size(), 2u) << (problems.empty() ? "" : problems[0]);

  pid_t sleeper = fork();
  if (sleeper == 0) {
    for (const auto& f : idle.procs())
      if (!write_file(f, std::to_string(getpid()))) _exit(5);
    ::pause();
    _exit(0);
  }
  const std::string file = "/var/tmp/" + k + ".dat";
  pid_t p = staller(m, v1, busy, file);
  const uint64_t t0 = mono_ns_now();
  std::string fired, err;
  while (fired.empty() && mono_ns_now() - t0 < 10'000'000'000ull) {
    std::vector<pollfd> fds;
    trig.add_to(fds);
    if (::poll(fds.data(), fds.size(), 1000) < 0) break;
    for (const auto& f : fds) {
      if (f.revents & POLLPRI) fired += (fired.empty() ? "" : " ") + *trig.path_of(f.fd);
      if (f.revents & (POLLERR | POLLNVAL)) err = *trig.path_of(f.fd);
    }
  }
  const double s = static_cast<double>(mono_ns_now() - t0) / 1e9;
  // The idle one is watched for a whole window more (2 s at most).
  std::string idle_fired;
  for (const uint64_t t1 = mono_ns_now(); !fired.empty() && mono_ns_now() - t1 < 2'100'000'000ull;) {
    std::vector<pollfd> fds;
    trig.add_to(fds);
    if (::poll(fds.data(), fds.size(), 300) < 0) break;
    for (const auto& f : fds)
      if ((f.revents & POLLPRI) && *trig.path_of(f.fd) == idle.v2().rel) idle_fired = idle.v2().rel;
  }
  const std::string pressure = read_file(busy.v2().dir() + "/memory.pressure");
  ::kill(p, SIGKILL);
  ::kill(sleeper, SIGKILL);
  waitpid(p, nullptr, 0);
  waitpid(sleeper, nullptr, 0);
  ::unlink(file.c_str());
  std::printf("PSI trigger fired after %.2f s on: %s\n%s\n", s, fired.c_str(), pressure.c_str());
  EXPECT_EQ(fired, busy.v2().rel) << "the stalling cgroup's trigger only; its memory.pressure:\n" << pressure;
  EXPECT_EQ(err, "");
  EXPECT_EQ(idle_fired, "") << "the idle cgroup's trigger fired";

  // A cgroup no longer listed loses its trigger.
  trig.sync({idle.v2().rel});
  EXPECT_EQ(trig.size(), 1u);
}

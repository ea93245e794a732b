// Who paid for memory reclaim, on the running kernel: the reclaim time the
// BPF side charges to a cgroup (the vmscan tracepoints, reclaim_stats)
// checked against the kernel's own count of that cgroup's memory stalls
// (PSI "some" of its memory.pressure), as the run-queue waits are checked
// against an independent tracer.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "host_util.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/memory.h"
#include "khagent/loader/runq_loader.h"

using namespace hosttest;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

khagent::ReclaimCounters reclaim_of(khagent::BpfMapSource& maps, uint64_t id) {
  auto r = maps.read();
  EXPECT_TRUE(r.ok()) << r.error().str();
  if (!r.ok()) return {};
  auto it = r->reclaim.find(id);
  return it == r->reclaim.end() ? khagent::ReclaimCounters{} : it->second;
}

double psi_some_ms(const std::string& cgroup_dir) {
  auto p = khagent::read_psi(cgroup_dir + "/memory.pressure");
  EXPECT_TRUE(p.ok()) << cgroup_dir << ": " << (p.ok() ? "" : p.error().str());
  return p.ok() ? static_cast<double>(p->some_us) / 1e3 : 0;
}

}  // namespace

// One task alone in a cgroup that reclaims at its memory cgroup's limit:
// every memory stall PSI counts for the cgroup is then a reclaim, so the
// time the BPF side charged to it is the cgroup's PSI "some" total.
//  - Hybrid host (v1 memory controller): a file on disk read again and
//    again under a 48 MiB limit; the kernel reclaims the cgroup's own clean
//    page cache at each charge, and nothing else stalls the task on memory
//    (the file is read from disk, an I/O wait, and is far larger than the
//    limit, so its refaults are not of a working set). Checked both ways.
//  - Pure v2 without a disk (the VM's initramfs root): anonymous memory over
//    memory.high; the kernel tries to reclaim (counted here) and then makes
//    the task sleep off the excess (a memory stall with no reclaim), so the
//    reclaim time is part of the stall only.
TEST(ReclaimHost, ReclaimTimeIsThePsiMemoryStallOfACgroupThatOnlyReclaims) {
  REQUIRE_ROOT();
  khagent::Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  const bool v1 = hybrid(m);
  if (v1 && m.memory_v1.empty()) FAIL() << "hybrid host without a v1 memory hierarchy: cannot make a cgroup reclaim";
  if (!v1 && read_file(m.cgroup2 + "/cgroup.subtree_control").find("memory") == std::string::npos)
    FAIL() << "the memory controller is not enabled in cgroup2: cannot make a cgroup reclaim";
  if (read_file(m.cgroup2 + "/memory.pressure").empty())
    FAIL() << "no memory.pressure in cgroup2: a kernel without PSI (or booted with psi=0)";

  khagent::LoaderOptions o;
  o.pin = false;
  o.cpu_controller_on_v1 = !m.cpu_v1.empty();
  auto b = khagent::RunqBpf::open_and_load(o);
  ASSERT_TRUE(b.ok()) << b.error().str();
  ASSERT_EQ((*b)->reclaim_kinds(), (std::vector<std::string>{"node", "memcg"}))
      << "the vmscan tracepoints did not attach";
  khagent::BpfMapSource maps((*b)->map_fds(true));

  const std::string k = unique("khagent-reclaim");
  LaidOutCgroup cg(m, "/" + k, true, true);
  const std::string file = "/var/tmp/" + k + ".dat";
  if (v1) {
    ASSERT_TRUE(write_file(m.memory_v1 + cg.v2().rel + "/memory.limit_in_bytes", std::to_string(48 * kMiB)));
    // 256 MiB on disk, written from outside the cgroup and dropped from the
    // page cache, so the reader's every read charges and reclaims.
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << file;
    std::vector<char> buf(kMiB, 'x');
    bool written = true;
    for (int i = 0; i < 256 && written; i++)
      written = ::write(fd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size());
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (!written) ::unlink(file.c_str());
    ASSERT_TRUE(written) << "writing " << file;
  } else {
    ASSERT_TRUE(write_file(cg.v2().dir() + "/memory.high", std::to_string(32 * kMiB)));
  }

  pid_t p = fork();
  if (p == 0) {
    for (const auto& f : cg.procs())
      if (!write_file(f, std::to_string(getpid()))) _exit(5);
    if (!v1) {
      for (int i = 0; i < 96; i++) {  // anonymous memory, page by page
        auto* mem = static_cast<char*>(std::malloc(kMiB));
        if (!mem) _exit(3);
        for (uint64_t off = 0; off < kMiB; off += 4096) mem[off] = 1;
      }
      ::pause();
      _exit(0);
    }
    std::vector<char> buf(kMiB);
    for (;;) {
      int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) _exit(6);
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
      ::close(fd);
    }
  }
  ASSERT_GT(p, 0);
  // The counts start a moment in, from a reading of both.
  sleep_s(0.5);
  const uint64_t id = cg.v2().id();
  const khagent::ReclaimCounters r0 = reclaim_of(maps, id);
  const double psi0 = psi_some_ms(cg.v2().dir());
  sleep_s(v1 ? 3.0 : 2.0);
  // Stopped for the second reading, so that no reclaim is half-counted.
  ::kill(p, SIGSTOP);
  sleep_s(0.05);
  const khagent::ReclaimCounters r1 = reclaim_of(maps, id);
  const double psi1 = psi_some_ms(cg.v2().dir());
  ::kill(p, SIGKILL);
  waitpid(p, nullptr, 0);
  ::unlink(file.c_str());

  const khagent::ReclaimCounters d = khagent::reclaim_delta(r1, r0);
  const double memcg_ms = static_cast<double>(d.ns[KH_RECLAIM_MEMCG]) / 1e6;
  const double psi_ms = psi1 - psi0;
  std::printf("memcg reclaim: %llu reclaims, %.1f ms, %llu pages; PSI some of the cgroup: %.1f ms; node: %llu\n",
              static_cast<unsigned long long>(d.count[KH_RECLAIM_MEMCG]), memcg_ms,
              static_cast<unsigned long long>(d.pages[KH_RECLAIM_MEMCG]), psi_ms,
              static_cast<unsigned long long>(d.count[KH_RECLAIM_NODE]));
  ASSERT_GT(d.count[KH_RECLAIM_MEMCG], 10u) << "the cgroup did not reclaim at its limit";
  EXPECT_EQ(d.count[KH_RECLAIM_NODE], 0u) << "a cgroup at its own limit is not in the node's reclaim";
  ASSERT_GT(psi_ms, 0) << "PSI counted no memory stall";
  // Never more than the stall: every reclaim is inside one (1 ms for PSI's
  // microsecond totals and the two readings not taken at one instant).
  EXPECT_LE(memcg_ms, psi_ms * 1.02 + 1.0) << "more reclaim time than memory stall";
  EXPECT_GT(memcg_ms, 0) << "reclaims of no duration";
  if (v1) {
    // PSI's stall opens before the begin tracepoint and closes after the
    // end one (the charge path calls psi_memstall_enter/leave around
    // try_to_free_mem_cgroup_pages, which sets up its scan and fires the
    // tracepoints inside), so each reclaim has a little stall outside the
    // timed part: 0.5 to 1 us on these VMs, 1.5 us allowed per reclaim.
    const double outside_ms = static_cast<double>(d.count[KH_RECLAIM_MEMCG]) * 1.5e-3;
    EXPECT_GE(memcg_ms, psi_ms * 0.98 - outside_ms)
        << "memory stall that is not reclaim, in a cgroup that only reclaims (" << outside_ms
        << " ms allowed outside the tracepoints)";
    // Reading the file past the 48 MiB limit reclaims at least the limit's worth.
    EXPECT_GT(d.pages[KH_RECLAIM_MEMCG], 48 * kMiB / 4096) << "less reclaimed than the limit";
  }

  // The entry stays until the agent forgets the cgroup (after its last
  // read), and goes then.
  cg.parts.clear();
  auto before_forget = maps.read();
  ASSERT_TRUE(before_forget.ok());
  EXPECT_EQ(before_forget->reclaim.count(id), 1u) << "the entry went before its last read";
  maps.forget({id}, {});
  auto after = maps.read();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->reclaim.count(id), 0u) << "reclaim_stats kept the entry of a forgotten cgroup";
}

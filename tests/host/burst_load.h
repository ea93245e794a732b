// A pod's request load for the CPU burst tests and benchmark: every
// `period`, `work` of CPU split over `threads` threads, each response timed
// from its intended start (no coordinated omission), in shared memory the
// test reads.
#pragma once

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "host_util.h"

namespace hosttest {

// The kubelet's quota for a 0.2 CPU limit (20 ms a 100 ms period) on the
// cgroup, v1 cpu on a hybrid host, v2 cpu.max else; false if a write failed.
inline bool kubelet_quota_02(const LaidOutCgroup& c, bool v1) {
  if (v1)
    return write_file(c.v1_file("cpu.cfs_period_us"), "100000") && write_file(c.v1_file("cpu.cfs_quota_us"), "20000");
  return write_file(c.v2().dir() + "/cpu.max", "20000 100000");
}

// The periods the kernel throttled the cgroup in (cpu.stat nr_throttled).
inline uint64_t nr_throttled(const LaidOutCgroup& c, bool v1) {
  const std::string stat = read_file(v1 ? c.v1_file("cpu.stat") : c.v2().dir() + "/cpu.stat");
  const size_t at = stat.find("nr_throttled ");
  return at == std::string::npos ? 0 : std::strtoull(stat.c_str() + at + 13, nullptr, 10);
}

// The cgroup's burst file: v1 cpu.cfs_burst_us, v2 cpu.max.burst ("" if none).
inline std::string burst_file(const LaidOutCgroup& c, bool v1) {
  return v1 ? c.v1_file("cpu.cfs_burst_us") : c.v2().dir() + "/cpu.max.burst";
}

struct BurstShape {
  const char* name;
  uint64_t period_ms;
  uint64_t work_ms;  // CPU time per request, all threads together
  unsigned threads;
};

constexpr uint32_t kMaxResponses = 4096;

struct Responses {
  std::atomic<uint32_t> n{0};
  float ms[kMaxResponses];
};

// Shared with a forked child; never freed (the test process ends soon).
inline Responses* shared_responses() {
  void* p = mmap(nullptr, sizeof(Responses), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : new (p) Responses();
}

inline uint64_t clock_ns(clockid_t c) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

inline void spin_cpu(uint64_t ns) {
  const uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < ns) asm volatile("" ::: "memory");
}

// The request loop, forever.
[[noreturn]] inline void request_loop(Responses* r, BurstShape s) {
  const uint64_t period = s.period_ms * 1'000'000, per_thread = s.work_ms * 1'000'000 / s.threads;
  uint64_t next = clock_ns(CLOCK_MONOTONIC) + period;
  for (;;) {
    timespec ts{static_cast<time_t>(next / 1'000'000'000ULL), static_cast<long>(next % 1'000'000'000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    if (s.threads == 1) {
      spin_cpu(per_thread);
    } else {
      std::vector<std::thread> ts;
      for (unsigned i = 1; i < s.threads; i++) ts.emplace_back([per_thread] { spin_cpu(per_thread); });
      spin_cpu(per_thread);
      for (auto& t : ts) t.join();
    }
    const uint32_t i = r->n.load(std::memory_order_relaxed);
    if (i < kMaxResponses) r->ms[i] = static_cast<float>(static_cast<double>(clock_ns(CLOCK_MONOTONIC) - next) / 1e6);
    r->n.store(i + 1, std::memory_order_release);
    next += period;
  }
}

// The p99 of the responses from index `from` on (with under 100 of them,
// the second largest or the largest).
inline double p99_from(const Responses* r, uint32_t from) {
  const uint32_t n = std::min(r->n.load(std::memory_order_acquire), kMaxResponses);
  std::vector<float> v(r->ms + std::min(from, n), r->ms + n);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(0.99 * static_cast<double>(v.size() - 1))];
}

}  // namespace hosttest

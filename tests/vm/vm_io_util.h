// Helpers of the in-guest IO tests and the IO benchmark: a null_blk
// device of known capacity, made through configfs, and processes doing
// O_DIRECT IO on it from a cgroup.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../host/host_util.h"
#include "khagent/util/clock.h"

namespace vmio {

using hosttest::sleep_s;
using hosttest::write_file;
using khagent::mono_ns;

inline const std::string kCg = "/sys/fs/cgroup";
inline const std::string kNullb = "/sys/kernel/config/nullb/khagent-io";

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

// What an IO process shares with its parent (in MAP_SHARED memory): IOs
// done, and while `recording`, each IO's latency in us (the first
// kMaxLatencies).
struct IoShared {
  static constexpr uint32_t kMaxLatencies = 1u << 20;
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> recording{0};
  std::atomic<uint32_t> n{0};
  uint32_t latency_us[kMaxLatencies];
};

// A new IoShared in shared memory (nullptr when mmap failed); free_shared
// gives it back.
inline IoShared* new_shared() {
  void* p = mmap(nullptr, sizeof(IoShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : new (p) IoShared();
}
inline void free_shared(IoShared* s) {
  if (s) munmap(s, sizeof(IoShared));
}

// A process in `cgroup` doing O_DIRECT IO on `dev` from `threads` threads
// until killed: reads of `bs` at random offsets, or writes; counted (and
// timed) in `sh` when given.
inline pid_t io_loop(const std::string& cgroup, const std::string& dev, bool write, size_t bs, int threads,
                     IoShared* sh = nullptr) {
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
          const uint64_t t0 = mono_ns();
          const ssize_t n = write ? ::pwrite(fd, buf, bs, off) : ::pread(fd, buf, bs, off);
          if (n != static_cast<ssize_t>(bs)) _exit(93);
          if (!sh) continue;
          sh->done.fetch_add(1, std::memory_order_relaxed);
          sh->bytes.fetch_add(bs, std::memory_order_relaxed);
          if (sh->recording.load(std::memory_order_relaxed)) {
            const uint32_t i = sh->n.fetch_add(1, std::memory_order_relaxed);
            if (i < IoShared::kMaxLatencies) sh->latency_us[i] = static_cast<uint32_t>((mono_ns() - t0) / 1000);
          }
        }
      });
    for (auto& t : ts) t.join();
    _exit(0);
  }
  return p;
}

inline void stop(pid_t p) {
  if (p <= 0) return;
  kill(p, SIGKILL);
  int st = 0;
  waitpid(p, &st, 0);
}

// IOs per second of `sh` over `seconds`.
inline double rate_over(IoShared* sh, double seconds) {
  const uint64_t a = sh->done.load(), t0 = mono_ns();
  sleep_s(seconds);
  return static_cast<double>(sh->done.load() - a) * 1e9 / static_cast<double>(mono_ns() - t0);
}

// The line of `majmin` in a cgroup's io.max ("" when it has none).
inline std::string io_max_line(const std::string& cgroup, const std::string& majmin) {
  const std::string text = hosttest::read_file(kCg + cgroup + "/io.max");
  const size_t at = text.find(majmin + " ");
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

}  // namespace vmio

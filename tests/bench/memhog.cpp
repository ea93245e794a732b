// khagent_memhog: anonymous memory that grows and stays in use, as a YARN
// task's JVM heap or an online pod's in-memory cache does. A plain process
// (its oom_score_adj is whatever it inherits, unlike stress-ng's workers,
// which raise their own), so it stands in for either side in an OOM
// experiment.
//
//   khagent_memhog --mb 2600 [--rate 500] [--touch-ms 100]
//
// Grows to --mb MiB at --rate MiB/s, writing every page it maps; then, every
// --touch-ms, writes one byte in each MiB again so the whole set stays in
// use. Prints "grown <MiB>" to stdout once at its size, and exits 0 on
// SIGTERM or SIGINT. Exit 2 on bad arguments, 1 when it cannot map memory.
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

constexpr size_t kMiB = size_t{1} << 20;

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "khagent_memhog: %s\nusage: khagent_memhog --mb N [--rate MIB_PER_S (500)] [--touch-ms MS (100)]\n",
               msg.c_str());
  std::exit(2);
}

long number(const char* name, const char* v, long lo, long hi) {
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < lo || n > hi)
    usage(std::string(name) + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return n;
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000};
  while (nanosleep(&ts, &ts) != 0 && !g_stop) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  long mb = 0, rate = 500, touch_ms = 100;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") usage("grows anonymous memory and keeps it in use");
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--mb") mb = number("--mb", v, 1, 1 << 20);
    else if (a == "--rate") rate = number("--rate", v, 1, 1 << 20);
    else if (a == "--touch-ms") touch_ms = number("--touch-ms", v, 1, 60'000);
    else usage("unknown option " + a);
  }
  if (mb == 0) usage("--mb is required");
  struct sigaction sa{};
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  const long page = sysconf(_SC_PAGESIZE);
  std::vector<char*> chunks;
  chunks.reserve(static_cast<size_t>(mb));
  // Grow in steps of 10 ms worth of the rate.
  const long step = rate / 100 > 0 ? rate / 100 : 1;
  while (!g_stop && static_cast<long>(chunks.size()) < mb) {
    for (long k = 0; k < step && static_cast<long>(chunks.size()) < mb; k++) {
      void* p = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "khagent_memhog: mmap: %s\n", std::strerror(errno));
        return 1;
      }
      char* c = static_cast<char*>(p);
      for (size_t off = 0; off < kMiB; off += static_cast<size_t>(page)) c[off] = static_cast<char>(off);
      chunks.push_back(c);
    }
    sleep_ms(step * 1000 / rate > 0 ? step * 1000 / rate : 1);
  }
  if (g_stop) return 0;
  std::printf("grown %zu\n", chunks.size());
  std::fflush(stdout);
  unsigned n = 0;
  while (!g_stop) {
    n++;
    for (char* c : chunks) c[(n * 4099u) % kMiB] = static_cast<char>(n);
    sleep_ms(touch_ms);
  }
  return 0;
}

// Memory of khagent's BPF maps and of the agent itself.
//
// The maps are charged to the agent's memory cgroup (the DaemonSet's limit is
// 256 Mi). Per-CPU maps grow with the number of *possible* CPUs, so a figure
// measured on this 2-CPU host says little about a 128-CPU node: the test
// reads each map's memlock (the kernel's own figure, as `bpftool map show`
// prints it), checks that a model of the kernel's accounting reproduces it
// here, and uses the model to compute the same maps at 128 possible CPUs.
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_util.h"
#include "khagent/loader/runq_loader.h"

using namespace khagent;
using namespace hosttest;

namespace {

constexpr uint64_t kBudget = 32ull << 20;  // map memory at 128 CPUs, 4096 cgroups
constexpr uint32_t kBigNode = 128;         // possible CPUs of the node to plan for
constexpr uint64_t kRssBudgetKb = 64 << 10;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t pow2_up(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Sizes of the kernel structures the accounting counts, from this kernel's BTF.
struct KernelSizes {
  uint64_t htab = 0, htab_elem = 0, bucket = 0, array = 0;
  bool ok() const { return htab && htab_elem && bucket && array; }
};

KernelSizes kernel_sizes() {
  KernelSizes k;
  struct btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return k;
  auto size_of = [&](const char* name) -> uint64_t {
    int id = btf__find_by_name_kind(vmlinux, name, BTF_KIND_STRUCT);
    if (id < 0) return 0;
    long n = btf__resolve_size(vmlinux, id);
    return n > 0 ? static_cast<uint64_t>(n) : 0;
  };
  k.htab = size_of("bpf_htab");
  k.htab_elem = size_of("htab_elem");
  k.bucket = size_of("bucket");
  k.array = size_of("bpf_array");
  btf__free(vmlinux);
  return k;
}

bool is_hash(uint32_t t) {
  return t == BPF_MAP_TYPE_HASH || t == BPF_MAP_TYPE_PERCPU_HASH || t == BPF_MAP_TYPE_LRU_HASH ||
         t == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}
bool is_percpu(uint32_t t) {
  return t == BPF_MAP_TYPE_PERCPU_HASH || t == BPF_MAP_TYPE_LRU_PERCPU_HASH || t == BPF_MAP_TYPE_PERCPU_ARRAY;
}
bool is_lru(uint32_t t) { return t == BPF_MAP_TYPE_LRU_HASH || t == BPF_MAP_TYPE_LRU_PERCPU_HASH; }

// Kernels since 6.4 (map_mem_usage): hashtab.c htab_map_mem_usage() and
// arraymap.c array_map_mem_usage() for a map with `ncpus` possible CPUs,
// preallocated hashes counted full (the worst case, which prealloc is).
// Returns 0 for map types it does not model (their memory does not depend
// on the number of CPUs in khagent's object: ring buffer, task storage).
uint64_t model_mem_usage(const MapMemory& m, uint32_t ncpus, const KernelSizes& k) {
  const uint64_t value = round_up(m.value_size, 8), key = round_up(m.key_size, 8);
  if (is_hash(m.type)) {
    const bool percpu = is_percpu(m.type), lru = is_lru(m.type);
    const uint64_t elem = k.htab_elem + key + (percpu ? 8 : value);
    uint64_t usage = k.htab + k.bucket * pow2_up(m.max_entries) + 4ull * ncpus * 8;  // map_locked[8]
    uint64_t entries = m.max_entries + (!percpu && !lru ? ncpus : 0);                // extra elems
    usage += elem * entries;
    if (percpu) usage += value * ncpus * entries;
    else if (!lru) usage += 8ull * ncpus;  // extra_elems pointers
    return usage;
  }
  if (m.type == BPF_MAP_TYPE_PERCPU_ARRAY) return k.array + m.max_entries * 8ull + m.max_entries * value * ncpus;
  return 0;
}

// Kernels before 6.4 (bpf_map_memory_footprint): key and value (times the
// possible CPUs for per-CPU maps) per entry, rounded up to pages.
uint64_t model_footprint(const MapMemory& m, uint32_t ncpus) {
  uint64_t value = is_percpu(m.type) ? round_up(m.value_size, 8) * ncpus : m.value_size;
  return round_up(m.max_entries * round_up(m.key_size + value, 8), 4096);
}

struct Row {
  std::string name;
  uint64_t here = 0;   // measured memlock on this host
  uint64_t model = 0;  // the model at this host's CPUs
  uint64_t big = 0;    // the model at kBigNode CPUs
};

// Loads the object with `max_cgroups`, prints every map's memlock here and
// at 128 CPUs, and returns the total at 128 CPUs (0 on failure).
uint64_t maps_at_128_cpus(uint32_t max_cgroups) {
  LoaderOptions o;
  o.pin = false;
  o.max_cgroups = max_cgroups;
  auto b = RunqBpf::open_and_load(o);
  EXPECT_TRUE(b.ok()) << b.error().str();
  if (!b.ok()) return 0;
  const uint32_t here = static_cast<uint32_t>(libbpf_num_possible_cpus());
  const KernelSizes k = kernel_sizes();
  EXPECT_TRUE(k.ok()) << "struct sizes missing from the kernel's BTF";

  auto maps = (*b)->map_memory();
  // Which accounting does this kernel use? The one that reproduces the
  // modelled maps' figures here.
  bool usage_ok = true, footprint_ok = true;
  for (const auto& m : maps) {
    uint64_t u = model_mem_usage(m, here, k);
    if (u == 0) continue;
    usage_ok = usage_ok && u == m.memlock;
    footprint_ok = footprint_ok && model_footprint(m, here) == m.memlock;
  }
  EXPECT_TRUE(usage_ok || footprint_ok)
      << "no model reproduces this kernel's memlock figures: the 128-CPU figure would be a guess";
  std::vector<Row> rows;
  uint64_t sum_here = 0, sum_big = 0;
  for (const auto& m : maps) {
    Row r{m.name, m.memlock, m.memlock, m.memlock};
    bool modelled = usage_ok ? model_mem_usage(m, here, k) != 0 : is_hash(m.type) || is_percpu(m.type);
    if (modelled) {
      r.model = usage_ok ? model_mem_usage(m, here, k) : model_footprint(m, here);
      r.big = usage_ok ? model_mem_usage(m, kBigNode, k) : model_footprint(m, kBigNode);
    }
    sum_here += r.here;
    sum_big += r.big;
    rows.push_back(r);
  }
  std::printf("max_cgroups %u, accounting: %s\n", max_cgroups,
              usage_ok ? "map_mem_usage (6.4+)" : "memory footprint (before 6.4)");
  std::printf("%-22s %14s %14s %16s\n", "map", "memlock here", "model here", "model 128 CPUs");
  for (const auto& r : rows)
    std::printf("%-22s %14llu %14llu %16llu\n", r.name.c_str(), static_cast<unsigned long long>(r.here),
                static_cast<unsigned long long>(r.model), static_cast<unsigned long long>(r.big));
  // Measured, not modelled: a VM booted with 128 possible CPUs
  // (vmtest.memory_at_128_possible_cpus) checks the budget directly here.
  EXPECT_LE(sum_here, kBudget) << "BPF maps measured at " << here << " possible CPUs";
  std::printf("%-22s %14llu %14s %16llu   (%u possible CPUs here; %.1f MiB -> %.1f MiB)\n", "total",
              static_cast<unsigned long long>(sum_here), "", static_cast<unsigned long long>(sum_big), here,
              static_cast<double>(sum_here) / (1 << 20), static_cast<double>(sum_big) / (1 << 20));
  return sum_big;
}

}  // namespace

TEST(MemoryHost, BpfMapsFitIn32MiBAt128PossibleCpus) {
  REQUIRE_ROOT();
  uint64_t dflt = maps_at_128_cpus(4096);  // the default --max-cgroups
  ASSERT_GT(dflt, 0u);
  EXPECT_LE(dflt, kBudget) << "BPF maps at 128 possible CPUs with 4096 cgroups";
  uint64_t big = maps_at_128_cpus(8192);
  ASSERT_GT(big, 0u);
  EXPECT_LE(big, kBudget) << "BPF maps at 128 possible CPUs with --max-cgroups 8192";
}

namespace {

// Runs khagent with `args` (after `sh -c exec`), stops it with SIGINT after
// `stop_after_s` (0: let it exit); returns its peak RSS in KiB and its output.
std::pair<long, std::string> run_agent(const std::string& args, double stop_after_s) {
  std::string out = "/tmp/" + unique("khagent-mem") + ".out";
  pid_t pid = fork();
  if (pid == 0) {
    std::string cmd = "exec " + std::string(KHAGENT_BINARY) + " " + args + " > " + out + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  if (stop_after_s > 0) {
    sleep_s(stop_after_s);
    ::kill(pid, SIGINT);
  }
  int st = 0;
  struct rusage ru{};
  wait4(pid, &st, 0, &ru);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << args << "\n" << read_file(out).substr(0, 4000);
  std::string text = read_file(out);
  ::unlink(out.c_str());
  return {ru.ru_maxrss, text};
}

}  // namespace

// The agent's own memory with 4096 busy cgroups: one process hops through
// them all again and again (a cgroup gets its map entry at its first switch).
// Userspace memory does not grow with the CPUs (the maps are read as one
// value per key), so this host's figure holds for a 128-CPU node.
TEST(MemoryHost, AgentRssWith4096Cgroups) {
  REQUIRE_ROOT();
  Mounts m = mounts();
  ASSERT_FALSE(m.cgroup2.empty());
  constexpr int kCgroups = 4096;
  TestCgroup parent(m.cgroup2, "/" + unique("khagent-mem"));
  std::vector<std::unique_ptr<TestCgroup>> cgs;
  std::vector<std::string> procs;
  for (int i = 0; i < kCgroups; i++) {
    cgs.push_back(std::make_unique<TestCgroup>(m.cgroup2, parent.rel + "/cg" + std::to_string(i)));
    procs.push_back(cgs.back()->dir() + "/cgroup.procs");
  }
  {
    Child hopper({parent.dir() + "/cgroup.procs"}, -1, 0, [&] {
      for (;;)
        for (const auto& p : procs) {
          write_file(p, "0");
          usleep(1);  // switch out and in: the switch-in charges this cgroup
        }
    });
    ASSERT_GT(hopper.pid, 0);
    sleep_s(1.0);

    auto [observe_kb, observe_out] =
        run_agent("--no-pin --log-level warn --max-cgroups 8192 observe --json --interval 1s --count 4", 0);
    size_t seen = 0;
    std::istringstream in(observe_out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] != '{') continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("cgroups")) continue;
      size_t n = 0;
      for (const auto& c : j["cgroups"]) n += c["path"].get<std::string>().rfind(parent.rel + "/cg", 0) == 0;
      seen = std::max(seen, n);
    }
    std::string cfg = "/tmp/" + unique("khagent-mem") + ".yaml";
    std::ofstream(cfg) << "tick: 1s\n";
    auto [run_kb, run_out] = run_agent("--no-pin --log-level warn --max-cgroups 8192 run --dry-run --config " + cfg +
                                           " --state-file /tmp/" + unique("khagent-mem") + "-state.json",
                                       5.0);
    ::unlink(cfg.c_str());
    std::printf(
        "%zu of the %d test cgroups active in one interval; peak RSS: observe --json %.1f MiB, "
        "run --dry-run %.1f MiB\n",
        seen, kCgroups, static_cast<double>(observe_kb) / 1024, static_cast<double>(run_kb) / 1024);
    EXPECT_GE(seen, static_cast<size_t>(kCgroups) * 9 / 10) << "the hopper did not reach the cgroups";
    // Both within the budget: the agent (the DaemonSet runs `run`), and
    // observe --json, which writes every active cgroup each tick (streamed
    // since it went over: 67-75 MiB when it built a JSON tree, 49 after).
    EXPECT_LE(static_cast<uint64_t>(run_kb), kRssBudgetKb) << "the agent";
    EXPECT_LE(static_cast<uint64_t>(observe_kb), kRssBudgetKb) << "observe --json";
  }  // the hopper is killed
  cgs.clear();  // rmdir, children first
}

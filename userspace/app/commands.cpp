// `khagent observe`, `khagent restore` and `khagent config check`, and the
// configuration every command loads (the run loop is agent.cpp).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <iostream>

#include <spdlog/spdlog.h>

#include "khagent/actuate/actuator.h"
#include "khagent/actuate/state_store.h"
#include "khagent/app/agent.h"
#include "khagent/app/bootstrap.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/topology.h"
#include "khagent/export/agent_log.h"
#include "khagent/export/observe.h"
#include "khagent/signals/signals.h"

namespace khagent {

NodeIdentity node_identity(const CliOptions& o) {
  NodeIdentity n;
  n.name = o.node_name;
  if (n.name.empty()) {
    if (const char* env = std::getenv("NODE_NAME"); env && *env) n.name = env;
  }
  if (n.name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) n.name = host;
  }
  n.labels = o.node_labels;
  return n;
}

Result<Config> effective_config(const CliOptions& o) {
  NodeIdentity node = node_identity(o);
  Result<Config> c = o.config_path.empty() ? Result<Config>(default_config()) : load_config_file(o.config_path, node);
  if (!c) return c;
  if (o.dry_run) c->dry_run = true;
  if (!o.state_file.empty()) c->state_file = o.state_file;
  if (auto v = validate_config(*c); !v) return v.error();
  return c;
}

namespace {

// Sleeps until `deadline` (CLOCK_MONOTONIC) or a signal.
void sleep_until(const timespec& deadline) {
  while (!g_stop) {
    int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    if (r == 0) return;
    if (r != EINTR) return;
  }
}

}  // namespace

int run_observe(const CliOptions& o) {
  Mounts mounts;
  if (auto rc = checked_mounts(mounts)) return *rc;
  spdlog::info("cgroup2 at {}{}", mounts.cgroup2,
               mounts.cpu_v1.empty() ? "" : " (cpu controller on cgroup v1 at " + mounts.cpu_v1 + ")");
  LoaderOptions lo = o.loader;
  lo.replace_pins = false;  // a running agent's pins stay its own
  Measuring meas;
  if (auto rc = start_measuring(mounts, lo, true, meas)) return *rc;
  Collector& collector = *meas.collector;
  ObserveView view{o.cgroup_prefix, o.limit};
  bool tty = !o.json && isatty(STDOUT_FILENO);

  if (auto first = collector.tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  uint64_t shown = 0;
  while (!g_stop && (o.count == 0 || shown < o.count)) {
    uint64_t ns = static_cast<uint64_t>(next.tv_nsec) + o.interval_ns;
    next.tv_sec += static_cast<time_t>(ns / 1000000000ULL);
    next.tv_nsec = static_cast<long>(ns % 1000000000ULL);
    sleep_until(next);
    if (g_stop) break;
    auto sample = collector.tick();
    if (!sample) {
      spdlog::error("{}", sample.error().str());
      return 1;
    }
    Signals sig = compute_signals(*sample);
    if (o.json) {
      std::cout << observe_json(sig, view) << '\n' << std::flush;
    } else {
      if (tty) std::cout << "\033[H\033[2J";
      std::cout << observe_table(sig, view) << std::flush;
    }
    shown++;
  }
  spdlog::info("stopping after {} intervals; {} map entries of removed cgroups deleted", shown, collector.forgotten());
  return 0;
}

int run_config_check(const CliOptions& o) {
  auto c = effective_config(o);
  if (!c) {
    std::cerr << "khagent: " << c.error().message << "\n";
    return 2;
  }
  std::cout << "# " << o.config_path << ": OK (node " << node_identity(o).name << ")\n" << config_to_yaml(*c);
  return 0;
}

int run_restore(const CliOptions& o) {
  auto c = effective_config(o);
  if (!c) {
    spdlog::error("{}", c.error().message);
    return 2;
  }
  auto mounts = find_mounts();
  if (!mounts) {
    spdlog::error("{}", mounts.error().str());
    return 2;
  }
  StateStore store(c->state_file);
  if (auto r = store.load(); !r) {
    spdlog::error("{}", r.error().str());
    return 1;
  }
  spdlog::info("{}", store.note());
  for (const auto& r : store.refused()) spdlog::error("state file {}: {}", c->state_file, r);
  RealCgroupFs cgfs(roots_of(*mounts));
  auto topo = read_topology();
  Actuator act(cgfs, store, false, topo ? topo->all() : CpuSet{});
  const size_t failed = log_restore(act.restore(), true);
  return failed || !store.refused().empty() ? 1 : 0;
}

}  // namespace khagent

// `khagent restore` and `khagent config check`, and the configuration every
// command loads (the run loop is agent.cpp).
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include <spdlog/spdlog.h>

#include "khagent/actuate/actuator.h"
#include "khagent/actuate/state_store.h"
#include "khagent/app/agent.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/topology.h"

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
  RealCgroupFs cgfs(CgroupRoots{mounts->cgroup2, mounts->cpu_v1, mounts->cpuset_v1});
  auto topo = read_topology();
  Actuator act(cgfs, store, false, topo ? topo->all() : CpuSet{});
  int failed = 0;
  for (const auto& r : act.restore()) {
    if (r.outcome == ActionOutcome::Rejected) failed++;
    spdlog::info("{} {} {}: '{}' -> '{}' {}", outcome_name(r.outcome), r.cgroup, cgroup_file_name(r.file), r.from, r.to,
                 r.message);
  }
  return failed || !store.refused().empty() ? 1 : 0;
}

}  // namespace khagent

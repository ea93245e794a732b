#include "khagent/app/peers.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "khagent/app/agent.h"

namespace khagent {

namespace {

std::optional<int> start_metrics(const Config& cfg, const CliOptions& o, Peers& out) {
  MetricsOptions mo;
  mo.address = o.metrics_address;
  mo.port = o.metrics_port;
  mo.stall_seconds = std::max(10.0, 20.0 * static_cast<double>(cfg.tick_ns) / 1e9);
  out.metrics = std::make_unique<Metrics>(mo);
  if (auto r = out.metrics->start(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }
  spdlog::info("serving /metrics, /healthz and /readyz on {}:{}", o.metrics_address, out.metrics->port());
  return std::nullopt;
}

// The names the ResourceManager may list this node under: the hostname,
// and the node's name where it differs.
std::vector<std::string> yarn_hostnames(const CliOptions& o) {
  std::vector<std::string> hosts;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) hosts.emplace_back(host);
  std::string node = node_identity(o).name;
  if (!node.empty() && (hosts.empty() || node != hosts.front())) hosts.push_back(node);
  return hosts;
}

}  // namespace

std::optional<int> start_peers(const Config& cfg, const CliOptions& o, const Mounts& m, Peers& out) {
  if (o.metrics)
    if (auto rc = start_metrics(cfg, o, out)) return rc;
  if (!cfg.kubelet_pods_url.empty()) {
    KubeletPodsOptions ko;
    ko.url = cfg.kubelet_pods_url;
    ko.token_file = cfg.kubelet_token_file;
    ko.ca_file = cfg.kubelet_ca_file;
    ko.insecure_skip_verify = cfg.kubelet_insecure_skip_verify;
    out.pods = std::make_unique<KubeletPodsWatcher>(ko);
    spdlog::info("pod metadata from {} (priority classes, labels, annotations)", ko.url);
  }
  if (cfg.yarn.enabled)
    out.yarn = std::make_unique<YarnDownscaler>(cfg.yarn, cfg.dry_run, m.cgroup2, yarn_hostnames(o),
                                                cfg.dry_run ? "" : cfg.state_file + ".yarn");
  if (cfg.capacity.enabled) {
    const std::string node = cfg.capacity.node_name.empty() ? node_identity(o).name : cfg.capacity.node_name;
    if (BatchPublisher::api_server(cfg.capacity).empty()) {
      spdlog::error(
          "capacity.enabled: no API server address (set capacity.api_server, or run in a pod, where "
          "KUBERNETES_SERVICE_HOST gives it)");
      return 2;
    }
    out.batch = std::make_unique<BatchPublisher>(cfg.capacity, node, cfg.dry_run);
  }
  return std::nullopt;
}

}  // namespace khagent

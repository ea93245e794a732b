// What the agent talks to besides the kernel, each built from the
// configuration and options, or left empty when not asked for: the
// /metrics server (started here, so a taken port fails the start-up), the
// kubelet's pod list, the YARN downscaler and the batch capacity publisher
// (both started by the agent once it measures).
#pragma once

#include <memory>
#include <optional>

#include "khagent/app/batch_publisher.h"
#include "khagent/app/cli.h"
#include "khagent/app/yarn_downscaler.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/kubelet_pods.h"
#include "khagent/config/config.h"
#include "khagent/export/metrics.h"

namespace khagent {

struct Peers {
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<KubeletPodsWatcher> pods;
  std::unique_ptr<YarnDownscaler> yarn;
  std::unique_ptr<BatchPublisher> batch;  // capacity published to Kubernetes
};

// The exit code of a failure, already logged, or nothing.
std::optional<int> start_peers(const Config& cfg, const CliOptions& o, const Mounts& m, Peers& out);

}  // namespace khagent

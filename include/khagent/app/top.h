// `khagent top`: a full-screen live view of run-queue latency by cgroup.
// The screen's model and rendering are in export/top_view.h.
#pragma once

#include "khagent/app/cli.h"
#include "khagent/export/top_view.h"

namespace khagent {

int run_top(const CliOptions& o);

}  // namespace khagent

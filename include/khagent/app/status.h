// `khagent status`: what a running agent sees (its pinned maps) and what it
// has changed (the state file, the offline targets' cpu.max). The report and
// its rendering are in export/status_report.h.
#pragma once

#include "khagent/app/cli.h"
#include "khagent/export/status_report.h"

namespace khagent {

int run_status(const CliOptions& o);

}  // namespace khagent

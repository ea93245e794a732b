// The commands' entry points: `khagent run` (agent.cpp), `observe`,
// `restore` and `config check` (commands.cpp), and the configuration every
// command loads.
#pragma once

#include <csignal>

#include "khagent/app/cli.h"
#include "khagent/config/config.h"

namespace khagent {

// Set by SIGINT/SIGTERM handlers; the loops stop when it is non-zero.
extern volatile std::sig_atomic_t g_stop;

// Who this node is: --node-name, else $NODE_NAME, else the hostname.
NodeIdentity node_identity(const CliOptions& o);

// Loads --config (or the defaults) with per-node overrides and the command
// line's overrides; errors are for exit code 2.
Result<Config> effective_config(const CliOptions& o);

int run_agent(const CliOptions& o);
int run_observe(const CliOptions& o);
int run_restore(const CliOptions& o);
int run_config_check(const CliOptions& o);

}  // namespace khagent

#include "khagent/app/cli.h"
#include "khagent/util/duration.h"
#include "khagent/version.h"

#include <cmath>
#include <optional>
#include <sstream>
#include <utility>

#include <CLI/CLI.hpp>

namespace khagent {

Result<uint64_t> parse_duration_ns(const std::string& text) {
  // The configuration's grammar (util/duration.h); a bare number is seconds.
  std::string t = text;
  if (!t.empty() && t.find_first_not_of("0123456789.") == std::string::npos) t += "s";
  uint64_t ns = 0;
  if (auto err = duration_text::parse_duration_ns(t, ns); !err.empty()) return make_error(EINVAL, err);
  if (ns == 0) return make_error(EINVAL, "duration must be positive: '" + text + "'");
  if (ns > duration_text::kNsPerHour) return make_error(ERANGE, "duration too long: '" + text + "' (at most 1h)");
  return ns;
}

namespace {

// What the options fill beyond CliOptions, turned into it after parsing.
struct Flags {
  bool no_pin = false, no_fentry = false, no_interference = false, no_metrics = false;
  std::string interval = "1s";
  std::string stall_period = "2ms";
  std::vector<std::string> labels;
};

void add_global_options(CLI::App& app, CliOptions& o, Flags& f) {
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--pin-dir", o.loader.pin_dir, "where maps are pinned for bpftool");
  app.add_flag("--no-pin", f.no_pin, "do not pin maps");
  app.add_flag("--no-fentry", f.no_fentry, "read throttling from cpu.stat even where fentry works");
  app.add_flag("--no-interference", f.no_interference, "do not record (victim, aggressor) pairs");
  app.add_option("--max-cgroups", o.loader.max_cgroups, "cgroups tracked in the kernel maps")
      ->check(CLI::Range(16u, 1u << 20));
  app.add_option("--stall-period", f.stall_period,
                 "how often each busy CPU's stall detector fires (100us to 100ms; 0: no detector): "
                 "waits through a CPU stall are charged to 'stolen'")
      ->capture_default_str();
}

// The live views: observe and top.
void add_view_commands(CLI::App& app, CliOptions& o, Flags& f) {
  auto* observe = app.add_subcommand("observe", "live per-cgroup run-queue latency, its causes and aggressors");
  observe->add_option("-i,--interval", f.interval, "refresh interval (e.g. 500ms, 1s)");
  observe->add_option("-c,--count", o.count, "stop after this many intervals (0: run until interrupted)");
  observe->add_option("--cgroup", o.cgroup_prefix,
                      "only cgroups at or below this path (relative to the cgroup2 mount)");
  observe->add_flag("--json", o.json, "one JSON object per line per interval");
  observe->add_option("--limit", o.limit, "table rows")->check(CLI::PositiveNumber);

  auto* top = app.add_subcommand("top", "full-screen live view of run-queue latency by cgroup, online first");
  top->add_option("-i,--interval", f.interval, "refresh interval (e.g. 500ms, 1s)");
  top->add_option("--config", o.config_path, "YAML configuration (for classes; default: built-in defaults)")
      ->check(CLI::ExistingFile);
  top->add_option("--cgroup", o.cgroup_prefix, "only cgroups at or below this path (relative to the cgroup2 mount)");
  top->add_flag("--online-only", o.online_only, "start showing online cgroups only (key o toggles)");
  top->footer(
      "Keys: q quit (also Ctrl-C), o online only on/off, s sort by p99 -> wait -> cpu.\n"
      "Needs a terminal; for pipes and files use `khagent observe` (or --json).");
}

// The agent and its configuration: run, restore, config check.
void add_agent_commands(CLI::App& app, CliOptions& o, Flags& f) {
  auto* run = app.add_subcommand("run", "the agent: protect online pods by squeezing offline CPU");
  run->add_option("--config", o.config_path, "YAML configuration (default: built-in defaults)")
      ->check(CLI::ExistingFile);
  run->add_flag("--dry-run", o.dry_run, "compute and log every action, write nothing");
  run->add_option("--state-file", o.state_file, "where original values are kept");
  run->add_option("--node-name", o.node_name,
                  "this node's name for per-node overrides (default: $NODE_NAME or the hostname)");
  run->add_option("--node-label", f.labels, "a label of this node (key=value), for per-node overrides");
  run->add_option("--metrics-address", o.metrics_address, "address for /metrics, /healthz and /readyz");
  run->add_option("--metrics-port", o.metrics_port, "port for /metrics, /healthz and /readyz")
      ->check(CLI::Range(0, 65535));
  run->add_flag("--no-metrics", f.no_metrics, "serve no HTTP endpoints");
  auto* restore = app.add_subcommand("restore", "restore every original value from the state file and exit");
  restore->add_option("--config", o.config_path, "YAML configuration (for state_file)")->check(CLI::ExistingFile);
  restore->add_option("--state-file", o.state_file, "the state file (default: the configuration's)");
  auto* config = app.add_subcommand("config", "configuration tools");
  config->require_subcommand(1);
  auto* check = config->add_subcommand("check", "validate a configuration file and print the effective configuration");
  check->add_option("file", o.config_path, "the YAML file")->required()->check(CLI::ExistingFile);
  check->add_option("--node-name", o.node_name, "evaluate per-node overrides for this node name");
  check->add_option("--node-label", f.labels, "a label of the node (key=value)");
}

// Looking at a node and its agent: status, doctor, version.
void add_inspect_commands(CLI::App& app, CliOptions& o) {
  auto* status = app.add_subcommand("status", "what a running agent sees (its pinned maps) and what it changed");
  status->add_option("--config", o.config_path, "YAML configuration (for state_file and offline targets)")
      ->check(CLI::ExistingFile);
  status->add_option("--state-file", o.state_file, "the state file (default: the configuration's)");
  status->add_flag("--json", o.json, "one JSON object");
  status->footer("Exit code: 0 an agent's maps are pinned and in use under --pin-dir, 1 none found.");

  auto* doctor = app.add_subcommand("doctor", "check that this node can run khagent, and say what to fix");
  doctor->add_option("--config", o.config_path, "YAML configuration (YARN hierarchy, state_file, cpuset)")
      ->check(CLI::ExistingFile);
  doctor->add_option("--state-file", o.state_file, "the state file to check (default: the configuration's)");
  doctor->footer("One line per check: OK, WARN or FAIL with the fix. Exit code 1 if any check FAILs.");

  app.add_subcommand("version", "print the version");
}

// After parsing: the flags into `o`, and the command. An error's text.
std::optional<std::string> finish(const CLI::App& app, const Flags& f, CliOptions& o) {
  for (const auto& l : f.labels) {
    auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) return "khagent: --node-label: want key=value, got '" + l + "'\n";
    o.node_labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  o.loader.pin = !f.no_pin;
  o.loader.allow_fentry = !f.no_fentry;
  o.loader.interference = !f.no_interference;
  {
    // 0 (with or without a unit) turns the detector off.
    std::string t = f.stall_period;
    if (!t.empty() && t.find_first_not_of("0123456789.") == std::string::npos) t += "s";
    uint64_t ns = 0;
    if (auto err = duration_text::parse_duration_ns(t, ns); !err.empty())
      return "khagent: --stall-period: " + err + "\n";
    if (ns != 0 && (ns < 100'000ULL || ns > 100'000'000ULL))
      return "khagent: --stall-period must be 0 or between 100us and 100ms, got '" + f.stall_period + "'\n";
    o.loader.stall_period_ns = ns;
  }
  static const std::pair<const char*, Command> kOneShot[] = {
      {"version", Command::Version},    {"run", Command::Run},       {"restore", Command::Restore},
      {"config", Command::ConfigCheck}, {"status", Command::Status}, {"doctor", Command::Doctor}};
  for (const auto& [name, cmd] : kOneShot) {
    if (!app.got_subcommand(name)) continue;
    o.command = cmd;
    if (cmd == Command::Run) o.metrics = !f.no_metrics;
    return std::nullopt;
  }
  auto d = parse_duration_ns(f.interval);
  if (!d) return "khagent: --interval: " + d.error().message + "\n";
  if (*d < 10000000ULL) return std::string("khagent: --interval must be at least 10ms\n");
  o.interval_ns = *d;
  o.command = app.got_subcommand("top") ? Command::Top : Command::Observe;
  return std::nullopt;
}

}  // namespace

CliParse parse_cli(const std::vector<std::string>& args) {
  CliOptions o;
  Flags f;
  CLI::App app{"khagent: node isolation agent for colocating online services with batch work"};
  app.name("khagent");
  app.require_subcommand(1);
  // Global options (--stall-period, --no-pin, ...) after the subcommand too:
  // `khagent run --stall-period 0` as well as `khagent --stall-period 0 run`.
  app.fallthrough();
  app.set_version_flag("--version", "khagent " KHAGENT_VERSION);
  add_global_options(app, o, f);
  add_view_commands(app, o, f);
  add_agent_commands(app, o, f);
  add_inspect_commands(app, o);

  CliParse out;
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    std::ostringstream os, es;
    out.exit_code = app.exit(e, os, es);
    out.output = os.str() + es.str();
    if (out.exit_code != 0) out.exit_code = 2;
    return out;
  }
  if (auto err = finish(app, f, o)) {
    out.exit_code = 2;
    out.output = *err;
    return out;
  }
  out.options = o;
  return out;
}

}  // namespace khagent

// khagent entry point.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "khagent/app/agent.h"
#include "khagent/app/cli.h"
#include "khagent/app/doctor.h"
#include "khagent/app/status.h"
#include "khagent/app/top.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/cpustat.h"
#include "khagent/export/observe.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/signals/signals.h"
#include "khagent/version.h"

namespace {

void on_signal(int sig) { khagent::g_stop = sig; }

// Sleeps until `deadline` (CLOCK_MONOTONIC) or a signal.
void sleep_until(const timespec& deadline) {
  while (!khagent::g_stop) {
    int r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    if (r == 0) return;
    if (r != EINTR) return;
  }
}

int run_observe(const khagent::CliOptions& o) {
  using namespace khagent;
  if (auto r = preflight(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }
  auto mounts = find_mounts();
  if (!mounts) {
    spdlog::error("{}", mounts.error().str());
    return 2;
  }
  spdlog::info("cgroup2 at {}{}", mounts->cgroup2,
               mounts->cpu_v1.empty() ? "" : " (cpu controller on cgroup v1 at " + mounts->cpu_v1 + ")");

  LoaderOptions lo = o.loader;
  lo.replace_pins = false;  // a running agent's pins stay its own
  lo.cpu_controller_on_v1 = !mounts->cpu_v1.empty();
  auto bpf = RunqBpf::open_and_load(lo);
  if (!bpf) {
    spdlog::error("{}", bpf.error().str());
    return 1;
  }
  CgroupIndex index(mounts->cgroup2);
  if (auto n = index.rescan(); !n) {
    spdlog::error("{}", n.error().str());
    return 1;
  } else {
    spdlog::info("{} cgroups under {}", *n, mounts->cgroup2);
  }
  BpfMapSource maps((*bpf)->map_fds(true));
  CpuStatThrottleReader cpu_stat(mounts->cgroup2, mounts->cpu_v1);
  Collector collector(maps, index, &cpu_stat, (*bpf)->throttle_source());
  ObserveView view{o.cgroup_prefix, o.limit};
  bool tty = !o.json && isatty(STDOUT_FILENO);

  if (auto first = collector.tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  uint64_t shown = 0;
  while (!khagent::g_stop && (o.count == 0 || shown < o.count)) {
    uint64_t ns = static_cast<uint64_t>(next.tv_nsec) + o.interval_ns;
    next.tv_sec += static_cast<time_t>(ns / 1000000000ULL);
    next.tv_nsec = static_cast<long>(ns % 1000000000ULL);
    sleep_until(next);
    if (khagent::g_stop) break;
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = khagent::parse_cli(args);
  if (!parsed.options) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output;
    return parsed.exit_code;
  }
  const auto& o = *parsed.options;
  if (o.command == khagent::Command::Version) {
    std::cout << "khagent " KHAGENT_VERSION "\n";
    return 0;
  }

  auto logger = spdlog::stderr_color_mt("khagent");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  khagent::route_libbpf_logs(o.log_level == "debug" || o.log_level == "trace");

  // Every signal that would end the process by default ends it through the
  // restore instead (SIGHUP from a closed terminal, SIGQUIT, SIGUSR1/2 sent
  // by mistake); SIGPIPE is ignored so a closed log reader or peer is an
  // error to handle, not an exit with the cgroups still squeezed.
  // One-shot commands (config check, restore, status, doctor) keep the
  // default dispositions: a SIGTERM must end them, even mid-parse.
  signal(SIGPIPE, SIG_IGN);
  if (o.command == khagent::Command::Run || o.command == khagent::Command::Observe ||
      o.command == khagent::Command::Top) {
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
  }

  switch (o.command) {
    case khagent::Command::Run: return khagent::run_agent(o);
    case khagent::Command::Restore: return khagent::run_restore(o);
    case khagent::Command::ConfigCheck: return khagent::run_config_check(o);
    case khagent::Command::Top: return khagent::run_top(o);
    case khagent::Command::Status: return khagent::run_status(o);
    case khagent::Command::Doctor: return khagent::run_doctor(o);
    default: return run_observe(o);
  }
}

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
#include "khagent/loader/runq_loader.h"
#include "khagent/version.h"

namespace {

void on_signal(int sig) { khagent::g_stop = sig; }

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
    default: return khagent::run_observe(o);
  }
}

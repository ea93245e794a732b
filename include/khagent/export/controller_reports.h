// What the controllers' reports become: log lines (a lasting problem once
// a minute) and metrics, one file per controller (cpu_report.cpp,
// memory_report.cpp, burst_report.cpp), chosen by the report's type. The
// loop hands every report here without knowing whose it is.
#pragma once

#include <cstdint>

#include "khagent/config/config.h"
#include "khagent/export/metrics.h"
#include "khagent/policy/controllers.h"
#include "khagent/util/log_limit.h"

namespace khagent {

class ReportExporter {
 public:
  // `metrics` may be null (no /metrics server).
  ReportExporter(const Config& cfg, Metrics* metrics) : cfg_(cfg), metrics_(metrics) {}
  void report(const ControllerReport& r, uint64_t now_ns);
  // A wake-up between ticks: `psi_triggers` memory PSI triggers fired.
  void wakeup(size_t psi_triggers);

  void operator()(const CpuReport& r);
  void operator()(const MemoryReport& r);
  void operator()(const BurstReport& r);

 private:
  const Config& cfg_;
  Metrics* metrics_;
  LogLimiter warned_;
  uint64_t now_ns_ = 0;
};

}  // namespace khagent

// What the controllers' reports become: log lines (a lasting problem once
// a minute) and metrics, one file per controller (cpu_report.cpp,
// memory_report.cpp, burst_report.cpp), chosen by the report's type. The
// loop hands every report here without knowing whose it is.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "khagent/config/config.h"
#include "khagent/export/metrics.h"
#include "khagent/model/capacity_status.h"
#include "khagent/policy/controllers.h"
#include "khagent/util/log_limit.h"

namespace khagent {

// Where the agent keeps its last burst report for `khagent status`: its
// state file's name with .burst.json for .json (written atomically, at most
// once a second unless a verdict changed; removed when the agent stops).
std::string burst_report_path(const std::string& state_file);
// The capacity report beside the state file (state.capacity.json), written
// by write_capacity_report when the capacity status moved.
std::string capacity_report_path(const std::string& state_file);
// The report as that file holds it: one JSON object, `unix_s` its time.
std::string burst_report_json(const BurstReport& r, const Config& cfg, int64_t unix_s);

class ReportExporter {
 public:
  // `metrics` may be null (no /metrics server).
  ReportExporter(const Config& cfg, Metrics* metrics) : cfg_(cfg), metrics_(metrics) {}
  ~ReportExporter();
  ReportExporter(const ReportExporter&) = delete;
  ReportExporter& operator=(const ReportExporter&) = delete;
  void report(const ControllerReport& r, uint64_t now_ns);
  // A wake-up between ticks: `psi_triggers` memory PSI triggers fired.
  void wakeup(size_t psi_triggers);

  void operator()(const CpuReport& r);
  void operator()(const MemoryReport& r);
  void operator()(const BurstReport& r);
  void operator()(const CacheReclaimReport& r);
  void operator()(const IoReport& r);

  // The capacity publisher's status, kept in the report file beside the
  // state file for `khagent status`: written when it moves, else every 10 s.
  void capacity(const CapacityStatus& st, uint64_t now_ns);

 private:
  const Config& cfg_;
  Metrics* metrics_;
  // The burst report file: written when its verdicts change, else once a second.
  void write_burst_report(const BurstReport& r);

  LogLimiter warned_;
  // The keys in warned_ of each pod, forgotten when it goes.
  std::map<std::string, std::set<std::string>> burst_keys_;
  bool allow_for(const std::string& pod, const std::string& key);
  uint64_t now_ns_ = 0;
  std::string burst_verdicts_;     // the verdicts last written to the report file
  uint64_t burst_written_ns_ = 0;  // when
  bool burst_write_failed_ = false;
  std::set<std::string> io_unreadable_;  // cgroups whose IO files could not be read, logged once
  std::string capacity_written_;         // the status last written, without its time
  uint64_t capacity_written_ns_ = 0;
  bool capacity_write_failed_ = false;
};

}  // namespace khagent

// `khagent top`'s screen: the model of one interval, made from the signals,
// and its rendering as plain text. Pure: app/top.cpp gathers the signals and
// drives the terminal.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "khagent/signals/signals.h"
#include "khagent/signals/workload.h"

namespace khagent {

enum class TopSort { P99, Wait, Cpu };
const char* top_sort_name(TopSort s);
TopSort next_top_sort(TopSort s);  // p99 -> wait -> cpu -> p99

// One cgroup that ran or waited in the last interval.
struct TopRow {
  std::string path;
  CgroupClass cls = CgroupClass::System;
  double cpu_pct = 0;  // of one CPU
  double wait_p50_us = 0;
  double wait_p99_us = 0;
  uint64_t wait_ns = 0;  // total run-queue wait in the interval
  uint64_t waits = 0;
  double other_share = 0;      // of wait_ns: behind other cgroups (interference)
  double throttled_share = 0;  // of wait_ns: its own CFS throttling
  std::string aggressor;       // held the CPU longest while this one waited ("" none)
  uint64_t aggressor_ns = 0;
};

struct TopClassSummary {
  double cpu_cores = 0;
  double wait_p99_us = 0;
  uint64_t waits = 0;
};

// The node's memory and the online pods' memory stall in the interval.
struct TopMemory {
  uint64_t capacity = 0;  // 0: unknown (no line's figures)
  uint64_t working_set = 0;
  double online_stall_share = 0;  // the largest of one online pod (PSI "some")
  std::string worst;              // that pod
  // Direct reclaim online tasks paid in the interval (ns, summed over
  // tasks); unknown where the vmscan tracepoints are not attached.
  std::optional<uint64_t> online_reclaim_ns;
};

struct TopModel {
  size_t node_cpus = 0;
  std::string throttle_source;
  uint64_t interval_ns = 0;                  // 0: no interval measured yet
  std::array<TopClassSummary, 3> classes{};  // by CgroupClass
  std::vector<TopRow> rows;                  // any order; render_top sorts
  TopSort sort = TopSort::P99;
  bool online_only = false;
  std::string note;  // shown in the footer (last warning)
  TopMemory memory;
};

// The model of one interval. `prefix` keeps cgroups at or below a path.
TopModel make_top_model(const Signals& sig, const NodeSignals& node, Classifier& classifier, size_t node_cpus,
                        const std::string& prefix);

// Sorted rows as displayed: online first, then by the sort column (largest
// first), then by path; only online ones when `online_only`.
std::vector<const TopRow*> top_sorted_rows(const TopModel& m);

// Line index (0-based) of the column header in render_top's output.
constexpr int kTopColumnHeaderLine = 6;

// The screen as plain text: at most `rows` lines, each ending in '\n' and at
// most `cols` columns wide (UTF-8 code points). No escape codes.
std::string render_top(const TopModel& m, int rows, int cols);

}  // namespace khagent

#include "khagent/export/status_report.h"

#include <algorithm>
#include <exception>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "khagent/abi/runq.h"
#include "khagent/model/bpf_counters.h"
#include "khagent/util/bytes.h"
#include "khagent/util/json_bounded.h"
#include "khagent/util/strings.h"

namespace khagent {

const std::vector<std::string>& bpf_counter_names() {
  static const std::vector<std::string> names(kBpfCounterNames.begin(), kBpfCounterNames.end());
  return names;
}

std::optional<double> cpu_max_cores(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  uint64_t period = 100000;
  if (!(in >> quota) || quota == "max") return std::nullopt;
  std::string p;
  if (in >> p) {
    try {
      period = std::stoull(p);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  try {
    size_t pos = 0;
    uint64_t q = std::stoull(quota, &pos);
    if (pos != quota.size() || period == 0) return std::nullopt;
    return static_cast<double>(q) / static_cast<double>(period);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> status_budget_cores(const StatusReport& r) {
  std::optional<double> sum;
  for (const auto& t : r.targets)
    if (t.cores) sum = sum.value_or(0) + *t.cores;
  return sum;
}

namespace {

// The online pods' memory lines, the most stalled first.
std::string online_memory_text(const StatusMemory& m) {
  constexpr size_t kShown = 10;
  const size_t n = m.online.size();
  std::string out =
      fmt::format("online pods' memory: {} pod{} under {}{}{}\n", n, n == 1 ? "" : "s", m.pods_under,
                  m.online_truncated ? " (the walk stopped early: too many cgroups)" : "",
                  m.online_by_metadata ? " (classed by path and QoS only: rules on priority classes, labels or "
                                         "annotations need the kubelet's pod list, which status does not read)"
                                       : "");
  if (!m.pods_error.empty()) return fmt::format("online pods' memory: unknown: {}\n", m.pods_error);
  for (size_t i = 0; i < n && i < kShown; i++) {
    const auto& p = m.online[i];
    if (!p.error.empty()) {
      out += fmt::format("  {}  memory unreadable: {}\n", p.cgroup, p.error);
      continue;
    }
    out += fmt::format(
        "  {}  memory {} (working set {}), {}; stall over 10 s: {}{}{}\n", p.cgroup, mib_text(p.usage),
        mib_text(p.working_set),
        (p.limit ? "a " + mib_text(*p.limit) + " limit" : std::string("no limit")) +
            (p.high ? " (memory.high " + mib_text(*p.high) + ")" : std::string()),
        p.psi ? fmt::format("some {:.2f}%, full {:.2f}%", p.some_avg10, p.full_avg10)
              : std::string("unknown (no memory.pressure)"),
        p.own_limit.empty()                    ? ""
        : p.own_limit.rfind("unknown", 0) == 0 ? "; own limit " + p.own_limit
                                               : "; at its own limit (" + p.own_limit + ")",
        p.oom_kills ? fmt::format("; {} OOM kill{} so far", p.oom_kills, p.oom_kills == 1 ? "" : "s") : std::string());
  }
  if (n > kShown) out += fmt::format("  ... and {} more (status --json lists them all)\n", n - kShown);
  return out;
}

// Whether an agent runs, its pins, programs and BPF counters.
std::string agent_text(const StatusReport& r) {
  std::string out;
  if (r.agent_found) {
    std::vector<std::string> procs;
    procs.reserve(r.processes.size());
    for (const auto& p : r.processes) procs.push_back(fmt::format("{} {}", p.pid, p.comm));
    out += fmt::format("agent: running (maps pinned under {}, used by {} BPF programs{})\n", r.pin_dir,
                       r.programs.size(), procs.empty() ? "" : fmt::format("; process {}", fmt::join(procs, ", ")));
  } else {
    out += fmt::format("no running agent found under {}{}\n", r.pin_dir,
                       r.agent_problem.empty() ? "" : ": " + r.agent_problem);
  }
  if (!r.pinned.empty()) out += fmt::format("pinned maps: {}\n", fmt::join(r.pinned, ", "));
  if (r.agent_found) {
    out += fmt::format("programs: {}\n", fmt::join(r.programs, ", "));
    out += fmt::format("map layout version: {}\n", r.abi_version);
    if (!r.throttle_source.empty()) out += fmt::format("throttling source: {}\n", r.throttle_source);
    out += fmt::format("cgroups tracked: {} (of {})\n", r.cgroups_tracked, r.max_cgroups);
    out += fmt::format("protected (online) cgroups: {}\n", r.protected_cgroups);
    out += fmt::format("interference pairs: {}\n", r.interference_pairs);
    std::vector<std::string> cs;
    for (const auto& n : bpf_counter_names()) {
      auto it = r.counters.find(n);
      if (it != r.counters.end()) cs.push_back(fmt::format("{} {}", n, it->second));
    }
    if (!cs.empty()) out += fmt::format("BPF counters: {}\n", fmt::join(cs, ", "));
  }
  return out;
}

// The original values of what khagent changed, with the current ones.
std::string state_file_text(const StatusReport& r) {
  std::string out;
  if (!r.state_error.empty()) {
    out += fmt::format("state file {}: {}\n", r.state_file, r.state_error);
  } else if (r.entries.empty()) {
    out += fmt::format("state file {}: no original values recorded (khagent has changed nothing)\n", r.state_file);
  } else {
    out += fmt::format("state file {}: {} original value{} (what khagent changed)\n", r.state_file, r.entries.size(),
                       r.entries.size() == 1 ? "" : "s");
    size_t w = 6;
    for (const auto& e : r.entries) w = std::max(w, width_of(e.cgroup));
    w = std::min<size_t>(w, 64);
    out += fmt::format("  {:<{}}  {:<12} {:<18} {}\n", "CGROUP", w, "FILE", "ORIGINAL", "CURRENT");
    for (const auto& e : r.entries) {
      std::string cur = !e.current                 ? "unreadable: " + e.current_error
                        : *e.current == e.original ? "'" + *e.current + "' (the original)"
                                                   : "'" + *e.current + "'";
      out += fmt::format("  {:<{}}  {:<12} {:<18} {}\n", shorten_left(e.cgroup, w), w, e.file, "'" + e.original + "'",
                         cur);
    }
  }
  return out;
}

// The offline budget as the targets' cpu.max says.
std::string budget_text(const StatusReport& r) {
  std::string out;
  if (r.targets.empty()) {
    out += "offline budget: no offline target found\n";
  } else {
    auto sum = status_budget_cores(r);
    bool readable = std::any_of(r.targets.begin(), r.targets.end(), [](const StatusTarget& t) { return t.cpu_max; });
    const char* plural = r.targets.size() == 1 ? "" : "s";
    if (sum)
      out += fmt::format("offline budget: {:.2f} cores (cpu.max of {} offline target{})\n", *sum, r.targets.size(),
                         plural);
    else if (readable)
      out += fmt::format("offline budget: unlimited (no quota in the cpu.max of {} offline target{})\n",
                         r.targets.size(), plural);
    else
      out += fmt::format("offline budget: unknown (the cpu.max of {} offline target{} cannot be read)\n",
                         r.targets.size(), plural);
    for (const auto& t : r.targets) {
      if (!t.cpu_max) out += fmt::format("  {}  cpu.max unreadable: {}\n", t.cgroup, t.error);
      else
        out += fmt::format("  {}  cpu.max '{}'{}\n", t.cgroup, *t.cpu_max,
                           t.cores ? fmt::format(" = {:.2f} cores", *t.cores) : " (no limit)");
    }
  }
  return out;
}

// The node's memory and the offline targets' (r.memory set).
std::string memory_text(const StatusMemory& m) {
  std::string out;
  if (m.capacity)
    out += fmt::format("node memory: {} in use of {} (working sets: usage less inactive page cache)\n",
                       mib_text(m.node_working_set), mib_text(m.capacity));
  else out += fmt::format("node memory: unknown ({})\n", m.node_error);
  for (const auto& t : m.targets) {
    if (!t.error.empty()) out += fmt::format("  {}  memory unreadable: {}\n", t.cgroup, t.error);
    else
      out += fmt::format("  {}  memory {} of {}{}\n", t.cgroup, mib_text(t.working_set),
                         t.limit ? "a " + mib_text(*t.limit) + " limit" : std::string("no limit"),
                         t.oom_kills ? fmt::format(", {} OOM kill{} so far", t.oom_kills, t.oom_kills == 1 ? "" : "s")
                                     : std::string());
  }
  out += online_memory_text(m);
  return out;
}

}  // namespace

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StatusBurstPod, cgroup, window_s, waits, wait_ms, throttled_wait_ms,
                                   throttled_periods, wait_p99_ms, verdict, why, burst, burst_us, cgroups, refusal)

std::string burst_report_text(const StatusBurst& b) {
  nlohmann::json j = {
      {"time", b.time}, {"burst_share", b.share}, {"self_throttle_window_s", b.window_s}, {"online", b.pods}};
  return j.dump(1) + "\n";
}

StatusBurst parse_burst_report(const std::string& path, const std::string& text, int64_t now_s) {
  StatusBurst b;
  b.path = path;
  auto doc = parse_json_bounded(text, JsonLimits{size_t{4} << 20, 8, 200'000});
  if (!doc) {
    b.error = doc.error().str();
    return b;
  }
  try {
    const auto& j = *doc;
    b.time = j.at("time").get<int64_t>();
    b.age_s = now_s - b.time;
    b.share = j.at("burst_share").get<double>();
    b.window_s = j.at("self_throttle_window_s").get<double>();
    b.pods = j.at("online").get<std::vector<StatusBurstPod>>();
  } catch (const std::exception& e) {
    b.pods.clear();
    b.error = std::string("not a burst report: ") + e.what();
  }
  return b;
}

std::string capacity_report_text(const StatusCapacity& c) {
  nlohmann::json j = {{"time", c.time},
                      {"node", c.node},
                      {"batch_cpu_milli", c.cpu_milli},
                      {"batch_memory_bytes", c.memory_bytes},
                      {"on_node_batch_cpu_milli", c.on_node_cpu_milli},
                      {"on_node_batch_memory_bytes", c.on_node_memory_bytes},
                      {"explanation", c.explanation},
                      {"patches_ok", c.patches_ok},
                      {"patches_failed", c.patches_failed},
                      {"reasserts", c.reasserts},
                      {"stale", c.stale},
                      {"last_error", c.last_error}};
  return j.dump(1) + "\n";
}

StatusCapacity parse_capacity_report(const std::string& path, const std::string& text, int64_t now_s) {
  StatusCapacity c;
  c.path = path;
  auto doc = parse_json_bounded(text, JsonLimits{size_t{1} << 20, 4, 1000});
  if (!doc) {
    c.error = doc.error().str();
    return c;
  }
  try {
    const auto& j = *doc;
    c.time = j.at("time").get<int64_t>();
    c.age_s = now_s - c.time;
    c.node = j.at("node").get<std::string>();
    c.cpu_milli = j.at("batch_cpu_milli").get<int64_t>();
    c.memory_bytes = j.at("batch_memory_bytes").get<int64_t>();
    c.on_node_cpu_milli = j.at("on_node_batch_cpu_milli").get<int64_t>();
    c.on_node_memory_bytes = j.at("on_node_batch_memory_bytes").get<int64_t>();
    c.explanation = j.at("explanation").get<std::string>();
    c.patches_ok = j.at("patches_ok").get<uint64_t>();
    c.patches_failed = j.at("patches_failed").get<uint64_t>();
    c.reasserts = j.at("reasserts").get<uint64_t>();
    c.stale = j.at("stale").get<bool>();
    c.last_error = j.at("last_error").get<std::string>();
  } catch (const std::exception& e) {
    c = StatusCapacity{};
    c.path = path;
    c.error = std::string("not a capacity report: ") + e.what();
  }
  return c;
}

namespace {

std::string quantity_text(int64_t cpu_milli, int64_t memory_bytes) {
  std::string s = cpu_milli >= 0 ? fmt::format("batch-cpu {}m", cpu_milli) : std::string("batch-cpu missing");
  s += memory_bytes >= 0 ? fmt::format(", batch-memory {}Mi", memory_bytes >> 20) : std::string(", no batch-memory");
  return s;
}

std::string capacity_text(const StatusCapacity& c) {
  if (!c.error.empty()) return fmt::format("capacity published to Kubernetes: {} unreadable: {}\n", c.path, c.error);
  std::string out =
      fmt::format("capacity published to Kubernetes (the agent's last report, {} s ago), node {}:\n", c.age_s, c.node);
  if (c.cpu_milli < 0) return out + "  nothing decided yet\n";
  out += fmt::format("  {}{}\n", quantity_text(c.cpu_milli, c.memory_bytes),
                     c.stale ? " (stale: no decision lately, the node keeps it)" : "");
  const bool same =
      c.on_node_cpu_milli == c.cpu_milli && (c.memory_bytes < 0 || c.on_node_memory_bytes == c.memory_bytes);
  out += same ? std::string("  the node shows it\n")
              : fmt::format("  the node shows {}\n", quantity_text(c.on_node_cpu_milli, c.on_node_memory_bytes));
  out += fmt::format("  {}\n", c.explanation);
  out += fmt::format("  patches: {} ok, {} failed, {} re-asserted{}\n", c.patches_ok, c.patches_failed, c.reasserts,
                     c.last_error.empty() ? "" : "; last error: " + c.last_error);
  return out;
}

// One online pod's CPU line: its throttled wait, the verdict, the burst in
// force or why none.
std::string burst_pod_text(const StatusBurstPod& p) {
  std::string burst;
  if (p.burst == "given" || p.burst == "in-force")
    burst = fmt::format("burst {} us on {} cgroup{}", p.burst_us, p.cgroups, p.cgroups == 1 ? "" : "s");
  else if (p.burst == "refused") burst = "no burst: " + p.refusal;
  else burst = "no burst: not self-throttled";
  const double share = p.wait_ms > 0 ? 100 * p.throttled_wait_ms / p.wait_ms : 0;
  return fmt::format(
      "  {}  throttled wait {:.1f} of {:.1f} ms ({:.0f}%, {} period{} throttled) over {:.1f} s, p99 "
      "{:.1f} ms; {}; {}\n",
      p.cgroup, p.throttled_wait_ms, p.wait_ms, share, p.throttled_periods, p.throttled_periods == 1 ? "" : "s",
      p.window_s, p.wait_p99_ms, p.verdict, burst);
}

std::string burst_text(const StatusBurst& b) {
  if (!b.error.empty()) return fmt::format("online pods' CPU burst: {} unreadable: {}\n", b.path, b.error);
  constexpr size_t kShown = 20;
  std::string out = fmt::format(
      "online pods' CPU burst (the agent's last report, {} s ago; burst {:.0f}% of the quota, judged over {:.1f} "
      "s):\n",
      b.age_s, b.share * 100, b.window_s);
  // The throttled first, then by name.
  std::vector<const StatusBurstPod*> pods;
  pods.reserve(b.pods.size());
  for (const auto& p : b.pods) pods.push_back(&p);
  std::stable_sort(pods.begin(), pods.end(), [](const StatusBurstPod* a, const StatusBurstPod* c) {
    return a->throttled_wait_ms > c->throttled_wait_ms;
  });
  for (size_t i = 0; i < pods.size() && i < kShown; i++) out += burst_pod_text(*pods[i]);
  if (pods.size() > kShown) out += fmt::format("  ... and {} more (--json lists them all)\n", pods.size() - kShown);
  if (pods.empty()) out += "  no online pods\n";
  return out;
}

}  // namespace

std::string format_status(const StatusReport& r) {
  std::string out = agent_text(r) + state_file_text(r) + budget_text(r);
  if (r.memory) out += memory_text(*r.memory);
  if (r.burst) out += burst_text(*r.burst);
  if (r.capacity) out += capacity_text(*r.capacity);
  return out;
}

std::string status_json(const StatusReport& r) {
  using nlohmann::json;
  json entries = json::array();
  for (const auto& e : r.entries) {
    json j = {{"cgroup", e.cgroup}, {"file", e.file}, {"original", e.original}};
    j["current"] = e.current ? json(*e.current) : json(nullptr);
    if (!e.current) j["current_error"] = e.current_error;
    entries.push_back(j);
  }
  json targets = json::array();
  for (const auto& t : r.targets) {
    json j = {{"cgroup", t.cgroup}};
    j["cpu_max"] = t.cpu_max ? json(*t.cpu_max) : json(nullptr);
    j["cores"] = t.cores ? json(*t.cores) : json(nullptr);
    if (!t.cpu_max) j["error"] = t.error;
    targets.push_back(j);
  }
  json memory = nullptr;
  if (r.memory) {
    json mt = json::array();
    for (const auto& t : r.memory->targets) {
      json j = {{"cgroup", t.cgroup}, {"working_set_bytes", t.working_set}, {"oom_kills", t.oom_kills}};
      j["limit_bytes"] = t.limit ? json(*t.limit) : json(nullptr);
      if (!t.error.empty()) j["error"] = t.error;
      mt.push_back(j);
    }
    json online = json::array();
    for (const auto& p : r.memory->online) {
      json j = {{"cgroup", p.cgroup},       {"usage_bytes", p.usage},   {"working_set_bytes", p.working_set},
                {"own_limit", p.own_limit}, {"oom_kills", p.oom_kills}, {"some_avg10", nullptr},
                {"full_avg10", nullptr},    {"limit_bytes", nullptr}};
      if (p.limit) j["limit_bytes"] = *p.limit;
      j["high_bytes"] = p.high ? json(*p.high) : json(nullptr);
      if (p.psi) {
        j["some_avg10"] = p.some_avg10;
        j["full_avg10"] = p.full_avg10;
      }
      if (!p.error.empty()) {  // nothing was read: no zeros beside the error
        j["error"] = p.error;
        for (const char* k : {"usage_bytes", "working_set_bytes", "oom_kills"}) j[k] = nullptr;
      }
      online.push_back(j);
    }
    memory = {{"capacity_bytes", r.memory->capacity},
              {"node_working_set_bytes", r.memory->node_working_set},
              {"offline_targets", mt},
              {"online_pods", online},
              {"online_pods_under", r.memory->pods_under},
              {"online_pods_truncated", r.memory->online_truncated},
              {"online_pods_by_metadata", r.memory->online_by_metadata}};
    if (!r.memory->node_error.empty()) memory["node_error"] = r.memory->node_error;
    if (!r.memory->pods_error.empty()) memory["online_pods_error"] = r.memory->pods_error;
  }
  json burst = nullptr;
  if (r.burst) {
    const json pods = r.burst->pods;
    burst = {{"report", r.burst->path}, {"time", r.burst->time},         {"age_s", r.burst->age_s},
             {"share", r.burst->share}, {"window_s", r.burst->window_s}, {"online_pods", pods}};
    if (!r.burst->error.empty()) burst["error"] = r.burst->error;
  }
  json procs = json::array();
  for (const auto& p : r.processes) procs.push_back({{"pid", p.pid}, {"comm", p.comm}});
  auto budget = status_budget_cores(r);
  json j = {
      {"agent_found", r.agent_found},
      {"pin_dir", r.pin_dir},
      {"pinned_maps", r.pinned},
      {"programs", r.programs},
      {"processes", procs},
      {"throttle_source", r.throttle_source},
      {"abi_version", r.abi_version},
      {"cgroups_tracked", r.cgroups_tracked},
      {"max_cgroups", r.max_cgroups},
      {"protected_cgroups", r.protected_cgroups},
      {"interference_pairs", r.interference_pairs},
      {"counters", r.counters},
      {"state_file", {{"path", r.state_file}, {"note", r.state_note}, {"error", r.state_error}, {"entries", entries}}},
      {"offline_targets", targets},
      {"offline_budget_cores", budget ? json(*budget) : json(nullptr)},
      {"memory", memory},
      {"burst", burst},
      {"capacity", r.capacity ? json::parse(capacity_report_text(*r.capacity)) : json(nullptr)},
  };
  if (r.capacity) {
    j["capacity"]["report"] = r.capacity->path;
    j["capacity"]["age_s"] = r.capacity->age_s;
    if (!r.capacity->error.empty()) j["capacity"]["error"] = r.capacity->error;
  }
  if (!r.agent_found) j["problem"] = r.agent_problem;
  return j.dump() + "\n";
}

int status_exit_code(const StatusReport& r) { return r.agent_found ? 0 : 1; }

}  // namespace khagent

// Checks of a whole configuration after loading: ranges, and values that
// make sense only together.
#include <fnmatch.h>

#include <cerrno>
#include <cmath>
#include <string>

#include "config_text.h"
#include "khagent/config/config.h"
#include "khagent/util/bytes.h"
#include "khagent/util/cpuset.h"

namespace khagent {

using namespace config_text;

namespace {

bool in_unit_range(double v) { return v >= 0 && v <= 1; }  // false for NaN too

// "/a/b" in the cgroup2 mount: absolute, no ".." components, not the root.
std::string check_cgroup_path(const std::string& p) {
  if (p.empty() || p.front() != '/') return "must be an absolute path in the cgroup2 mount";
  if (p.find_first_not_of('/') == std::string::npos) return "must not be the root cgroup";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    if (p.compare(start, end - start, "..") == 0) return "must not contain \"..\"";
    start = end + 1;
  }
  // "/." and "/./" are the root too, "/a/./b" is an alias of "/a/b".
  std::string clean;
  for (size_t i = 0; i < p.size();) {
    size_t end = p.find('/', i);
    if (end == std::string::npos) end = p.size();
    std::string part = p.substr(i, end - i);
    if (!part.empty() && part != ".") clean += "/" + part;
    i = end + 1;
  }
  if (clean.empty()) return "must not be the root cgroup";
  for (char ch : p)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return "must not contain control characters";
  return "";
}

}  // namespace

Result<void> validate_config(const Config& c) {
  auto bad = [](const std::string& key, const std::string& what) { return make_error(EINVAL, key + ": " + what); };
  const auto& b = c.budget;
  const auto& o = c.online;

  if (c.tick_ns < 10 * kNsPerMs || c.tick_ns > 60 * kNsPerS) {
    return bad("tick", "must be between 10ms and 60s, got " + format_duration_ns(c.tick_ns));
  }
  if (c.state_file.empty()) return bad("state_file", "must not be empty");
  for (size_t i = 0; i < c.classes.rules.size(); i++) {
    const auto& qos = c.classes.rules[i].qos;
    if (qos && !known_qos(*qos)) {
      return bad("classes.rules[" + std::to_string(i) + "].qos",
                 "unknown qos \"" + *qos + "\" (known: guaranteed, burstable, besteffort)");
    }
  }

  if (!(o.wait_p99_target_us > 0)) {
    return bad("online.wait_p99_target", "must be positive, got " + format_duration_us(o.wait_p99_target_us));
  }
  // A huge target (or one that overflowed to infinity) would turn breach
  // detection off without a word.
  if (!std::isfinite(o.wait_p99_target_us) || o.wait_p99_target_us > 60.0 * 1e6) {
    return bad("online.wait_p99_target",
               "must be at most 1m, got " + (std::isfinite(o.wait_p99_target_us)
                                                 ? format_duration_us(o.wait_p99_target_us)
                                                 : std::string("a duration too long to represent")));
  }
  // Shorter than the tick: one tick.
  if (o.self_throttle_window_ns == 0 || o.self_throttle_window_ns > 60 * kNsPerS) {
    return bad("online.self_throttle_window",
               "must be above 0 and at most 1m, got " + format_duration_ns(o.self_throttle_window_ns));
  }
  const std::pair<const char*, double> shares[] = {
      {"online.interference_share_limit", o.interference_share_limit},
      {"online.min_offline_share", o.min_offline_share},
      {"online.self_throttle_share", o.self_throttle_share},
      {"online.burst_share", o.burst_share},
  };
  for (const auto& [key, v] : shares) {
    if (!in_unit_range(v)) return bad(key, "must be between 0 and 1, got " + format_double(v));
  }

  if (!(b.floor_cores >= 0)) {
    return bad("budget.floor", "must not be negative, got " + format_double(b.floor_cores));
  }
  if (b.floor_cores == 0 && !b.allow_zero) {
    return bad("budget.floor", "0 lets offline work starve; set budget.allow_zero: true if that is intended");
  }
  if (!(b.reserve_cores >= 0)) {
    return bad("budget.reserve", "must not be negative, got " + format_double(b.reserve_cores));
  }
  if (!std::isfinite(b.initial_cores)) return bad("budget.initial", "must be a number");
  if (b.initial_cores >= 0 && b.initial_cores < b.floor_cores) {
    return bad("budget.initial", format_double(b.initial_cores) + " is below budget.floor (" +
                                     format_double(b.floor_cores) + "); use a negative value to start at the ceiling");
  }
  if (!(b.decrease_factor > 0 && b.decrease_factor < 1)) {
    return bad("budget.decrease_factor",
               "must be between 0 and 1 (exclusive), got " + format_double(b.decrease_factor));
  }
  if (!(b.increase_step_cores > 0)) {
    return bad("budget.increase_step", "must be positive, got " + format_double(b.increase_step_cores));
  }
  if (!(b.deadband_cores >= 0)) {
    return bad("budget.deadband", "must not be negative, got " + format_double(b.deadband_cores));
  }
  // The kernel accepts cpu.max periods of 1ms to 1s.
  if (b.cpu_max_period_us < 1000 || b.cpu_max_period_us > 1'000'000) {
    return bad("budget.cpu_max_period",
               "must be between 1ms and 1s (kernel limits), got " + format_duration_us(b.cpu_max_period_us));
  }

  for (size_t i = 0; i < c.offline.targets.size(); i++) {
    if (auto err = check_cgroup_path(c.offline.targets[i]); !err.empty()) {
      return bad("offline.targets[" + std::to_string(i) + "]", "\"" + c.offline.targets[i] + "\" " + err);
    }
  }
  // The YARN hierarchy is a name or path relative to the cgroup2 mount.
  if (auto err = check_cgroup_path("/" + c.offline.yarn_hierarchy);
      !err.empty() || c.offline.yarn_hierarchy.empty() || c.offline.yarn_hierarchy.front() == '/') {
    return bad("offline.yarn_hierarchy",
               "\"" + c.offline.yarn_hierarchy + "\" " +
                   (err.empty() ? std::string("must be a path relative to the cgroup2 mount, like hadoop-yarn") : err));
  }
  if (c.offline.weight > 10000) {  // 0 = leave cpu.weight alone
    return bad("offline.weight",
               "must be 0 (leave as is) or between 1 and 10000, got " + std::to_string(c.offline.weight));
  }
  if (c.offline.idle && c.offline.weight != 0) {
    // The kernel ignores (and refuses writes to) cpu.weight of idle cgroups.
    return bad("offline.weight", "must be 0 when offline.idle is true: an idle cgroup has no weight");
  }

  if (!c.memory.node_cgroup.empty()) {
    if (auto err = check_cgroup_path(c.memory.node_cgroup); !err.empty())
      return bad("memory.node_cgroup", "\"" + c.memory.node_cgroup + "\" " + err);
  }
  if (!(c.memory.reserve_share >= 0 && c.memory.reserve_share <= 0.9)) {
    return bad("memory.reserve_share", "must be between 0 and 0.9, got " + format_double(c.memory.reserve_share));
  }
  if (c.memory.min_offline_bytes < (uint64_t{1} << 20)) {
    return bad("memory.min_offline", "must be at least 1Mi: below that no process starts");
  }
  if (!(c.memory.stall_limit > 0 && c.memory.stall_limit <= 1)) {
    return bad("memory.stall_limit", "must be above 0 and at most 1, got " + format_double(c.memory.stall_limit));
  }
  if (!(c.memory.stall_cut > 0 && c.memory.stall_cut < 1)) {
    return bad("memory.stall_cut", "must be above 0 and below 1, got " + format_double(c.memory.stall_cut));
  }
  if (c.memory.stall_window_ns != 0 &&
      (c.memory.stall_window_ns < 500'000'000 || c.memory.stall_window_ns > 10'000'000'000)) {
    return bad("memory.stall_window",
               "must be 0 (no PSI trigger) or between 500ms and 10s (what the kernel takes), got " +
                   format_duration_ns(c.memory.stall_window_ns));
  }
  if (c.memory.grow_per_second_bytes == 0) {
    return bad("memory.grow_per_second", "must be above 0: a budget that never grows keeps offline cut for good");
  }
  if (c.memory.reclaim_refault_rate_bytes == 0) {
    return bad("memory.reclaim_refault_rate",
               "must be above 0: every tick would reclaim offline page cache (memory.reclaim: false turns it off)");
  }
  if (c.memory.reclaim_step_bytes < (uint64_t{1} << 20) || c.memory.reclaim_step_bytes > (uint64_t{4} << 30)) {
    return bad("memory.reclaim_step", "must be between 1Mi and 4Gi, got " + format_bytes(c.memory.reclaim_step_bytes));
  }
  if (c.memory.reclaim_interval_ns < 200'000'000 || c.memory.reclaim_interval_ns > 60'000'000'000) {
    return bad("memory.reclaim_interval", "must be between 200ms and 1m (each step is judged over it), got " +
                                              format_duration_ns(c.memory.reclaim_interval_ns));
  }
  if (c.memory.refault_halflife_ns != 0 &&
      (c.memory.refault_halflife_ns < 10'000'000'000 || c.memory.refault_halflife_ns > 86'400'000'000'000)) {
    return bad("memory.refault_halflife", "must be 0 (refaulted page cache not counted) or between 10s and 24h, got " +
                                              format_duration_ns(c.memory.refault_halflife_ns));
  }

  if (!(c.ladder.min_improvement >= 0 && c.ladder.min_improvement < 1)) {
    return bad("ladder.min_improvement",
               "must be at least 0 and below 1, got " + format_double(c.ladder.min_improvement));
  }

  if (c.fast_path.enabled && c.fast_path.wait_threshold_ns == 0) {
    return bad("fast_path.wait_threshold", "must be positive while fast_path.enabled is true");
  }

  // The pod list is fetched with libcurl, which would also read file:// and
  // other schemes: only http:// and https:// are allowed.
  if (!c.kubelet_pods_url.empty()) {
    size_t sep = c.kubelet_pods_url.find("://");
    std::string scheme = sep == std::string::npos ? "" : c.kubelet_pods_url.substr(0, sep + 3);
    for (auto& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if ((scheme != "http://" && scheme != "https://") || c.kubelet_pods_url.size() <= scheme.size() ||
        c.kubelet_pods_url.find_first_of(" \t\r\n") != std::string::npos) {
      return bad("kubelet_pods_url", "\"" + c.kubelet_pods_url +
                                         "\" must be an http:// or https:// URL, like https://127.0.0.1:10250/pods");
    }
  }

  const auto& y = c.yarn;
  if (y.enabled && y.rm_urls.empty()) {
    return bad("yarn.rm_urls", "needs at least one ResourceManager address while yarn.enabled is true");
  }
  for (size_t i = 0; i < y.rm_urls.size(); i++) {
    const std::string& u = y.rm_urls[i];
    bool scheme = u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0;
    size_t host = u.find("://") + 3;
    if (!scheme || u.size() <= host || u.find('/', host) != std::string::npos ||
        u.find_first_of(" ?#", host) != std::string::npos) {
      return bad("yarn.rm_urls[" + std::to_string(i) + "]",
                 "\"" + u + "\" is not a base address like http://rm1:8088 (no path)");
    }
  }
  if (!y.nm_url.empty() && y.nm_url.rfind("http://", 0) != 0 && y.nm_url.rfind("https://", 0) != 0) {
    return bad("yarn.nm_url", "\"" + y.nm_url + "\" must start with http:// or https://");
  }
  if (!y.node_id.empty() && y.node_id.find(':') == std::string::npos) {
    return bad("yarn.node_id", "\"" + y.node_id + "\" is not a NodeManager id host:port");
  }
  if (y.auth == HttpAuth::Simple && y.user.empty()) {
    return bad("yarn.user", "must be set for simple auth (it is sent as user.name)");
  }
  if (!(y.vcores_per_core > 0)) {
    return bad("yarn.vcores_per_core", "must be positive, got " + format_double(y.vcores_per_core));
  }
  if (y.request_timeout_ms == 0) return bad("yarn.request_timeout", "must be at least 1ms");
  if (y.connect_timeout_ms == 0) return bad("yarn.connect_timeout", "must be at least 1ms");
  if (y.refresh_interval_ns < kNsPerS) return bad("yarn.refresh_interval", "must be at least 1s");
  if (y.retries > 10) return bad("yarn.retries", "must be at most 10, got " + std::to_string(y.retries));
  if (y.retry_backoff_ms > 60'000) return bad("yarn.retry_backoff", "must be at most 1m");
  if (y.request_timeout_ms > 300'000) return bad("yarn.request_timeout", "must be at most 5m");
  if (y.reclaimer == Reclaimer::Rm && y.over_commit_timeout_ms < 0) {
    return bad("yarn.over_commit_timeout", "is never while yarn.reclaimer is rm: nothing would be reclaimed");
  }
  if (y.over_commit_timeout_ms > 2'147'483'647) {
    return bad("yarn.over_commit_timeout", "must fit the RM's int milliseconds (at most 596h), or be never");
  }
  if (!(y.emergency_p99_factor >= 1)) {
    return bad("yarn.emergency_p99_factor", "must be at least 1, got " + format_double(y.emergency_p99_factor));
  }

  if (!(c.io.stall_limit > 0 && c.io.stall_limit <= 1)) {
    return bad("io.stall_limit", "must be above 0 and at most 1, got " + format_double(c.io.stall_limit));
  }
  if (!(c.io.limit_step >= 0.1 && c.io.limit_step <= 0.9)) {
    return bad("io.limit_step",
               "must be within [0.1, 0.9] (each step keeps that share), got " + format_double(c.io.limit_step));
  }
  if (c.io.min_bps < 4096) return bad("io.min_bps", "must be at least 4Ki (one page a second)");
  if (c.io.min_iops < 1) return bad("io.min_iops", "must be at least 1");
  if (c.io.verdict_after_ns < 100'000'000ULL || c.io.verdict_after_ns > 600'000'000'000ULL)
    return bad("io.verdict_after", "must be within [100ms, 10m]");
  if (c.io.calm_after_ns < c.io.verdict_after_ns)
    return bad("io.calm_after", "must be at least io.verdict_after: a limit is judged before it is raised");
  if (c.io.hold_off_ns > 3'600'000'000'000ULL) return bad("io.hold_off", "must be at most 1h");

  const auto& k = c.capacity;
  if (!k.api_server.empty() && k.api_server.rfind("https://", 0) != 0) {
    return bad("capacity.api_server",
               "\"" + k.api_server + "\" must be an https:// address, like https://10.96.0.1:443");
  }
  if (k.enabled && k.token_file.empty())
    return bad("capacity.token_file", "must be set while capacity.enabled is true");
  if (!in_unit_range(k.batch_share)) {
    return bad("capacity.batch_share", "must be between 0 and 1, got " + format_double(k.batch_share));
  }
  if (!(k.min_share >= 0 && k.min_share <= 0.5)) {
    return bad("capacity.min_share", "must be between 0 and 0.5, got " + format_double(k.min_share));
  }
  if (!(k.floor_cores >= 0 && k.floor_cores <= 1024)) {
    return bad("capacity.floor_cpu", "must be between 0 and 1024 cores, got " + format_double(k.floor_cores));
  }
  if (!(k.deadband >= 0.01 && k.deadband <= 0.9)) {
    return bad("capacity.deadband", "must be between 0.01 and 0.9, got " + format_double(k.deadband));
  }
  if (k.grow_interval_ns < kNsPerS) return bad("capacity.grow_interval", "must be at least 1s");
  if (k.reassert_interval_ns < kNsPerS || k.reassert_interval_ns > 600 * kNsPerS) {
    return bad("capacity.reassert_interval", "must be between 1s and 10m");
  }
  if (k.enabled && k.stale_after_ns < 2 * c.tick_ns) return bad("capacity.stale_after", "must be at least two ticks");
  if (k.request_timeout_ms == 0 || k.request_timeout_ms > 300'000) {
    return bad("capacity.request_timeout", "must be between 1ms and 5m");
  }
  return {};
}

}  // namespace khagent

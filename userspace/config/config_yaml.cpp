// The YAML side of the configuration: loading a document over
// default_config(), per-node overrides (reading a file within bounds:
// config_file.cpp; validation: config_validate.cpp; emitting the effective
// configuration: config_emit.cpp).
//
// Loading walks the document against a schema written as tables of known keys
// (the walker: config_walk.h), so unknown keys and wrong types are caught where
// they are, with the key path and line. A problem is thrown as ConfigError and
// turned into an Error at the public entry points.
#include <fnmatch.h>
#include <stdio.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "khagent/config/config.h"
#include "khagent/util/bytes.h"
#include "khagent/util/cpuset.h"

#include "config_text.h"
#include "config_walk.h"
#include "config_yaml.h"

namespace khagent {

using namespace config_text;
using namespace config_yaml;

namespace {

// The configuration's schema: the walker (config_walk.h) with a table of
// fields per section.
class Loader : public Walker {
 public:
  using Walker::Walker;

  // --- The schema ----------------------------------------------------------

  ClassRule rule(const YAML::Node& n, const Where& at) const {
    ClassRule r;
    bool has_class = false;
    section(n, at,
            {{"class",
              [&](const YAML::Node& v, const Where& w) {
                r.cls = cls(v, w);
                has_class = true;
              }},
             {"qos",
              [&](const YAML::Node& v, const Where& w) {
                r.qos = string(v, w);
                if (!known_qos(*r.qos)) {
                  fail(w, "unknown qos " + describe(v) + " (known: guaranteed, burstable, besteffort)");
                }
              }},
             optional("path", r.path_glob, &Loader::string),
             optional("priority_class", r.priority_class, &Loader::string),
             dict("labels", r.labels),
             dict("annotations", r.annotations),
             optional("yarn", r.yarn, &Loader::boolean),
             optional("batch_resources", r.batch_resources, &Loader::boolean)});
    if (!has_class) fail(at, "a rule needs a class (online, offline or system)");
    return r;
  }

  void classes(const YAML::Node& n, const Where& at, ClassConfig& c) const {
    section(n, at,
            {klass("default_pod_class", c.default_pod_class),
             klass("default_class", c.default_class),
             {"rules", [&](const YAML::Node& v, const Where& w) {
                // Given rules replace the defaults entirely; the order is the priority.
                c.rules.clear();
                if (v.IsNull()) return;
                if (!v.IsSequence()) fail(w, "expected a list, got " + describe(v));
                for (size_t i = 0; i < v.size(); i++) {
                  const YAML::Node item = v[i];
                  c.rules.push_back(rule(item, w.item(i, mark_of(item, w.mark))));
                }
              }}});
  }

  // A list of distinct levers: cpuset, quota.
  void levers(const YAML::Node& v, const Where& w, std::vector<Lever>& out) const {
    if (!v.IsSequence()) fail(w, "expected a list of levers (cpuset, quota), got " + describe(v));
    out.clear();
    for (size_t i = 0; i < v.size(); i++) {
      const Where here = w.item(i, mark_of(v[i], w.mark));
      const std::string name = string(v[i], here);
      auto lv = lever_from_name(name);
      if (!lv || !lever_is_rung(*lv))
        fail(here, "unknown lever \"" + name +
                       "\" (known: cpuset, quota; cpu.idle is offline.idle, the weight offline.weight)");
      if (std::find(out.begin(), out.end(), *lv) != out.end()) fail(here, "lever \"" + name + "\" listed twice");
      out.push_back(*lv);
    }
  }

  void yarn(const YAML::Node& n, const Where& at, YarnConfig& y) const {
    section(n, at,
            {flag("enabled", y.enabled),
             strings("rm_urls", y.rm_urls),
             text("node_id", y.node_id),
             text("nm_url", y.nm_url),
             choice("auth", y.auth, {HttpAuth::None, HttpAuth::Simple, HttpAuth::Kerberos}, http_auth_name),
             text("user", y.user),
             text("ca_file", y.ca_file),
             flag("insecure_skip_verify", y.insecure_skip_verify),
             {"request_timeout",
              [&](const YAML::Node& v, const Where& w) { y.request_timeout_ms = duration_ns(v, w) / kNsPerMs; }},
             {"connect_timeout",
              [&](const YAML::Node& v, const Where& w) { y.connect_timeout_ms = duration_ns(v, w) / kNsPerMs; }},
             whole("retries", y.retries),
             {"retry_backoff",
              [&](const YAML::Node& v, const Where& w) { y.retry_backoff_ms = duration_ns(v, w) / kNsPerMs; }},
             ns("refresh_interval", y.refresh_interval_ns),
             num("vcores_per_core", y.vcores_per_core),
             choice("rounding", y.rounding, {VcoreRounding::Down, VcoreRounding::Nearest, VcoreRounding::Up},
                    vcore_rounding_name),
             whole("reserve_vcores", y.reserve_vcores),
             whole("min_vcores", y.min_vcores),
             whole("memory_mb", y.memory_mb),
             flag("memory_follows_cpu", y.memory_follows_cpu),
             flag("memory_follows_budget", y.memory_follows_budget),
             whole("deadband_vcores", y.deadband_vcores),
             ns("grow_stable", y.grow_stable_ns),
             ns("grow_interval", y.grow_interval_ns),
             {"over_commit_timeout",
              [&](const YAML::Node& v, const Where& w) {
                // "never" is the RM's -1: it does not preempt on its own.
                if (v.IsScalar() && v.Scalar() == "never") {
                  y.over_commit_timeout_ms = -1;
                  return;
                }
                uint64_t ns = duration_ns(v, w);
                if (ns % kNsPerMs != 0) fail(w, "must be a whole number of milliseconds, got " + v.Scalar());
                y.over_commit_timeout_ms = static_cast<int64_t>(ns / kNsPerMs);
              }},
             flag("resize_with_other_resources", y.resize_with_other_resources),
             choice("reclaimer", y.reclaimer, {Reclaimer::Khagent, Reclaimer::Rm}, reclaimer_name),
             flag("reclaim", y.reclaim),
             ns("reclaim_grace", y.reclaim_grace_ns),
             {"queue_priority",
              [&](const YAML::Node& v, const Where& w) {
                y.queue_priority.clear();
                for (const auto& [queue, text] : string_map(v, w)) {
                  int prio = 0;
                  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), prio);
                  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
                    fail(w.key(queue, w.mark), "expected a whole number (may be negative), got \"" + text + "\"");
                  }
                  y.queue_priority[queue] = prio;
                }
              }},
             flag("emergency", y.emergency),
             num("emergency_p99_factor", y.emergency_p99_factor),
             flag("memory_emergency", y.memory_emergency)});
  }

  // Everything but `nodes`, which only the base document may have.
  std::vector<Field> top_fields(Config& c) const {
    return {
        ns("tick", c.tick_ns),
        flag("dry_run", c.dry_run),
        text("state_file", c.state_file),
        text("kubelet_pods_url", c.kubelet_pods_url),
        text("kubelet_token_file", c.kubelet_token_file),
        text("kubelet_ca_file", c.kubelet_ca_file),
        flag("kubelet_insecure_skip_verify", c.kubelet_insecure_skip_verify),
        {"classes", [this, &c](const YAML::Node& n, const Where& at) { classes(n, at, c.classes); }},
        {"online",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& o = c.online;
           section(n, at,
                   {us("wait_p99_target", o.wait_p99_target_us),
                    num("interference_share_limit", o.interference_share_limit),
                    num("min_offline_share", o.min_offline_share), num("self_throttle_share", o.self_throttle_share),
                    whole("min_waits", o.min_waits), ns("self_throttle_window", o.self_throttle_window_ns),
                    num("burst_share", o.burst_share)});
         }},
        {"budget",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& b = c.budget;
           section(
               n, at,
               {num("floor", b.floor_cores), flag("allow_zero", b.allow_zero), num("reserve", b.reserve_cores),
                num("initial", b.initial_cores), num("decrease_factor", b.decrease_factor),
                ns("min_decrease_interval", b.min_decrease_interval_ns), num("increase_step", b.increase_step_cores),
                ns("increase_interval", b.increase_interval_ns), ns("calm_period", b.calm_period_ns),
                num("deadband", b.deadband_cores), us("cpu_max_period", b.cpu_max_period_us)});
         }},
        {"cpuset",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& s = c.cpuset;
           section(n, at,
                   {flag("enabled", s.enabled), cpus("reserved_cpus", s.reserved_cpus),
                    text("cpu_manager_state", s.cpu_manager_state), flag("throttle", s.throttle)});
         }},
        {"offline",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& o = c.offline;
           section(n, at,
                   {strings("targets", o.targets), flag("besteffort", o.besteffort), flag("yarn", o.yarn),
                    text("yarn_hierarchy", o.yarn_hierarchy), flag("idle", o.idle), whole("weight", o.weight)});
         }},
        {"fast_path",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& f = c.fast_path;
           section(n, at,
                   {flag("enabled", f.enabled), ns("wait_threshold", f.wait_threshold_ns),
                    ns("min_interval", f.min_interval_ns), ns("scan_interval", f.scan_interval_ns)});
         }},
        {"ladder",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& l = c.ladder;
           section(n, at,
                   {{"rungs", [&](const YAML::Node& v, const Where& w) { levers(v, w, l.rungs); }},
                    {"always", [&](const YAML::Node& v, const Where& w) { levers(v, w, l.always); }},
                    ns("escalate_after", l.escalate_after_ns),
                    ns("verify_window", l.verify_window_ns),
                    num("min_improvement", l.min_improvement),
                    ns("retry_after", l.retry_after_ns),
                    ns("relax_after", l.relax_after_ns)});
         }},
        {"memory",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& m = c.memory;
           section(n, at,
                   {flag("enabled", m.enabled),
                    text("node_cgroup", m.node_cgroup),
                    bytes("reserve", m.reserve_bytes),
                    num("reserve_share", m.reserve_share),
                    bytes("reserve_min", m.reserve_min_bytes),
                    bytes("eviction_threshold", m.eviction_threshold_bytes),
                    bytes("min_offline", m.min_offline_bytes),
                    bytes("grow_per_second", m.grow_per_second_bytes),
                    bytes("deadband", m.deadband_bytes),
                    num("stall_limit", m.stall_limit),
                    num("stall_cut", m.stall_cut),
                    ns("stall_window", m.stall_window_ns),
                    flag("oom_order", m.oom_order),
                    flag("backstop", m.backstop),
                    flag("oom_group", m.oom_group),
                    flag("reclaim", m.reclaim),
                    bytes("reclaim_refault_rate", m.reclaim_refault_rate_bytes),
                    bytes("reclaim_step", m.reclaim_step_bytes),
                    ns("reclaim_interval", m.reclaim_interval_ns),
                    ns("refault_halflife", m.refault_halflife_ns)});
         }},
        {"yarn", [this, &c](const YAML::Node& n, const Where& at) { yarn(n, at, c.yarn); }},
        {"io",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& io = c.io;
           section(n, at,
                   {flag("enabled", io.enabled), num("stall_limit", io.stall_limit), flag("limit", io.limit),
                    num("limit_step", io.limit_step), bytes("min_bps", io.min_bps), whole("min_iops", io.min_iops),
                    ns("verdict_after", io.verdict_after_ns), ns("hold_off", io.hold_off_ns),
                    ns("calm_after", io.calm_after_ns)});
         }},
        {"capacity",
         [this, &c](const YAML::Node& n, const Where& at) {
           auto& k = c.capacity;
           section(n, at,
                   {flag("enabled", k.enabled),
                    text("api_server", k.api_server),
                    text("token_file", k.token_file),
                    text("ca_file", k.ca_file),
                    text("node_name", k.node_name),
                    choice("split", k.split, {CapacitySplitRule::Fixed, CapacitySplitRule::Usage}, capacity_split_name),
                    num("batch_share", k.batch_share),
                    num("min_share", k.min_share),
                    num("floor_cpu", k.floor_cores),
                    bytes("floor_memory", k.floor_memory_bytes),
                    num("deadband", k.deadband),
                    ns("grow_stable", k.grow_stable_ns),
                    ns("grow_interval", k.grow_interval_ns),
                    ns("reassert_interval", k.reassert_interval_ns),
                    ns("stale_after", k.stale_after_ns),
                    {"request_timeout", [&](const YAML::Node& v, const Where& w) {
                       k.request_timeout_ms = duration_ns(v, w) / kNsPerMs;
                     }}});
         }},
    };
  }

  // --- Per-node overrides ----------------------------------------------------

  struct Override {
    std::optional<std::string> name;  // fnmatch(3) pattern
    std::map<std::string, std::string> labels;
    YAML::Node set;
  };

  static bool matches(const Override& o, const NodeIdentity& node) {
    if (o.name && fnmatch(o.name->c_str(), node.name.c_str(), 0) != 0) return false;
    for (const auto& [k, v] : o.labels) {
      auto it = node.labels.find(k);
      if (it == node.labels.end() || it->second != v) return false;
    }
    return true;
  }

  // Checks every entry, matching or not, so a mistake shows on every node.
  std::vector<Override> overrides(const YAML::Node& n, const Where& at) const {
    std::vector<Override> out;
    if (n.IsNull()) return out;
    if (!n.IsSequence()) fail(at, "expected a list, got " + describe(n));
    for (size_t i = 0; i < n.size(); i++) {
      const YAML::Node entry = n[i];
      const Where here = at.item(i, mark_of(entry, at.mark));
      if (!entry.IsMap()) fail(here, "expected a map with match and set, got " + describe(entry));
      Override o;
      bool has_match = false, has_set = false;
      section(entry, here,
              {{"match",
                [&](const YAML::Node& v, const Where& w) {
                  has_match = true;
                  section(v, w, {optional("name", o.name, &Loader::string), dict("labels", o.labels)});
                  if (!o.name && o.labels.empty()) {
                    fail(w, "empty match would apply to every node (give name and/or labels)");
                  }
                }},
               {"set", [&](const YAML::Node& v, const Where& w) {
                  has_set = true;
                  Config scratch = default_config();  // only for the key and type checks
                  section(v, w, top_fields(scratch));
                  o.set = v.IsNull() ? YAML::Node(YAML::NodeType::Map) : v;
                }}});
      if (!has_match) fail(here, "missing match (give name and/or labels)");
      if (!has_set) fail(here, "missing set");
      out.push_back(std::move(o));
    }
    return out;
  }
};

// Deep merge: maps merge key by key, anything else in `over` replaces. New
// map nodes are built and the leaves of both documents reused as they are, so
// neither input changes and line numbers survive for later errors. Keys are
// known to be unique strings (checked before merging).
YAML::Node merge(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return over;
  auto find = [](const YAML::Node& map, const std::string& key) -> std::optional<YAML::Node> {
    for (const auto& kv : map) {
      if (kv.first.Scalar() == key) return kv.second;
    }
    return std::nullopt;
  };
  YAML::Node out(YAML::NodeType::Map);
  for (const auto& kv : base) {
    auto o = find(over, kv.first.Scalar());
    out.force_insert(kv.first, o ? merge(kv.second, *o) : kv.second);
  }
  for (const auto& kv : over) {
    if (!find(base, kv.first.Scalar())) out.force_insert(kv.first, kv.second);
  }
  return out;
}

}  // namespace

Result<Config> load_config_text(const std::string& text, const std::string& source, const NodeIdentity& node) {
  Loader loader(source);
  try {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
      loader.fail({"", e.mark}, "YAML syntax error: " + e.msg);
    }
    if (docs.size() > 1) {
      loader.fail({"", docs[1].Mark()}, "expected one YAML document, found " + std::to_string(docs.size()));
    }
    // Nothing (or only comments) is an empty map: all defaults.
    YAML::Node doc = docs.empty() || docs[0].IsNull() ? YAML::Node(YAML::NodeType::Map) : docs[0];
    if (!doc.IsMap()) {
      loader.fail({"", doc.Mark()}, "expected a map at the top level, got " + describe(doc));
    }

    // First pass: check the base document on its own and collect `nodes`.
    Config checked = default_config();
    std::vector<Loader::Override> overrides;
    std::vector<Field> fields = loader.top_fields(checked);
    fields.push_back({"nodes", [&](const YAML::Node& n, const Where& at) { overrides = loader.overrides(n, at); }});
    loader.section(doc, {}, fields);

    // Then merge the matching overrides into the document, in order, and
    // convert the result; a map is merged key by key, so an override only
    // changes what it names.
    YAML::Node merged(YAML::NodeType::Map);
    for (const auto& kv : doc) {
      if (kv.first.Scalar() != "nodes") merged.force_insert(kv.first, kv.second);
    }
    for (const auto& o : overrides) {
      if (Loader::matches(o, node)) merged = merge(merged, o.set);
    }
    Config c = default_config();
    loader.section(merged, {}, loader.top_fields(c));

    if (auto v = validate_config(c); !v.ok()) {
      return make_error(EINVAL, source + ": " + v.error().message);
    }
    return c;
  } catch (const ConfigError& e) {
    return make_error(EINVAL, e.message);
  } catch (const YAML::Exception& e) {  // not expected: the walk above checks types first
    return make_error(EINVAL, source + ": " + e.what());
  }
}

namespace config_yaml {

size_t applying_overrides(const YAML::Node& doc, const NodeIdentity& node) {
  if (!doc.IsMap()) return 0;
  const YAML::Node nodes = doc["nodes"];
  if (!nodes || !nodes.IsSequence()) return 0;
  size_t n = 0;
  for (const auto& entry : nodes) {
    const YAML::Node match = entry.IsMap() ? entry["match"] : YAML::Node();
    if (!match || !match.IsMap()) {
      n++;
      continue;
    }
    Loader::Override o;
    bool readable = true;
    if (const YAML::Node name = match["name"]; name) {
      if (name.IsScalar()) o.name = name.Scalar();
      else readable = false;
    }
    if (const YAML::Node labels = match["labels"]; labels) {
      if (!labels.IsMap()) readable = false;
      for (const auto& kv : labels.IsMap() ? labels : YAML::Node()) {
        if (kv.first.IsScalar() && kv.second.IsScalar()) o.labels[kv.first.Scalar()] = kv.second.Scalar();
        else readable = false;
      }
    }
    if (!readable || Loader::matches(o, node)) n++;
  }
  return n;
}

}  // namespace config_yaml

}  // namespace khagent

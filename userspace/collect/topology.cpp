#include "khagent/collect/topology.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "khagent/util/file.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace fs = std::filesystem;

namespace {

// The kubelet's cpu_manager_state is {"policyName","defaultCpuSet",
// "entries":{pod:{container:list}},"checksum"}: 3 levels, ~100 bytes a
// container. 4 MiB is some 40000 containers.
constexpr JsonLimits kCpuManagerStateLimits{size_t{4} << 20, 8, 1'000'000};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// A single (possibly negative) decimal integer, as sysfs attributes hold.
Result<int> read_int_file(const std::string& path) {
  auto text = read_file(path);
  if (!text) return text.error();
  std::string_view s = trim(*text);
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return make_error(EINVAL, "bad integer '" + std::string(s) + "' in " + path);
  }
  return v;
}

Result<CpuSet> read_cpu_list_file(const std::string& path) {
  auto text = read_file(path);
  if (!text) return text.error();
  auto cpus = parse_cpu_list(*text);
  if (!cpus) return make_error(cpus.error().err, path + ": " + cpus.error().message);
  return cpus;
}

// core_id is only unique within a package; CpuInfo::core must be unique on
// the node, so the package goes in the high bits.
constexpr int kCoresPerPackage = 1 << 16;

// CPU -> NUMA node from <node_dir>/nodeM/cpulist. An absent node directory
// (kernel without NUMA) is an empty map: everything is on node 0.
Result<std::map<int, int>> read_numa_nodes(const std::string& node_dir) {
  std::map<int, int> node_of;
  std::error_code ec;
  fs::directory_iterator it(node_dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return node_of;
  if (ec) return make_error(ec.value(), "cannot list " + node_dir);

  // Only nodeM entries ("possible", "online", "has_cpu", ... are lists too).
  std::map<int, std::string> nodes;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= 4 || name.compare(0, 4, "node") != 0) continue;
    int id = 0;
    auto [p, err] = std::from_chars(name.data() + 4, name.data() + name.size(), id);
    if (err != std::errc() || p != name.data() + name.size() || id < 0) continue;
    nodes[id] = it->path().string();
  }
  if (ec) return make_error(ec.value(), "cannot list " + node_dir);

  for (const auto& [id, dir] : nodes) {
    auto cpus = read_cpu_list_file(dir + "/cpulist");
    if (!cpus) return cpus.error();
    // A CPU in two lists cannot happen on a sane kernel; the lower node wins.
    for (int c : *cpus) node_of.emplace(c, id);
  }
  return node_of;
}

}  // namespace

Result<Topology> read_topology(const std::string& sys_cpu_dir, const std::string& sys_node_dir) {
  // Offline CPUs have no topology directory, so only online ones are read.
  auto online = read_cpu_list_file(sys_cpu_dir + "/online");
  if (!online) return online.error();
  auto node_of = read_numa_nodes(sys_node_dir);
  if (!node_of) return node_of.error();

  Topology topo;
  for (int id : *online) {  // CpuSet iterates in order: cpus stays sorted by id
    const std::string dir = sys_cpu_dir + "/cpu" + std::to_string(id) + "/topology/";
    auto core = read_int_file(dir + "core_id");
    if (!core) return core.error();
    auto package = read_int_file(dir + "physical_package_id");
    if (!package) return package.error();
    // Some platforms (older arm64 kernels) report package -1: one package.
    int pkg = *package == -1 ? 0 : *package;
    if (*core < 0 || *core >= kCoresPerPackage || pkg < 0 || pkg >= (1 << 14)) {
      return make_error(ERANGE, "cpu" + std::to_string(id) + ": core_id " + std::to_string(*core) +
                                    " / physical_package_id " + std::to_string(*package) + " out of range in " +
                                    sys_cpu_dir);
    }
    CpuInfo info;
    info.id = id;
    info.core = pkg * kCoresPerPackage + *core;
    // An online CPU missing from every node list is put on node 0.
    auto n = node_of->find(id);
    info.node = n == node_of->end() ? 0 : n->second;
    topo.cpus.push_back(info);
  }
  return topo;
}

Result<CpuManagerState> parse_cpu_manager_state(const std::string& json_text) {
  using nlohmann::json;
  const std::string what = "cpu_manager_state: ";
  auto parsed = parse_json_bounded(json_text, kCpuManagerStateLimits);
  if (!parsed) return make_error(parsed.error().err, what + parsed.error().message);
  const json& doc = parsed.value();
  if (!doc.is_object()) return make_error(EINVAL, what + "not a JSON object");

  CpuManagerState st;
  auto policy = doc.find("policyName");
  if (policy == doc.end() || !policy->is_string()) {
    return make_error(EINVAL, what + "policyName missing or not a string");
  }
  st.policy = policy->get<std::string>();

  // "none" writes defaultCpuSet ""; a missing key is read the same way.
  if (auto def = doc.find("defaultCpuSet"); def != doc.end()) {
    if (!def->is_string()) return make_error(EINVAL, what + "defaultCpuSet is not a string");
    auto cpus = parse_cpu_list(def->get<std::string>());
    if (!cpus) return make_error(EINVAL, what + "defaultCpuSet: " + cpus.error().message);
    st.default_set = std::move(*cpus);
  }

  auto add_exclusive = [&](const json& v, const std::string& where) -> Result<void> {
    if (!v.is_string()) return make_error(EINVAL, what + where + " is not a string");
    auto cpus = parse_cpu_list(v.get<std::string>());
    if (!cpus) return make_error(EINVAL, what + where + ": " + cpus.error().message);
    st.exclusive.insert(cpus->begin(), cpus->end());
    return {};
  };

  auto entries = doc.find("entries");
  if (entries != doc.end() && !entries->is_null()) {
    if (!entries->is_object()) return make_error(EINVAL, what + "entries is not an object");
    for (const auto& [pod, containers] : entries->items()) {
      const std::string where = "entries[\"" + pod + "\"]";
      // Checkpoint v1 (kubelet < 1.18) mapped container id -> cpu list
      // directly; v2 maps pod uid -> container name -> cpu list.
      if (containers.is_string()) {
        if (auto r = add_exclusive(containers, where); !r) return r.error();
        continue;
      }
      if (!containers.is_object()) return make_error(EINVAL, what + where + " is not an object");
      for (const auto& [name, cpus] : containers.items()) {
        if (auto r = add_exclusive(cpus, where + "[\"" + name + "\"]"); !r) return r.error();
      }
    }
  }
  return st;
}

Result<CpuManagerState> read_cpu_manager_state(const std::string& path) {
  auto text = read_regular_file(path, kCpuManagerStateLimits.max_bytes);
  if (!text) {
    // No file: the kubelet has no CPU manager state, i.e. policy none.
    if (text.error().err == ENOENT) return CpuManagerState{"none", {}, {}};
    return text.error();
  }
  auto st = parse_cpu_manager_state(*text);
  if (!st) return make_error(st.error().err, path + ": " + st.error().message);
  return st;
}

}  // namespace khagent

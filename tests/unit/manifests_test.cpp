// The deployment files under manifests/ checked against the agent itself: the
// DaemonSet's arguments go through khagent's own command line parser, the
// ConfigMap's configuration through its own loader, and the Grafana dashboard
// may only use metric families that userspace/export/metrics*.cpp register.
// The files are found through this source file's location (the repository
// root is three levels up), so the test runs from any build directory.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "khagent/app/agent.h"
#include "khagent/app/cli.h"
#include "khagent/config/config.h"
#include "test_util.h"

using namespace khagent;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(__FILE__).parent_path().parent_path().parent_path();
const fs::path kManifests = kRoot / "manifests";

const std::string kConfigMapName = "khagent-config";
const std::string kConfigKey = "config.yaml";

// The two DaemonSet files: the privileged default and the capability variant.
const char* const kDaemonSetFiles[] = {"daemonset.yaml", "daemonset-capabilities.yaml"};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- Reading YAML without surprises ---------------------------------------------
//
// yaml-cpp's operator[] is no good for probing: on a const node a missing key
// gives an invalid node that throws when indexed further, and on a non-const
// one it can add keys to the (shared) document. Node's assignment operator
// is no good either: it re-points the node the left side refers to, inside
// the document. `at` only reads and only copy-constructs.

YAML::Node missing() { return YAML::Node(YAML::NodeType::Undefined); }

YAML::Node at_keys(const YAML::Node& cur, const std::string* key, const std::string* end) {
  if (key == end) return cur;
  if (!cur || !cur.IsMap()) return missing();
  for (const auto& kv : cur)
    if (kv.first.IsScalar() && kv.first.Scalar() == *key) return at_keys(kv.second, key + 1, end);
  return missing();
}

// The value at this path of map keys, or an undefined node (false in a
// boolean context) if a step is missing or not a map.
YAML::Node at(const YAML::Node& n, std::initializer_list<std::string> keys) {
  return at_keys(n, keys.begin(), keys.end());
}

std::string str(const YAML::Node& n) { return n && n.IsScalar() ? n.Scalar() : ""; }
std::string str(const YAML::Node& n, std::initializer_list<std::string> keys) { return str(at(n, keys)); }

bool flag(const YAML::Node& n) {
  bool b = false;
  return n && n.IsScalar() && YAML::convert<bool>::decode(n, b) && b;
}

// The elements of a sequence (none if it is not one).
std::vector<YAML::Node> seq(const YAML::Node& n) {
  std::vector<YAML::Node> out;
  if (n && n.IsSequence())
    for (const auto& e : n) out.push_back(e);
  return out;
}

// The first element of a sequence of maps whose `key` is `value`.
YAML::Node item(const YAML::Node& list, const std::string& key, const std::string& value) {
  for (const auto& e : seq(list))
    if (str(e, {key}) == value) return e;
  return missing();
}

// --- The documents ----------------------------------------------------------------

struct Doc {
  std::string file;  // relative to manifests/
  YAML::Node node;
};

// Every document of every manifests/**/*.yaml, in path order. Empty documents
// (comments only) are skipped; YAML errors fail the test that asked.
const std::vector<Doc>& docs() {
  static const std::vector<Doc> all = [] {
    std::vector<fs::path> files;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(kManifests, ec), end; !ec && it != end; it.increment(ec)) {
      auto ext = it->path().extension();
      if (it->is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    std::vector<Doc> out;
    for (const auto& f : files) {
      std::string rel = fs::relative(f, kManifests).generic_string();
      try {
        for (const auto& n : YAML::LoadAll(slurp(f)))
          if (!n.IsNull()) out.push_back({rel, n});
      } catch (const YAML::Exception& e) {
        ADD_FAILURE() << rel << ": " << e.what();
      }
    }
    return out;
  }();
  return all;
}

// The one document of this kind and name in `file` ("" = any file).
YAML::Node object(const std::string& kind, const std::string& name, const std::string& file = "") {
  std::vector<YAML::Node> hits;
  for (const auto& d : docs()) {
    if (!file.empty() && d.file != file) continue;
    if (str(d.node, {"kind"}) == kind && str(d.node, {"metadata", "name"}) == name) hits.push_back(d.node);
  }
  EXPECT_EQ(hits.size(), 1u) << kind << "/" << name << " in " << (file.empty() ? "manifests/" : file);
  return hits.empty() ? missing() : hits.front();
}

std::vector<Doc> of_kind(const std::string& kind) {
  std::vector<Doc> out;
  for (const auto& d : docs())
    if (str(d.node, {"kind"}) == kind) out.push_back(d);
  return out;
}

YAML::Node pod_spec(const YAML::Node& workload) { return at(workload, {"spec", "template", "spec"}); }
YAML::Node pod_labels(const YAML::Node& workload) { return at(workload, {"spec", "template", "metadata", "labels"}); }

// Every key of `want` (a label map) has the same value in `have`.
bool labels_match(const YAML::Node& want, const YAML::Node& have) {
  if (!want || !want.IsMap() || want.size() == 0) return false;
  for (const auto& kv : want)
    if (str(have, {kv.first.Scalar()}) != str(kv.second)) return false;
  return true;
}

YAML::Node agent_container(const YAML::Node& ds) { return item(at(pod_spec(ds), {"containers"}), "name", "khagent"); }

std::vector<std::string> container_args(const YAML::Node& c) {
  std::vector<std::string> out;
  for (const auto& a : seq(at(c, {"args"}))) out.push_back(str(a));
  return out;
}

// A port given by number or by the name of one of the container's ports.
int port_of(const YAML::Node& container, const YAML::Node& port) {
  int n = -1;
  if (!port || !port.IsScalar()) return -1;
  if (YAML::convert<int>::decode(port, n)) return n;
  auto named = at(item(at(container, {"ports"}), "name", port.Scalar()), {"containerPort"});
  return named && YAML::convert<int>::decode(named, n) ? n : -1;
}

int as_int(const YAML::Node& n) {
  int v = -1;
  return n && n.IsScalar() && YAML::convert<int>::decode(n, v) ? v : -1;
}

struct Mount {
  YAML::Node mount;   // the container's volumeMounts entry
  YAML::Node volume;  // the pod's volume it names
};

std::optional<Mount> mount_at(const YAML::Node& ds, const std::string& path) {
  for (const auto& m : seq(at(agent_container(ds), {"volumeMounts"}))) {
    if (str(m, {"mountPath"}) != path) continue;
    return Mount{m, item(at(pod_spec(ds), {"volumes"}), "name", str(m, {"name"}))};
  }
  return std::nullopt;
}

// Which ConfigMap key the pod sees as the file `path`, as "<configmap>/<key>";
// "" if `path` is not in a mounted configMap volume.
std::string configmap_file_at(const YAML::Node& ds, const std::string& path) {
  for (const auto& m : seq(at(agent_container(ds), {"volumeMounts"}))) {
    auto vol = item(at(pod_spec(ds), {"volumes"}), "name", str(m, {"name"}));
    auto cm = at(vol, {"configMap"});
    if (!cm) continue;
    std::string dir = str(m, {"mountPath"});
    if (path.rfind(dir + "/", 0) != 0) continue;
    std::string key = path.substr(dir.size() + 1);
    if (auto items = at(cm, {"items"})) {  // keys mounted under paths of their own
      auto it = item(items, "path", key);
      if (!it) continue;
      key = str(it, {"key"});
    }
    return str(cm, {"name"}) + "/" + key;
  }
  return "";
}

std::string config_text() { return str(object("ConfigMap", kConfigMapName, "configmap.yaml"), {"data", kConfigKey}); }

}  // namespace

// --- Every file ---------------------------------------------------------------

TEST(ManifestFiles, EveryDocumentHasApiVersionKindAndName) {
  ASSERT_TRUE(fs::is_directory(kManifests)) << kManifests;
  std::set<std::string> files;
  for (const auto& d : docs()) {
    SCOPED_TRACE(d.file);
    files.insert(d.file);
    ASSERT_TRUE(d.node.IsMap());
    EXPECT_FALSE(str(d.node, {"apiVersion"}).empty());
    EXPECT_FALSE(str(d.node, {"kind"}).empty());
    EXPECT_FALSE(str(d.node, {"metadata", "name"}).empty());
  }
  for (const char* f : {"namespace.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml",
                        "daemonset-capabilities.yaml", "priorityclasses.yaml", "servicemonitor.yaml",
                        "examples/nodemanager-statefulset.yaml", "examples/cronhpa-online.yaml",
                        "node-status-policy.yaml", "examples/batch-pod.yaml", "examples/batch-deployment.yaml"})
    EXPECT_TRUE(files.count(f)) << f << " has no document";
}

TEST(ManifestFiles, AgentObjectsLiveInThePrivilegedKhagentNamespace) {
  EXPECT_EQ(str(object("Namespace", "khagent", "namespace.yaml"),
                {"metadata", "labels", "pod-security.kubernetes.io/enforce"}),
            "privileged");
  const std::set<std::string> cluster_scoped = {"Namespace",
                                                "ClusterRole",
                                                "ClusterRoleBinding",
                                                "PriorityClass",
                                                "ValidatingAdmissionPolicy",
                                                "ValidatingAdmissionPolicyBinding"};
  for (const auto& d : docs()) {
    if (d.file.rfind("examples/", 0) == 0) continue;
    auto kind = str(d.node, {"kind"});
    if (cluster_scoped.count(kind)) continue;
    EXPECT_EQ(str(d.node, {"metadata", "namespace"}), "khagent") << d.file << ": " << kind;
  }
}

// --- The DaemonSet --------------------------------------------------------------

TEST(ManifestDaemonSet, ArgsParseWithTheAgentsOwnCli) {
  for (const char* file : kDaemonSetFiles) {
    SCOPED_TRACE(file);
    auto ds = object("DaemonSet", "khagent", file);
    auto c = agent_container(ds);
    ASSERT_TRUE(c) << "no container named khagent";
    auto args = container_args(c);

    // --config names the ConfigMap's config.yaml where the pod mounts it.
    auto cfg = std::find(args.begin(), args.end(), "--config");
    ASSERT_TRUE(cfg != args.end() && cfg + 1 != args.end()) << "no --config FILE";
    const std::string config_in_pod = *(cfg + 1);
    EXPECT_EQ(configmap_file_at(ds, config_in_pod), kConfigMapName + "/" + kConfigKey) << config_in_pod;

    // The parser insists that --config exists, so that one path is redirected
    // into a temporary tree holding the ConfigMap's text; every other
    // argument is passed exactly as the container gets it.
    ASSERT_FALSE(config_in_pod.empty());
    ASSERT_EQ(config_in_pod.front(), '/');
    TempDir tmp;
    tmp.write(config_in_pod.substr(1), config_text());
    const std::string local = (tmp.path / config_in_pod.substr(1)).string();
    *(cfg + 1) = local;

    auto p = parse_cli(args);
    ASSERT_TRUE(p.options.has_value()) << p.output;
    const auto& o = *p.options;
    EXPECT_EQ(o.command, Command::Run);
    EXPECT_EQ(o.config_path, local);
    EXPECT_FALSE(o.dry_run);
    EXPECT_TRUE(o.metrics);
    EXPECT_TRUE(o.loader.pin);
    // The kubelet probes the node's address (hostNetwork): not loopback only.
    EXPECT_EQ(o.metrics_address, "0.0.0.0");

    // The metrics port is the one the probes and the named port use.
    for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
      if (!at(c, {probe})) continue;
      EXPECT_EQ(port_of(c, at(c, {probe, "httpGet", "port"})), o.metrics_port) << probe;
    }
    auto metrics_port = item(at(c, {"ports"}), "name", "metrics");
    ASSERT_TRUE(metrics_port);
    EXPECT_EQ(as_int(at(metrics_port, {"containerPort"})), o.metrics_port);
    EXPECT_EQ(as_int(at(metrics_port, {"hostPort"})), o.metrics_port);

    // The state file lies in a host directory, so a restarted agent finds it.
    ASSERT_FALSE(o.state_file.empty());
    auto state_dir = mount_at(ds, fs::path(o.state_file).parent_path().string());
    ASSERT_TRUE(state_dir.has_value()) << "no volume at the directory of " << o.state_file;
    EXPECT_FALSE(flag(at(state_dir->mount, {"readOnly"})));
    EXPECT_EQ(str(state_dir->volume, {"hostPath", "type"}), "DirectoryOrCreate");

    // What `khagent run` would load with these options on a node the
    // configuration's override matches (the DaemonSet passes $NODE_NAME).
    CliOptions on_node = o;
    on_node.node_name = "colo-big-07";
    auto eff = effective_config(on_node);
    ASSERT_TRUE(eff.ok()) << eff.error().message;
    EXPECT_EQ(eff->state_file, o.state_file);
  }
}

TEST(ManifestDaemonSet, VolumesMountTheHostPathsTheAgentUses) {
  auto cfg = load_config_text(config_text(), "configmap.yaml", {});
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  for (const char* file : kDaemonSetFiles) {
    SCOPED_TRACE(file);
    auto ds = object("DaemonSet", "khagent", file);
    struct Want {
      std::string path;
      bool read_only;
    } wants[] = {
        {"/sys/fs/bpf", false},      // pins (LoaderOptions::pin_dir /sys/fs/bpf/khagent)
        {"/sys/fs/cgroup", false},   // the cgroup2 tree, written
        {"/sys/kernel/btf", true},   // preflight and the fentry probe
        {"/var/lib/kubelet", true},  // cpu_manager_state
    };
    for (const auto& w : wants) {
      SCOPED_TRACE(w.path);
      auto m = mount_at(ds, w.path);
      ASSERT_TRUE(m.has_value()) << "not mounted";
      EXPECT_EQ(flag(at(m->mount, {"readOnly"})), w.read_only);
      // The same path on the host: the agent finds the host's files where it
      // looks for them outside a container.
      EXPECT_EQ(str(m->volume, {"hostPath", "path"}), w.path);
    }
    // Bidirectional (a bpffs the agent mounts shows on the host) is only
    // allowed for privileged containers.
    bool privileged = flag(at(agent_container(ds), {"securityContext", "privileged"}));
    EXPECT_EQ(str(mount_at(ds, "/sys/fs/bpf")->mount, {"mountPropagation"}),
              privileged ? "Bidirectional" : "HostToContainer");

    EXPECT_EQ(cfg->cpuset.cpu_manager_state.rfind("/var/lib/kubelet/", 0), 0u)
        << "cpu_manager_state " << cfg->cpuset.cpu_manager_state << " is outside the kubelet mount";

    // Every volume is mounted, and /proc stays out (hostPID gives the host's).
    std::set<std::string> mounted;
    for (const auto& m : seq(at(agent_container(ds), {"volumeMounts"}))) {
      mounted.insert(str(m, {"name"}));
      EXPECT_NE(str(m, {"mountPath"}).rfind("/proc", 0), 0u) << str(m, {"mountPath"});
    }
    for (const auto& v : seq(at(pod_spec(ds), {"volumes"})))
      EXPECT_TRUE(mounted.count(str(v, {"name"}))) << "volume " << str(v, {"name"}) << " is not mounted";
  }
}

TEST(ManifestDaemonSet, ProbesSchedulingAndLifecycle) {
  for (const char* file : kDaemonSetFiles) {
    SCOPED_TRACE(file);
    auto ds = object("DaemonSet", "khagent", file);
    auto spec = pod_spec(ds);
    auto c = agent_container(ds);
    EXPECT_EQ(str(c, {"livenessProbe", "httpGet", "path"}), "/healthz");
    EXPECT_EQ(str(c, {"readinessProbe", "httpGet", "path"}), "/readyz");
    if (at(c, {"startupProbe"})) {
      EXPECT_EQ(str(c, {"startupProbe", "httpGet", "path"}), "/healthz");
    }

    EXPECT_TRUE(flag(at(spec, {"hostPID"})));
    EXPECT_TRUE(flag(at(spec, {"hostNetwork"})));  // kubelet_pods_url is 127.0.0.1
    EXPECT_EQ(str(spec, {"priorityClassName"}), "system-node-critical");
    bool tolerates_all = false;
    for (const auto& t : seq(at(spec, {"tolerations"})))
      tolerates_all |= str(t, {"operator"}) == "Exists" && !at(t, {"key"}) && !at(t, {"effect"});
    EXPECT_TRUE(tolerates_all) << "no toleration with operator Exists for every taint";
    EXPECT_EQ(as_int(at(spec, {"terminationGracePeriodSeconds"})), 30);

    // NODE_NAME from the downward API: per-node overrides match on it.
    auto env = item(at(c, {"env"}), "name", "NODE_NAME");
    ASSERT_TRUE(env);
    EXPECT_EQ(str(env, {"valueFrom", "fieldRef", "fieldPath"}), "spec.nodeName");

    EXPECT_EQ(str(spec, {"serviceAccountName"}), "khagent");
    object("ServiceAccount", "khagent", "rbac.yaml");

    EXPECT_EQ(str(ds, {"spec", "updateStrategy", "type"}), "RollingUpdate");
    EXPECT_EQ(str(ds, {"spec", "updateStrategy", "rollingUpdate", "maxUnavailable"}), "10%");

    EXPECT_EQ(str(c, {"resources", "requests", "cpu"}), "50m");
    EXPECT_EQ(str(c, {"resources", "requests", "memory"}), "64Mi");
    EXPECT_EQ(str(c, {"resources", "limits", "cpu"}), "500m");
    EXPECT_EQ(str(c, {"resources", "limits", "memory"}), "256Mi");

    EXPECT_TRUE(labels_match(at(ds, {"spec", "selector", "matchLabels"}), pod_labels(ds)));
  }
}

TEST(ManifestDaemonSet, PrivilegedByDefault) {
  auto ds = object("DaemonSet", "khagent", "daemonset.yaml");
  EXPECT_TRUE(flag(at(agent_container(ds), {"securityContext", "privileged"})));
}

TEST(ManifestDaemonSet, CapabilityVariantAddsExactlyTheFourCapabilities) {
  auto ds = object("DaemonSet", "khagent", "daemonset-capabilities.yaml");
  auto sc = at(agent_container(ds), {"securityContext"});
  ASSERT_TRUE(sc);
  EXPECT_EQ(str(sc, {"privileged"}), "false");
  std::multiset<std::string> add;
  for (const auto& cap : seq(at(sc, {"capabilities", "add"}))) add.insert(str(cap));
  EXPECT_EQ(add, (std::multiset<std::string>{"BPF", "PERFMON", "SYS_ADMIN", "SYS_RESOURCE"}));
  // The API server rejects allowPrivilegeEscalation: false next to SYS_ADMIN.
  EXPECT_NE(str(sc, {"allowPrivilegeEscalation"}), "false");

  // Otherwise the same agent: same arguments, same mount points.
  auto priv = object("DaemonSet", "khagent", "daemonset.yaml");
  EXPECT_EQ(container_args(agent_container(ds)), container_args(agent_container(priv)));
  std::set<std::string> a, b;
  for (const auto& m : seq(at(agent_container(ds), {"volumeMounts"}))) a.insert(str(m, {"mountPath"}));
  for (const auto& m : seq(at(agent_container(priv), {"volumeMounts"}))) b.insert(str(m, {"mountPath"}));
  EXPECT_EQ(a, b);
}

// --- Configuration, RBAC, priority classes, monitoring ----------------------------

TEST(ManifestConfigMap, LoadsForAMatchingNodeAndForAnyOther) {
  const std::string text = config_text();
  ASSERT_FALSE(text.empty()) << "configmap.yaml has no data." << kConfigKey;

  // The override example: match.name is an fnmatch pattern.
  auto doc = YAML::Load(text);
  auto first = seq(at(doc, {"nodes"}));
  ASSERT_FALSE(first.empty()) << "no per-node override example";
  const std::string pattern = str(first[0], {"match", "name"});
  ASSERT_FALSE(pattern.empty()) << "the first override should match on a node name";
  const std::string matching = std::regex_replace(pattern, std::regex("[*?]"), "7");
  ASSERT_TRUE(at(first[0], {"set", "budget", "floor"})) << "the example override should set budget.floor";
  const double override_floor = at(first[0], {"set", "budget", "floor"}).as<double>();
  const double base_floor = at(doc, {"budget", "floor"}).as<double>();

  auto other = load_config_text(text, "configmap.yaml", {"some-other-node", {}});
  ASSERT_TRUE(other.ok()) << other.error().message;
  auto match = load_config_text(text, "configmap.yaml", {matching, {}});
  ASSERT_TRUE(match.ok()) << match.error().message;
  EXPECT_EQ(match->budget.floor_cores, override_floor) << "node " << matching;
  EXPECT_EQ(other->budget.floor_cores, base_floor);
  EXPECT_NE(override_floor, base_floor);

  // The platform defaults this ConfigMap is meant to carry.
  EXPECT_EQ(other->tick_ns, 200'000'000u);
  EXPECT_EQ(other->kubelet_pods_url, "https://127.0.0.1:10250/pods");
  EXPECT_TRUE(other->kubelet_insecure_skip_verify);
  EXPECT_TRUE(other->offline.besteffort);
  EXPECT_TRUE(other->offline.yarn);
  EXPECT_EQ(other->offline.yarn_hierarchy, "hadoop-yarn");
  EXPECT_GT(other->online.wait_p99_target_us, 0);
}

TEST(ManifestConfigMap, RulesNameThePlatformsPriorityClasses) {
  auto cfg = load_config_text(config_text(), "configmap.yaml", {});
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  std::map<std::string, CgroupClass> by_priority;
  for (const auto& r : cfg->classes.rules)
    if (r.priority_class) by_priority[*r.priority_class] = r.cls;
  EXPECT_EQ(by_priority.size(), 2u);
  for (const auto& [name, cls] : by_priority) {
    SCOPED_TRACE(name);
    object("PriorityClass", name, "priorityclasses.yaml");
    EXPECT_EQ(cls, name == "high-priority-online" ? CgroupClass::Online : CgroupClass::Offline);
  }
}

TEST(ManifestPriorityClasses, NamesAndValues) {
  std::map<std::string, int> got;
  for (const auto& d : of_kind("PriorityClass")) {
    got[str(d.node, {"metadata", "name"})] = as_int(at(d.node, {"value"}));
    EXPECT_EQ(str(d.node, {"globalDefault"}), "false");
  }
  EXPECT_EQ(got, (std::map<std::string, int>{{"high-priority-online", 2000000}, {"low-priority-offline", 1000000}}));
}

TEST(ManifestRbac, OnlyGetOnNodesAndNodesProxyAndPatchOnNodeStatus) {
  auto role = object("ClusterRole", "khagent", "rbac.yaml");
  std::set<std::string> grants;  // "<group>/<resource>:<verb>"
  for (const auto& rule : seq(at(role, {"rules"})))
    for (const auto& g : seq(at(rule, {"apiGroups"})))
      for (const auto& r : seq(at(rule, {"resources"})))
        for (const auto& v : seq(at(rule, {"verbs"}))) grants.insert(str(g) + "/" + str(r) + ":" + str(v));
  EXPECT_EQ(grants, (std::set<std::string>{"/nodes:get", "/nodes/proxy:get", "/nodes/status:patch"}));

  auto binding = object("ClusterRoleBinding", "khagent", "rbac.yaml");
  EXPECT_EQ(str(binding, {"roleRef", "kind"}), "ClusterRole");
  EXPECT_EQ(str(binding, {"roleRef", "name"}), "khagent");
  auto sa = item(at(binding, {"subjects"}), "kind", "ServiceAccount");
  EXPECT_EQ(str(sa, {"name"}), "khagent");
  EXPECT_EQ(str(sa, {"namespace"}), "khagent");
}

// The admission policy limits the nodes/status grant to the agent's own
// node: it must name the ServiceAccount the DaemonSet runs as, and be bound.
TEST(ManifestNodeStatusPolicy, NamesTheAgentsServiceAccountAndIsBound) {
  auto policy = object("ValidatingAdmissionPolicy", "khagent-node-status", "node-status-policy.yaml");
  auto cond = item(at(policy, {"spec", "matchConditions"}), "name", "khagent-service-account");
  ASSERT_TRUE(cond);
  EXPECT_NE(str(cond, {"expression"}).find("system:serviceaccount:khagent:khagent"), std::string::npos);
  auto rule = seq(at(policy, {"spec", "matchConstraints", "resourceRules"}));
  ASSERT_EQ(rule.size(), 1u);
  EXPECT_EQ(str(seq(at(rule[0], {"resources"}))[0]), "nodes/status");
  EXPECT_EQ(str(policy, {"spec", "failurePolicy"}), "Fail");
  auto binding = object("ValidatingAdmissionPolicyBinding", "khagent-node-status", "node-status-policy.yaml");
  EXPECT_EQ(str(binding, {"spec", "policyName"}), "khagent-node-status");
  EXPECT_EQ(str(seq(at(binding, {"spec", "validationActions"}))[0]), "Deny");
  auto ds = object("DaemonSet", "khagent", "daemonset.yaml");
  EXPECT_EQ(str(ds, {"spec", "template", "spec", "serviceAccountName"}), "khagent");
}

TEST(ManifestServiceMonitor, SelectsTheAgentsMetricsPort) {
  auto ds = object("DaemonSet", "khagent", "daemonset.yaml");
  auto svc = object("Service", "khagent-metrics", "servicemonitor.yaml");
  EXPECT_EQ(str(svc, {"spec", "clusterIP"}), "None");
  EXPECT_TRUE(labels_match(at(svc, {"spec", "selector"}), pod_labels(ds)));
  auto port = item(at(svc, {"spec", "ports"}), "name", "metrics");
  ASSERT_TRUE(port);
  EXPECT_EQ(as_int(at(port, {"port"})), 9464);
  EXPECT_EQ(port_of(agent_container(ds), at(port, {"targetPort"})), 9464);

  auto sm = object("ServiceMonitor", "khagent", "servicemonitor.yaml");
  EXPECT_EQ(str(sm, {"apiVersion"}), "monitoring.coreos.com/v1");
  EXPECT_TRUE(labels_match(at(sm, {"spec", "selector", "matchLabels"}), at(svc, {"metadata", "labels"})));
  auto ep = item(at(sm, {"spec", "endpoints"}), "port", "metrics");
  ASSERT_TRUE(ep);
  EXPECT_EQ(str(ep, {"path"}), "/metrics");
}

// --- Examples -------------------------------------------------------------------

TEST(ManifestExamples, NodeManagerIsOfflineAndOnePerNode) {
  const std::string file = "examples/nodemanager-statefulset.yaml";
  auto sts = object("StatefulSet", "yarn-nodemanager", file);
  auto spec = pod_spec(sts);
  EXPECT_EQ(str(spec, {"priorityClassName"}), "low-priority-offline");
  object("PriorityClass", "low-priority-offline", "priorityclasses.yaml");
  object("Service", str(sts, {"spec", "serviceName"}), file);
  auto anti = seq(at(spec, {"affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"}));
  ASSERT_FALSE(anti.empty());
  EXPECT_EQ(str(anti[0], {"topologyKey"}), "kubernetes.io/hostname");
  EXPECT_TRUE(labels_match(at(anti[0], {"labelSelector", "matchLabels"}), pod_labels(sts)));
}

TEST(ManifestExamples, CronHpaScalesTheOnlineDeployment) {
  const std::string file = "examples/cronhpa-online.yaml";
  auto deploy = object("Deployment", "web-frontend", file);
  EXPECT_EQ(str(pod_spec(deploy), {"priorityClassName"}), "high-priority-online");
  auto hpa = object("CronHorizontalPodAutoscaler", "web-frontend-tidal", file);
  EXPECT_EQ(str(hpa, {"apiVersion"}), "autoscaling.alibabacloud.com/v1beta1");
  EXPECT_EQ(str(hpa, {"metadata", "namespace"}), str(deploy, {"metadata", "namespace"}));
  EXPECT_EQ(str(hpa, {"spec", "scaleTargetRef", "kind"}), "Deployment");
  EXPECT_EQ(str(hpa, {"spec", "scaleTargetRef", "name"}), "web-frontend");
  std::set<std::string> schedules;
  for (const auto& j : seq(at(hpa, {"spec", "jobs"}))) schedules.insert(str(j, {"schedule"}));
  // Six fields, seconds first: 08:00:00 and 23:00:00 every day.
  EXPECT_TRUE(schedules.count("0 0 8 * * *"));
  EXPECT_TRUE(schedules.count("0 0 23 * * *"));
}

// --- Grafana --------------------------------------------------------------------

TEST(ManifestGrafana, ExpressionsUseOnlyExportedMetrics) {
  const auto path = kManifests / "grafana-dashboard.json";
  ASSERT_TRUE(fs::exists(path)) << path;
  nlohmann::json dash;
  ASSERT_NO_THROW(dash = nlohmann::json::parse(slurp(path)));

  // Every PromQL text: the panels' target expressions and the variables' queries.
  std::vector<std::string> exprs;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (v.is_string() && (k == "expr" || k == "definition" || k == "query")) exprs.push_back(v);
        walk(v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j) walk(v);
    }
  };
  walk(dash);
  ASSERT_GE(exprs.size(), 8u);

  // A family exists if metrics.cpp or one of its parts (metrics_*.cpp, a
  // table per concern) names it as a string literal.
  std::string source;
  for (const auto& f : fs::directory_iterator(kRoot / "userspace/export")) {
    const std::string name = f.path().filename().string();
    if (name.rfind("metrics", 0) == 0 && f.path().extension() == ".cpp") source += slurp(f.path());
  }
  ASSERT_FALSE(source.empty());
  const std::regex token("khagent_[a-z_]+");
  const std::regex suffix("_(bucket|sum|count)$");
  std::set<std::string> used;
  for (const auto& e : exprs) {
    for (std::sregex_iterator it(e.begin(), e.end(), token), end; it != end; ++it) {
      std::string family = std::regex_replace(it->str(), suffix, "");
      used.insert(family);
      EXPECT_NE(source.find("\"" + family + "\""), std::string::npos)
          << family << " (in " << e << ") is not a metric family of metrics*.cpp";
    }
  }
  // The panels the dashboard is for.
  for (const char* f :
       {"khagent_runq_wait_seconds", "khagent_runq_wait_by_cause_seconds_total", "khagent_interference_seconds_total",
        "khagent_offline_cpu_budget_cores", "khagent_actions_total", "khagent_reaction_seconds",
        "khagent_bpf_prog_run_seconds_total", "khagent_bpf_prog_runs_total", "khagent_yarn_node_vcores",
        "khagent_yarn_resource_updates_total", "khagent_yarn_container_kills_total"})
    EXPECT_TRUE(used.count(f)) << f << " is not plotted";
  bool p99 = false, cost = false;
  for (const auto& e : exprs) {
    p99 |= e.find("histogram_quantile(0.99") != std::string::npos &&
           e.find("khagent_runq_wait_seconds_bucket") != std::string::npos;
    cost |= e.find("rate(khagent_bpf_prog_run_seconds_total") != std::string::npos &&
            e.find(") / ") != std::string::npos && e.find("rate(khagent_bpf_prog_runs_total") != std::string::npos;
  }
  EXPECT_TRUE(p99) << "no p99 of khagent_runq_wait_seconds";
  EXPECT_TRUE(cost) << "no BPF cost per run";
}

#include "khagent/app/status.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "khagent/abi/runq.h"
#include "khagent/actuate/cgroup_writer.h"
#include "khagent/actuate/state_store.h"
#include "khagent/app/agent.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/memory.h"
#include "khagent/export/controller_reports.h"
#include "khagent/model/cgroup_file.h"
#include "khagent/policy/lever_table.h"
#include "khagent/signals/offline_candidates.h"
#include "khagent/signals/workload.h"
#include "khagent/util/file.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace fs = std::filesystem;

namespace {

uint64_t count_keys(int fd, size_t key_size) {
  std::vector<char> key(key_size), next(key_size);
  uint64_t n = 0;
  const void* cur = nullptr;
  while (bpf_map_get_next_key(fd, cur, next.data()) == 0) {
    n++;
    key.swap(next);
    cur = key.data();
  }
  return n;
}

// Full name of a program from its BTF (the kernel keeps only 15 characters).
std::string prog_name(int fd, const bpf_prog_info& base) {
  std::string name = base.name;
  if (!base.btf_id || !base.nr_func_info) return name;
  bpf_func_info fi{};
  bpf_prog_info info{};
  info.nr_func_info = 1;
  info.func_info_rec_size = sizeof(fi);
  info.func_info = reinterpret_cast<uintptr_t>(&fi);
  __u32 len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return name;
  btf* b = btf__load_from_kernel_by_id(base.btf_id);
  if (!b) return name;
  if (const btf_type* t = btf__type_by_id(b, fi.type_id)) {
    const char* full = btf__name_by_offset(b, t->name_off);
    if (full && *full) name = full;
  }
  btf__free(b);
  return name;
}

// Calls fn(program fd, its info, the ids of the maps it uses) for each
// loaded program that uses any of the maps in `map_ids`, until fn says stop.
void for_each_prog_using(const std::set<uint32_t>& map_ids,
                         const std::function<bool(int, const bpf_prog_info&, const std::vector<__u32>&)>& fn) {
  __u32 id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    Fd fd(bpf_prog_get_fd_by_id(id));
    if (!fd.valid()) continue;
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0 || info.nr_map_ids == 0) continue;
    std::vector<__u32> ids(info.nr_map_ids);
    bpf_prog_info with_maps{};
    with_maps.nr_map_ids = info.nr_map_ids;
    with_maps.map_ids = reinterpret_cast<uintptr_t>(ids.data());
    len = sizeof(with_maps);
    if (bpf_obj_get_info_by_fd(fd.get(), &with_maps, &len) != 0) continue;
    ids.resize(std::min<size_t>(ids.size(), with_maps.nr_map_ids));
    if (std::none_of(ids.begin(), ids.end(), [&](__u32 m) { return map_ids.count(m) > 0; })) continue;
    if (!fn(fd.get(), info, ids)) return;
  }
}

// Loaded programs that use any of the maps in `map_ids`.
std::vector<std::string> programs_using(const std::set<uint32_t>& map_ids) {
  std::vector<std::string> out;
  for_each_prog_using(map_ids, [&](int fd, const bpf_prog_info& info, const std::vector<__u32>&) {
    out.push_back(prog_name(fd, info));
    return true;
  });
  return out;
}

// kh_abi_version from map `map_id` if it is a BPF object's rodata holding
// it (found by the variable's name in the map's BTF); 0 otherwise.
uint32_t rodata_abi_version(uint32_t map_id) {
  Fd mfd(bpf_map_get_fd_by_id(map_id));
  bpf_map_info mi{};
  __u32 mlen = sizeof(mi);
  if (mfd.get() < 0 || bpf_obj_get_info_by_fd(mfd.get(), &mi, &mlen) != 0 || !mi.btf_id) return 0;
  std::string name = mi.name;
  if (name.size() < 7 || name.compare(name.size() - 7, 7, ".rodata") != 0) return 0;
  btf* b = btf__load_from_kernel_by_id(mi.btf_id);
  if (!b) return 0;
  uint32_t version = 0;
  const btf_type* sec = btf__type_by_id(b, mi.btf_value_type_id);
  std::vector<unsigned char> value(mi.value_size);
  __u32 zero = 0;
  if (sec && btf_is_datasec(sec) && bpf_map_lookup_elem(mfd.get(), &zero, value.data()) == 0) {
    const btf_var_secinfo* v = btf_var_secinfos(sec);
    for (int i = 0; i < btf_vlen(sec); i++, v++) {
      const btf_type* var = btf__type_by_id(b, v->type);
      if (var && std::strcmp(btf__name_by_offset(b, var->name_off), "kh_abi_version") == 0 &&
          v->size == sizeof(uint32_t) && v->offset + sizeof(uint32_t) <= value.size())
        std::memcpy(&version, value.data() + v->offset, sizeof(version));
    }
  }
  btf__free(b);
  return version;
}

// kh_abi_version of the loaded programs using the maps in `map_ids`; 0 if
// none has it (an agent older than layout version 2).
uint32_t running_abi_version(const std::set<uint32_t>& map_ids) {
  uint32_t version = 0;
  for_each_prog_using(map_ids, [&](int, const bpf_prog_info&, const std::vector<__u32>& ids) {
    for (__u32 mid : ids) {
      version = rodata_abi_version(mid);
      if (version != 0) return false;
    }
    return true;
  });
  return version;
}

// Processes (other than this one) holding one of the maps open.
std::vector<StatusProcess> processes_using(const std::set<uint32_t>& map_ids) {
  std::vector<StatusProcess> out;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    std::string pid = p.path().filename();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](unsigned char c) { return std::isdigit(c); })) continue;
    if (std::stol(pid) == getpid()) continue;
    std::error_code ec2;
    for (const auto& f : fs::directory_iterator(p.path() / "fd", ec2)) {
      std::error_code ec3;
      if (fs::read_symlink(f.path(), ec3).string() != "anon_inode:bpf-map") continue;
      std::istringstream info(read_text_file(p.path().string() + "/fdinfo/" + f.path().filename().string()));
      std::string line;
      bool ours = false;
      unsigned id = 0;
      while (std::getline(info, line))
        if (sscanf(line.c_str(), "map_id: %u", &id) == 1) ours = map_ids.count(id) > 0;
      if (ours) {
        out.push_back({std::stoi(pid), trim_space(read_text_file(p.path().string() + "/comm"))});
        break;
      }
    }
  }
  return out;
}

// The offline parents an agent with this configuration writes a quota on
// (found as the agent finds them: signals/offline_candidates, policy/targets),
// and every cgroup whose quota the state file records.
std::vector<std::string> offline_targets(const Config& cfg, const std::string& cgroup2,
                                         const std::vector<StatusEntry>& entries) {
  std::set<std::string> out;
  for (const auto& t : select_targets(find_target_candidates(cgroup2, cfg.offline, {}), cfg.offline))
    if (lever_spec(Lever::Quota).touches(t.kind)) out.insert(t.path);
  for (const auto& e : entries)
    if ((e.file == cgroup_file_name(CgroupFile::CpuMax) || e.file == cgroup_file_name(CgroupFile::V1CpuCfs)) &&
        fs::is_directory(cgroup2 + e.cgroup))
      out.insert(e.cgroup);
  return {out.begin(), out.end()};
}

// What the pinned maps say: the agent that uses them, its layout version,
// what it tracks, and its counters.
void read_pinned_maps(StatusReport& r) {
  static const char* kMaps[] = {"cgroup_stats", "cgroup_slots", "interference",      "pair_slots",   "throttle_stats",
                                "cpu_state",    "counters",     "protected_cgroups", "reclaim_stats"};
  std::map<std::string, Fd> fds;
  std::set<uint32_t> ids;
  std::string open_error;
  for (const char* name : kMaps) {
    std::string path = r.pin_dir + "/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) {
      if (errno != ENOENT && open_error.empty()) open_error = "cannot open " + path + ": " + std::strerror(errno);
      continue;
    }
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      ids.insert(info.id);
      if (std::string(name) == "cgroup_stats") r.max_cgroups = info.max_entries;
    }
    r.pinned.push_back(name);
    fds.emplace(name, Fd(fd));
  }
  if (fds.empty()) {
    r.agent_problem =
        open_error.empty() ? "no pinned maps (is khagent running, with pinning on, and this --pin-dir?)" : open_error;
  } else {
    r.programs = programs_using(ids);
    r.processes = processes_using(ids);
    if (!r.programs.empty()) r.abi_version = running_abi_version(ids);
    if (r.programs.empty()) {
      r.agent_problem =
          "maps are pinned but no loaded BPF program uses them: stale pins of an agent that did "
          "not exit cleanly (remove them: rm -r " +
          r.pin_dir + ")";
    } else if (r.abi_version != KH_RUNQ_ABI_VERSION) {
      r.agent_problem = fmt::format(
          "the running agent's maps have layout version {}, this khagent reads version {}: run the status "
          "command of the agent's own version (its image)",
          r.abi_version ? std::to_string(r.abi_version) : "1 or unknown", static_cast<int>(KH_RUNQ_ABI_VERSION));
      fds.clear();  // their layout is not this binary's: read none of them
    } else {
      r.agent_found = true;
      bool fentry = std::any_of(r.programs.begin(), r.programs.end(),
                                [](const std::string& p) { return p.find("throttle") != std::string::npos; });
      r.throttle_source = fentry ? "fentry" : "cpu.stat";
    }
    // The slot indexes: one key per cgroup (pair) holding a slot.
    if (auto it = fds.find("cgroup_slots"); it != fds.end()) r.cgroups_tracked = count_keys(it->second.get(), 8);
    if (auto it = fds.find("protected_cgroups"); it != fds.end()) r.protected_cgroups = count_keys(it->second.get(), 8);
    if (auto it = fds.find("pair_slots"); it != fds.end())
      r.interference_pairs = count_keys(it->second.get(), sizeof(kh_pair));
    if (auto it = fds.find("counters"); it != fds.end()) {
      int ncpus = std::max(1, libbpf_num_possible_cpus());
      std::vector<uint64_t> vals(static_cast<size_t>(ncpus));
      for (uint32_t k = 0; k < KH_NR_COUNTERS; k++) {
        if (bpf_map_lookup_elem(it->second.get(), &k, vals.data()) != 0) continue;
        uint64_t sum = 0;
        for (auto v : vals) sum += v;
        r.counters[bpf_counter_names()[k]] = sum;
      }
    }
  }
}

// The originals in the state file, each with what its cgroup file holds now.
void read_state_entries(StatusReport& r, const Config& cfg, const CgroupRoots& roots) {
  r.state_file = cfg.state_file;
  StateStore store(cfg.state_file);
  if (auto l = store.load(); !l) {
    r.state_error = l.error().str();
  } else {
    r.state_note = store.note();
    RealCgroupFs cgfs(roots);
    for (const auto& e : store.entries()) {
      StatusEntry s{e.cgroup, cgroup_file_name(e.file), e.value, std::nullopt, ""};
      if (auto v = cgfs.read(e.cgroup, e.file)) s.current = *v;
      else if (v.error().err != ENOENT) s.current_error = v.error().str();
      else
        s.current_error =
            cgfs.exists(e.cgroup) ? "no " + s.file + " (its controller is not enabled there)" : "cgroup gone";
      r.entries.push_back(std::move(s));
    }
  }
}

// Each offline target with its CPU quota now (the v1 pair read like cpu.max).
void read_targets(StatusReport& r, const Config& cfg, const CgroupRoots& roots, CgroupBackend backend) {
  RealCgroupFs cgfs(roots);
  const CgroupFile quota_file = file_for(backend, Knob::Quota);
  for (const auto& t : offline_targets(cfg, roots.unified, r.entries)) {
    StatusTarget st{t, std::nullopt, "", std::nullopt};
    if (auto v = cgfs.read(t, quota_file)) {
      // The v1 pair "QUOTA PERIOD" reads like cpu.max, with -1 for max.
      std::string as_max = *v;
      if (as_max.rfind("-1 ", 0) == 0) as_max = "max" + as_max.substr(2);
      st.cpu_max = as_max;
      st.cores = cpu_max_cores(as_max);
    } else {
      st.error =
          v.error().err == ENOENT ? "no cpu.max: the cpu controller is not enabled for this cgroup" : v.error().str();
    }
    r.targets.push_back(std::move(st));
  }
}

// The online pods under the node (memory.node_cgroup, else the whole
// tree) and their memory: use, limit, the kernel's 10 s stall average, and
// whether they are at their own limit (a stall there is not offline's
// doing). Pods are classed as the agent classes them, without the
// kubelet's pod list: rules on its metadata are said not to apply here.
void read_online_memory(StatusMemory& m, const Config& cfg, const CgroupRoots& roots, const MemoryReader& reader) {
  const std::string under = cfg.memory.node_cgroup.empty() ? "/" : cfg.memory.node_cgroup;
  const std::string& yarn = cfg.offline.yarn_hierarchy;
  // Pod cgroups sit 2-3 levels below the kubepods root, which may itself
  // sit below a slice or a node cgroup.
  constexpr int kPodDepth = 6;
  auto found = find_cgroups(roots.unified, under, kPodDepth, [&](const std::string& rel) {
    auto id = identify_cgroup(rel, yarn);
    return !id.pod_uid.empty() && id.pod_path == rel;
  });
  m.pods_under = under;
  m.online_truncated = found.truncated;
  if (std::error_code ec; under != "/" && !std::filesystem::is_directory(roots.unified + under, ec)) {
    m.pods_error = "memory.node_cgroup " + under + " is no cgroup in " + roots.unified + " (mistyped?)";
    return;
  }
  for (const auto& rule : cfg.classes.rules)
    if (rule.priority_class || !rule.labels.empty() || !rule.annotations.empty()) m.online_by_metadata = true;
  for (const auto& path : found.paths) {
    auto id = identify_cgroup(path, yarn);
    if (classify_cgroup(path, id, nullptr, cfg.classes) != CgroupClass::Online) continue;
    StatusOnlinePod p;
    p.cgroup = path;
    auto u = reader.cgroup(path);
    if (!u) {
      p.error = u.error().str();
      m.online.push_back(std::move(p));
      continue;
    }
    p.usage = u->usage;
    p.working_set = u->working_set();
    p.limit = u->limit;
    if (auto high = read_file(roots.unified + path + "/memory.high")) {
      uint64_t h = 0;
      if (parse_u64(trim_space(*high), h)) p.high = h;
    }
    if (auto psi = read_psi(roots.unified + path + "/memory.pressure")) {
      p.psi = true;
      p.some_avg10 = psi->some_avg10;
      p.full_avg10 = psi->full_avg10;
    }
    auto own = reader.at_own_limit(path, cfg.memory.node_cgroup);
    p.own_limit = own ? *own : "unknown: " + own.error().str();
    if (auto k = reader.oom_kills(path)) p.oom_kills = *k;
    m.online.push_back(std::move(p));
  }
  std::stable_sort(m.online.begin(), m.online.end(), [](const StatusOnlinePod& a, const StatusOnlinePod& b) {
    if (a.some_avg10 != b.some_avg10) return a.some_avg10 > b.some_avg10;
    return a.usage > b.usage;
  });
}

// The node's memory and each offline target's, as the memory lever reads
// them (a pressure domain set by memory.node_cgroup included).
void read_memory(StatusReport& r, const Config& cfg, const CgroupRoots& roots, CgroupBackend backend) {
  if (!memory_controller_for(backend, roots)) return;
  const bool v1 = backend == CgroupBackend::V1Hybrid;
  MemoryReader reader(v1 ? roots.memory_v1 : roots.unified, v1);
  StatusMemory m;
  if (auto n = reader.node(cfg.memory.node_cgroup)) {
    m.capacity = n->limit.value_or(0);
    m.node_working_set = n->working_set();
  } else {
    m.node_error = n.error().str();
  }
  for (const auto& t : r.targets) {
    StatusMemoryTarget mt;
    mt.cgroup = t.cgroup;
    auto u = reader.cgroup(t.cgroup);
    if (!u) {
      mt.error = u.error().str();
    } else {
      mt.working_set = u->working_set();
      mt.limit = u->limit;
      if (!v1) {  // the lever writes memory.high there, not memory.max
        auto high = read_file(roots.unified + t.cgroup + "/memory.high");
        uint64_t h = 0;
        if (high && parse_u64(trim_space(*high), h)) mt.limit = mt.limit ? std::min(*mt.limit, h) : h;
      }
      if (auto k = reader.oom_kills(t.cgroup)) mt.oom_kills = *k;
    }
    m.targets.push_back(std::move(mt));
  }
  read_online_memory(m, cfg, roots, reader);
  r.memory = std::move(m);
}

// The burst report the agent writes beside its state file, if there is one.
void read_burst(StatusReport& r, const Config& cfg) {
  const std::string path = burst_report_path(cfg.state_file);
  auto text = read_regular_file(path, size_t{4} << 20);
  if (!text) {
    if (text.error().err != ENOENT) r.burst = StatusBurst{path, text.error().str(), 0, 0, 0, 0, {}};
    return;
  }
  r.burst = parse_burst_report(path, *text, static_cast<int64_t>(std::time(nullptr)));
}

// The capacity report the agent writes beside its state file, if there is one.
void read_capacity(StatusReport& r, const Config& cfg) {
  const std::string path = capacity_report_path(cfg.state_file);
  auto text = read_regular_file(path, size_t{1} << 20);
  if (!text) {
    if (text.error().err != ENOENT) {
      r.capacity = StatusCapacity{};
      r.capacity->path = path;
      r.capacity->error = text.error().str();
    }
    return;
  }
  r.capacity = parse_capacity_report(path, *text, static_cast<int64_t>(std::time(nullptr)));
}

StatusReport collect_status(const CliOptions& o, const Config& cfg) {
  StatusReport r;
  r.pin_dir = o.loader.pin_dir;
  read_pinned_maps(r);
  CgroupRoots roots;
  CgroupBackend backend = CgroupBackend::V2;
  if (auto m = find_mounts()) {
    roots = roots_of(*m);
    if (auto b = detect_backend(roots)) backend = *b;
  }
  read_state_entries(r, cfg, roots);
  read_burst(r, cfg);
  read_capacity(r, cfg);
  if (!roots.unified.empty()) {
    read_targets(r, cfg, roots, backend);
    read_memory(r, cfg, roots, backend);
  }
  return r;
}

}  // namespace

int run_status(const CliOptions& o) {
  auto cfg = effective_config(o);
  if (!cfg) {
    std::cerr << "khagent: " << cfg.error().message << "\n";
    return 2;
  }
  if (geteuid() != 0) {
    std::cerr << "khagent status must run as root (it reads the agent's pinned BPF maps)\n";
    return 2;
  }
  StatusReport r = collect_status(o, *cfg);
  std::cout << (o.json ? status_json(r) : format_status(r)) << std::flush;
  return status_exit_code(r);
}

}  // namespace khagent

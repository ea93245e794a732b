#include "khagent/app/doctor.h"

#include <bpf/libbpf.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/app/agent.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/topology.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/signals/workload.h"
#include "khagent/util/cpuset.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace fs = std::filesystem;

BpfProbe probe_bpf(const LoaderOptions& lo) {
  BpfProbe p;
  if (geteuid() != 0) {
    p.skip_reason = "not checked: loading BPF programs needs root";
    return p;
  }
  p.attempted = true;
  LoaderOptions l = lo;
  l.pin = false;
  l.allow_fentry = false;  // probed on its own below
  auto bpf = RunqBpf::open_and_load(l);
  if (!bpf) p.load_error = bpf.error().str();
  p.fentry = probe_fentry("throttle_cfs_rq") && probe_fentry("unthrottle_cfs_rq");
  p.ringbuf = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1;
  p.task_storage = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) == 1;
  return p;
}

namespace {

// Pods under the kubepods root (a shallow walk: QoS level, then pods).
size_t count_pods(const std::string& cgroup2, const std::string& kubepods_rel) {
  return find_cgroups(cgroup2, kubepods_rel, 3,
                      [](const std::string& rel) { return !identify_cgroup(rel, "").pod_uid.empty(); })
      .paths.size();
}

// Where the YARN hierarchy is: at the root, else the first directory of that
// name within a few levels (inside the NodeManager pod's cgroup). "" if none.
std::string find_yarn(const std::string& cgroup2, const std::string& name) {
  if (fs::is_directory(cgroup2 + "/" + name)) return "/" + name;
  std::error_code ec;
  fs::recursive_directory_iterator it(cgroup2, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 5) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->path().filename() == name && it->is_directory(ec)) return it->path().string().substr(cgroup2.size());
  }
  return "";
}

// Whether a file can be created in `dir` (creates and removes one).
std::string try_write_in(const std::string& dir) {
  std::string tmpl = dir + "/.khagent-doctor-XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(tmpl.c_str());
  return "";
}

}  // namespace

namespace {

// The checks found so far, and where the files they read are.
struct Checks {
  const DoctorEnv& env;
  std::vector<DoctorCheck> out;
  void add(CheckLevel l, std::string name, std::string detail) {
    out.push_back({l, std::move(name), std::move(detail)});
  }
  std::string at(const std::string& abs) const { return env.root + abs; }
};
using L = CheckLevel;

// Root, the kernel's release and BTF.
void kernel_checks(Checks& c) {
  const DoctorEnv& env = c.env;
  c.add(env.is_root ? L::Ok : L::Fail, "root",
        env.is_root ? "running as root" : "not root: khagent loads BPF programs and writes cgroups; run it as root");

  // Kernel and BTF.
  std::string release = env.kernel_release;
  if (release.empty()) {
    utsname u{};
    if (uname(&u) == 0) release = u.release;
  }
  int major = 0, minor = 0;
  if (sscanf(release.c_str(), "%d.%d", &major, &minor) != 2)
    c.add(L::Warn, "kernel", "cannot parse the kernel release '" + release + "' (khagent needs 5.13 or newer)");
  else if (major < 5 || (major == 5 && minor < 13))
    c.add(L::Fail, "kernel",
          release + " is too old: khagent needs 5.13 or newer (BPF task storage in tracing programs)");
  else c.add(L::Ok, "kernel", release + " (>= 5.13)");
  std::string btf = "/sys/kernel/btf/vmlinux";
  if (::access(c.at(btf).c_str(), R_OK) == 0) c.add(L::Ok, "btf", btf + " present");
  else c.add(L::Fail, "btf", btf + " missing: use a kernel built with CONFIG_DEBUG_INFO_BTF=y");
}

// BPF program types, hooks and maps.
void bpf_checks(Checks& c, const BpfProbe& bpf) {
  if (!bpf.attempted) {
    c.add(L::Warn, "bpf programs", bpf.skip_reason.empty() ? "not checked" : bpf.skip_reason);
  } else {
    if (bpf.load_error.empty())
      c.add(L::Ok, "bpf programs", "tp_btf sched_wakeup, sched_wakeup_new and sched_switch load and attach");
    else
      c.add(
          L::Fail, "bpf programs",
          "tp_btf sched_* programs refused: " + bpf.load_error + " (run with --log-level debug for the verifier log)");
    if (bpf.fentry)
      c.add(L::Ok, "throttle hooks", "fentry on throttle_cfs_rq/unthrottle_cfs_rq: throttling measured in the kernel");
    else c.add(L::Warn, "throttle hooks", "fentry refused: throttling read from cpu.stat");
    std::vector<std::string> missing;
    if (!bpf.ringbuf) missing.push_back("ring buffer (5.8+)");
    if (!bpf.task_storage) missing.push_back("task storage (5.13+)");
    if (missing.empty()) c.add(L::Ok, "bpf maps", "ring buffer and task storage supported");
    else c.add(L::Fail, "bpf maps", fmt::format("not supported by this kernel: {}", fmt::join(missing, ", ")));
  }
}

// The kubelet's cgroup driver, from its layout.
void kubelet_check(Checks& c, const Mounts& m) {
  std::string kube;
  if (fs::is_directory(c.at(m.cgroup2 + "/kubepods.slice"))) kube = "/kubepods.slice";
  else if (fs::is_directory(c.at(m.cgroup2 + "/kubepods"))) kube = "/kubepods";
  if (!kube.empty()) {
    size_t pods = count_pods(c.at(m.cgroup2), kube);
    c.add(L::Ok, "kubelet",
          fmt::format("{} cgroup driver ({}, {} pod{})", kube == "/kubepods.slice" ? "systemd" : "cgroupfs", kube, pods,
                      pods == 1 ? "" : "s"));
  } else if (!m.cpu_v1.empty() &&
             (fs::is_directory(c.at(m.cpu_v1 + "/kubepods.slice")) || fs::is_directory(c.at(m.cpu_v1 + "/kubepods")))) {
    c.add(L::Warn, "kubelet",
          "kubelet pods only in cgroup v1 (" + m.cpu_v1 +
              "): khagent classifies cgroup v2 paths and will not see them; use the systemd cgroup driver or "
              "cgroup v2");
  } else {
    c.add(L::Warn, "kubelet",
          "no kubelet pods found (neither /kubepods.slice nor /kubepods under " + m.cgroup2 +
              "): online pods cannot be recognized until the kubelet runs here");
  }
}

void yarn_check(Checks& c, const Mounts& m) {
  if (!c.env.config.offline.yarn) {
    c.add(L::Ok, "yarn", "not used (offline.yarn: false)");
  } else {
    std::string y = find_yarn(c.at(m.cgroup2), c.env.config.offline.yarn_hierarchy);
    if (y.empty()) {
      c.add(L::Warn, "yarn",
            "no YARN hierarchy '" + c.env.config.offline.yarn_hierarchy + "' under " + m.cgroup2 +
                ": set offline.yarn_hierarchy to the NodeManager's cgroup hierarchy, or offline.yarn: false if "
                "this node runs no YARN");
    } else {
      size_t containers = 0;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(c.at(m.cgroup2 + y), ec))
        if (e.is_directory() && e.path().filename().string().rfind("container_", 0) == 0) containers++;
      bool cpu_max = ::access(c.at(m.cgroup2 + y + "/cpu.max").c_str(), F_OK) == 0;
      c.add(cpu_max ? L::Ok : L::Warn, "yarn",
            fmt::format("hierarchy {} ({} container{}){}", y, containers, containers == 1 ? "" : "s",
                        cpu_max ? ""
                                : "; it has no cpu.max: enable the cpu controller in its parent's "
                                  "cgroup.subtree_control"));
    }
  }
}

// bpffs, cgroup v2, its controllers and the backend, then the kubelet and
// YARN under it.
void cgroup_checks(Checks& c) {
  const DoctorEnv& env = c.env;
  std::string mountinfo = read_text_file(c.at("/proc/self/mountinfo"));
  const auto entries = parse_mount_entries(mountinfo);
  bool bpffs = std::any_of(entries.begin(), entries.end(),
                           [&](const MountEntry& e) { return e.fstype == "bpf" && e.mountpoint == env.bpffs_dir; });
  if (bpffs) c.add(L::Ok, "bpffs", "mounted at " + env.bpffs_dir);
  else
    c.add(L::Warn, "bpffs",
          "not mounted at " + env.bpffs_dir + ": khagent mounts it to pin its maps (or: mount -t bpf bpf " +
              env.bpffs_dir + ")");

  // cgroup v2 and its controllers.
  Mounts m = parse_mountinfo(mountinfo);
  if (m.cgroup2.empty()) {
    c.add(L::Fail, "cgroup v2",
          "not mounted: khagent needs cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1, or mount -t cgroup2 "
          "none /sys/fs/cgroup/unified)");
  } else {
    std::string controllers = trim_space(read_text_file(c.at(m.cgroup2 + "/cgroup.controllers")));
    std::string subtree = trim_space(read_text_file(c.at(m.cgroup2 + "/cgroup.subtree_control")));
    c.add(L::Ok, "cgroup v2",
          fmt::format("{}{}; controllers at the root: {}; enabled for children: {}", m.cgroup2,
                      m.cpu_v1.empty() ? "" : " (hybrid: cpu controller on cgroup v1 at " + m.cpu_v1 + ")",
                      controllers.empty() ? "none" : controllers, subtree.empty() ? "none" : subtree));
    // `why`: what it means when khagent cannot use the controller; `missing`:
    // the level then.
    auto controller = [&](const std::string& ctl, const std::string& file, L missing, const std::string& why) {
      std::string name = ctl + " controller";
      std::string v1 = ctl == "cpu" ? m.cpu_v1 : m.cpuset_v1;
      if (has_word(subtree, ctl)) c.add(L::Ok, name, "enabled for child cgroups (" + file + " writable)");
      else if (has_word(controllers, ctl))
        c.add(missing, name,
              "available but not enabled for child cgroups (" + why + "): echo +" + ctl + " > " + m.cgroup2 +
                  "/cgroup.subtree_control");
      else if (!v1.empty())
        c.add(L::Ok, name,
              "hybrid host: on cgroup v1 at " + v1 + "; khagent measures by cgroup2 ids and writes the v1 " + ctl +
                  " files at the same relative path (" +
                  (ctl == "cpu" ? "cpu.cfs_quota_us/cfs_period_us, cpu.shares, cpu.idle" : "cpuset.cpus") + ")");
      else c.add(missing, name, "not in " + m.cgroup2 + "/cgroup.controllers (" + why + ")");
    };
    {
      CgroupRoots roots = roots_of(m);
      auto b = choose_backend(roots, controllers);
      if (b) c.add(L::Ok, "cgroup backend", std::string(backend_name(*b)));
      else c.add(L::Fail, "cgroup backend", b.error().message);
    }
    controller("cpu", "cpu.max", L::Fail, "it measures but cannot limit offline CPU");
    controller("cpuset", "cpuset.cpus", c.env.config.cpuset.enabled ? L::Fail : L::Warn,
               c.env.config.cpuset.enabled ? "cpuset.enabled is on" : "only needed with cpuset.enabled");

    kubelet_check(c, m);
    yarn_check(c, m);
  }
}

// The kubelet's CPU manager (read only; cpuset partitions avoid its CPUs).
void cpu_manager_check(Checks& c) {
  std::string cms = c.env.kubelet_dir + "/cpu_manager_state";
  L cms_bad = c.env.config.cpuset.enabled ? L::Fail : L::Warn;
  if (::access(c.at(cms).c_str(), F_OK) != 0) {
    c.add(L::Warn, "cpu manager", "no " + cms + " (no kubelet on this node, or it uses another --root-dir)");
  } else if (auto st = read_cpu_manager_state(c.at(cms)); !st) {
    c.add(cms_bad, "cpu manager", "cannot read " + cms + ": " + st.error().str());
  } else if (st->policy == "static") {
    c.add(L::Ok, "cpu manager",
          "policy static; " + (st->exclusive.empty() ? std::string("no CPUs exclusive to containers yet")
                                                     : "CPUs " + format_cpu_list(st->exclusive) +
                                                           " exclusive to containers (never given to offline)"));
  } else {
    c.add(L::Ok, "cpu manager", "policy " + st->policy);
  }
}

// The state file: originals are saved there before any write.
void state_file_check(Checks& c) {
  fs::path dir = fs::path(c.env.config.state_file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (fs::exists(c.at(dir.string()), ec)) {
    if (!fs::is_directory(c.at(dir.string()), ec)) {
      c.add(L::Fail, "state file", dir.string() + " exists and is not a directory: set state_file (or --state-file)");
    } else if (auto err = try_write_in(c.at(dir.string())); !err.empty()) {
      c.add(L::Fail, "state file",
            dir.string() + " is not writable (" + err +
                "): khagent saves original values there before any write; fix it or set state_file");
    } else {
      c.add(L::Ok, "state file", dir.string() + " writable (" + c.env.config.state_file + ")");
    }
  } else {
    fs::path anc = dir;
    while (!anc.empty() && anc != anc.root_path() && !fs::exists(c.at(anc.string()), ec)) anc = anc.parent_path();
    if (anc.empty()) anc = "/";
    if (auto err = try_write_in(c.at(anc.string())); err.empty())
      c.add(L::Ok, "state file", dir.string() + " will be created (" + anc.string() + " writable)");
    else
      c.add(L::Fail, "state file",
            dir.string() + " does not exist and " + anc.string() + " is not writable (" + err +
                "): create it or set state_file");
  }
}

}  // namespace

std::vector<DoctorCheck> doctor_checks(const DoctorEnv& env, const BpfProbe& bpf) {
  Checks c{env, {}};
  kernel_checks(c);
  bpf_checks(c, bpf);
  cgroup_checks(c);
  cpu_manager_check(c);
  state_file_check(c);
  return std::move(c.out);
}

int run_doctor(const CliOptions& o) {
  auto cfg = effective_config(o);
  if (!cfg) {
    std::cerr << "khagent: " << cfg.error().message << "\n";
    return 2;
  }
  DoctorEnv env;
  env.is_root = geteuid() == 0;
  env.bpffs_dir = fs::path(o.loader.pin_dir).parent_path().string();
  env.config = *cfg;
  // The probes' own info lines would interleave with the report.
  auto level = spdlog::get_level();
  if (level == spdlog::level::info) spdlog::set_level(spdlog::level::warn);
  BpfProbe bpf = probe_bpf(o.loader);
  spdlog::set_level(level);
  auto checks = doctor_checks(env, bpf);
  std::cout << format_doctor(checks) << std::flush;
  return doctor_exit_code(checks);
}

}  // namespace khagent

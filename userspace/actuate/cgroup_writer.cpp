#include "khagent/actuate/cgroup_writer.h"
#include "khagent/model/knob_values.h"
#include "khagent/util/strings.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string_view>

namespace khagent {

namespace fs = std::filesystem;

const char* backend_name(CgroupBackend b) {
  return b == CgroupBackend::V2 ? "cgroup v2" : "hybrid (cpu and cpuset on cgroup v1)";
}

Result<CgroupBackend> choose_backend(const CgroupRoots& roots, const std::string& controllers) {
  if (roots.unified.empty())
    return make_error(ENOTSUP,
                      "no cgroup2 file system is mounted: khagent measures by cgroup v2 ids and "
                      "does not support pure cgroup v1 hosts");
  if (has_word(controllers, "cpu")) return CgroupBackend::V2;
  if (!roots.cpu_v1.empty()) return CgroupBackend::V1Hybrid;
  return make_error(ENOTSUP, "the cpu controller is neither enabled in cgroup2 at " + roots.unified +
                                 " nor mounted as a cgroup v1 hierarchy: nothing to write CPU limits to");
}

Result<CgroupBackend> detect_backend(const CgroupRoots& roots) {
  std::string controllers;
  if (!roots.unified.empty()) {
    int fd = ::open((roots.unified + "/cgroup.controllers").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[512];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) controllers.assign(buf, static_cast<size_t>(n));
      ::close(fd);
    }
  }
  return choose_backend(roots, controllers);
}

uint64_t shares_to_weight(uint64_t shares) {
  // The kubelet's conversion (and runc's): [2, 262144] -> [1, 10000].
  shares = std::clamp<uint64_t>(shares, 2, 262144);
  return 1 + ((shares - 2) * 9999) / 262142;
}

uint64_t weight_to_shares(uint64_t weight) {
  weight = std::clamp<uint64_t>(weight, 1, 10000);
  return 2 + ((weight - 1) * 262142) / 9999;
}

bool kernel_has_cpu_idle(const CgroupRoots& roots, CgroupBackend b) {
  std::error_code ec;
  if (b == CgroupBackend::V1Hybrid) return fs::exists(roots.cpu_v1 + "/cpu.idle", ec);
  for (const auto& c : child_cgroups(roots.unified, "/"))
    if (fs::exists(roots.unified + c + "/cpu.weight", ec)) return fs::exists(roots.unified + c + "/cpu.idle", ec);
  return true;
}

Result<void> memory_controller_for(CgroupBackend b, const CgroupRoots& roots) {
  if (b == CgroupBackend::V1Hybrid) {
    if (roots.memory_v1.empty())
      return make_error(ENOTSUP, "no v1 memory hierarchy is mounted on this hybrid host: no memory limits");
    return {};
  }
  std::string controllers;
  if (int fd = ::open((roots.unified + "/cgroup.controllers").c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) controllers.assign(buf, static_cast<size_t>(n));
    ::close(fd);
  }
  if (!has_word(controllers, "memory"))
    return make_error(ENOTSUP, "the memory controller is not enabled at " + roots.unified + ": no memory limits");
  return {};
}

Result<void> io_controller_for(CgroupBackend b, const CgroupRoots& roots) {
  std::string controllers;
  if (int fd = ::open((roots.unified + "/cgroup.controllers").c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) controllers.assign(buf, static_cast<size_t>(n));
    ::close(fd);
  }
  if (b == CgroupBackend::V1Hybrid && has_word(controllers, "io"))
    return make_error(ENOTSUP,
                      "the io controller is on cgroup2 but cpu on v1: IO limits are written on pure cgroup "
                      "v2 hosts only (this mix is not supported yet)");
  if (b == CgroupBackend::V1Hybrid) {
    // v1 blk-throttle is flat: a limit on an offline parent does not apply
    // to the tasks of its children (the kernel's throtl_pd_init links a
    // group to its parent on the default hierarchy only), and it limits
    // direct IO only. Limits on the cgroups that hold the tasks are not
    // built yet.
    return make_error(ENOTSUP, std::string("the io controller is on cgroup v1 here (blkio") +
                                   (roots.blkio_v1.empty() ? ", not mounted" : "") +
                                   "), whose blk-throttle is flat: a limit on an offline parent would not apply to its "
                                   "children's tasks (and v1 limits direct IO only); no IO limits on this hybrid host");
  }
  if (!has_word(controllers, "io"))
    return make_error(ENOTSUP, "the io controller is not available at " + roots.unified + ": no IO limits");
  return {};
}

CgroupFile file_for(CgroupBackend b, Knob k) {
  return knob_file(b == CgroupBackend::V1Hybrid, k).value_or(knob_file(false, k).value_or(CgroupFile::CpuMax));
}

Result<DesiredValue> render(CgroupBackend b, const Setting& s, const CpuSet& node_cpus) {
  DesiredValue out;
  out.cgroup = s.cgroup;
  out.file = file_for(b, knob_of(s.value));
  out.canonical = true;
  out.lever = s.lever;
  const std::string what = std::string(cgroup_file_name(out.file)) + " for " + s.cgroup;
  if (const auto* q = std::get_if<CpuQuota>(&s.value)) {
    if (q->period_us < 1000 || q->period_us > 1000000)
      return make_error(EINVAL, what + ": period " + std::to_string(q->period_us) + " us, want 1000..1000000");
    if (q->quota_us && *q->quota_us < 1000)
      return make_error(EINVAL, what + ": quota " + std::to_string(*q->quota_us) + " us, want at least 1000");
    const std::string none = b == CgroupBackend::V2 ? "max" : "-1";
    out.value = (q->quota_us ? std::to_string(*q->quota_us) : none) + " " + std::to_string(q->period_us);
  } else if (const auto* w = std::get_if<CpuWeight>(&s.value)) {
    if (w->weight < 1 || w->weight > 10000)
      return make_error(EINVAL, what + ": weight " + std::to_string(w->weight) + ", want 1..10000");
    out.value = std::to_string(b == CgroupBackend::V2 ? w->weight : weight_to_shares(w->weight));
  } else if (const auto* i = std::get_if<CpuIdle>(&s.value)) {
    out.value = i->idle ? "1" : "0";
  } else if (const auto* c = std::get_if<CpuList>(&s.value)) {
    for (int cpu : c->cpus)
      if (cpu < 0 || (!node_cpus.empty() && !node_cpus.count(cpu)))
        return make_error(EINVAL, what + ": CPU " + std::to_string(cpu) + " is not online on this node");
    out.value = format_cpu_list(c->cpus);
    out.cpus = c->cpus;
  } else if (const auto* m = std::get_if<MemoryLimit>(&s.value)) {
    const uint64_t page = static_cast<uint64_t>(::getpagesize());
    if (m->bytes && *m->bytes < page)
      return make_error(EINVAL, what + ": " + std::to_string(*m->bytes) + " bytes, want at least one page");
    const std::string none = b == CgroupBackend::V2 ? "max" : "-1";
    out.value = m->bytes ? std::to_string(*m->bytes / page * page) : none;
  } else if (const auto* bu = std::get_if<CpuBurst>(&s.value)) {
    out.value = std::to_string(bu->burst_us);  // the kernel checks it against the quota
  } else if (const auto* rc = std::get_if<MemoryReclaim>(&s.value)) {
    if (rc->bytes < static_cast<uint64_t>(::getpagesize()))
      return make_error(EINVAL, what + ": " + std::to_string(rc->bytes) + " bytes, want at least one page");
    out.value = std::to_string(rc->bytes);  // the kernel reclaims whole pages; v1: the pulse's depth
  } else if (const auto* mx = std::get_if<MemoryMax>(&s.value)) {
    if (b != CgroupBackend::V2)
      return make_error(ENOTSUP, "memory.max for " + s.cgroup + ": a cgroup v2 file (v1's limit is hard already)");
    const uint64_t page = static_cast<uint64_t>(::getpagesize());
    if (mx->bytes && *mx->bytes < page)
      return make_error(EINVAL, what + ": " + std::to_string(*mx->bytes) + " bytes, want at least one page");
    out.value = mx->bytes ? std::to_string(*mx->bytes / page * page) : "max";
  } else if (const auto* og = std::get_if<MemoryOomGroup>(&s.value)) {
    if (b != CgroupBackend::V2)
      return make_error(ENOTSUP, "memory.oom.group for " + s.cgroup + ": a cgroup v2 file (v1 has none)");
    out.value = og->group ? "1" : "0";
  } else if (const auto* io = std::get_if<IoLimit>(&s.value)) {
    IoMaxLine l{io->device, io->rbps, io->wbps, io->riops, io->wiops};
    out.value = format_io_max_line(l);
    if (std::string why = why_invalid_io_max(out.value, {}); !why.empty())
      return make_error(EINVAL, what + ": '" + out.value + "': " + why);
  }
  return out;
}

RealCgroupFs::RealCgroupFs(CgroupRoots roots, bool use_openat2) : roots_(std::move(roots)), use_openat2_(use_openat2) {}

RealCgroupFs::~RealCgroupFs() {
  for (int fd : root_fd_)
    if (fd >= 0) ::close(fd);
}

Result<int> RealCgroupFs::open_beneath(Hierarchy h, const std::string& rel, int flags) {
  const std::string& root = roots_.of(h);
  if (root.empty()) return make_error(ENOENT, "no mounted hierarchy for this file");
  if (!is_clean_cgroup_path(rel)) return make_error(EINVAL, "refusing cgroup path '" + rel + "'");
  int& rfd = root_fd_[static_cast<size_t>(h)];
  if (rfd < 0) {
    rfd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) return make_error(errno, "cannot open " + root);
  }
  std::string inner = rel == "/" ? "." : rel.substr(1);
  if (use_openat2_) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    long fd = ::syscall(SYS_openat2, rfd, inner.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != ENOSYS) return make_error(errno, "cannot open " + root + rel);
    use_openat2_ = false;  // kernel before 5.6
  }
  // One component at a time, never following a symlink. The path is clean
  // (no "..", no "."), so every step goes down from the root.
  int dir = ::dup(rfd);
  if (dir < 0) return make_error(errno, "dup");
  size_t start = 0;
  while (true) {
    size_t end = inner.find('/', start);
    bool last = end == std::string::npos;
    std::string part = inner.substr(start, last ? std::string::npos : end - start);
    int next = ::openat(dir, part.c_str(), (last ? flags : O_PATH | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    ::close(dir);
    if (next < 0) return make_error(err, "cannot open " + root + rel);
    if (last) return next;
    dir = next;
    start = end + 1;
  }
}

Result<std::string> RealCgroupFs::read_one(Hierarchy h, const std::string& cgroup, const std::string& name) {
  std::string rel = (cgroup == "/" ? "" : cgroup) + "/" + name;
  auto fd = open_beneath(h, rel, O_RDONLY);
  if (!fd) return fd.error();
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(*fd, buf, sizeof(buf))) > 0 && out.size() < 65536) out.append(buf, static_cast<size_t>(n));
  int err = errno;
  ::close(*fd);
  if (n < 0) return make_error(err, "cannot read " + roots_.of(h) + rel);
  return trim_blank(out);
}

Result<void> RealCgroupFs::write_one(Hierarchy h, const std::string& cgroup, const std::string& name,
                                     const std::string& value) {
  std::string rel = (cgroup == "/" ? "" : cgroup) + "/" + name;
  auto fd = open_beneath(h, rel, O_WRONLY | O_TRUNC);
  if (!fd) return fd.error();
  // One write(2) with a newline, as echo(1) writes: the kernel parses the
  // whole value or rejects it. The newline matters for empty values: a
  // write of zero bytes never reaches the kernel's handler, so restoring an
  // empty cpuset.cpus ("use the parent's CPUs") would silently do nothing.
  std::string line = value + "\n";
  ssize_t n = ::write(*fd, line.data(), line.size());
  int err = errno;
  ::close(*fd);
  if (n < 0) return make_error(err, "writing '" + value + "' to " + roots_.of(h) + rel);
  if (static_cast<size_t>(n) != line.size()) return make_error(EIO, "short write to " + roots_.of(h) + rel);
  return {};
}

namespace {

// blkio.throttle's files, in io.max's key order.
constexpr const char* kThrottleFiles[4] = {"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                                           "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"};

}  // namespace

Result<std::string> RealCgroupFs::read_blkio_throttle(const std::string& cgroup) {
  std::map<std::string, IoMaxLine> by_device;
  for (int i = 0; i < 4; i++) {
    auto text = read_one(Hierarchy::BlkioV1, cgroup, kThrottleFiles[i]);
    if (!text) return text.error();
    std::istringstream in(*text);
    std::string dev, val;
    while (in >> dev >> val) {
      uint64_t n = 0;
      if (!parse_u64(val, n) || n == 0) continue;
      IoMaxLine& l = by_device[dev];
      l.device = dev;
      std::optional<uint64_t>* fields[4] = {&l.rbps, &l.wbps, &l.riops, &l.wiops};
      *fields[i] = n;
    }
  }
  std::string out;
  for (const auto& [dev, l] : by_device) out += (out.empty() ? "" : "\n") + format_io_max_line(l);
  return out;
}

Result<void> RealCgroupFs::write_blkio_throttle(const std::string& cgroup, const std::string& value) {
  auto want = parse_io_max_line(value);
  if (!want) return make_error(EINVAL, "v1 blkio.throttle value '" + value + "': want io.max's grammar");
  const std::optional<uint64_t> fields[4] = {want->rbps, want->wbps, want->riops, want->wiops};
  for (int i = 0; i < 4; i++)  // 0: no limit on v1
    if (auto r = write_one(Hierarchy::BlkioV1, cgroup, kThrottleFiles[i],
                           want->device + " " + std::to_string(fields[i].value_or(0)));
        !r)
      return r;
  return {};
}

Result<std::string> RealCgroupFs::read(const std::string& cgroup, CgroupFile f) {
  Hierarchy h = hierarchy_of(f);
  if (f == CgroupFile::V1BlkioThrottle) return read_blkio_throttle(cgroup);
  if (f != CgroupFile::V1CpuCfs) return read_one(h, cgroup, kernel_files(f).front());
  auto q = read_one(h, cgroup, "cpu.cfs_quota_us");
  if (!q) return q.error();
  auto p = read_one(h, cgroup, "cpu.cfs_period_us");
  if (!p) return p.error();
  return *q + " " + *p;
}

namespace {

// Lowering a memory limit (or asking memory.reclaim) makes the kernel
// reclaim what the group holds above it in the writer's context: hundreds of MiB of page cache in one
// write. At the agent's own priority that is CPU taken from online tasks
// on a node where offline runs at cpu.idle; as SCHED_IDLE the writing
// thread yields to any task that wakes (reclaim reschedules often).
class IdleWhile {
 public:
  IdleWhile() : policy_(::sched_getscheduler(0)) {
    if (policy_ < 0 || ::sched_getparam(0, &param_) != 0) {
      policy_ = -1;
      return;
    }
    sched_param idle{};
    if (::sched_setscheduler(0, SCHED_IDLE, &idle) != 0) policy_ = -1;
  }
  ~IdleWhile() {
    if (policy_ >= 0) ::sched_setscheduler(0, policy_, &param_);
  }
  IdleWhile(const IdleWhile&) = delete;
  IdleWhile& operator=(const IdleWhile&) = delete;

 private:
  int policy_;
  sched_param param_{};
};

}  // namespace

Result<void> RealCgroupFs::pulse(const std::string& cgroup, const std::string& value) {
  constexpr Hierarchy h = Hierarchy::MemoryV1;
  uint64_t bytes = 0, lim = 0, use = 0;
  if (!parse_u64(trim_blank(value), bytes)) return make_error(EINVAL, "v1 limit pulse '" + value + "': want bytes");
  auto limit = read_one(h, cgroup, "memory.limit_in_bytes");
  if (!limit) return limit.error();
  auto usage = read_one(h, cgroup, "memory.usage_in_bytes");
  if (!usage) return usage.error();
  if (!parse_u64(*limit, lim) || !parse_u64(*usage, use))
    return make_error(EIO, "unreadable memory.limit_in_bytes or memory.usage_in_bytes of " + cgroup);
  const uint64_t page = static_cast<uint64_t>(::getpagesize());
  const uint64_t target = std::max(use > bytes ? (use - bytes) / page * page : 0, page);
  if (target >= lim) return {};  // nothing above the target to reclaim
  Result<void> low;
  {
    IdleWhile idle;
    // The kernel reclaims in this write until the group fits or nothing
    // more comes back (then EBUSY: what it got stays reclaimed); no OOM.
    low = write_one(h, cgroup, "memory.limit_in_bytes", std::to_string(target));
  }
  if (auto back = write_one(h, cgroup, "memory.limit_in_bytes", *limit); !back)
    return make_error(back.error().err, "limit pulse: memory.limit_in_bytes of " + cgroup + " not put back to " +
                                            *limit + ": " + back.error().message);
  if (!low && low.error().err != EBUSY) return low.error();
  return {};
}

Result<void> RealCgroupFs::write(const std::string& cgroup, CgroupFile f, const std::string& value) {
  Hierarchy h = hierarchy_of(f);
  if (f == CgroupFile::V1MemoryPulse) return pulse(cgroup, value);
  if (f == CgroupFile::V1BlkioThrottle) return write_blkio_throttle(cgroup, value);
  if (std::string_view(knob_row(f).controller) == "memory") {
    IdleWhile idle;
    return write_one(h, cgroup, kernel_files(f).front(), value);
  }
  if (f != CgroupFile::V1CpuCfs) return write_one(h, cgroup, kernel_files(f).front(), value);
  // v1 checks the quota against the period in place at each write, and
  // against the parent's and the children's limits: when the period
  // changes, lift the quota first (always allowed), set the period, then
  // the quota, so no intermediate step asks for an impossible pair.
  std::string quota, period;
  if (!two_words(trim_blank(value), quota, period) || period.empty())
    return make_error(EINVAL, "v1 cfs value '" + value + "': want 'QUOTA PERIOD'");
  auto cur = read_one(h, cgroup, "cpu.cfs_period_us");
  if (!cur) return cur.error();
  if (*cur != period) {
    if (auto r = write_one(h, cgroup, "cpu.cfs_quota_us", "-1"); !r) return r;
    if (auto r = write_one(h, cgroup, "cpu.cfs_period_us", period); !r) return r;
    if (quota == "-1") return {};
  }
  return write_one(h, cgroup, "cpu.cfs_quota_us", quota);
}

std::vector<std::string> RealCgroupFs::children(Hierarchy h, const std::string& cgroup) {
  std::vector<std::string> out;
  auto fd = open_beneath(h, cgroup, O_RDONLY | O_DIRECTORY);
  if (!fd) return out;
  DIR* d = ::fdopendir(*fd);
  if (!d) {
    ::close(*fd);
    return out;
  }
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    std::string p = (cgroup == "/" ? "" : cgroup) + "/" + e->d_name;
    if (is_clean_cgroup_path(p)) out.push_back(std::move(p));
  }
  ::closedir(d);  // closes fd too
  std::sort(out.begin(), out.end());
  return out;
}

bool RealCgroupFs::exists(const std::string& cgroup) {
  auto fd = open_beneath(Hierarchy::Unified, cgroup, O_PATH | O_DIRECTORY);
  if (!fd) return false;
  ::close(*fd);
  return true;
}

}  // namespace khagent

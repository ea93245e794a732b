#include "khagent/actuate/cgroup_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <sstream>

namespace khagent {

namespace fs = std::filesystem;

const char* cgroup_file_name(CgroupFile f) {
  switch (f) {
    case CgroupFile::CpuMax: return "cpu.max";
    case CgroupFile::CpuWeight: return "cpu.weight";
    case CgroupFile::CpuIdle: return "cpu.idle";
    case CgroupFile::CpusetCpus: return "cpuset.cpus";
  }
  return "";
}

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\n");
  return s.substr(a, b - a + 1);
}

bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<void> validate_cgroup_value(CgroupFile f, const std::string& value, const CpuSet& node_cpus) {
  std::string v = trim(value);
  std::string what = std::string(cgroup_file_name(f)) + " value '" + value + "'";
  switch (f) {
    case CgroupFile::CpuMax: {
      std::istringstream in(v);
      std::string quota, period, extra;
      in >> quota >> period >> extra;
      if (quota.empty() || !extra.empty()) return make_error(EINVAL, what + ": want 'max|QUOTA [PERIOD]'");
      uint64_t q = 0, p = 100000;
      if (quota != "max" && (!parse_u64(quota, q) || q < 1000))
        return make_error(EINVAL, what + ": quota must be 'max' or at least 1000 us");
      if (!period.empty() && (!parse_u64(period, p) || p < 1000 || p > 1000000))
        return make_error(EINVAL, what + ": period must be 1000..1000000 us");
      return {};
    }
    case CgroupFile::CpuWeight: {
      uint64_t w = 0;
      if (!parse_u64(v, w) || w < 1 || w > 10000) return make_error(EINVAL, what + ": want 1..10000");
      return {};
    }
    case CgroupFile::CpuIdle:
      if (v != "0" && v != "1") return make_error(EINVAL, what + ": want 0 or 1");
      return {};
    case CgroupFile::CpusetCpus: {
      auto cpus = parse_cpu_list(v);
      if (!cpus) return make_error(EINVAL, what + ": " + cpus.error().message);
      for (int c : *cpus)
        if (!node_cpus.count(c))
          return make_error(EINVAL, what + ": CPU " + std::to_string(c) + " is not online on this node");
      return {};
    }
  }
  return make_error(EINVAL, what + ": unknown file");
}

std::string normalize_cgroup_value(CgroupFile f, const std::string& value) {
  std::string v = trim(value);
  if (f == CgroupFile::CpuMax) {
    std::istringstream in(v);
    std::string q, p;
    in >> q >> p;
    return q + " " + (p.empty() ? "100000" : p);
  }
  if (f == CgroupFile::CpusetCpus) {
    auto c = parse_cpu_list(v);
    return c ? format_cpu_list(*c) : v;
  }
  return v;
}

Result<std::string> confine_cgroup_path(const std::string& mount, const std::string& configured) {
  if (configured.empty()) return make_error(EINVAL, "empty cgroup path");
  fs::path m = fs::path(mount).lexically_normal();
  fs::path p(configured);
  std::string rel;
  for (const auto& part : p)
    if (part == "..") return make_error(EINVAL, "cgroup path '" + configured + "' contains '..'");
  std::string ms = m.string();
  while (ms.size() > 1 && ms.back() == '/') ms.pop_back();
  if (configured.rfind(ms + "/", 0) == 0 || configured == ms) {
    rel = configured.substr(ms.size());
  } else if (configured.front() == '/' && (configured.rfind("/sys/", 0) == 0 || configured.rfind("/proc/", 0) == 0 ||
                                           configured.rfind("/dev/", 0) == 0)) {
    return make_error(EINVAL, "cgroup path '" + configured + "' is outside the cgroup2 mount " + ms);
  } else {
    rel = configured;
  }
  if (rel.empty() || rel.front() != '/') rel = "/" + rel;
  while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
  // Symlinks: the real location must stay inside the mount.
  std::error_code ec;
  fs::path full = fs::path(ms + rel);
  if (fs::exists(full, ec)) {
    fs::path real = fs::canonical(full, ec);
    fs::path real_mount = fs::canonical(ms, ec);
    if (ec) return make_error(ec.value(), "cannot resolve " + full.string());
    auto r = real.lexically_relative(real_mount);
    if (r.empty() || *r.begin() == "..")
      return make_error(EINVAL, "cgroup path '" + configured + "' resolves to " + real.string() +
                                    ", outside the cgroup2 mount " + ms);
  }
  return rel;
}

Result<std::string> RealCgroupFs::read(const std::string& cgroup, CgroupFile f) {
  std::string path = root_ + (cgroup == "/" ? "" : cgroup) + "/" + cgroup_file_name(f);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errno, "cannot read " + path);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = errno;
  ::close(fd);
  if (n < 0) return make_error(err, "cannot read " + path);
  return trim(out);
}

Result<void> RealCgroupFs::write(const std::string& cgroup, CgroupFile f, const std::string& value) {
  std::string path = root_ + (cgroup == "/" ? "" : cgroup) + "/" + cgroup_file_name(f);
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errno, "cannot open " + path);
  // One write(2) with a newline, as echo(1) writes: the kernel parses the
  // whole value or rejects it. The newline matters for empty values: a
  // write of zero bytes never reaches the kernel's handler, so restoring an
  // empty cpuset.cpus ("use the parent's CPUs") would silently do nothing.
  std::string line = value + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (n < 0) return make_error(err, "writing '" + value + "' to " + path);
  if (static_cast<size_t>(n) != line.size()) return make_error(EIO, "short write to " + path);
  return {};
}

bool RealCgroupFs::exists(const std::string& cgroup) {
  return ::access((root_ + (cgroup == "/" ? "" : cgroup)).c_str(), F_OK) == 0;
}

}  // namespace khagent

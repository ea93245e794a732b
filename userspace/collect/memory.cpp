#include "khagent/collect/memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "khagent/util/clock.h"
#include "khagent/util/file.h"
#include "khagent/util/strings.h"

namespace khagent {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

// The first line whose first word is `key`, without it.
std::optional<std::string_view> line_after(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == '\t'))
      return trimmed(line.substr(key.size() + 1));
  }
  return std::nullopt;
}

Result<uint64_t> number_file(const std::string& path) {
  auto t = read_file(path);
  if (!t) return t.error();
  uint64_t v = 0;
  if (!parse_u64(trimmed(*t), v))
    return make_error(EINVAL, path + ": not a number: '" + std::string(trimmed(*t)) + "'");
  return v;
}

}  // namespace

std::optional<uint64_t> stat_value(std::string_view text, std::string_view key) {
  auto rest = line_after(text, key);
  uint64_t v = 0;
  if (!rest) return std::nullopt;
  while (!rest->empty() && (rest->front() == ' ' || rest->front() == '\t')) rest->remove_prefix(1);
  if (!parse_u64(*rest, v)) return std::nullopt;
  return v;
}

Result<MemoryUse> parse_meminfo(std::string_view text) {
  // "MemTotal:       24555520 kB"
  auto kb = [&](std::string_view key) -> std::optional<uint64_t> {
    auto rest = line_after(text, key);
    if (!rest) return std::nullopt;
    std::string_view r = *rest;
    while (!r.empty() && r.front() == ' ') r.remove_prefix(1);
    if (r.size() > 3 && r.substr(r.size() - 3) == " kB") r.remove_suffix(3);
    uint64_t v = 0;
    if (!parse_u64(r, v)) return std::nullopt;
    return v << 10;
  };
  auto total = kb("MemTotal:");
  if (!total) return make_error(EINVAL, "meminfo without MemTotal");
  MemoryUse u;
  u.limit = total;
  // The kubelet's node working set: all but free memory and inactive page
  // cache, counted as a cgroup's (usage - inactive_file) is.
  auto free = kb("MemFree:");
  auto inactive_file = kb("Inactive(file):");
  if (free && inactive_file) {
    u.usage = *total > *free ? *total - *free : 0;
    u.inactive_file = *inactive_file;
    return u;
  }
  auto avail = kb("MemAvailable:");
  if (!avail) return make_error(EINVAL, "meminfo without MemFree and Inactive(file), or MemAvailable");
  u.usage = *total > *avail ? *total - *avail : 0;
  return u;
}

Result<PsiTotals> parse_psi(std::string_view text) {
  PsiTotals p;
  bool some = false;
  struct Line {
    std::string_view key;
    uint64_t* total;
    double* avg10;
  };
  for (const Line& l : {Line{"some", &p.some_us, &p.some_avg10}, Line{"full", &p.full_us, &p.full_avg10}}) {
    auto rest = line_after(text, l.key);
    if (!rest) continue;
    size_t at = rest->find("total=");
    if (at == std::string_view::npos || !parse_u64(rest->substr(at + 6), *l.total))
      return make_error(EINVAL, "PSI line without a total: '" + std::string(*rest) + "'");
    // "avg10=" comes first on the kernel's lines; a line without it, or
    // with one that does not parse, keeps 0 (only status shows it; the
    // totals are what the agent acts on).
    if (size_t a = rest->find("avg10="); a != std::string_view::npos) {
      const char* b = rest->data() + a + 6;
      const char* e = rest->data() + rest->size();
      double v = 0;
      auto [end, ec] = std::from_chars(b, e, v);
      if (ec == std::errc() && (end == e || *end == ' ')) *l.avg10 = v;
    }
    if (l.key == "some") some = true;
  }
  if (!some) return make_error(EINVAL, "PSI text without a 'some' line");
  return p;
}

Result<PsiTotals> read_psi(const std::string& path) {
  auto t = read_file(path);
  if (!t) return t.error();
  auto p = parse_psi(*t);
  if (!p) return make_error(p.error().err, path + ": " + p.error().message);
  return p;
}

PsiTriggers::PsiTriggers(std::string unified_root, uint64_t stall_us, uint64_t window_us)
    : root_(std::move(unified_root)), stall_us_(std::max<uint64_t>(stall_us, 1)), window_us_(window_us) {}

std::string PsiTriggers::spec() const { return "some " + std::to_string(stall_us_) + " " + std::to_string(window_us_); }

Result<Fd> PsiTriggers::open_one(const std::string& file) const {
  Fd fd(::open(file.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return make_error(errno, "PSI trigger on " + file);
  // The kernel takes the whole trigger in one write, with its NUL.
  const std::string text = spec();
  if (::write(fd.get(), text.c_str(), text.size() + 1) < 0)
    return make_error(errno, "PSI trigger \"" + text + "\" on " + file);
  return fd;
}

std::vector<std::string> PsiTriggers::sync(const std::vector<std::string>& paths) {
  std::vector<std::string> problems;
  std::map<std::string, Fd> keep;
  constexpr uint64_t kUnprivilegedUs = 2'000'000;
  for (const auto& p : paths) {
    if (keep.count(p)) continue;
    if (auto it = fds_.find(p); it != fds_.end()) {
      keep.emplace(p, std::move(it->second));
      continue;
    }
    const std::string file = root_ + (p == "/" ? "" : p) + "/memory.pressure";
    auto fd = open_one(file);
    if (!fd && fd.error().err == EINVAL && window_us_ % kUnprivilegedUs != 0) {
      const uint64_t before = window_us_, before_stall = stall_us_;
      const uint64_t window = (window_us_ + kUnprivilegedUs - 1) / kUnprivilegedUs * kUnprivilegedUs;
      stall_us_ = std::max<uint64_t>(1, stall_us_ * window / window_us_);
      window_us_ = window;
      fd = open_one(file);
      if (fd) {
        note_ = "window " + std::to_string(window / 1000) + " ms instead of " + std::to_string(before / 1000) +
                " ms: the kernel refused it (without CAP_SYS_RESOURCE it takes only multiples of 2 s)";
      } else {  // refused for another reason: as it was
        stall_us_ = before_stall;
        window_us_ = before;
      }
    }
    if (!fd) {
      problems.push_back(fd.error().str());
      continue;
    }
    keep.emplace(p, std::move(*fd));
  }
  fds_ = std::move(keep);
  return problems;
}

void PsiTriggers::add_to(std::vector<pollfd>& fds) const {
  for (const auto& [p, fd] : fds_) fds.push_back({fd.get(), POLLPRI, 0});
}

const std::string* PsiTriggers::path_of(int fd) const {
  for (const auto& [p, f] : fds_)
    if (f.get() == fd) return &p;
  return nullptr;
}

MemoryReader::MemoryReader(std::string root, bool v1, std::string proc_root)
    : root_(std::move(root)), v1_(v1), proc_root_(std::move(proc_root)) {}

Result<MemoryUse> MemoryReader::cgroup(const std::string& path) const {
  const std::string dir = root_ + (path == "/" ? "" : path) + "/";
  MemoryUse u;
  auto usage = number_file(dir + (v1_ ? "memory.usage_in_bytes" : "memory.current"));
  if (!usage) return usage.error();
  u.usage = *usage;
  auto stat = read_file(dir + "memory.stat");
  if (!stat) return stat.error();
  u.inactive_file = stat_value(*stat, v1_ ? "total_inactive_file" : "inactive_file").value_or(0);
  // Split into anon and file since 5.9 (v1 memory.stat only has them in
  // recent kernels); before, one workingset_refault.
  const std::string pre = v1_ ? "total_" : "";
  auto anon = stat_value(*stat, pre + "workingset_refault_anon");
  auto file = stat_value(*stat, pre + "workingset_refault_file");
  if (anon || file) u.refaults = anon.value_or(0) + file.value_or(0);
  else u.refaults = stat_value(*stat, pre + "workingset_refault");
  u.refaults_file = file;
  auto lim = read_file(dir + (v1_ ? "memory.limit_in_bytes" : "memory.max"));
  if (!lim) return lim.error();
  uint64_t l = 0;
  if (parse_u64(trimmed(*lim), l) && l < (uint64_t{1} << 62)) u.limit = l;
  return u;
}

Result<std::string> MemoryReader::at_own_limit(const std::string& path, const std::string& stop) const {
  const std::string dir = root_ + (path == "/" ? "" : path);
  auto one = [&](const std::string& d, const std::string& rel) -> Result<std::string> {
    auto usage = number_file(d + (v1_ ? "/memory.usage_in_bytes" : "/memory.current"));
    if (!usage) return usage.error();
    uint64_t limit = UINT64_MAX;
    const std::vector<std::string> files = v1_ ? std::vector<std::string>{"/memory.limit_in_bytes"}
                                               : std::vector<std::string>{"/memory.max", "/memory.high"};
    for (const auto& f : files) {
      auto t = read_file(d + f);
      if (!t) return make_error(t.error().err, d + f + ": " + t.error().message);
      uint64_t l = 0;
      if (parse_u64(trimmed(*t), l) && l < (uint64_t{1} << 62)) limit = std::min(limit, l);  // "max": none
    }
    if (limit == UINT64_MAX) return std::string();
    const uint64_t margin = std::max<uint64_t>(limit / 32, uint64_t{4} << 20);
    if (*usage + margin < limit) return std::string();
    return rel + ": " + std::to_string(*usage >> 20) + " MiB of " + std::to_string(limit >> 20) + " MiB";
  };
  auto top = one(dir, path);
  if (!top || !top->empty()) return top;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code kind;
    if (!e.is_directory(kind)) continue;
    const std::string name = e.path().filename().string();
    auto c = one(e.path().string(), path + "/" + name);
    if (!c && c.error().err == ENOENT) continue;  // a container removed meanwhile
    if (!c || !c->empty()) return c;
  }
  if (ec) return make_error(ec.value(), dir + ": " + ec.message());
  // The levels between the pod and the node (kubepods.slice, its QoS
  // class): a limit there is online's own too.
  for (std::string p = path; p.size() > 1;) {
    p = p.substr(0, p.rfind('/'));
    if (p.empty() || p == stop) break;
    auto a = one(root_ + p, p);
    if (!a || !a->empty()) return a;
  }
  return std::string();
}

Result<std::map<std::string, uint64_t>> MemoryReader::oom_kill_counts(const std::string& path) const {
  const std::string dir = root_ + (path == "/" ? "" : path);
  auto one = [&](const std::string& d) -> Result<uint64_t> {
    auto t = read_file(d + (v1_ ? "/memory.oom_control" : "/memory.events"));
    if (!t) return make_error(t.error().err, d + ": " + t.error().message);
    return stat_value(*t, "oom_kill").value_or(0);
  };
  std::map<std::string, uint64_t> out;
  auto top = one(dir);
  if (!top) return top.error();
  out[path] = *top;
  if (!v1_) return out;
  std::error_code ec;
  // A pod's or a YARN root's subtree: a few levels, a bounded walk.
  auto it = std::filesystem::recursive_directory_iterator(dir, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > 4) it.disable_recursion_pending();
    std::error_code kind;
    if (!it->is_directory(kind) || it->is_symlink(kind)) continue;
    if (out.size() >= 4096) return make_error(E2BIG, dir + ": more than 4096 memory cgroups below it");
    const std::string rel = path + it->path().string().substr(dir.size());
    if (auto k = one(it->path().string())) out[rel] = *k;
    // else a group removed meanwhile: its count went with it
  }
  if (ec) return make_error(ec.value(), dir + ": walking its groups");
  return out;
}

Result<uint64_t> MemoryReader::oom_kills(const std::string& path) const {
  auto c = oom_kill_counts(path);
  if (!c) return c.error();
  uint64_t n = 0;
  for (const auto& [p, k] : *c) n += k;
  return n;
}

std::optional<uint64_t> parse_zoneinfo_high(std::string_view text) {
  // Each zone: "Node 0, zone   Normal", then "  pages free N", "        min N",
  // "        low N", "        high N", ...; "high" also starts other keys'
  // lines ("high_wmark" in none so far), so the word must stand alone.
  std::optional<uint64_t> sum;
  size_t at = 0;
  while (at < text.size()) {
    size_t eol = text.find('\n', at);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(at, eol - at);
    at = eol + 1;
    const size_t k = line.find_first_not_of(' ');
    if (k == std::string_view::npos || line.substr(k, 5) != "high ") continue;
    uint64_t v = 0;
    if (parse_u64(trimmed(line.substr(k + 5)), v)) sum = sum.value_or(0) + v;
  }
  return sum;
}

Result<MemoryUse> MemoryReader::node(const std::string& node_cgroup) const {
  auto text = read_file(proc_root_ + "/meminfo");
  if (!text) return text.error();
  auto whole = parse_meminfo(*text);
  if (whole && node_cgroup.empty()) {
    const uint64_t now = mono_ns();
    if (!watermark_read_ns_ || now - watermark_read_ns_ >= 60'000'000'000ULL) {
      watermark_read_ns_ = now;
      watermark_high_.reset();
      if (auto zi = read_file(proc_root_ + "/zoneinfo"))
        if (auto pages = parse_zoneinfo_high(*zi))
          watermark_high_ = *pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    }
    whole->watermark_high = watermark_high_;
  }
  if (!whole || node_cgroup.empty()) return whole;
  auto u = cgroup(node_cgroup);
  if (!u) return u.error();
  MemoryUse out;
  out.usage = u->usage;
  out.inactive_file = u->inactive_file;
  const uint64_t total = whole->limit.value_or(0);  // parse_meminfo always sets it
  const std::optional<uint64_t> own = u->limit;
  out.limit = own ? std::min(*own, total) : total;
  return out;
}

}  // namespace khagent

#include "khagent/app/tools.h"
#include "khagent/util/strings.h"

#include <functional>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "khagent/abi/runq.h"
#include "khagent/actuate/state_store.h"
#include "khagent/app/agent.h"
#include "khagent/collect/bpf_maps.h"
#include "khagent/collect/cgroupfs.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/cpustat.h"
#include "khagent/collect/topology.h"
#include "khagent/export/observe.h"
#include "khagent/loader/runq_loader.h"

namespace khagent {

namespace fs = std::filesystem;

namespace {

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

// =================================================================== top

const char* top_sort_name(TopSort s) {
  switch (s) {
    case TopSort::P99: return "p99";
    case TopSort::Wait: return "wait";
    case TopSort::Cpu: return "cpu";
  }
  return "";
}

TopSort next_top_sort(TopSort s) {
  switch (s) {
    case TopSort::P99: return TopSort::Wait;
    case TopSort::Wait: return TopSort::Cpu;
    case TopSort::Cpu: return TopSort::P99;
  }
  return TopSort::P99;
}

TopModel make_top_model(const Signals& sig, const NodeSignals& node, Classifier& classifier,
                        size_t node_cpus, const std::string& prefix) {
  TopModel m;
  m.node_cpus = node_cpus;
  m.throttle_source = throttle_source_name(sig.throttle_source);
  m.interval_ns = sig.interval_ns;
  for (size_t i = 0; i < m.classes.size(); i++) {
    m.classes[i].cpu_cores = node.classes[i].cpu_cores;
    m.classes[i].wait_p99_us = node.classes[i].wait_p99_us;
    m.classes[i].waits = node.classes[i].interval.waits;
  }
  for (const auto& c : sig.cgroups) {
    const auto& i = c.interval;
    if (i.cpu_ns == 0 && i.waits == 0 && i.wait_ns == 0) continue;  // idle this interval
    if (!path_matches(c.path, prefix)) continue;
    TopRow r;
    r.path = c.path;
    r.cls = classifier.get(c.id, c.path).cls;
    r.cpu_pct = c.cpu_pct;
    r.wait_p50_us = c.wait_p50_us;
    r.wait_p99_us = c.wait_p99_us;
    r.wait_ns = i.wait_ns;
    r.waits = i.waits;
    if (i.wait_ns) {
      r.other_share = static_cast<double>(i.cause_ns[KH_WAIT_OTHER_CGROUP]) / static_cast<double>(i.wait_ns);
      r.throttled_share = static_cast<double>(i.cause_ns[KH_WAIT_THROTTLED]) / static_cast<double>(i.wait_ns);
    }
    // Of the aggressors since start, the one that held the CPU longest while
    // this cgroup waited in this interval.
    for (const auto& a : c.top_aggressors) {
      if (a.wait_ns_interval > r.aggressor_ns) {
        r.aggressor_ns = a.wait_ns_interval;
        r.aggressor = a.path.empty() ? "id " + std::to_string(a.id) : a.path;
      }
    }
    m.rows.push_back(std::move(r));
  }
  return m;
}

std::vector<const TopRow*> top_sorted_rows(const TopModel& m) {
  std::vector<const TopRow*> rows;
  for (const auto& r : m.rows)
    if (!m.online_only || r.cls == CgroupClass::Online) rows.push_back(&r);
  auto key = [&](const TopRow* r) -> std::pair<double, double> {
    switch (m.sort) {
      case TopSort::P99:
        return {r->waits ? r->wait_p99_us : -1.0, static_cast<double>(r->wait_ns)};
      case TopSort::Wait: return {static_cast<double>(r->wait_ns), r->waits ? r->wait_p99_us : -1.0};
      case TopSort::Cpu: return {r->cpu_pct, static_cast<double>(r->wait_ns)};
    }
    return {0, 0};
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const TopRow* a, const TopRow* b) {
    bool ao = a->cls == CgroupClass::Online, bo = b->cls == CgroupClass::Online;
    if (ao != bo) return ao;
    auto ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a->path < b->path;
  });
  return rows;
}

namespace {
// CLASS CPU% P50 P99 WAIT WAITS OTHER THR, then the cgroup. 60 columns: an
// 80-column terminal keeps 20 for the path.
constexpr const char* kRowFormat = "{:<7} {:>6} {:>7} {:>7} {:>8} {:>6} {:>5} {:>4}  ";
}  // namespace

std::string render_top(const TopModel& m, int rows_i, int cols_i) {
  if (rows_i <= 0 || cols_i <= 0) return "";
  const size_t rows = static_cast<size_t>(rows_i), cols = static_cast<size_t>(cols_i);
  std::vector<std::string> lines;

  // (The online-only state is in the footer: this line fits 80 columns.)
  lines.push_back(fmt::format("khagent top  {} CPUs  interval {}  throttling from {}  sort {}", m.node_cpus,
                              m.interval_ns ? human_ns(static_cast<double>(m.interval_ns)) : "-", m.throttle_source,
                              top_sort_name(m.sort)));
  for (CgroupClass c : {CgroupClass::Online, CgroupClass::Offline, CgroupClass::System}) {
    const auto& s = m.classes[static_cast<size_t>(c)];
    lines.push_back(fmt::format("{:<8} cpu {:>6.2f} cores   wait p99 {:>8}   waits {:>8}", class_name(c),
                                s.cpu_cores, s.waits ? human_ns(s.wait_p99_us * 1e3) : "-", s.waits));
  }
  lines.push_back("");

  // Fixed columns, then the cgroup and (when there is room) its aggressor.
  auto mark = [&](const char* name, TopSort s) { return std::string(name) + (m.sort == s ? "*" : ""); };
  std::string fixed_head = fmt::format(kRowFormat, "CLASS", mark("CPU%", TopSort::Cpu), "P50",
                                       mark("P99", TopSort::P99), mark("WAIT", TopSort::Wait), "WAITS", "OTHER", "THR");
  auto sorted = top_sorted_rows(m);
  size_t fixed = width_of(fixed_head);
  size_t rest = cols > fixed ? cols - fixed : 0;
  size_t cg_w = std::max<size_t>(rest, 6), agg_w = 0;
  const std::string agg_head = "HELD THE CPU MEANWHILE";
  if (rest >= 50) {
    // Two columns: the path takes what it needs, leaving the aggressor at
    // least half of the room (or what it needs, if less); the aggressor gets
    // the rest.
    size_t path_need = 6, agg_need = agg_head.size();
    for (const TopRow* r : sorted) {
      path_need = std::max(path_need, width_of(r->path));
      if (!r->aggressor.empty()) agg_need = std::max(agg_need, width_of(r->aggressor) + 10);
    }
    size_t agg_min = std::min(agg_need, (rest - 2) / 2);
    cg_w = std::min(path_need, rest - 2 - agg_min);
    agg_w = rest - 2 - cg_w;
  }
  lines.push_back(fixed_head + (agg_w ? pad_right("CGROUP", cg_w + 2) + agg_head : "CGROUP"));
  // kTopColumnHeaderLine is where the runner highlights the header.
  static_assert(kTopColumnHeaderLine == 5, "title, three class lines, a blank line, then the header");

  size_t room = rows > lines.size() + 1 ? rows - lines.size() - 1 : 0;
  size_t shown = 0;
  if (m.interval_ns == 0) {
    if (room) lines.push_back("collecting the first interval...");
  } else if (sorted.empty() && room) {
    lines.push_back(m.online_only ? "no online cgroup ran or waited in this interval (o: show all)"
                                  : "no cgroup ran or waited in this interval");
  } else {
    for (const TopRow* r : sorted) {
      if (shown >= room) break;
      auto pct = [&](double share) { return r->wait_ns ? fmt::format("{:.0f}%", 100 * share) : std::string("-"); };
      std::string line = fmt::format(
          kRowFormat, class_name(r->cls), fmt::format("{:.1f}", r->cpu_pct),
          r->waits ? human_ns(r->wait_p50_us * 1e3) : "-", r->waits ? human_ns(r->wait_p99_us * 1e3) : "-",
          human_ns(static_cast<double>(r->wait_ns)), r->waits, pct(r->other_share), pct(r->throttled_share));
      if (agg_w) {
        line += pad_right(shorten_left(r->path, cg_w), cg_w + 2);
        if (!r->aggressor.empty()) {
          std::string t = " (" + human_ns(static_cast<double>(r->aggressor_ns)) + ")";
          line += shorten_left(r->aggressor, agg_w > t.size() ? agg_w - t.size() : 1) + t;
        }
      } else {
        line += shorten_left(r->path, cg_w);
      }
      lines.push_back(line);
      shown++;
    }
  }
  std::string footer = fmt::format("q quit  o online only: {}  s sort: {}   {} of {} cgroups", m.online_only ? "on" : "off",
                                   top_sort_name(m.sort), shown, sorted.size());
  if (!m.note.empty()) footer += "  | " + m.note;
  lines.push_back(footer);

  std::string out;
  for (size_t i = 0; i < lines.size() && i < rows; i++) {
    std::string l = cut_to_width(lines[i], cols);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + '\n';
  }
  return out;
}

namespace {

// The terminal state top changes, restored on every way out: the destructor
// (normal exit, q, Ctrl-C/SIGTERM/SIGHUP through g_stop) and fatal signals
// (the handler restores, then re-raises). Kept in globals so the signal
// handler can reach it; tcsetattr and write are async-signal-safe.
termios g_saved_termios{};
volatile sig_atomic_t g_termios_saved = 0;
volatile sig_atomic_t g_screen_active = 0;
volatile sig_atomic_t g_resized = 0;
constexpr char kEnterScreen[] = "\033[?1049h\033[?25l";  // alternate screen, hide cursor
constexpr char kLeaveScreen[] = "\033[0m\033[?25h\033[?1049l";

void restore_terminal_raw() {
  if (g_termios_saved) tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
  if (g_screen_active) {
    ssize_t n = ::write(STDOUT_FILENO, kLeaveScreen, sizeof(kLeaveScreen) - 1);
    (void)n;
  }
  g_termios_saved = 0;
  g_screen_active = 0;
}

void on_fatal_signal(int sig) {
  restore_terminal_raw();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_stop_signal(int) { g_stop = 1; }
void on_winch(int) { g_resized = 1; }

class TerminalSession {
 public:
  // Character-at-a-time input without echo (ICANON and ECHO off, Ctrl-Z
  // disabled; Ctrl-C still raises SIGINT, which stops the loop), the
  // alternate screen and no cursor.
  bool enter() {
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
      g_termios_saved = 1;
      termios raw = g_saved_termios;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO | IEXTEN));
      raw.c_iflag &= static_cast<tcflag_t>(~(IXON | ICRNL));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      raw.c_cc[VSUSP] = _POSIX_VDISABLE;  // a stopped top would leave the screen raw
      if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0) {
        g_termios_saved = 0;
        return false;
      }
      keys_ = true;
    }
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(s, &sa, nullptr);
    sa.sa_handler = on_stop_signal;  // no SA_RESTART: poll() returns at once
    for (int s : {SIGHUP, SIGQUIT}) sigaction(s, &sa, nullptr);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, nullptr);
    g_screen_active = 1;
    write_all(kEnterScreen);
    return true;
  }
  ~TerminalSession() { restore_terminal_raw(); }
  bool keys() const { return keys_; }

  static void write_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::write(STDOUT_FILENO, s.data() + off, s.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  // Draws the rendered text from the top-left corner, clearing what is left
  // of each line and below the last one.
  static void draw(const TopModel& m) {
    winsize ws{};
    int rows = 24, cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
      rows = ws.ws_row;
      cols = ws.ws_col;
    }
    std::string text = render_top(m, rows, cols);
    std::string out = "\033[H";
    std::istringstream in(text);
    std::string line;
    for (int i = 0; std::getline(in, line); i++) {
      if (i) out += "\r\n";
      if (i == kTopColumnHeaderLine)
        out += "\033[7m" + pad_right(line, static_cast<size_t>(cols)) + "\033[0m";
      else
        out += line + "\033[K";
    }
    out += "\033[J";
    write_all(out);
  }

 private:
  bool keys_ = false;
};

// While the screen is up, log messages go to a small ring shown in the footer
// (writing them to the terminal would tear the screen); they are printed to
// stderr once the screen is gone.
class ScreenLog {
 public:
  ScreenLog() : ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16)), prev_(spdlog::default_logger()) {
    ring_->set_pattern("%l %v");
    auto l = std::make_shared<spdlog::logger>("khagent-top", ring_);
    l->set_level(prev_->level());
    spdlog::set_default_logger(l);
  }
  ~ScreenLog() {
    spdlog::set_default_logger(prev_);
    for (const auto& m : ring_->last_formatted()) std::cerr << m;
  }
  std::string last() const {
    auto v = ring_->last_formatted(1);
    return v.empty() ? "" : trim_space(v.back());
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
  std::shared_ptr<spdlog::logger> prev_;
};

}  // namespace

int run_top(const CliOptions& o) {
  if (!isatty(STDOUT_FILENO)) {
    std::cerr << "khagent top: standard output is not a terminal; for a pipe or a file use "
                 "`khagent observe` (a table per interval) or `khagent observe --json`\n";
    return 2;
  }
  auto cfg = effective_config(o);
  if (!cfg) {
    std::cerr << "khagent: " << cfg.error().message << "\n";
    return 2;
  }
  // Setup chatter would only scroll by before the screen appears.
  if (spdlog::get_level() == spdlog::level::info) spdlog::set_level(spdlog::level::warn);
  if (auto r = preflight(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }
  auto mounts = find_mounts();
  if (!mounts) {
    spdlog::error("{}", mounts.error().str());
    return 2;
  }
  auto topo = read_topology();
  size_t cpus = topo ? topo->cpus.size() : static_cast<size_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));

  // top is a viewer: it never pins, so it cannot replace a running agent's pins.
  LoaderOptions lo = o.loader;
  lo.pin = false;
  auto bpf = RunqBpf::open_and_load(lo);
  if (!bpf) {
    spdlog::error("{}", bpf.error().str());
    return 1;
  }
  CgroupIndex index(mounts->cgroup2);
  if (auto n = index.rescan(); !n) {
    spdlog::error("{}", n.error().str());
    return 1;
  }
  BpfMapSource maps((*bpf)->map_fds());
  CpuStatThrottleReader cpu_stat(mounts->cgroup2, mounts->cpu_v1);
  Collector collector(maps, index, &cpu_stat, (*bpf)->throttle_source());
  Classifier classifier(cfg->classes, cfg->offline.yarn_hierarchy);
  if (auto first = collector.tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }

  TopModel model;
  model.node_cpus = cpus;
  model.throttle_source = throttle_source_name((*bpf)->throttle_source());
  model.online_only = o.online_only;
  std::string failure;
  {
    ScreenLog log;
    TerminalSession term;
    if (!term.enter()) {
      failure = std::string("cannot set the terminal mode: ") + std::strerror(errno);
    } else {
      TerminalSession::draw(model);
      uint64_t next = mono_ns() + o.interval_ns;
      while (!g_stop) {
        uint64_t now = mono_ns();
        int timeout = now >= next ? 0 : static_cast<int>((next - now + 999999) / 1000000);
        pollfd pfd{STDIN_FILENO, POLLIN, 0};
        int n = poll(term.keys() ? &pfd : nullptr, term.keys() ? 1 : 0, timeout);
        if (g_stop) break;
        bool redraw = false;
        if (g_resized) {
          g_resized = 0;
          redraw = true;
        }
        if (n > 0 && (pfd.revents & (POLLHUP | POLLERR))) break;  // the terminal went away
        if (n > 0 && (pfd.revents & POLLIN)) {
          char buf[64];
          ssize_t got = ::read(STDIN_FILENO, buf, sizeof(buf));
          for (ssize_t i = 0; i < got; i++) {
            switch (buf[i]) {
              case 'q': case 'Q': case 0x03: g_stop = 1; break;  // 0x03: Ctrl-C with ISIG off
              case 'o': case 'O': model.online_only = !model.online_only; redraw = true; break;
              case 's': case 'S': model.sort = next_top_sort(model.sort); redraw = true; break;
              default: break;
            }
          }
          if (g_stop) break;
        }
        if (mono_ns() >= next) {
          next += o.interval_ns;
          if (next < mono_ns()) next = mono_ns() + o.interval_ns;  // fell behind: skip
          auto sample = collector.tick();
          if (!sample) {
            failure = sample.error().str();
            break;
          }
          Signals sig = compute_signals(*sample);
          NodeSignals node = rollup(*sample, classifier);
          TopModel fresh = make_top_model(sig, node, classifier, cpus, o.cgroup_prefix);
          fresh.sort = model.sort;
          fresh.online_only = model.online_only;
          model = std::move(fresh);
          redraw = true;
        }
        if (redraw) {
          model.note = log.last();
          TerminalSession::draw(model);
        }
      }
    }
  }  // terminal restored, captured log lines printed
  if (!failure.empty()) {
    spdlog::error("{}", failure);
    return 1;
  }
  return 0;
}

// ================================================================= status

const std::vector<std::string>& bpf_counter_names() {
  static const std::vector<std::string> names = {"switches",   "wakeups",    "storage_miss", "ring_overflow",
                                                 "stats_full", "pairs_full", "events",       "events_dropped"};
  static_assert(KH_NR_COUNTERS == 8, "name every counter of enum kh_counter");
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

std::string format_status(const StatusReport& r) {
  std::string out;
  if (r.agent_found) {
    std::vector<std::string> procs;
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
      std::string cur = !e.current                ? "unreadable: " + e.current_error
                        : *e.current == e.original ? "'" + *e.current + "' (the original)"
                                                   : "'" + *e.current + "'";
      out += fmt::format("  {:<{}}  {:<12} {:<18} {}\n", shorten_left(e.cgroup, w), w, e.file,
                         "'" + e.original + "'", cur);
    }
  }

  if (r.targets.empty()) {
    out += "offline budget: no offline target found\n";
  } else {
    auto sum = status_budget_cores(r);
    bool readable = std::any_of(r.targets.begin(), r.targets.end(), [](const StatusTarget& t) { return t.cpu_max; });
    const char* plural = r.targets.size() == 1 ? "" : "s";
    if (sum)
      out += fmt::format("offline budget: {:.2f} cores (cpu.max of {} offline target{})\n", *sum, r.targets.size(), plural);
    else if (readable)
      out += fmt::format("offline budget: unlimited (no quota in the cpu.max of {} offline target{})\n",
                         r.targets.size(), plural);
    else
      out += fmt::format("offline budget: unknown (the cpu.max of {} offline target{} cannot be read)\n",
                         r.targets.size(), plural);
    for (const auto& t : r.targets) {
      if (!t.cpu_max)
        out += fmt::format("  {}  cpu.max unreadable: {}\n", t.cgroup, t.error);
      else
        out += fmt::format("  {}  cpu.max '{}'{}\n", t.cgroup, *t.cpu_max,
                           t.cores ? fmt::format(" = {:.2f} cores", *t.cores) : " (no limit)");
    }
  }
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
  };
  if (!r.agent_found) j["problem"] = r.agent_problem;
  return j.dump() + "\n";
}

int status_exit_code(const StatusReport& r) { return r.agent_found ? 0 : 1; }

namespace {

// An fd closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

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
    if (fd.fd < 0) continue;
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd.fd, &info, &len) != 0 || info.nr_map_ids == 0) continue;
    std::vector<__u32> ids(info.nr_map_ids);
    bpf_prog_info with_maps{};
    with_maps.nr_map_ids = info.nr_map_ids;
    with_maps.map_ids = reinterpret_cast<uintptr_t>(ids.data());
    len = sizeof(with_maps);
    if (bpf_obj_get_info_by_fd(fd.fd, &with_maps, &len) != 0) continue;
    ids.resize(std::min<size_t>(ids.size(), with_maps.nr_map_ids));
    if (std::none_of(ids.begin(), ids.end(), [&](__u32 m) { return map_ids.count(m) > 0; })) continue;
    if (!fn(fd.fd, info, ids)) return;
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
  if (mfd.fd < 0 || bpf_obj_get_info_by_fd(mfd.fd, &mi, &mlen) != 0 || !mi.btf_id) return 0;
  std::string name = mi.name;
  if (name.size() < 7 || name.compare(name.size() - 7, 7, ".rodata") != 0) return 0;
  btf* b = btf__load_from_kernel_by_id(mi.btf_id);
  if (!b) return 0;
  uint32_t version = 0;
  const btf_type* sec = btf__type_by_id(b, mi.btf_value_type_id);
  std::vector<unsigned char> value(mi.value_size);
  __u32 zero = 0;
  if (sec && btf_is_datasec(sec) && bpf_map_lookup_elem(mfd.fd, &zero, value.data()) == 0) {
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
    for (__u32 mid : ids)
      if ((version = rodata_abi_version(mid)) != 0) return false;
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
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
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

// The offline targets an agent with this configuration writes: configured
// targets, the BestEffort QoS cgroup and the YARN hierarchy where they exist,
// and every cgroup whose cpu.max the state file records.
std::vector<std::string> offline_targets(const Config& cfg, const std::string& cgroup2,
                                         const std::vector<StatusEntry>& entries) {
  std::set<std::string> out;
  auto add_if_exists = [&](const std::string& p) {
    if (fs::is_directory(cgroup2 + p)) out.insert(p);
  };
  for (const auto& t : cfg.offline.targets)
    if (auto c = confine_cgroup_path(cgroup2, t)) add_if_exists(*c);
  if (cfg.offline.besteffort) {
    add_if_exists("/kubepods.slice/kubepods-besteffort.slice");
    add_if_exists("/kubepods/besteffort");
  }
  if (cfg.offline.yarn) add_if_exists("/" + cfg.offline.yarn_hierarchy);
  for (const auto& e : entries)
    if (e.file == cgroup_file_name(CgroupFile::CpuMax) || e.file == cgroup_file_name(CgroupFile::V1CpuCfs))
      add_if_exists(e.cgroup);
  return {out.begin(), out.end()};
}

StatusReport collect_status(const CliOptions& o, const Config& cfg) {
  StatusReport r;
  r.pin_dir = o.loader.pin_dir;
  static const char* kMaps[] = {"cgroup_stats", "interference", "throttle_stats",
                                "cpu_state",    "counters",     "protected_cgroups"};
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
    r.agent_problem = open_error.empty() ? "no pinned maps (is khagent running, with pinning on, and this --pin-dir?)"
                                         : open_error;
  } else {
    r.programs = programs_using(ids);
    r.processes = processes_using(ids);
    if (r.programs.empty()) {
      r.agent_problem = "maps are pinned but no loaded BPF program uses them: stale pins of an agent that did "
                        "not exit cleanly (remove them: rm -r " + r.pin_dir + ")";
    } else if ((r.abi_version = running_abi_version(ids)) != KH_RUNQ_ABI_VERSION) {
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
    if (auto it = fds.find("cgroup_stats"); it != fds.end()) r.cgroups_tracked = count_keys(it->second.fd, 8);
    if (auto it = fds.find("protected_cgroups"); it != fds.end()) r.protected_cgroups = count_keys(it->second.fd, 8);
    if (auto it = fds.find("interference"); it != fds.end())
      r.interference_pairs = count_keys(it->second.fd, sizeof(kh_pair));
    if (auto it = fds.find("counters"); it != fds.end()) {
      int ncpus = std::max(1, libbpf_num_possible_cpus());
      std::vector<uint64_t> vals(static_cast<size_t>(ncpus));
      for (uint32_t k = 0; k < KH_NR_COUNTERS; k++) {
        if (bpf_map_lookup_elem(it->second.fd, &k, vals.data()) != 0) continue;
        uint64_t sum = 0;
        for (auto v : vals) sum += v;
        r.counters[bpf_counter_names()[k]] = sum;
      }
    }
  }

  std::string cgroup2;
  CgroupRoots roots;
  CgroupBackend backend = CgroupBackend::V2;
  if (auto m = find_mounts()) {
    cgroup2 = m->cgroup2;
    roots = {m->cgroup2, m->cpu_v1, m->cpuset_v1};
    if (auto b = detect_backend(roots)) backend = *b;
  }
  r.state_file = cfg.state_file;
  StateStore store(cfg.state_file);
  if (auto l = store.load(); !l) {
    r.state_error = l.error().str();
  } else {
    r.state_note = store.note();
    RealCgroupFs cgfs(roots);
    for (const auto& e : store.entries()) {
      StatusEntry s{e.cgroup, cgroup_file_name(e.file), e.value, std::nullopt, ""};
      if (auto v = cgfs.read(e.cgroup, e.file))
        s.current = *v;
      else if (v.error().err != ENOENT)
        s.current_error = v.error().str();
      else
        s.current_error = cgfs.exists(e.cgroup) ? "no " + s.file + " (its controller is not enabled there)"
                                                : "cgroup gone";
      r.entries.push_back(std::move(s));
    }
  }
  if (!cgroup2.empty()) {
    RealCgroupFs cgfs(roots);
    const CgroupFile quota_file = to_backend(backend, CgroupFile::CpuMax, "max").file;
    for (const auto& t : offline_targets(cfg, cgroup2, r.entries)) {
      StatusTarget st{t, std::nullopt, "", std::nullopt};
      if (auto v = cgfs.read(t, quota_file)) {
        // The v1 pair "QUOTA PERIOD" reads like cpu.max, with -1 for max.
        std::string as_max = *v;
        if (as_max.rfind("-1 ", 0) == 0) as_max = "max" + as_max.substr(2);
        st.cpu_max = as_max;
        st.cores = cpu_max_cores(as_max);
      } else {
        st.error = v.error().err == ENOENT ? "no cpu.max: the cpu controller is not enabled for this cgroup"
                                           : v.error().str();
      }
      r.targets.push_back(std::move(st));
    }
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

// ================================================================= doctor

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

// Mount points of file systems of `fstype` in mountinfo text.
std::vector<std::string> mounts_of_type(const std::string& mountinfo, const std::string& fstype) {
  std::vector<std::string> out;
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string f[5], type;
    for (auto& x : f) left >> x;
    right >> type;
    if (type == fstype) out.push_back(f[4]);
  }
  return out;
}

// Mount point of the cgroup v1 hierarchy holding `controller` ("" if none).
std::string v1_mount_of(const std::string& mountinfo, const std::string& controller) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string f[5], type, source, opts;
    for (auto& x : f) left >> x;
    right >> type >> source >> opts;
    if (type != "cgroup") continue;
    std::istringstream o(opts);
    std::string opt;
    while (std::getline(o, opt, ','))
      if (opt == controller) return f[4];
  }
  return "";
}

// Pods under the kubepods root (a shallow walk: QoS level, then pods).
size_t count_pods(const std::string& cgroup2, const std::string& kubepods_rel) {
  std::set<std::string> pods;
  std::error_code ec;
  fs::recursive_directory_iterator it(cgroup2 + kubepods_rel, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_directory(ec)) continue;
    std::string rel = it->path().string().substr(cgroup2.size());
    auto id = identify_cgroup(rel, "");
    if (!id.pod_uid.empty()) {
      pods.insert(id.pod_uid);
      it.disable_recursion_pending();
    }
  }
  return pods.size();
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
    if (it->path().filename() == name && it->is_directory(ec))
      return it->path().string().substr(cgroup2.size());
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

std::vector<DoctorCheck> doctor_checks(const DoctorEnv& env, const BpfProbe& bpf) {
  using L = CheckLevel;
  std::vector<DoctorCheck> out;
  auto add = [&](L l, std::string name, std::string detail) { out.push_back({l, std::move(name), std::move(detail)}); };
  auto at = [&](const std::string& abs) { return env.root + abs; };
  const Config& cfg = env.config;

  add(env.is_root ? L::Ok : L::Fail, "root",
      env.is_root ? "running as root" : "not root: khagent loads BPF programs and writes cgroups; run it as root");

  // Kernel and BTF.
  std::string release = env.kernel_release;
  if (release.empty()) {
    utsname u{};
    if (uname(&u) == 0) release = u.release;
  }
  int major = 0, minor = 0;
  if (sscanf(release.c_str(), "%d.%d", &major, &minor) != 2)
    add(L::Warn, "kernel", "cannot parse the kernel release '" + release + "' (khagent needs 5.13 or newer)");
  else if (major < 5 || (major == 5 && minor < 13))
    add(L::Fail, "kernel",
        release + " is too old: khagent needs 5.13 or newer (BPF task storage in tracing programs)");
  else
    add(L::Ok, "kernel", release + " (>= 5.13)");
  std::string btf = "/sys/kernel/btf/vmlinux";
  if (::access(at(btf).c_str(), R_OK) == 0)
    add(L::Ok, "btf", btf + " present");
  else
    add(L::Fail, "btf", btf + " missing: use a kernel built with CONFIG_DEBUG_INFO_BTF=y");

  // BPF program types, hooks and maps.
  if (!bpf.attempted) {
    add(L::Warn, "bpf programs", bpf.skip_reason.empty() ? "not checked" : bpf.skip_reason);
  } else {
    if (bpf.load_error.empty())
      add(L::Ok, "bpf programs", "tp_btf sched_wakeup, sched_wakeup_new and sched_switch load and attach");
    else
      add(L::Fail, "bpf programs",
          "tp_btf sched_* programs refused: " + bpf.load_error + " (run with --log-level debug for the verifier log)");
    if (bpf.fentry)
      add(L::Ok, "throttle hooks", "fentry on throttle_cfs_rq/unthrottle_cfs_rq: throttling measured in the kernel");
    else
      add(L::Warn, "throttle hooks", "fentry refused: throttling read from cpu.stat");
    std::vector<std::string> missing;
    if (!bpf.ringbuf) missing.push_back("ring buffer (5.8+)");
    if (!bpf.task_storage) missing.push_back("task storage (5.13+)");
    if (missing.empty())
      add(L::Ok, "bpf maps", "ring buffer and task storage supported");
    else
      add(L::Fail, "bpf maps", fmt::format("not supported by this kernel: {}", fmt::join(missing, ", ")));
  }

  std::string mountinfo = read_text_file(at("/proc/self/mountinfo"));
  auto bpffs = mounts_of_type(mountinfo, "bpf");
  if (std::find(bpffs.begin(), bpffs.end(), env.bpffs_dir) != bpffs.end())
    add(L::Ok, "bpffs", "mounted at " + env.bpffs_dir);
  else
    add(L::Warn, "bpffs",
        "not mounted at " + env.bpffs_dir + ": khagent mounts it to pin its maps (or: mount -t bpf bpf " +
            env.bpffs_dir + ")");

  // cgroup v2 and its controllers.
  Mounts m = parse_mountinfo(mountinfo);
  if (m.cgroup2.empty()) {
    add(L::Fail, "cgroup v2",
        "not mounted: khagent needs cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1, or mount -t cgroup2 "
        "none /sys/fs/cgroup/unified)");
  } else {
    std::string controllers = trim_space(read_text_file(at(m.cgroup2 + "/cgroup.controllers")));
    std::string subtree = trim_space(read_text_file(at(m.cgroup2 + "/cgroup.subtree_control")));
    add(L::Ok, "cgroup v2",
        fmt::format("{}{}; controllers at the root: {}; enabled for children: {}", m.cgroup2,
                    m.cpu_v1.empty() ? "" : " (hybrid: cpu controller on cgroup v1 at " + m.cpu_v1 + ")",
                    controllers.empty() ? "none" : controllers, subtree.empty() ? "none" : subtree));
    // `why`: what it means when khagent cannot use the controller; `missing`:
    // the level then.
    auto controller = [&](const std::string& c, const std::string& file, L missing, const std::string& why) {
      std::string name = c + " controller";
      std::string v1 = v1_mount_of(mountinfo, c);
      if (has_word(subtree, c))
        add(L::Ok, name, "enabled for child cgroups (" + file + " writable)");
      else if (has_word(controllers, c))
        add(missing, name,
            "available but not enabled for child cgroups (" + why + "): echo +" + c + " > " + m.cgroup2 +
                "/cgroup.subtree_control");
      else if (!v1.empty())
        add(L::Ok, name,
            "hybrid host: on cgroup v1 at " + v1 + "; khagent measures by cgroup2 ids and writes the v1 " + c +
                " files at the same relative path (" + (c == "cpu" ? "cpu.cfs_quota_us/cfs_period_us, cpu.shares, cpu.idle" : "cpuset.cpus") + ")");
      else
        add(missing, name, "not in " + m.cgroup2 + "/cgroup.controllers (" + why + ")");
    };
    {
      CgroupRoots roots{m.cgroup2, m.cpu_v1, m.cpuset_v1};
      auto b = choose_backend(roots, controllers);
      if (b)
        add(L::Ok, "cgroup backend", std::string(backend_name(*b)));
      else
        add(L::Fail, "cgroup backend", b.error().message);
    }
    controller("cpu", "cpu.max", L::Fail, "it measures but cannot limit offline CPU");
    controller("cpuset", "cpuset.cpus", cfg.cpuset.enabled ? L::Fail : L::Warn,
               cfg.cpuset.enabled ? "cpuset.enabled is on" : "only needed with cpuset.enabled");

    // Kubernetes: the kubelet's cgroup driver, from its layout.
    std::string kube;
    if (fs::is_directory(at(m.cgroup2 + "/kubepods.slice")))
      kube = "/kubepods.slice";
    else if (fs::is_directory(at(m.cgroup2 + "/kubepods")))
      kube = "/kubepods";
    if (!kube.empty()) {
      size_t pods = count_pods(at(m.cgroup2), kube);
      add(L::Ok, "kubelet",
          fmt::format("{} cgroup driver ({}, {} pod{})", kube == "/kubepods.slice" ? "systemd" : "cgroupfs", kube,
                      pods, pods == 1 ? "" : "s"));
    } else if (!m.cpu_v1.empty() && (fs::is_directory(at(m.cpu_v1 + "/kubepods.slice")) ||
                                     fs::is_directory(at(m.cpu_v1 + "/kubepods")))) {
      add(L::Warn, "kubelet",
          "kubelet pods only in cgroup v1 (" + m.cpu_v1 +
              "): khagent classifies cgroup v2 paths and will not see them; use the systemd cgroup driver or "
              "cgroup v2");
    } else {
      add(L::Warn, "kubelet",
          "no kubelet pods found (neither /kubepods.slice nor /kubepods under " + m.cgroup2 +
              "): online pods cannot be recognized until the kubelet runs here");
    }

    // YARN.
    if (!cfg.offline.yarn) {
      add(L::Ok, "yarn", "not used (offline.yarn: false)");
    } else {
      std::string y = find_yarn(at(m.cgroup2), cfg.offline.yarn_hierarchy);
      if (y.empty()) {
        add(L::Warn, "yarn",
            "no YARN hierarchy '" + cfg.offline.yarn_hierarchy + "' under " + m.cgroup2 +
                ": set offline.yarn_hierarchy to the NodeManager's cgroup hierarchy, or offline.yarn: false if "
                "this node runs no YARN");
      } else {
        size_t containers = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(at(m.cgroup2 + y), ec))
          if (e.is_directory() && e.path().filename().string().rfind("container_", 0) == 0) containers++;
        bool cpu_max = ::access(at(m.cgroup2 + y + "/cpu.max").c_str(), F_OK) == 0;
        add(cpu_max ? L::Ok : L::Warn, "yarn",
            fmt::format("hierarchy {} ({} container{}){}", y, containers, containers == 1 ? "" : "s",
                        cpu_max ? "" : "; it has no cpu.max: enable the cpu controller in its parent's "
                                       "cgroup.subtree_control"));
      }
    }
  }

  // The kubelet's CPU manager (read only; cpuset partitions avoid its CPUs).
  std::string cms = env.kubelet_dir + "/cpu_manager_state";
  L cms_bad = cfg.cpuset.enabled ? L::Fail : L::Warn;
  if (::access(at(cms).c_str(), F_OK) != 0) {
    add(L::Warn, "cpu manager", "no " + cms + " (no kubelet on this node, or it uses another --root-dir)");
  } else if (auto st = read_cpu_manager_state(at(cms)); !st) {
    add(cms_bad, "cpu manager", "cannot read " + cms + ": " + st.error().str());
  } else if (st->policy == "static") {
    add(L::Ok, "cpu manager",
        "policy static; " + (st->exclusive.empty() ? std::string("no CPUs exclusive to containers yet")
                                                   : "CPUs " + format_cpu_list(st->exclusive) +
                                                         " exclusive to containers (never given to offline)"));
  } else {
    add(L::Ok, "cpu manager", "policy " + st->policy);
  }

  // The state file: originals are saved there before any write.
  fs::path dir = fs::path(cfg.state_file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (fs::exists(at(dir.string()), ec)) {
    if (!fs::is_directory(at(dir.string()), ec)) {
      add(L::Fail, "state file", dir.string() + " exists and is not a directory: set state_file (or --state-file)");
    } else if (auto err = try_write_in(at(dir.string())); !err.empty()) {
      add(L::Fail, "state file",
          dir.string() + " is not writable (" + err +
              "): khagent saves original values there before any write; fix it or set state_file");
    } else {
      add(L::Ok, "state file", dir.string() + " writable (" + cfg.state_file + ")");
    }
  } else {
    fs::path anc = dir;
    while (!anc.empty() && anc != anc.root_path() && !fs::exists(at(anc.string()), ec)) anc = anc.parent_path();
    if (anc.empty()) anc = "/";
    if (auto err = try_write_in(at(anc.string())); err.empty())
      add(L::Ok, "state file", dir.string() + " will be created (" + anc.string() + " writable)");
    else
      add(L::Fail, "state file",
          dir.string() + " does not exist and " + anc.string() + " is not writable (" + err +
              "): create it or set state_file");
  }
  return out;
}

std::string format_doctor(const std::vector<DoctorCheck>& checks) {
  std::string out;
  size_t counts[3] = {0, 0, 0};
  for (const auto& c : checks) {
    const char* tag = c.level == CheckLevel::Ok ? "OK  " : c.level == CheckLevel::Warn ? "WARN" : "FAIL";
    counts[static_cast<size_t>(c.level)]++;
    out += fmt::format("{} {}{}\n", tag, c.name, c.detail.empty() ? "" : ": " + c.detail);
  }
  out += fmt::format("{} OK, {} WARN, {} FAIL\n", counts[0], counts[1], counts[2]);
  return out;
}

int doctor_exit_code(const std::vector<DoctorCheck>& checks) {
  return std::any_of(checks.begin(), checks.end(), [](const DoctorCheck& c) { return c.level == CheckLevel::Fail; })
             ? 1
             : 0;
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

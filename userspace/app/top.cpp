#include "khagent/app/top.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <sstream>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/app/agent.h"
#include "khagent/app/bootstrap.h"
#include "khagent/collect/collector.h"
#include "khagent/collect/memory.h"
#include "khagent/collect/topology.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/signals/offline_memory.h"
#include "khagent/util/clock.h"
#include "khagent/util/strings.h"

namespace khagent {

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
    struct sigaction sa{};
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
      if (i == kTopColumnHeaderLine) out += "\033[7m" + pad_right(line, static_cast<size_t>(cols)) + "\033[0m";
      else out += line + "\033[K";
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

// Applies the keys read from the terminal; whether the screen changed.
// q (or Ctrl-C) sets g_stop.
bool apply_keys(const char* buf, ssize_t got, TopModel& model) {
  bool redraw = false;
  for (ssize_t i = 0; i < got && !g_stop; i++) {
    switch (buf[i]) {
      case 'q':
      case 'Q':
      case 0x03: g_stop = 1; break;  // 0x03: Ctrl-C with ISIG off
      case 'o':
      case 'O':
        model.online_only = !model.online_only;
        redraw = true;
        break;
      case 's':
      case 'S':
        model.sort = next_top_sort(model.sort);
        redraw = true;
        break;
      default: break;
    }
  }
  return redraw;
}

// Where top's screen comes from each interval.
struct TopSource {
  Collector& collector;
  Classifier& classifier;
  size_t cpus;
  const NodeReads& reads;
  MemoryStallMeter* stall;
  const std::string& node_cgroup;
  bool reclaim_timed;  // the vmscan tracepoints are attached
};

TopMemory top_memory(const TopSource& src, const NodeSignals& node) {
  TopMemory out;
  if (!src.reads.has_memory()) return out;
  const TickSnapshot snap(src.reads, mono_ns());
  if (const auto& n = snap.node_memory(src.node_cgroup)) {
    out.capacity = n.value().limit.value_or(0);
    out.working_set = n.value().working_set();
  }
  std::vector<std::string> online;
  for (const auto& p : node.pods)
    if (p.cls == CgroupClass::Online) online.push_back(p.path);
  MemoryStall s = src.stall->step(snap, online);
  out.online_stall_share = s.max_share;
  out.worst = s.worst;
  if (src.reclaim_timed) out.online_reclaim_ns = node.reclaim[static_cast<size_t>(CgroupClass::Online)].total_ns();
  return out;
}

// Redraws at each interval and on keys until q or a signal; a failure's text.
std::string top_loop(const CliOptions& o, TerminalSession& term, ScreenLog& log, TopSource src, TopModel& model) {
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
      redraw = apply_keys(buf, got, model) || redraw;
      if (g_stop) break;
    }
    if (mono_ns() >= next) {
      next += o.interval_ns;
      if (next < mono_ns()) next = mono_ns() + o.interval_ns;  // fell behind: skip
      auto sample = src.collector.tick();
      if (!sample) return sample.error().str();
      Signals sig = compute_signals(*sample);
      NodeSignals node = rollup(*sample, src.classifier);
      TopModel fresh = make_top_model(sig, node, src.classifier, src.cpus, o.cgroup_prefix);
      fresh.memory = top_memory(src, node);
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
  return "";
}

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
  Mounts mounts;
  if (auto rc = checked_mounts(mounts)) return *rc;
  auto topo = read_topology();
  size_t cpus = topo ? topo->cpus.size() : static_cast<size_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));

  // top is a viewer: it never pins, so it cannot replace a running agent's pins.
  LoaderOptions lo = o.loader;
  lo.pin = false;
  Measuring meas;
  if (auto rc = start_measuring(mounts, lo, true, meas)) return *rc;
  Classifier classifier(cfg->classes, cfg->offline.yarn_hierarchy);
  if (auto first = meas.collector->tick(); !first) {
    spdlog::error("{}", first.error().str());
    return 1;
  }

  CgroupRoots roots = roots_of(mounts);
  CgroupBackend backend = CgroupBackend::V2;
  if (auto b = detect_backend(roots)) backend = *b;
  auto reads = real_node_reads(node_read_roots(roots, backend, memory_controller_for(backend, roots).ok(), ""));
  MemoryStallMeter stall;

  TopModel model;
  model.node_cpus = cpus;
  model.throttle_source = throttle_source_name(meas.bpf->throttle_source());
  model.online_only = o.online_only;
  std::string failure;
  {
    ScreenLog log;
    TerminalSession term;
    if (!term.enter()) failure = std::string("cannot set the terminal mode: ") + std::strerror(errno);
    else
      failure = top_loop(o, term, log,
                         {*meas.collector, classifier, cpus, *reads, &stall, cfg->memory.node_cgroup,
                          !meas.bpf->reclaim_kinds().empty()},
                         model);
  }  // terminal restored, captured log lines printed
  if (!failure.empty()) {
    spdlog::error("{}", failure);
    return 1;
  }
  return 0;
}

}  // namespace khagent

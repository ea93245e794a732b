// khagent_openloop: an open-loop HTTP/1.1 load generator for loopback services.
//
// Requests are due at fixed times, t0 + i / rate (or, with --arrivals poisson,
// at exponentially spaced times of the same mean rate), whatever the server does
// (no coordinated omission): each request's latency runs from its *intended*
// send time to the end of its response, so time spent waiting for a free
// keep-alive connection, or lost because this client was itself descheduled,
// counts against the service. One thread, epoll, a timerfd armed at the next
// intended time, one request in flight per connection (no pipelining).
//
//   khagent_openloop --url http://127.0.0.1:8080/file --rate 200 --duration 8
//                    --warmup 2 --connections 8 [--header 'Accept-Encoding: gzip']
//
// With --spread N, the URL's path holds "{}", and each request replaces it
// with a number drawn uniformly from 0..N-1 (seeded by --seed): a working set
// of N files rather than one.
//
// Output: one JSON line on stdout. count = measured requests answered 2xx;
// errors = measured requests that failed (non-2xx, connection error, timeout,
// still unanswered at the end). Percentiles are exact (nearest rank over all
// measured samples, sorted). send_lag_* is how late this client actually
// wrote each request relative to its intended time (the client's own delay,
// already included in the latency). Exit 2 on bad arguments, 1 when the
// service cannot be reached or nothing was measured.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int64_t kNsPerSec = 1'000'000'000;
constexpr size_t kMaxHead = 64 * 1024;

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr,
               "khagent_openloop: %s\n"
               "usage: khagent_openloop --url http://127.0.0.1:PORT/PATH --rate REQ_PER_S\n"
               "         [--duration S (10)] [--warmup S (1)] [--connections C (8)]\n"
               "         [--timeout S (5)] [--header 'Name: value']... [--arrivals uniform|poisson] [--seed N]\n"
               "         [--spread N (a path with {}: 0..N-1 in its place)]\n"
               "loopback only: the host must be 127.0.0.1, localhost or [::1]\n",
               msg.c_str());
  std::exit(2);
}

[[noreturn]] void fatal(const std::string& msg) {
  std::fprintf(stderr, "khagent_openloop: %s\n", msg.c_str());
  std::exit(1);
}

std::string errno_str() { return std::strerror(errno); }

struct Options {
  double rate = 0;
  double duration = 10;
  double warmup = 1;
  double timeout = 5;
  long connections = 8;
  bool poisson = false;  // exponential gaps (mean 1 / rate) instead of a fixed 1 / rate
  uint64_t seed = 1;
  long spread = 0;  // > 0: "{}" in the path becomes 0..spread-1, drawn per request
  std::string url;
  std::vector<std::string> headers;
};

double parse_number(std::string_view name, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(v)) {
    usage_error("bad value for " + std::string(name) + ": '" + value + "'");
  }
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool have_rate = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fprintf(stdout,
                   "usage: khagent_openloop --url http://127.0.0.1:PORT/PATH --rate REQ_PER_S\n"
                   "         [--duration S (10)] [--warmup S (1)] [--connections C (8)]\n"
                   "         [--timeout S (5)] [--header 'Name: value']... [--arrivals uniform|poisson] [--seed N]\n"
                   "         [--spread N (a path with {}: 0..N-1 in its place)]\n");
      std::exit(0);
    }
    std::string value;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      value = argv[++i];
    } else {
      usage_error("unexpected argument '" + arg + "'");
    }
    if (arg == "--rate") {
      o.rate = parse_number(arg, value);
      have_rate = true;
    } else if (arg == "--duration") {
      o.duration = parse_number(arg, value);
    } else if (arg == "--warmup") {
      o.warmup = parse_number(arg, value);
    } else if (arg == "--timeout") {
      o.timeout = parse_number(arg, value);
    } else if (arg == "--connections") {
      double c = parse_number(arg, value);
      if (c != std::floor(c) || c < 1 || c > 10000) usage_error("--connections must be an integer in 1..10000");
      o.connections = static_cast<long>(c);
    } else if (arg == "--arrivals") {
      if (value == "uniform") {
        o.poisson = false;
      } else if (value == "poisson") {
        o.poisson = true;
      } else {
        usage_error("--arrivals must be uniform or poisson");
      }
    } else if (arg == "--seed") {
      double v = parse_number(arg, value);
      if (v != std::floor(v) || v < 0 || v > 9e15) usage_error("--seed must be a whole number");
      o.seed = static_cast<uint64_t>(v);
    } else if (arg == "--spread") {
      double v = parse_number(arg, value);
      if (v != std::floor(v) || v < 1 || v > 1e6) usage_error("--spread must be an integer in 1..1000000");
      o.spread = static_cast<long>(v);
    } else if (arg == "--url") {
      o.url = value;
    } else if (arg == "--header") {
      if (value.find(':') == std::string::npos || value.find_first_of("\r\n") != std::string::npos) {
        usage_error("--header must be 'Name: value' on one line");
      }
      o.headers.push_back(value);
    } else {
      usage_error("unknown option " + arg);
    }
  }
  if (o.url.empty()) usage_error("--url is required");
  if ((o.spread > 0) != (o.url.find("{}") != std::string::npos))
    usage_error("--spread and a URL path with {} go together");
  if (!have_rate) usage_error("--rate is required");
  if (o.rate <= 0 || o.rate > 1e6) usage_error("--rate must be in (0, 1000000]");
  if (o.duration <= 0) usage_error("--duration must be > 0");
  if (o.warmup < 0) usage_error("--warmup must be >= 0");
  if (o.timeout <= 0) usage_error("--timeout must be > 0");
  if ((o.duration + o.warmup) * o.rate > 2e8) usage_error("too many requests (rate x (warmup + duration) > 2e8)");
  if (o.poisson && (o.duration + o.warmup) * o.rate > 5e7)
    usage_error("too many requests for --arrivals poisson (> 5e7)");
  return o;
}

struct Target {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string host_header;  // host[:port] as given
  std::string path;
};

Target parse_url(const std::string& url) {
  constexpr std::string_view scheme = "http://";
  if (url.rfind(scheme, 0) != 0) usage_error("only http:// URLs are supported: '" + url + "'");
  std::string rest = url.substr(scheme.size());
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Target t;
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  t.host_header = authority;
  if (authority.find('@') != std::string::npos) usage_error("user info in URLs is not supported");
  std::string host;
  std::string port_s;
  if (!authority.empty() && authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) usage_error("bad IPv6 address in '" + url + "'");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') usage_error("bad authority in '" + url + "'");
      port_s = authority.substr(close + 2);
    }
  } else {
    auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string::npos) port_s = authority.substr(colon + 1);
  }
  unsigned port = 80;
  if (!port_s.empty()) {
    auto [p, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
    if (ec != std::errc() || p != port_s.data() + port_s.size() || port == 0 || port > 65535) {
      usage_error("bad port '" + port_s + "'");
    }
  }
  if (host == "127.0.0.1" || host == "localhost") {
    auto* sa = reinterpret_cast<sockaddr_in*>(&t.addr);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(static_cast<uint16_t>(port));
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    t.addr_len = sizeof(sockaddr_in);
  } else if (host == "::1") {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&t.addr);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(static_cast<uint16_t>(port));
    sa->sin6_addr = in6addr_loopback;
    t.addr_len = sizeof(sockaddr_in6);
  } else {
    usage_error("refusing host '" + host + "': loopback only (127.0.0.1, localhost, [::1])");
  }
  return t;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Incremental HTTP/1.1 response parser: Content-Length, chunked, or until close.
class ResponseParser {
 public:
  enum class Result { NeedMore, Done, Error };

  void reset() {
    state_ = State::Head;
    buf_.clear();
    remaining_ = 0;
    status_ = 0;
    close_ = false;
  }
  int status() const { return status_; }
  bool close_after() const { return close_; }
  bool reads_until_close() const { return state_ == State::UntilClose; }

  Result feed(const char* data, size_t n) {
    buf_.append(data, n);
    size_t pos = 0;
    Result r = run(pos);
    buf_.erase(0, pos);
    return r;
  }

 private:
  enum class State { Head, Fixed, ChunkSize, ChunkData, ChunkCrlf, Trailer, UntilClose, Done };

  Result run(size_t& pos) {
    for (;;) {
      switch (state_) {
        case State::Head: {
          auto end = buf_.find("\r\n\r\n", pos);
          if (end == std::string::npos) return buf_.size() - pos > kMaxHead ? Result::Error : Result::NeedMore;
          if (!parse_head(std::string_view(buf_).substr(pos, end - pos))) return Result::Error;
          pos = end + 4;
          break;
        }
        case State::Fixed: {
          size_t take = std::min<size_t>(remaining_, buf_.size() - pos);
          pos += take;
          remaining_ -= take;
          if (remaining_ > 0) return Result::NeedMore;
          state_ = State::Done;
          break;
        }
        case State::ChunkSize: {
          auto eol = buf_.find("\r\n", pos);
          if (eol == std::string::npos) return buf_.size() - pos > 1024 ? Result::Error : Result::NeedMore;
          std::string_view line = std::string_view(buf_).substr(pos, eol - pos);
          line = line.substr(0, line.find(';'));
          while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
          uint64_t size = 0;
          auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
          if (line.empty() || ec != std::errc() || p != line.data() + line.size()) return Result::Error;
          pos = eol + 2;
          if (size == 0) {
            state_ = State::Trailer;
          } else {
            remaining_ = size;
            state_ = State::ChunkData;
          }
          break;
        }
        case State::ChunkData: {
          size_t take = std::min<size_t>(remaining_, buf_.size() - pos);
          pos += take;
          remaining_ -= take;
          if (remaining_ > 0) return Result::NeedMore;
          state_ = State::ChunkCrlf;
          break;
        }
        case State::ChunkCrlf: {
          if (buf_.size() - pos < 2) return Result::NeedMore;
          if (buf_.compare(pos, 2, "\r\n") != 0) return Result::Error;
          pos += 2;
          state_ = State::ChunkSize;
          break;
        }
        case State::Trailer: {
          auto eol = buf_.find("\r\n", pos);
          if (eol == std::string::npos) return buf_.size() - pos > kMaxHead ? Result::Error : Result::NeedMore;
          bool empty = eol == pos;
          pos = eol + 2;
          if (empty) state_ = State::Done;
          break;
        }
        case State::UntilClose: pos = buf_.size(); return Result::NeedMore;
        case State::Done:
          // Bytes after a complete response that nobody asked for.
          return pos == buf_.size() ? Result::Done : Result::Error;
      }
    }
  }

  bool parse_head(std::string_view head) {
    auto eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    // "HTTP/1.1 200 OK"
    if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") return false;
    bool http10 = status_line.substr(5, 3) == "1.0";
    auto sp = status_line.find(' ');
    if (sp == std::string_view::npos || sp + 4 > status_line.size()) return false;
    auto [p, ec] = std::from_chars(status_line.data() + sp + 1, status_line.data() + sp + 4, status_);
    if (ec != std::errc() || p != status_line.data() + sp + 4) return false;
    std::optional<uint64_t> content_length;
    bool chunked = false;
    bool keep_alive = false;
    while (eol != std::string_view::npos) {
      head.remove_prefix(eol + 2);
      eol = head.find("\r\n");
      std::string_view line = head.substr(0, eol);
      auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      std::string name = lower(line.substr(0, colon));
      if (name == "content-length") {
        uint64_t v = 0;
        auto [q, ec2] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec2 != std::errc() || q != value.data() + value.size()) return false;
        content_length = v;
      } else if (name == "transfer-encoding") {
        chunked = lower(value).find("chunked") != std::string::npos;
      } else if (name == "connection") {
        std::string v = lower(value);
        if (v.find("close") != std::string::npos) close_ = true;
        if (v.find("keep-alive") != std::string::npos) keep_alive = true;
      }
    }
    if (http10 && !keep_alive) close_ = true;
    if (status_ < 200 && status_ >= 100) return false;  // no interim responses expected for GET
    if (status_ == 204 || status_ == 304) {
      state_ = State::Done;
    } else if (chunked) {
      state_ = State::ChunkSize;
    } else if (content_length) {
      remaining_ = *content_length;
      state_ = remaining_ == 0 ? State::Done : State::Fixed;
    } else {
      state_ = State::UntilClose;
      close_ = true;
    }
    return true;
  }

  State state_ = State::Head;
  std::string buf_;
  uint64_t remaining_ = 0;
  int status_ = 0;
  bool close_ = false;
};

enum class ConnState { Closed, Connecting, Idle, Busy };

struct Conn {
  int fd = -1;
  ConnState state = ConnState::Closed;
  int64_t retry_at = 0;    // when Closed: earliest reconnect
  int64_t req = -1;        // request in flight
  int64_t sent_ns = 0;     // when its request was handed to the socket
  int64_t connect_ns = 0;  // when its connect started
  size_t out_off = 0;
  bool want_out = false;  // EPOLLOUT registered
  ResponseParser parser;
};

class Runner {
 public:
  Runner(const Options& o, const Target& t) : opt_(o), target_(t) {
    auto request_for = [&](const std::string& path) {
      std::string r = "GET " + path + " HTTP/1.1\r\nHost: " + t.host_header + "\r\nUser-Agent: khagent-openloop\r\n";
      for (const auto& h : o.headers) r += h + "\r\n";
      return r + "\r\n";
    };
    total_ = static_cast<int64_t>(std::llround((o.warmup + o.duration) * o.rate));
    if (o.spread > 0) {
      const size_t at = t.path.find("{}");
      for (long k = 0; k < o.spread; ++k)
        requests_.push_back(request_for(t.path.substr(0, at) + std::to_string(k) + t.path.substr(at + 2)));
      std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ULL);
      std::uniform_int_distribution<long> pick(0, o.spread - 1);
      choice_.resize(static_cast<size_t>(std::max<int64_t>(total_, 0)));
      for (auto& c : choice_) c = static_cast<uint32_t>(pick(rng));
    } else {
      requests_.push_back(request_for(t.path));
    }
    warm_ = static_cast<int64_t>(std::llround(o.warmup * o.rate));
    if (total_ - warm_ < 1) usage_error("--rate x --duration gives no measured request");
    period_ns_ = static_cast<double>(kNsPerSec) / o.rate;
    if (o.poisson) {
      // Poisson arrivals: the same mean rate without a fixed phase (a fixed
      // 1 / rate can lock onto periodic effects such as a CFS quota period).
      std::mt19937_64 rng(o.seed);
      std::exponential_distribution<double> gap(1.0 / period_ns_);
      offsets_.resize(static_cast<size_t>(total_));
      double at = 0;
      for (auto& off : offsets_) {
        off = static_cast<int64_t>(std::llround(at));
        at += gap(rng);
      }
    }
    timeout_ns_ = static_cast<int64_t>(o.timeout * kNsPerSec);
    latency_.reserve(static_cast<size_t>(total_ - warm_));
    lag_.reserve(static_cast<size_t>(total_ - warm_));
  }

  int run() {
    // Timer slack (50 us by default) would make every send late by up to that much.
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep_ < 0 || tfd_ < 0) fatal("epoll/timerfd: " + errno_str());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kTimerTag;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, tfd_, &ev) != 0) fatal("epoll_ctl: " + errno_str());

    probe_service();
    conns_.resize(static_cast<size_t>(opt_.connections));
    for (size_t i = 0; i < conns_.size(); ++i) start_connect(i);

    t0_ = now_ns() + 20'000'000;  // let the connections finish first
    const int64_t last_intended = intended(total_ - 1);
    const int64_t drain_deadline = last_intended + timeout_ns_;
    int64_t armed_for = -1;
    std::vector<epoll_event> events(64);

    for (;;) {
      int64_t now = now_ns();
      while (next_ < total_ && intended(next_) <= now) pending_.push_back(next_++);
      max_pending_ = std::max(max_pending_, pending_.size());
      dispatch(now);
      check_timeouts(now);
      reconnect_closed(now);
      if (next_ == total_ && pending_.empty() && inflight_ == 0) break;
      if (next_ == total_ && now >= drain_deadline) break;
      if (next_ < total_ && armed_for != next_) {
        arm_timer(intended(next_));
        armed_for = next_;
      }
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 10);
      if (n < 0) {
        if (errno == EINTR) continue;
        fatal("epoll_wait: " + errno_str());
      }
      for (int k = 0; k < n; ++k) {
        if (events[k].data.u64 == kTimerTag) {
          uint64_t expirations = 0;
          [[maybe_unused]] ssize_t r = read(tfd_, &expirations, sizeof expirations);
          continue;
        }
        handle_conn_event(static_cast<size_t>(events[k].data.u64), events[k].events);
      }
    }
    // Whatever is still unanswered or never sent counts as failed.
    for (auto& c : conns_) {
      if (c.state == ConnState::Busy && c.req >= warm_) ++errors_;
      if (c.fd >= 0) close(c.fd);
    }
    for (int64_t r : pending_) {
      if (r >= warm_) ++errors_;
    }
    errors_ += total_ - next_;  // never scheduled (cannot happen unless the loop broke early)
    report();
    return latency_.empty() ? 1 : 0;
  }

 private:
  static constexpr uint64_t kTimerTag = ~0ULL;

  int64_t intended(int64_t i) const {
    if (!offsets_.empty()) return t0_ + offsets_[static_cast<size_t>(i)];
    return t0_ + static_cast<int64_t>(std::llround(static_cast<double>(i) * period_ns_));
  }

  void arm_timer(int64_t at_ns) {
    itimerspec its{};
    its.it_value.tv_sec = at_ns / kNsPerSec;
    its.it_value.tv_nsec = at_ns % kNsPerSec;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    if (timerfd_settime(tfd_, TFD_TIMER_ABSTIME, &its, nullptr) != 0) fatal("timerfd_settime: " + errno_str());
  }

  int new_socket() {
    int fd = socket(target_.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fatal("socket: " + errno_str());
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }

  // One blocking connect first, so an absent service is a clear error.
  void probe_service() {
    int fd = socket(target_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fatal("socket: " + errno_str());
    if (connect(fd, reinterpret_cast<const sockaddr*>(&target_.addr), target_.addr_len) != 0) {
      std::string e = errno_str();
      close(fd);
      fatal("cannot connect to " + opt_.url + ": " + e);
    }
    close(fd);
  }

  void set_events(Conn& c, size_t idx, bool want_out, int op) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
    ev.data.u64 = idx;
    if (epoll_ctl(ep_, op, c.fd, &ev) != 0) fatal("epoll_ctl: " + errno_str());
    c.want_out = want_out;
  }

  void start_connect(size_t idx) {
    Conn& c = conns_[idx];
    c.fd = new_socket();
    c.parser.reset();
    c.req = -1;
    c.connect_ns = now_ns();
    int r = connect(c.fd, reinterpret_cast<const sockaddr*>(&target_.addr), target_.addr_len);
    if (r == 0) {
      c.state = ConnState::Idle;
      set_events(c, idx, false, EPOLL_CTL_ADD);
      idle_.push_back(idx);
    } else if (errno == EINPROGRESS) {
      c.state = ConnState::Connecting;
      set_events(c, idx, true, EPOLL_CTL_ADD);
    } else {
      close(c.fd);
      c.fd = -1;
      c.state = ConnState::Closed;
      c.retry_at = now_ns() + 50'000'000;
      ++connect_errors_;
    }
  }

  // A failed request is recorded; the connection is closed and opened again.
  void drop(size_t idx, bool request_failed) {
    Conn& c = conns_[idx];
    if (c.state == ConnState::Busy) {
      --inflight_;
      if (request_failed) count_error(c.req);
    }
    if (c.state == ConnState::Idle) idle_.erase(std::remove(idle_.begin(), idle_.end(), idx), idle_.end());
    if (c.fd >= 0) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
    }
    c.fd = -1;
    c.state = ConnState::Closed;
    c.req = -1;
    c.retry_at = 0;
    ++reconnects_;
  }

  void count_error(int64_t req) {
    if (req >= warm_) {
      ++errors_;
    } else {
      ++warmup_errors_;
    }
  }

  void reconnect_closed(int64_t now) {
    for (size_t i = 0; i < conns_.size(); ++i) {
      if (conns_[i].state == ConnState::Closed && now >= conns_[i].retry_at) start_connect(i);
    }
  }

  void dispatch(int64_t now) {
    while (!pending_.empty() && !idle_.empty()) {
      size_t idx = idle_.back();
      idle_.pop_back();
      Conn& c = conns_[idx];
      c.req = pending_.front();
      pending_.pop_front();
      c.state = ConnState::Busy;
      c.sent_ns = now;
      c.out_off = 0;
      c.parser.reset();
      ++inflight_;
      write_more(idx);
      now = now_ns();
    }
  }

  void write_more(size_t idx) {
    Conn& c = conns_[idx];
    const std::string& rq = request_of(c.req);
    while (c.out_off < rq.size()) {
      ssize_t w = send(c.fd, rq.data() + c.out_off, rq.size() - c.out_off, MSG_NOSIGNAL);
      if (w > 0) {
        c.out_off += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.want_out) set_events(c, idx, true, EPOLL_CTL_MOD);
        return;
      }
      drop(idx, true);
      return;
    }
    if (c.want_out) set_events(c, idx, false, EPOLL_CTL_MOD);
  }

  void check_timeouts(int64_t now) {
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      if (c.state == ConnState::Busy && now - c.sent_ns > timeout_ns_) {
        ++timeouts_;
        drop(i, true);
      } else if (c.state == ConnState::Connecting && now - c.connect_ns > timeout_ns_) {
        drop(i, false);
      }
    }
  }

  void complete(size_t idx) {
    Conn& c = conns_[idx];
    int64_t done = now_ns();
    int64_t req = c.req;
    --inflight_;
    if (c.parser.status() >= 200 && c.parser.status() < 300) {
      if (req >= warm_) {
        latency_.push_back(done - intended(req));
        lag_.push_back(c.sent_ns - intended(req));
        last_done_ = done;
      }
    } else {
      ++bad_status_;
      count_error(req);
    }
    c.req = -1;
    if (c.parser.close_after()) {
      c.state = ConnState::Idle;  // so drop() neither counts it nor touches inflight
      idle_.push_back(idx);
      drop(idx, false);
      return;
    }
    c.state = ConnState::Idle;
    idle_.push_back(idx);
  }

  void handle_conn_event(size_t idx, uint32_t events) {
    Conn& c = conns_[idx];
    if (c.fd < 0) return;
    if (c.state == ConnState::Connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
        ++connect_errors_;
        drop(idx, false);
        conns_[idx].retry_at = now_ns() + 50'000'000;
        return;
      }
      c.state = ConnState::Idle;
      set_events(c, idx, false, EPOLL_CTL_MOD);
      idle_.push_back(idx);
      return;
    }
    if ((events & EPOLLOUT) && c.state == ConnState::Busy) {
      write_more(idx);
      if (conns_[idx].fd < 0) return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) read_more(idx);
  }

  void read_more(size_t idx) {
    char buf[64 * 1024];
    for (;;) {
      Conn& c = conns_[idx];
      ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (c.state != ConnState::Busy) {  // bytes nobody asked for
          drop(idx, false);
          return;
        }
        auto r = c.parser.feed(buf, static_cast<size_t>(n));
        if (r == ResponseParser::Result::Done) {
          complete(idx);
          if (conns_[idx].state != ConnState::Idle) return;
          continue;  // drain a possible EOF behind it
        }
        if (r == ResponseParser::Result::Error) {
          ++protocol_errors_;
          drop(idx, true);
          return;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EOF or error.
      if (c.state == ConnState::Busy && n == 0 && c.parser.reads_until_close()) {
        complete(idx);
        if (conns_[idx].fd >= 0) drop(idx, false);
        return;
      }
      drop(idx, c.state == ConnState::Busy);
      return;
    }
  }

  static double pct_us(const std::vector<int64_t>& sorted, double q) {
    if (sorted.empty()) return 0;
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    if (rank < 1) rank = 1;
    if (rank > sorted.size()) rank = sorted.size();
    return static_cast<double>(sorted[rank - 1]) / 1000.0;
  }

  void report() {
    std::sort(latency_.begin(), latency_.end());
    std::sort(lag_.begin(), lag_.end());
    double mean = 0;
    for (int64_t v : latency_) mean += static_cast<double>(v);
    if (!latency_.empty()) mean /= static_cast<double>(latency_.size()) * 1000.0;
    int64_t start = intended(warm_);
    // Answers per second over the measured window, or longer if answers came late.
    double span_s =
        std::max(opt_.duration, last_done_ > start ? static_cast<double>(last_done_ - start) / kNsPerSec : 0);
    double achieved = span_s > 0 ? static_cast<double>(latency_.size()) / span_s : 0;
    std::printf(
        "{\"count\":%zu,\"errors\":%lld,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
        "\"max_us\":%.1f,\"mean_us\":%.1f,\"rate_target\":%.3f,\"rate_achieved\":%.3f,\"scheduled\":%lld,"
        "\"warmup_requests\":%lld,\"warmup_errors\":%lld,\"connections\":%ld,\"duration_s\":%.3f,"
        "\"send_lag_p50_us\":%.1f,\"send_lag_p99_us\":%.1f,\"send_lag_max_us\":%.1f,\"max_queued\":%zu,"
        "\"timeouts\":%lld,\"bad_status\":%lld,\"protocol_errors\":%lld,\"connect_errors\":%lld,"
        "\"reconnects\":%lld,\"arrivals\":\"%s\"}\n",
        latency_.size(), static_cast<long long>(errors_), pct_us(latency_, 0.50), pct_us(latency_, 0.90),
        pct_us(latency_, 0.99), pct_us(latency_, 0.999),
        latency_.empty() ? 0.0 : static_cast<double>(latency_.back()) / 1000.0, mean, opt_.rate, achieved,
        static_cast<long long>(total_ - warm_), static_cast<long long>(warm_), static_cast<long long>(warmup_errors_),
        opt_.connections, opt_.duration, pct_us(lag_, 0.50), pct_us(lag_, 0.99),
        lag_.empty() ? 0.0 : static_cast<double>(lag_.back()) / 1000.0, max_pending_, static_cast<long long>(timeouts_),
        static_cast<long long>(bad_status_), static_cast<long long>(protocol_errors_),
        static_cast<long long>(connect_errors_), static_cast<long long>(reconnects_),
        opt_.poisson ? "poisson" : "uniform");
    std::fflush(stdout);
  }

  const Options& opt_;
  const Target& target_;
  // The request text of request number `req` (the probe's: the first).
  const std::string& request_of(int64_t req) const {
    if (choice_.empty() || req < 0 || static_cast<size_t>(req) >= choice_.size()) return requests_.front();
    return requests_[choice_[static_cast<size_t>(req)]];
  }
  std::vector<std::string> requests_;  // one per path (--spread), else one
  std::vector<uint32_t> choice_;       // --spread: the path of each request
  int ep_ = -1;
  int tfd_ = -1;
  std::vector<Conn> conns_;
  std::vector<size_t> idle_;
  std::deque<int64_t> pending_;
  int64_t total_ = 0;
  int64_t warm_ = 0;
  int64_t next_ = 0;
  int64_t t0_ = 0;
  double period_ns_ = 0;
  std::vector<int64_t> offsets_;  // --arrivals poisson: intended send times from t0
  int64_t timeout_ns_ = 0;
  int64_t inflight_ = 0;
  int64_t last_done_ = 0;
  size_t max_pending_ = 0;
  std::vector<int64_t> latency_;
  std::vector<int64_t> lag_;
  int64_t errors_ = 0;
  int64_t warmup_errors_ = 0;
  int64_t timeouts_ = 0;
  int64_t bad_status_ = 0;
  int64_t protocol_errors_ = 0;
  int64_t connect_errors_ = 0;
  int64_t reconnects_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  Target target = parse_url(opt.url);
  Runner runner(opt, target);
  return runner.run();
}

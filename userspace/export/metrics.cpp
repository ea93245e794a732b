#include "khagent/export/metrics.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "khagent/util/clock.h"
#include "metrics_parts.h"

namespace khagent {

namespace {

using metrics::FamilySpec;
using metrics::MetricType;
using metrics::secs;

// The agent's own family; the others are declared by the parts, in their files.
enum AgentFamily : size_t { kBuildInfo, kNrAgentFamilies };
constexpr std::array<FamilySpec, kNrAgentFamilies> kAgentFamilies = {{
    {kBuildInfo, "khagent_build_info", MetricType::Gauge, {"version"}, "khagent version"},
}};
static_assert(metrics::rows_in_order(kAgentFamilies));

std::string endpoint(const std::string& address, int port) {
  if (address.find(':') != std::string::npos) return fmt::format("[{}]:{}", address, port);
  return fmt::format("{}:{}", address, port);
}

}  // namespace

struct Metrics::Impl {
  explicit Impl(MetricsOptions o) : opt(std::move(o)) {
    metrics::TableFamily<metrics::Gauge>(registry, kAgentFamilies[kBuildInfo]).add({opt.version}).Set(1);
  }

  MetricsOptions opt;

  // Guards the registry and the parts, so that a scrape sees one tick
  // entirely or not at all.
  std::mutex mu;
  prometheus::Registry registry;
  // The parts register their eager families in this order (within a metric
  // type, the order of /metrics): keep it.
  metrics::RunqMetrics runq{registry, opt};
  metrics::BudgetMetrics budget{registry};
  metrics::ActionMetrics actions{registry};
  metrics::LeverMetrics levers{registry};
  metrics::BpfMetrics bpf{registry};
  metrics::MemoryMetrics memory{registry};
  metrics::BurstMetrics burst{registry};
  metrics::CacheReclaimMetrics reclaim{registry};
  metrics::YarnMetrics yarn{registry};
  metrics::CapacityMetrics capacity{registry};
  metrics::IoMetrics io{registry};

  // Health, read by the HTTP thread without `mu`.
  std::atomic<bool> bpf_attached{false};
  std::atomic<bool> ready{false};
  std::atomic<uint64_t> last_update_ns{0};  // steady clock; 0 = never

  // Server lifecycle, guarded by `life_mu`.
  std::mutex life_mu;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<bool> listen_done{false};
  std::atomic<int> bound_port{0};

  std::pair<bool, std::string> health() const;
  std::string render();
};

std::pair<bool, std::string> Metrics::Impl::health() const {
  if (!bpf_attached) return {false, "bpf programs not attached"};
  uint64_t last = last_update_ns;
  if (opt.stall_seconds > 0 && last != 0) {
    double age = secs(mono_ns() - last);
    if (age > opt.stall_seconds)
      return {false, fmt::format("no tick for {:.1f}s (limit {:.1f}s)", age, opt.stall_seconds)};
  }
  return {true, "ok"};
}

std::string Metrics::Impl::render() {
  std::lock_guard lk(mu);
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

Metrics::Metrics(MetricsOptions o) : impl_(std::make_unique<Impl>(std::move(o))) {
  impl_->bound_port = impl_->opt.port;
}

Metrics::~Metrics() { stop(); }

Result<void> Metrics::start() {
  auto& m = *impl_;
  std::lock_guard lk(m.life_mu);
  if (m.thread.joinable())
    return make_error(0, fmt::format("metrics server already running on {}", endpoint(m.opt.address, m.bound_port)));

  auto srv = std::make_unique<httplib::Server>();
  // Two workers are plenty for a scraper and probes (the default is >= 8).
  srv->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib sets SO_REUSEPORT by default, which lets a second agent bind the
  // same port and silently share it; SO_REUSEADDR alone still fails then.
  srv->set_socket_options([](socket_t s) {
    int yes = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // One request per connection (a scrape every few seconds gains nothing from
  // keep-alive) and short timeouts, so that stop() is not held up by idle
  // connections: at most ~1 s by one that connected and sent nothing.
  srv->set_keep_alive_max_count(1);
  srv->set_keep_alive_timeout(1);
  srv->set_read_timeout(2);
  srv->set_write_timeout(2);

  Impl* impl = &m;
  srv->Get("/metrics", [impl](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl->render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  srv->Get("/healthz", [impl](const httplib::Request&, httplib::Response& res) {
    auto [ok, why] = impl->health();
    res.status = ok ? 200 : 503;
    res.set_content(why, "text/plain; charset=utf-8");
  });
  srv->Get("/readyz", [impl](const httplib::Request&, httplib::Response& res) {
    bool ok = impl->ready;
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok" : "first tick not done", "text/plain; charset=utf-8");
  });

  errno = 0;
  int port = m.opt.port;
  bool bound = false;
  if (port == 0) {
    port = srv->bind_to_any_port(m.opt.address);
    bound = port > 0;
  } else {
    bound = srv->bind_to_port(m.opt.address, port);
  }
  if (!bound)
    return make_error(errno, fmt::format("metrics: cannot listen on {}", endpoint(m.opt.address, m.opt.port)));

  m.bound_port = port;
  m.server = std::move(srv);
  m.listen_done = false;
  m.thread = std::thread([impl] {
    impl->server->listen_after_bind();
    impl->listen_done = true;
  });
  // httplib's stop() does nothing until the accept loop runs: wait for it.
  while (!m.server->is_running() && !m.listen_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (m.listen_done) {
    m.thread.join();
    m.server.reset();
    return make_error(0, fmt::format("metrics: server on {} stopped at once", endpoint(m.opt.address, port)));
  }
  return {};
}

int Metrics::port() const { return impl_->bound_port; }

void Metrics::stop() {
  auto& m = *impl_;
  std::lock_guard lk(m.life_mu);
  if (!m.thread.joinable()) return;
  m.server->stop();
  m.thread.join();
  m.server.reset();
}

void Metrics::set_bpf_attached(bool attached) { impl_->bpf_attached = attached; }

void Metrics::set_ready() { impl_->ready = true; }

void Metrics::set_throttle_source(const std::string& source) {
  std::lock_guard lk(impl_->mu);
  impl_->bpf.set_throttle_source(source);
}

void Metrics::update(const NodeSignals& node, const Sample& sample) {
  auto& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    m.runq.update(node);
    m.bpf.update(sample);
  }
  m.last_update_ns = mono_ns();
}

void Metrics::record_decision(const Decision& d) {
  std::lock_guard lk(impl_->mu);
  impl_->budget.record_decision(d);
}

void Metrics::record_memory(const MemoryInput& in, const MemoryDecision& d) {
  std::lock_guard lk(impl_->mu);
  impl_->memory.record(in, d);
}

void Metrics::record_memory_stall(const MemoryStall& s) {
  std::lock_guard lk(impl_->mu);
  impl_->memory.record_stall(s);
}

void Metrics::record_psi_triggers(size_t n) {
  std::lock_guard lk(impl_->mu);
  impl_->memory.record_psi_triggers(n);
}

void Metrics::record_burst(const BurstReport& r) {
  std::lock_guard lk(impl_->mu);
  impl_->burst.record(r);
}

void Metrics::record_cache_reclaim(const CacheReclaimReport& r) {
  std::lock_guard lk(impl_->mu);
  impl_->reclaim.record(r);
}

void Metrics::record_memory_events(const MemoryEvents& e) {
  std::lock_guard lk(impl_->mu);
  impl_->memory.record_events(e);
}

void Metrics::record_actions(const std::vector<ActionRecord>& recs) {
  std::lock_guard lk(impl_->mu);
  impl_->actions.record(recs);
}

void Metrics::record_levers(const std::vector<std::pair<std::string, bool>>& active) {
  std::lock_guard lk(impl_->mu);
  impl_->levers.record_levers(active);
}

void Metrics::record_ladder_step(const std::string& lever, const std::string& action, double before_ratio,
                                 double after_ratio, bool verdict) {
  std::lock_guard lk(impl_->mu);
  impl_->levers.record_ladder_step(lever, action, before_ratio, after_ratio, verdict);
}

void Metrics::record_reaction(double seconds) {
  std::lock_guard lk(impl_->mu);
  impl_->budget.record_reaction(seconds);
}

void Metrics::update_bpf_cost(const std::vector<ProgStats>& progs) {
  std::lock_guard lk(impl_->mu);
  impl_->bpf.update_cost(progs);
}

void Metrics::update_yarn(const YarnStatus& st) {
  std::lock_guard lk(impl_->mu);
  impl_->yarn.update(st);
}

void Metrics::record_io(const IoReport& r) {
  std::lock_guard lk(impl_->mu);
  impl_->io.record(r);
}

void Metrics::update_capacity(const CapacityPlan& plan) {
  std::lock_guard lk(impl_->mu);
  impl_->capacity.update(plan);
}

void Metrics::update_capacity(const CapacityStatus& st) {
  std::lock_guard lk(impl_->mu);
  impl_->capacity.update(st);
}

std::string Metrics::render() { return impl_->render(); }

}  // namespace khagent

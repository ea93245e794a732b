// The online burst controller's report: which pods got a burst, which were
// refused one and why, in the log, on /metrics and in the report file that
// `khagent status` reads.
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"
#include "khagent/export/status_report.h"
#include "khagent/util/file.h"

namespace khagent {

std::string capacity_report_path(const std::string& state_file) {
  return std::filesystem::path(state_file).replace_extension(".capacity.json").string();
}

std::string burst_report_path(const std::string& state_file) {
  return std::filesystem::path(state_file).replace_extension(".burst.json").string();
}

ReportExporter::~ReportExporter() {
  // A report of an agent that stopped would be read as a live one.
  if (burst_written_ns_) std::remove(burst_report_path(cfg_.state_file).c_str());
  if (capacity_written_ns_) std::remove(capacity_report_path(cfg_.state_file).c_str());
}

namespace {

const char* burst_name(BurstPod::Burst b) {
  switch (b) {
    case BurstPod::Burst::None: return "none";
    case BurstPod::Burst::Given: return "given";
    case BurstPod::Burst::InForce: return "in-force";
    case BurstPod::Burst::Refused: return "refused";
  }
  return "none";
}

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

std::string burst_report_json(const BurstReport& r, const Config& cfg, int64_t unix_s) {
  StatusBurst b;
  b.time = unix_s;
  b.share = r.share;
  b.window_s = static_cast<double>(cfg.online.self_throttle_window_ns) / 1e9;
  b.pods.reserve(r.online.size());
  for (const auto& p : r.online)
    b.pods.push_back({p.path, p.window_s, p.waits, ms(p.wait_ns), ms(p.throttled_wait_ns), p.throttled_periods,
                      p.wait_p99_us / 1000, verdict_name(p.verdict), p.why, burst_name(p.burst), p.burst_us, p.cgroups,
                      p.burst == BurstPod::Burst::Refused ? refusal_text(p.refusal) : ""});
  return burst_report_text(b);
}

void ReportExporter::write_burst_report(const BurstReport& r) {
  if (cfg_.dry_run || cfg_.state_file.empty()) return;  // a dry run writes nothing
  std::string verdicts;
  for (const auto& p : r.online)
    verdicts +=
        fmt::format("{} {} {} {}\n", p.path, verdict_name(p.verdict), burst_name(p.burst), refusal_name(p.refusal));
  if (verdicts == burst_verdicts_ && now_ns_ - burst_written_ns_ < 1'000'000'000ULL) return;
  const std::string path = burst_report_path(cfg_.state_file);
  std::error_code ec;  // the state file's folder, made by the first save if not before
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  auto w = write_file_atomic(path, burst_report_json(r, cfg_, static_cast<int64_t>(std::time(nullptr))), 0644, false);
  if (!w) {
    if (!burst_write_failed_)
      spdlog::warn("CPU burst: cannot write {}: {} (khagent status will not show it)", path, w.error().message);
    burst_write_failed_ = true;
    return;
  }
  burst_write_failed_ = false;
  burst_verdicts_ = std::move(verdicts);
  burst_written_ns_ = now_ns_;
}

bool ReportExporter::allow_for(const std::string& pod, const std::string& key) {
  burst_keys_[pod].insert(key);
  return warned_.allow(key, now_ns_);
}

void ReportExporter::operator()(const BurstReport& r) {
  // The once-a-minute keys of pods that are gone.
  std::set<std::string> online;
  for (const auto& p : r.online) online.insert(p.path);
  std::erase_if(burst_keys_, [&](const auto& kv) {
    if (online.count(kv.first)) return false;
    for (const auto& key : kv.second) warned_.forget(key);
    return true;
  });
  for (const auto& p : r.online) {
    if (p.burst == BurstPod::Burst::Given) {
      spdlog::info(
          "online {}: self-throttled {}; CPU burst of {:.0f}% of its quota on the pod and its containers "
          "({} us on {} cgroup{})",
          p.path, p.why, r.share * 100, p.burst_us, p.cgroups, p.cgroups == 1 ? "" : "s");
    } else if (p.burst == BurstPod::Burst::Refused) {
      if (p.first)
        spdlog::warn("online {}: self-throttled {}; no CPU burst: {}", p.path, p.why, refusal_text(p.refusal));
    } else if (p.burst == BurstPod::Burst::InForce && p.verdict == BurstPod::Verdict::SelfThrottled) {
      if (allow_for(p.path, "quota " + p.path))
        spdlog::warn(
            "online {}: self-throttled {}, with its CPU burst of {} us in place (a burst lends only what earlier "
            "periods left unused: a pod busy at its limit needs a larger limit)",
            p.path, p.why, p.burst_us);
    } else if (p.verdict == BurstPod::Verdict::TooFew && spdlog::should_log(spdlog::level::debug)) {
      if (allow_for(p.path, "too few " + p.path)) spdlog::debug("online {}: throttled {}", p.path, p.why);
    }
  }
  for (const auto& n : r.notes) {
    if (n.kind == BurstNote::Kind::NoBurstFile) {
      if (warned_.allow("no burst", now_ns_))
        spdlog::warn("CPU burst: {} has no burst file (kernels before 5.14): no burst for it", n.path);
    } else if (allow_for(n.pod, "foreign burst " + n.path)) {
      spdlog::info("CPU burst: {} already has a burst of {} us that khagent did not write: left alone", n.path,
                   n.burst_us);
    }
  }
  if (metrics_) metrics_->record_burst(r);
  write_burst_report(r);
}

}  // namespace khagent

// khagent_verifier_stats: what the kernel's verifier did with each program of
// the runq BPF object on this kernel. Loads the object as `khagent run` with
// its built-in defaults does (RunqBpf::open_and_load: the same rodata, map
// sizes and choice of programs), with the verifier's statistics asked for
// (log level 4, BPF_LOG_STATS), attaches nothing, prints one row per program
// and unloads. scripts/verifier-stats.sh runs it and puts the table in
// docs/bpftool.md.
//
//   khagent_verifier_stats [--json] [--no-fentry] [--no-fast-path]
//
// Exit codes: 0 loaded, 1 the load failed (the failing program's verifier
// log on stderr), 2 cannot run here (not root, kernel too old, no BTF) or
// bad arguments.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/utsname.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "khagent/config/config.h"
#include "khagent/loader/runq_loader.h"

namespace {

using namespace khagent;

constexpr int kLogStats = 4;                 // BPF_LOG_STATS
constexpr size_t kLogSize = 1 << 20;         // per program; statistics take a few lines
constexpr uint64_t kDefaultLimit = 1000000;  // BPF_COMPLEXITY_LIMIT_INSNS

// The statistics lines of a verifier log (kernel/bpf/verifier.c,
// print_verification_stats):
//   verification time 1234 usec
//   stack depth 64+0
//   processed 5678 insns (limit 1000000) max_states_per_insn 4 total_states 321 peak_states 123 mark_read 45
struct VerifierStats {
  std::optional<uint64_t> processed, limit, max_states_per_insn, total_states, peak_states, mark_read, time_usec;
  std::string stack_depth;
};

VerifierStats parse_stats(const std::string& log) {
  VerifierStats v;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    unsigned long long a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
    char depth[128] = {};
    if (std::sscanf(line.c_str(), "verification time %llu usec", &a) == 1) {
      v.time_usec = a;
    } else if (std::sscanf(line.c_str(), "stack depth %127s", depth) == 1) {
      v.stack_depth = depth;
    } else if (int n = std::sscanf(line.c_str(),
                                   "processed %llu insns (limit %llu) max_states_per_insn %llu "
                                   "total_states %llu peak_states %llu mark_read %llu",
                                   &a, &b, &c, &d, &e, &f);
               n >= 1) {
      v.processed = a;
      if (n >= 2) v.limit = b;
      if (n >= 3) v.max_states_per_insn = c;
      if (n >= 4) v.total_states = d;
      if (n >= 5) v.peak_states = e;
      if (n >= 6) v.mark_read = f;
    }
  }
  return v;
}

struct ProgRow {
  std::string name, section;
  bool loaded = false;
  std::string reason;  // why not loaded
  std::unique_ptr<char[]> log;
  VerifierStats stats;
  uint32_t xlated_insns = 0, jited_bytes = 0, verified_insns = 0;

  std::string log_text() const { return log ? std::string(log.get()) : std::string(); }
};

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string num(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "-"; }

double share_of_limit(const ProgRow& r) {
  uint64_t limit = r.stats.limit.value_or(kDefaultLimit);
  return limit ? 100.0 * static_cast<double>(r.stats.processed.value_or(0)) / static_cast<double>(limit) : 0.0;
}

const ProgRow* closest_to_limit(const std::vector<ProgRow>& rows) {
  const ProgRow* best = nullptr;
  for (const auto& r : rows)
    if (r.loaded && r.stats.processed && (!best || share_of_limit(r) > share_of_limit(*best))) best = &r;
  return best;
}

void print_json(const std::vector<ProgRow>& rows, const std::string& kernel) {
  nlohmann::json progs = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json p = {{"name", r.name}, {"section", r.section}, {"loaded", r.loaded}};
    if (!r.loaded) {
      p["reason"] = r.reason;
    } else {
      p["processed_insns"] = opt(r.stats.processed);
      p["insn_limit"] = opt(r.stats.limit);
      p["max_states_per_insn"] = opt(r.stats.max_states_per_insn);
      p["total_states"] = opt(r.stats.total_states);
      p["peak_states"] = opt(r.stats.peak_states);
      p["mark_read"] = opt(r.stats.mark_read);
      p["verification_time_usec"] = opt(r.stats.time_usec);
      p["stack_depth"] = r.stats.stack_depth.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.stats.stack_depth);
      p["verified_insns"] = r.verified_insns;  // bpf_prog_info (5.16+; 0 before)
      p["xlated_insns"] = r.xlated_insns;
      p["jited_bytes"] = r.jited_bytes;
    }
    progs.push_back(std::move(p));
  }
  nlohmann::json out = {{"kernel", kernel}, {"programs", std::move(progs)}};
  if (const ProgRow* c = closest_to_limit(rows)) out["closest_to_limit"] = c->name;
  std::cout << out.dump(2) << "\n";
}

void print_markdown(const std::vector<ProgRow>& rows) {
  std::cout << "| program | attached to | insns processed | of the limit | states total / peak | "
               "max states per insn | verification time | stack depth | xlated insns | jited bytes |\n"
            << "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n";
  for (const auto& r : rows) {
    std::cout << "| `" << r.name << "` | `" << r.section << "` | ";
    if (!r.loaded) {
      std::cout << "not loaded: " << r.reason << " | - | - | - | - | - | - | - |\n";
      continue;
    }
    char share[32];
    std::snprintf(share, sizeof share, "%.2f%%", share_of_limit(r));
    std::cout << num(r.stats.processed) << " | " << (r.stats.processed ? share : "-") << " | "
              << num(r.stats.total_states) << " / " << num(r.stats.peak_states) << " | "
              << num(r.stats.max_states_per_insn) << " | "
              << (r.stats.time_usec ? std::to_string(*r.stats.time_usec) + " us" : "-") << " | "
              << (r.stats.stack_depth.empty() ? "-" : r.stats.stack_depth) << " | " << r.xlated_insns << " | "
              << r.jited_bytes << " |\n";
  }
  if (const ProgRow* c = closest_to_limit(rows)) {
    char share[32];
    std::snprintf(share, sizeof share, "%.2f%%", share_of_limit(*c));
    std::cout << "\nClosest to the limit: `" << c->name << "`, " << *c->stats.processed << " instructions processed of "
              << c->stats.limit.value_or(kDefaultLimit) << " (" << share << ").\n";
  }
}

int usage(std::ostream& os, int code) {
  os << "usage: khagent_verifier_stats [--json] [--no-fentry] [--no-fast-path]\n"
        "  Loads the runq BPF object as `khagent run` does (built-in defaults), with the\n"
        "  verifier's statistics, and prints them per program (Markdown table, or JSON).\n"
        "  --no-fentry      as khagent's --no-fentry: leave the fentry programs out\n"
        "  --no-fast-path   as fast_path.enabled: false (scan_waits left out)\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, fentry = true, fast_path = true;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--no-fentry") fentry = false;
    else if (a == "--no-fast-path") fast_path = false;
    else if (a == "-h" || a == "--help") return usage(std::cout, 0);
    else return usage(std::cerr, 2);
  }
  // stdout is for the table only.
  spdlog::set_default_logger(spdlog::stderr_color_st("verifier-stats"));
  route_libbpf_logs(false);
  if (auto r = preflight(); !r) {
    spdlog::error("{}", r.error().str());
    return 2;
  }

  LoaderOptions lo;
  if (fast_path) lo = with_fast_path(lo, FastPathConfig{});
  lo.allow_fentry = fentry;
  lo.pin = false;
  lo.attach = false;
  std::vector<ProgRow> rows;
  bpf_object* obj = nullptr;
  lo.before_load = [&](bpf_object* o, const std::vector<LeftOutProgram>& left_out) {
    obj = o;
    bpf_program* p;
    bpf_object__for_each_program(p, o) {
      ProgRow r;
      r.name = bpf_program__name(p);
      r.section = bpf_program__section_name(p);
      if (!bpf_program__autoload(p)) {
        r.reason = "left out by the loader";
        for (const auto& l : left_out)
          if (l.name == r.name) r.reason = l.reason;
      } else {
        r.log.reset(new char[kLogSize]());
        bpf_program__set_log_buf(p, r.log.get(), kLogSize);
        bpf_program__set_log_level(p, kLogStats);
      }
      rows.push_back(std::move(r));
    }
  };

  auto bpf = RunqBpf::open_and_load(lo);
  if (!bpf) {
    spdlog::error("{}", bpf.error().str());
    // libbpf loads the programs in order and stops at the first refused one:
    // the last log written is its.
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      std::string log = it->log_text();
      if (log.empty()) continue;
      spdlog::error("verifier log of {} ({}):\n{}", it->name, it->section, log);
      break;
    }
    return 1;
  }

  bpf_program* p;
  size_t i = 0;
  bpf_object__for_each_program(p, obj) {
    ProgRow& r = rows.at(i++);
    int fd = bpf_program__fd(p);
    if (fd < 0) continue;  // left out
    r.loaded = true;
    r.stats = parse_stats(r.log_text());
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      r.xlated_insns = info.xlated_prog_len / sizeof(struct bpf_insn);
      r.jited_bytes = info.jited_prog_len;
      r.verified_insns = info.verified_insns;
    }
    // Kernels that leave the statistics out of the log still count the
    // instructions processed in bpf_prog_info (5.16+).
    if (!r.stats.processed && r.verified_insns) r.stats.processed = r.verified_insns;
  }

  struct utsname u{};
  std::string kernel = uname(&u) == 0 ? u.release : "unknown";
  if (json) print_json(rows, kernel);
  else print_markdown(rows);
  return 0;
}

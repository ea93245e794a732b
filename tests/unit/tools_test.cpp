// khagent top / status / doctor: the pure parts (rendering, formatting, the
// doctor's checks on fixture trees). No root, no BPF.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "khagent/app/doctor.h"
#include "khagent/export/controller_reports.h"
#include "khagent/export/status_report.h"
#include "khagent/export/top_view.h"
#include "khagent/model/histogram.h"
#include "test_util.h"

using namespace khagent;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

TopRow row(std::string path, CgroupClass cls, double cpu_pct, double p99_us, uint64_t wait_ns, uint64_t waits = 10) {
  TopRow r;
  r.path = std::move(path);
  r.cls = cls;
  r.cpu_pct = cpu_pct;
  r.wait_p50_us = p99_us / 2;
  r.wait_p99_us = p99_us;
  r.wait_ns = wait_ns;
  r.waits = waits;
  return r;
}

// Online a (small p99), online b (larger p99, least CPU), offline c (largest
// p99 and wait), system d (most CPU).
TopModel sample_model() {
  TopModel m;
  m.node_cpus = 8;
  m.throttle_source = "cpu.stat";
  m.interval_ns = 1'000'000'000;
  m.classes[static_cast<size_t>(CgroupClass::Online)] = {1.25, 480.0, 300};
  m.classes[static_cast<size_t>(CgroupClass::Offline)] = {5.5, 9000.0, 900};
  m.rows.push_back(row("/online-a", CgroupClass::Online, 20, 100, 3'000'000));
  m.rows.push_back(row("/online-b", CgroupClass::Online, 5, 500, 1'000'000));
  m.rows.push_back(row("/offline-c", CgroupClass::Offline, 300, 10'000, 90'000'000));
  m.rows.push_back(row("/system-d", CgroupClass::System, 400, 1000, 2'000'000));
  return m;
}

std::vector<std::string> order(const TopModel& m) {
  std::vector<std::string> out;
  for (const TopRow* r : top_sorted_rows(m)) out.push_back(r->path);
  return out;
}

// Position of each path in the rendered text (npos if absent).
size_t pos(const std::string& text, const std::string& what) { return text.find(what); }

}  // namespace

TEST(TopRender, OnlineFirstThenBySortColumn) {
  TopModel m = sample_model();
  using V = std::vector<std::string>;
  EXPECT_EQ(order(m), (V{"/online-b", "/online-a", "/offline-c", "/system-d"}));
  m.sort = TopSort::Wait;
  EXPECT_EQ(order(m), (V{"/online-a", "/online-b", "/offline-c", "/system-d"}));
  m.sort = TopSort::Cpu;
  EXPECT_EQ(order(m), (V{"/online-a", "/online-b", "/system-d", "/offline-c"}));

  // The rendering follows the same order and marks the sort column.
  m.sort = TopSort::P99;
  std::string t = render_top(m, 30, 120);
  ASSERT_NE(pos(t, "/online-b"), std::string::npos) << t;
  EXPECT_LT(pos(t, "/online-b"), pos(t, "/online-a")) << t;
  EXPECT_LT(pos(t, "/online-a"), pos(t, "/offline-c")) << t;
  EXPECT_LT(pos(t, "/offline-c"), pos(t, "/system-d")) << t;
  auto ls = lines_of(t);
  ASSERT_GT(ls.size(), static_cast<size_t>(kTopColumnHeaderLine));
  EXPECT_NE(ls[kTopColumnHeaderLine].find("P99*"), std::string::npos) << ls[kTopColumnHeaderLine];
  EXPECT_EQ(ls[kTopColumnHeaderLine].find("CPU%*"), std::string::npos);
  m.sort = TopSort::Cpu;
  ls = lines_of(render_top(m, 30, 120));
  EXPECT_NE(ls[kTopColumnHeaderLine].find("CPU%*"), std::string::npos) << ls[kTopColumnHeaderLine];
}

TEST(TopRender, RowsWithoutWaitsSortLastByP99) {
  TopModel m;
  m.interval_ns = 1;
  m.rows.push_back(row("/ran-only", CgroupClass::Offline, 90, 0, 0, 0));
  m.rows.push_back(row("/waited", CgroupClass::Offline, 1, 2, 100));
  EXPECT_EQ(order(m), (std::vector<std::string>{"/waited", "/ran-only"}));
  std::string t = render_top(m, 20, 120);
  // No waits: percentiles are "-", not 0.
  auto ls = lines_of(t);
  auto it =
      std::find_if(ls.begin(), ls.end(), [](const std::string& l) { return l.find("/ran-only") != std::string::npos; });
  ASSERT_NE(it, ls.end());
  EXPECT_NE(it->find(" - "), std::string::npos) << *it;
}

TEST(TopRender, SortKeyCycles) {
  EXPECT_EQ(next_top_sort(TopSort::P99), TopSort::Wait);
  EXPECT_EQ(next_top_sort(TopSort::Wait), TopSort::Cpu);
  EXPECT_EQ(next_top_sort(TopSort::Cpu), TopSort::P99);
  EXPECT_STREQ(top_sort_name(TopSort::Wait), "wait");
}

TEST(TopRender, OnlineOnlyToggle) {
  TopModel m = sample_model();
  m.online_only = true;
  std::string t = render_top(m, 30, 120);
  EXPECT_NE(pos(t, "/online-a"), std::string::npos);
  EXPECT_NE(pos(t, "/online-b"), std::string::npos);
  EXPECT_EQ(pos(t, "/offline-c"), std::string::npos) << t;
  EXPECT_EQ(pos(t, "/system-d"), std::string::npos) << t;
  EXPECT_NE(pos(t, "online only: on"), std::string::npos) << t;
  EXPECT_NE(pos(t, "2 of 2 cgroups"), std::string::npos) << t;
  // The class summary stays node-wide.
  EXPECT_NE(pos(t, "offline  cpu   5.50 cores"), std::string::npos) << t;

  m.rows.erase(m.rows.begin(), m.rows.begin() + 2);  // no online rows left
  t = render_top(m, 30, 120);
  EXPECT_NE(pos(t, "no online cgroup"), std::string::npos) << t;
  m.online_only = false;
  t = render_top(m, 30, 120);
  EXPECT_NE(pos(t, "/offline-c"), std::string::npos) << t;
  EXPECT_NE(pos(t, "online only: off"), std::string::npos) << t;
}

TEST(TopRender, HeaderSaysNodeSourceAndClasses) {
  TopModel m = sample_model();
  auto ls = lines_of(render_top(m, 30, 200));
  ASSERT_GE(ls.size(), 7u);
  EXPECT_NE(ls[0].find("8 CPUs"), std::string::npos) << ls[0];
  EXPECT_NE(ls[0].find("interval 1.00s"), std::string::npos) << ls[0];
  EXPECT_NE(ls[0].find("throttling from cpu.stat"), std::string::npos) << ls[0];
  EXPECT_NE(ls[0].find("sort p99"), std::string::npos) << ls[0];
  EXPECT_EQ(ls[1].rfind("online ", 0), 0u) << ls[1];
  EXPECT_NE(ls[1].find("1.25 cores"), std::string::npos) << ls[1];
  EXPECT_NE(ls[1].find("480.0us"), std::string::npos) << ls[1];
  EXPECT_NE(ls[2].find("9.0ms"), std::string::npos) << ls[2];
  EXPECT_EQ(ls[3].rfind("system ", 0), 0u) << ls[3];
  EXPECT_NE(ls[3].find("wait p99        -"), std::string::npos) << ls[3];  // no waits
  EXPECT_EQ(ls.back().rfind("q quit", 0), 0u) << ls.back();
}

TEST(TopRender, FitsTheScreen) {
  TopModel m = sample_model();
  for (int i = 0; i < 40; i++)
    m.rows.push_back(row("/many/cgroup-" + std::to_string(i) + "/with/a/rather/long/path/below/it", CgroupClass::System,
                         i, i, static_cast<uint64_t>(i) * 1000));
  for (auto [rows, cols] :
       {std::pair{24, 80}, std::pair{10, 40}, std::pair{3, 200}, std::pair{1, 5}, std::pair{50, 300}}) {
    std::string t = render_top(m, rows, cols);
    auto ls = lines_of(t);
    EXPECT_LE(ls.size(), static_cast<size_t>(rows)) << rows << "x" << cols;
    for (const auto& l : ls) EXPECT_LE(code_points(l), static_cast<size_t>(cols)) << "'" << l << "'";
    if (rows >= 8) {
      EXPECT_EQ(ls.size(), std::min<size_t>(static_cast<size_t>(rows), 7 + m.rows.size() + 1));
      EXPECT_EQ(ls.back().rfind("q quit", 0), 0u) << "footer on the last row: " << ls.back();
    }
  }
  // 24 rows: 7 header lines + 16 cgroups + footer.
  std::string t = render_top(m, 24, 80);
  EXPECT_NE(t.find("16 of 44 cgroups"), std::string::npos) << t;
  EXPECT_NE(t.find("\nmemory   -\n"), std::string::npos) << "no memory controller read" << t;
  m.memory = {3ull << 30, 2ull << 30, 0.123, "/kubepods/pod-a", std::nullopt};
  t = render_top(m, 24, 80);
  EXPECT_NE(t.find("\nmemory   node 2048 MiB of 3072 MiB   online stalled 12.3% (/kubepods/pod-a)\n"),
            std::string::npos)
      << t;
  // Where reclaim is timed, online's direct reclaim per second (summed over
  // tasks: it can pass 1000 ms/s).
  m.interval_ns = 1'000'000'000;
  m.memory.online_reclaim_ns = 50'000'000;
  t = render_top(m, 24, 100);
  EXPECT_NE(t.find("online stalled 12.3% (/kubepods/pod-a)   in reclaim 50.0 ms/s\n"), std::string::npos) << t;
  EXPECT_EQ(render_top(m, 0, 80), "");
  EXPECT_EQ(render_top(m, 24, 0), "");
}

TEST(TopRender, LongPathsKeepTheirEnd) {
  TopModel m;
  m.interval_ns = 1;
  std::string path =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/"
      "cri-containerd-0123456789abcdef0123456789abcdef.scope";
  m.rows.push_back(row(path, CgroupClass::Online, 1, 1, 1));
  m.rows.back().aggressor = "/hadoop-yarn/container_1700000000000_0001_01_000002";
  m.rows.back().aggressor_ns = 2'500'000;
  std::string t = render_top(m, 20, 120);
  EXPECT_EQ(t.find(path), std::string::npos) << "120 columns cannot hold it";
  EXPECT_NE(t.find("..."), std::string::npos) << t;
  EXPECT_NE(t.find("0123456789abcdef.scope"), std::string::npos) << t;
  EXPECT_NE(t.find("(2.5ms)"), std::string::npos) << "aggressor column at 120 columns:\n" << t;
  // Wide enough: whole path and aggressor.
  t = render_top(m, 20, 300);
  EXPECT_NE(t.find(path), std::string::npos) << t;
  EXPECT_NE(t.find("/hadoop-yarn/container_1700000000000_0001_01_000002 (2.5ms)"), std::string::npos) << t;
  // 80 columns: no aggressor column, the path's end still there.
  t = render_top(m, 20, 80);
  EXPECT_EQ(t.find("(2.5ms)"), std::string::npos) << t;
  EXPECT_NE(t.find("def.scope"), std::string::npos) << t;
}

TEST(TopRender, FirstIntervalPending) {
  TopModel m;
  m.node_cpus = 2;
  m.throttle_source = "fentry";
  std::string t = render_top(m, 20, 100);
  EXPECT_NE(t.find("collecting the first interval"), std::string::npos) << t;
  EXPECT_NE(t.find("interval -"), std::string::npos) << t;
}

TEST(TopRender, NoteInFooter) {
  TopModel m = sample_model();
  m.note = "warning cgroup walk slow";
  auto ls = lines_of(render_top(m, 30, 200));
  EXPECT_NE(ls.back().find("| warning cgroup walk slow"), std::string::npos) << ls.back();
}

TEST(TopModelFromSignals, ClassifiesFiltersAndPicksIntervalAggressor) {
  const std::string pod =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_4a4a_9f9f_"
      "123456789abc.slice/cri-containerd-aaaaaaaaaaaa.scope";
  const std::string yarn = "/hadoop-yarn/container_1_2_3_4";
  Sample s;
  s.interval_ns = 500'000'000;
  s.throttle_source = ThrottleSource::CpuStat;
  auto add = [&](uint64_t id, const std::string& path, uint64_t cpu, uint64_t wait, uint64_t waits) {
    CgroupSample c;
    c.id = id;
    c.path = path;
    c.interval.cpu_ns = cpu;
    c.interval.wait_ns = wait;
    c.interval.waits = waits;
    c.interval.cause_ns[KH_WAIT_OTHER_CGROUP] = wait * 3 / 4;
    c.interval.hist[hist_bucket(40'000)] = waits;
    s.cgroups.push_back(c);
  };
  add(1, pod, 100'000'000, 4'000'000, 100);
  add(2, yarn, 450'000'000, 0, 0);
  add(3, "/system.slice/idle.service", 0, 0, 0);  // idle: not shown
  add(4, "/system.slice/cron.service", 1'000'000, 10'000, 1);
  // Since start /system.slice/cron held the CPU longer, but in this interval the YARN container did.
  s.pairs.push_back({1, 4, 9'000'000, 9, 0});
  s.pairs.push_back({1, 2, 5'000'000, 5, 3'000'000});
  Signals sig = compute_signals(s);
  Config cfg = default_config();
  Classifier k(cfg.classes, cfg.offline.yarn_hierarchy);
  NodeSignals node = rollup(s, k);
  TopModel m = make_top_model(sig, node, k, 4, "");
  EXPECT_EQ(m.node_cpus, 4u);
  EXPECT_EQ(m.throttle_source, "cpu.stat");
  EXPECT_EQ(m.interval_ns, 500'000'000u);
  ASSERT_EQ(m.rows.size(), 3u);
  auto find = [&](const std::string& p) -> const TopRow* {
    for (const auto& r : m.rows)
      if (r.path == p) return &r;
    return nullptr;
  };
  const TopRow* on = find(pod);
  ASSERT_NE(on, nullptr);
  EXPECT_EQ(on->cls, CgroupClass::Online);
  EXPECT_NEAR(on->cpu_pct, 20.0, 1e-9);
  EXPECT_NEAR(on->other_share, 0.75, 1e-9);
  EXPECT_EQ(on->aggressor, yarn);
  EXPECT_EQ(on->aggressor_ns, 3'000'000u);
  ASSERT_NE(find(yarn), nullptr);
  EXPECT_EQ(find(yarn)->cls, CgroupClass::Offline);
  EXPECT_EQ(find("/system.slice/cron.service")->cls, CgroupClass::System);
  EXPECT_EQ(find("/system.slice/idle.service"), nullptr);
  EXPECT_NEAR(m.classes[static_cast<size_t>(CgroupClass::Offline)].cpu_cores, 0.9, 1e-9);
  EXPECT_EQ(m.classes[static_cast<size_t>(CgroupClass::Online)].waits, 100u);

  // --cgroup prefix
  TopModel sub = make_top_model(sig, node, k, 4, "/hadoop-yarn");
  ASSERT_EQ(sub.rows.size(), 1u);
  EXPECT_EQ(sub.rows[0].path, yarn);
}

// ------------------------------------------------------------------ status

namespace {

StatusReport running_report() {
  StatusReport r;
  r.pin_dir = "/sys/fs/bpf/khagent";
  r.agent_found = true;
  r.pinned = {"cgroup_stats",   "cgroup_slots", "interference", "pair_slots",
              "throttle_stats", "cpu_state",    "counters",     "protected_cgroups"};
  r.programs = {"handle_sched_wakeup", "handle_sched_wakeup_new", "handle_sched_switch"};
  r.processes = {{4242, "khagent"}};
  r.throttle_source = "cpu.stat";
  r.cgroups_tracked = 57;
  r.max_cgroups = 4096;
  r.protected_cgroups = 3;
  r.interference_pairs = 210;
  for (size_t i = 0; i < bpf_counter_names().size(); i++) r.counters[bpf_counter_names()[i]] = 1000 * (i + 1);
  r.state_file = "/var/lib/khagent/state.json";
  r.entries.push_back({"/hadoop-yarn", "cpu.max", "max 100000", std::string("20000 100000"), ""});
  r.entries.push_back({"/hadoop-yarn", "cpu.idle", "0", std::string("0"), ""});
  r.entries.push_back({"/gone", "cpu.max", "max 100000", std::nullopt, "cgroup gone"});
  r.targets.push_back({"/hadoop-yarn", std::string("20000 100000"), "", 0.2});
  r.targets.push_back({"/kubepods.slice/kubepods-besteffort.slice", std::string("50000 100000"), "", 0.5});
  StatusMemory m;
  m.capacity = 3ull << 30;
  m.node_working_set = 2ull << 30;
  m.targets.push_back({"/hadoop-yarn", 1536ull << 20, 1ull << 30, 2, ""});
  m.targets.push_back({"/kubepods.slice/kubepods-besteffort.slice", std::nullopt, 0, 0, "ENOENT"});
  m.pods_under = "/";
  StatusOnlinePod stalled;
  stalled.cgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa.slice";
  stalled.usage = 600ull << 20;
  stalled.working_set = 500ull << 20;
  stalled.limit = 640ull << 20;
  stalled.high = 600ull << 20;
  stalled.psi = true;
  stalled.some_avg10 = 12.5;
  stalled.full_avg10 = 3.25;
  stalled.own_limit = stalled.cgroup + ": 600 MiB of 640 MiB";
  stalled.oom_kills = 1;
  StatusOnlinePod quiet;
  quiet.cgroup = "/kubepods.slice/kubepods-podbb.slice";
  quiet.usage = 100ull << 20;
  quiet.working_set = 90ull << 20;
  StatusOnlinePod unreadable;
  unreadable.cgroup = "/kubepods.slice/kubepods-podcc.slice";
  unreadable.error = "memory.stat: No such file or directory";
  m.online = {stalled, quiet, unreadable};
  r.memory = m;
  return r;
}

}  // namespace

TEST(StatusFormat, RunningAgent) {
  StatusReport r = running_report();
  std::string t = format_status(r);
  auto has = [&](const std::string& s) { return t.find(s) != std::string::npos; };
  EXPECT_TRUE(
      has("agent: running (maps pinned under /sys/fs/bpf/khagent, used by 3 BPF programs; process 4242 khagent)"))
      << t;
  EXPECT_TRUE(has("throttling source: cpu.stat")) << t;
  EXPECT_TRUE(has("cgroups tracked: 57 (of 4096)")) << t;
  EXPECT_TRUE(has("protected (online) cgroups: 3")) << t;
  EXPECT_TRUE(has("interference pairs: 210")) << t;
  EXPECT_TRUE(
      has("BPF counters: switches 1000, wakeups 2000, storage_miss 3000, ring_overflow 4000, "
          "stats_full 5000, pairs_full 6000, events 7000, events_dropped 8000"))
      << t;
  EXPECT_TRUE(has("state file /var/lib/khagent/state.json: 3 original values")) << t;
  EXPECT_TRUE(has("node memory: 2048 MiB in use of 3072 MiB")) << t;
  EXPECT_TRUE(has("/hadoop-yarn  memory 1024 MiB of a 1536 MiB limit, 2 OOM kills so far")) << t;
  EXPECT_TRUE(has("/kubepods.slice/kubepods-besteffort.slice  memory unreadable: ENOENT")) << t;
  EXPECT_TRUE(has("online pods' memory: 3 pods under /\n")) << t;
  EXPECT_TRUE(
      has("  /kubepods.slice/kubepods-podcc.slice  memory unreadable: memory.stat: No such file or directory\n"))
      << t;
  EXPECT_TRUE(
      has("  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa.slice  memory 600 MiB (working set 500 "
          "MiB), a 640 MiB limit (memory.high 600 MiB); stall over 10 s: some 12.50%, full 3.25%; at its own limit "
          "(/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa.slice: 600 MiB of 640 MiB); 1 OOM "
          "kill so far\n"))
      << t;
  EXPECT_TRUE(
      has("  /kubepods.slice/kubepods-podbb.slice  memory 100 MiB (working set 90 MiB), no limit; stall over "
          "10 s: unknown (no memory.pressure)\n"))
      << t;
  // cgroup, file, original, current.
  auto ls = lines_of(t);
  auto line_with = [&](const std::string& a, const std::string& b) {
    for (const auto& l : ls)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return l;
    return std::string();
  };
  std::string yarn = line_with("/hadoop-yarn", "cpu.max ");
  EXPECT_NE(yarn.find("'max 100000'"), std::string::npos) << t;
  EXPECT_NE(yarn.find("'20000 100000'"), std::string::npos) << t;
  EXPECT_LT(yarn.find("'max 100000'"), yarn.find("'20000 100000'")) << "original, then current: " << yarn;
  EXPECT_NE(line_with("/hadoop-yarn", "cpu.idle").find("(the original)"), std::string::npos) << t;
  EXPECT_NE(line_with("/gone", "cpu.max").find("unreadable: cgroup gone"), std::string::npos) << t;
  EXPECT_TRUE(has("offline budget: 0.70 cores (cpu.max of 2 offline targets)")) << t;
  EXPECT_TRUE(has("/kubepods.slice/kubepods-besteffort.slice  cpu.max '50000 100000' = 0.50 cores")) << t;
  EXPECT_EQ(status_exit_code(r), 0);
}

TEST(StatusFormat, ManyOnlinePodsAndRulesOnMetadata) {
  StatusReport r = running_report();
  r.memory->online.resize(13);
  r.memory->online[12].cgroup = "/kubepods/podzz";
  r.memory->online[12].error = "EACCES";
  r.memory->online_by_metadata = true;
  r.memory->online_truncated = true;
  std::string t = format_status(r);
  EXPECT_NE(t.find("online pods' memory: 13 pods under / (the walk stopped early: too many cgroups) (classed by path "
                   "and QoS only: rules on priority classes, labels or annotations need the kubelet's pod list, which "
                   "status does not read)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  ... and 3 more (status --json lists them all)\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("/kubepods/podzz"), std::string::npos) << "the 13th is not shown:\n" << t;
  auto j = nlohmann::json::parse(status_json(r));
  EXPECT_EQ(j["memory"]["online_pods"].size(), 13u);
  EXPECT_EQ(j["memory"]["online_pods"][12]["error"], "EACCES");
}

TEST(StatusFormat, NoAgent) {
  StatusReport r;
  r.pin_dir = "/sys/fs/bpf/elsewhere";
  r.agent_problem = "no pinned maps";
  r.state_file = "/tmp/none.json";
  std::string t = format_status(r);
  EXPECT_EQ(t.rfind("no running agent found under /sys/fs/bpf/elsewhere: no pinned maps\n", 0), 0u) << t;
  EXPECT_EQ(t.find("cgroups tracked"), std::string::npos) << t;
  EXPECT_NE(t.find("state file /tmp/none.json: no original values recorded"), std::string::npos) << t;
  EXPECT_NE(t.find("offline budget: no offline target found"), std::string::npos) << t;
  EXPECT_EQ(status_exit_code(r), 1);
  auto j = nlohmann::json::parse(status_json(r));
  EXPECT_FALSE(j["agent_found"].get<bool>());
  EXPECT_EQ(j["problem"], "no pinned maps");
  EXPECT_TRUE(j["offline_budget_cores"].is_null());
}

TEST(StatusFormat, UnlimitedBudgetAndDamagedStateFile) {
  StatusReport r = running_report();
  r.entries.clear();
  r.state_error = "state file /x: checksum mismatch";
  r.targets = {{"/hadoop-yarn", std::string("max 100000"), "", std::nullopt},
               {"/kubepods/besteffort", std::nullopt, "no cpu.max: the cpu controller is not enabled", std::nullopt}};
  std::string t = format_status(r);
  EXPECT_NE(t.find("state file /var/lib/khagent/state.json: state file /x: checksum mismatch"), std::string::npos) << t;
  EXPECT_NE(t.find("offline budget: unlimited (no quota in the cpu.max of 2 offline targets)"), std::string::npos) << t;
  EXPECT_NE(t.find("/hadoop-yarn  cpu.max 'max 100000' (no limit)"), std::string::npos) << t;
  EXPECT_NE(t.find("/kubepods/besteffort  cpu.max unreadable: no cpu.max"), std::string::npos) << t;
  EXPECT_FALSE(status_budget_cores(r).has_value());
  // Nothing readable: the budget is not known (not "unlimited").
  r.targets.erase(r.targets.begin());
  t = format_status(r);
  EXPECT_NE(t.find("offline budget: unknown (the cpu.max of 1 offline target cannot be read)"), std::string::npos) << t;
  r.entries = {{"/a", "cpu.max", "max 100000", std::string("max 100000"), ""}};
  r.state_error.clear();
  EXPECT_NE(format_status(r).find("1 original value (what khagent changed)"), std::string::npos) << format_status(r);
}

TEST(StatusFormat, Json) {
  auto j = nlohmann::json::parse(status_json(running_report()));
  EXPECT_TRUE(j["agent_found"].get<bool>());
  EXPECT_EQ(j["cgroups_tracked"], 57);
  EXPECT_EQ(j["protected_cgroups"], 3);
  EXPECT_EQ(j["counters"]["switches"], 1000);
  EXPECT_EQ(j["throttle_source"], "cpu.stat");
  ASSERT_EQ(j["state_file"]["entries"].size(), 3u);
  EXPECT_EQ(j["state_file"]["entries"][0]["original"], "max 100000");
  EXPECT_EQ(j["state_file"]["entries"][0]["current"], "20000 100000");
  EXPECT_TRUE(j["state_file"]["entries"][2]["current"].is_null());
  EXPECT_EQ(j["state_file"]["entries"][2]["current_error"], "cgroup gone");
  EXPECT_NEAR(j["offline_budget_cores"].get<double>(), 0.7, 1e-9);
  EXPECT_EQ(j["offline_targets"][0]["cgroup"], "/hadoop-yarn");
  EXPECT_EQ(j["memory"]["capacity_bytes"], 3ull << 30);
  EXPECT_EQ(j["memory"]["offline_targets"][0]["limit_bytes"], 1536ull << 20);
  EXPECT_EQ(j["memory"]["offline_targets"][0]["oom_kills"], 2);
  EXPECT_TRUE(j["memory"]["offline_targets"][1]["limit_bytes"].is_null());
  ASSERT_EQ(j["memory"]["online_pods"].size(), 3u);
  EXPECT_EQ(j["memory"]["online_pods"][0]["high_bytes"], 600ull << 20) << "the kubelet's MemoryQoS throttle";
  EXPECT_TRUE(j["memory"]["online_pods"][1]["high_bytes"].is_null());
  const auto& bad = j["memory"]["online_pods"][2];
  EXPECT_EQ(bad["error"], "memory.stat: No such file or directory");
  EXPECT_TRUE(bad["usage_bytes"].is_null() && bad["working_set_bytes"].is_null() && bad["oom_kills"].is_null())
      << "no zeros beside an error: " << bad.dump();
  EXPECT_FALSE(j["memory"].contains("online_pods_error"));
  EXPECT_EQ(j["memory"]["online_pods"][0]["usage_bytes"], 600ull << 20);
  EXPECT_EQ(j["memory"]["online_pods"][0]["limit_bytes"], 640ull << 20);
  EXPECT_DOUBLE_EQ(j["memory"]["online_pods"][0]["some_avg10"].get<double>(), 12.5);
  EXPECT_NE(j["memory"]["online_pods"][0]["own_limit"].get<std::string>().find("600 MiB of 640 MiB"),
            std::string::npos);
  EXPECT_TRUE(j["memory"]["online_pods"][1]["limit_bytes"].is_null());
  EXPECT_TRUE(j["memory"]["online_pods"][1]["some_avg10"].is_null());
  EXPECT_EQ(j["memory"]["online_pods_under"], "/");
  EXPECT_FALSE(j["memory"]["online_pods_truncated"].get<bool>());
  EXPECT_FALSE(j["memory"]["online_pods_by_metadata"].get<bool>());
  ASSERT_EQ(j["processes"].size(), 1u);
  EXPECT_EQ(j["processes"][0]["pid"], 4242);
  EXPECT_EQ(j["processes"][0]["comm"], "khagent");
}

TEST(StatusFormat, AMistypedNodeCgroupIsAnErrorNotZeroPods) {
  StatusReport r = running_report();
  r.memory->online.clear();
  r.memory->pods_under = "/nodee";
  r.memory->pods_error = "memory.node_cgroup /nodee is no cgroup in /sys/fs/cgroup (mistyped?)";
  const std::string t = format_status(r);
  EXPECT_NE(t.find("online pods' memory: unknown: memory.node_cgroup /nodee is no cgroup"), std::string::npos) << t;
  EXPECT_EQ(t.find("0 pods"), std::string::npos) << t;
  auto j = nlohmann::json::parse(status_json(r));
  EXPECT_EQ(j["memory"]["online_pods_error"], r.memory->pods_error);
}

TEST(StatusFormat, CpuMaxCores) {
  EXPECT_NEAR(*cpu_max_cores("20000 100000"), 0.2, 1e-12);
  EXPECT_NEAR(*cpu_max_cores("150000 100000\n"), 1.5, 1e-12);
  EXPECT_NEAR(*cpu_max_cores("50000"), 0.5, 1e-12);  // default period
  EXPECT_FALSE(cpu_max_cores("max 100000").has_value());
  EXPECT_FALSE(cpu_max_cores("max").has_value());
  EXPECT_FALSE(cpu_max_cores("").has_value());
  EXPECT_FALSE(cpu_max_cores("12x 100000").has_value());
  EXPECT_FALSE(cpu_max_cores("1000 0").has_value());
}

// ------------------------------------------------------------------ doctor

namespace {

const char* kPureMountinfo =
    "24 1 0:22 / /sys rw,nosuid - sysfs sysfs rw\n"
    "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    "31 24 0:27 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:5 - bpf bpf rw,mode=700\n";

// Like this project's development host: cgroup2 at /sys/fs/cgroup/unified
// without controllers, cpu and cpuset on v1.
const char* kHybridMountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    "42 23 0:39 / /sys/fs/bpf rw,relatime - bpf bpf rw,mode=700\n";

const std::string kPodSd = "kubepods-burstable-pod1b2c3d4e_0000_4a4a_9f9f_123456789abc.slice";

BpfProbe good_bpf() {
  BpfProbe p;
  p.attempted = true;
  p.fentry = true;
  p.ringbuf = true;
  p.task_storage = true;
  return p;
}

// A node where everything is in place: pure cgroup v2 with cpu and cpuset
// enabled, systemd-driver pods, a YARN hierarchy, the static CPU manager.
struct Node {
  TempDir t;
  DoctorEnv env;
  Node() {
    t.write("proc/self/mountinfo", kPureMountinfo);
    t.write("sys/kernel/btf/vmlinux", "BTF");
    t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    t.write("sys/fs/cgroup/cgroup.subtree_control", "cpuset cpu io memory pids\n");
    t.write("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/cpu.max", "max 100000\n");
    t.write(
        "sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-pod99999999_0000_4a4a_9f9f_123456789abc.slice/cpu.max",
        "max 100000\n");
    t.write("sys/fs/cgroup/hadoop-yarn/cpu.max", "max 100000\n");
    t.write("sys/fs/cgroup/hadoop-yarn/container_1_2_3_4/cpu.max", "max 100000\n");
    t.write("sys/fs/cgroup/hadoop-yarn/container_1_2_3_5/cpu.max", "max 100000\n");
    t.write("var/lib/kubelet/cpu_manager_state",
            R"({"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"uid":{"app":"2-3"}},"checksum":1})");
    std::filesystem::create_directories(t.path / "var/lib/khagent");
    env.root = t.path.string();
    env.kernel_release = "6.1.0-18-amd64";
    env.is_root = true;
    env.config = default_config();
  }
  std::vector<DoctorCheck> run(const BpfProbe& b = good_bpf()) const { return doctor_checks(env, b); }
};

const DoctorCheck* check(const std::vector<DoctorCheck>& cs, const std::string& name) {
  for (const auto& c : cs)
    if (c.name == name) return &c;
  return nullptr;
}

std::string dump(const std::vector<DoctorCheck>& cs) { return format_doctor(cs); }

// The check called `name` has level `lvl` and says `text`. `checks` may be a
// temporary (n.run()): it is evaluated once and kept alive here.
#define EXPECT_CHECK(checks, name, lvl, text)                                                           \
  do {                                                                                                  \
    const std::vector<DoctorCheck> cs_ = (checks);                                                      \
    const DoctorCheck* c_ = check(cs_, name);                                                           \
    ASSERT_NE(c_, nullptr) << "no check '" << (name) << "' in:\n" << dump(cs_);                         \
    EXPECT_EQ(c_->level, lvl) << dump(cs_);                                                             \
    EXPECT_NE(c_->detail.find(text), std::string::npos) << "'" << (text) << "' not in: " << c_->detail; \
  } while (0)

}  // namespace

TEST(DoctorChecks, PureV2NodeWithEverythingPasses) {
  Node n;
  auto cs = n.run();
  for (const auto& c : cs) EXPECT_EQ(c.level, CheckLevel::Ok) << dump(cs);
  EXPECT_EQ(doctor_exit_code(cs), 0);
  EXPECT_CHECK(cs, "kernel", CheckLevel::Ok, "6.1.0-18-amd64 (>= 5.13)");
  EXPECT_CHECK(cs, "btf", CheckLevel::Ok, "/sys/kernel/btf/vmlinux present");
  EXPECT_CHECK(cs, "cgroup v2", CheckLevel::Ok, "/sys/fs/cgroup;");
  EXPECT_CHECK(cs, "cgroup v2", CheckLevel::Ok, "enabled for children: cpuset cpu io memory pids");
  EXPECT_CHECK(cs, "cpu controller", CheckLevel::Ok, "enabled for child cgroups");
  EXPECT_CHECK(cs, "cpuset controller", CheckLevel::Ok, "enabled");
  EXPECT_CHECK(cs, "bpffs", CheckLevel::Ok, "mounted at /sys/fs/bpf");
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Ok, "systemd cgroup driver (/kubepods.slice, 2 pods)");
  EXPECT_CHECK(cs, "cpu manager", CheckLevel::Ok, "policy static; CPUs 2-3 exclusive");
  EXPECT_CHECK(cs, "yarn", CheckLevel::Ok, "hierarchy /hadoop-yarn (2 containers)");
  EXPECT_CHECK(cs, "state file", CheckLevel::Ok, "/var/lib/khagent writable");
  EXPECT_CHECK(cs, "throttle hooks", CheckLevel::Ok, "fentry");
  std::string text = format_doctor(cs);
  EXPECT_NE(text.find("OK   kernel: 6.1.0-18-amd64 (>= 5.13)\n"), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(cs.size()) + " OK, 0 WARN, 0 FAIL\n"), std::string::npos) << text;
}

TEST(DoctorChecks, CpuAvailableButNotEnabledSaysHowToEnableIt) {
  Node n;
  n.t.write("sys/fs/cgroup/cgroup.subtree_control", "memory pids\n");
  auto cs = n.run();
  EXPECT_CHECK(cs, "cpu controller", CheckLevel::Fail, "echo +cpu > /sys/fs/cgroup/cgroup.subtree_control");
  EXPECT_CHECK(cs, "cpuset controller", CheckLevel::Warn, "echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control");
  EXPECT_EQ(doctor_exit_code(cs), 1);
  // With cpuset.enabled the missing cpuset controller is a failure too.
  n.env.config.cpuset.enabled = true;
  cs = n.run();
  EXPECT_CHECK(cs, "cpuset controller", CheckLevel::Fail, "cpuset.enabled is on");
}

TEST(DoctorChecks, HybridHostIsWrittenThroughV1) {
  Node n;
  n.t.write("proc/self/mountinfo", kHybridMountinfo);
  n.t.write("sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
  n.t.write("sys/fs/cgroup/unified/cgroup.subtree_control", "");
  auto cs = n.run();
  EXPECT_CHECK(cs, "cgroup v2", CheckLevel::Ok,
               "/sys/fs/cgroup/unified (hybrid: cpu controller on cgroup v1 at /sys/fs/cgroup/cpu)");
  EXPECT_CHECK(cs, "cgroup backend", CheckLevel::Ok, "hybrid (cpu and cpuset on cgroup v1)");
  EXPECT_CHECK(cs, "cpu controller", CheckLevel::Ok, "hybrid host: on cgroup v1 at /sys/fs/cgroup/cpu");
  EXPECT_CHECK(cs, "cpu controller", CheckLevel::Ok, "cpu.cfs_quota_us/cfs_period_us, cpu.shares, cpu.idle");
  EXPECT_CHECK(cs, "cpuset controller", CheckLevel::Ok, "hybrid host: on cgroup v1 at /sys/fs/cgroup/cpuset");
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Warn, "no kubelet pods found");
  EXPECT_CHECK(cs, "yarn", CheckLevel::Warn, "no YARN hierarchy 'hadoop-yarn' under /sys/fs/cgroup/unified");
  std::string text = format_doctor(cs);
  EXPECT_NE(text.find("\nOK   cpu controller: hybrid host"), std::string::npos) << text;
}

TEST(DoctorChecks, NoCgroupV2) {
  Node n;
  n.t.write("proc/self/mountinfo",
            "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
            "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  auto cs = n.run();
  EXPECT_CHECK(cs, "cgroup v2", CheckLevel::Fail, "not mounted");
  EXPECT_CHECK(cs, "bpffs", CheckLevel::Warn, "mount -t bpf bpf /sys/fs/bpf");
  EXPECT_EQ(check(cs, "cpu controller"), nullptr) << "nothing to check without cgroup v2";
  EXPECT_EQ(doctor_exit_code(cs), 1);
}

TEST(DoctorChecks, KubeletDrivers) {
  Node n;
  std::filesystem::remove_all(n.t.path / "sys/fs/cgroup/kubepods.slice");
  auto cs = n.run();
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Warn, "no kubelet pods found");
  n.t.write("sys/fs/cgroup/kubepods/burstable/pod1b2c3d4e-0000-4a4a-9f9f-123456789abc/0123456789ab/cpu.max", "max\n");
  cs = n.run();
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Ok, "cgroupfs cgroup driver (/kubepods, 1 pod)");
  n.t.write("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/cpu.max", "max\n");
  cs = n.run();
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Ok, "systemd cgroup driver (/kubepods.slice, 1 pod)");
}

TEST(DoctorChecks, KubeletPodsOnlyInCgroupV1) {
  Node n;
  n.t.write("proc/self/mountinfo", kHybridMountinfo);
  n.t.write("sys/fs/cgroup/unified/cgroup.controllers", "");
  n.t.write("sys/fs/cgroup/cpu/kubepods/burstable/cpu.shares", "2\n");
  auto cs = n.run();
  EXPECT_CHECK(cs, "kubelet", CheckLevel::Warn, "kubelet pods only in cgroup v1 (/sys/fs/cgroup/cpu)");
}

TEST(DoctorChecks, CpuManagerState) {
  Node n;
  const std::string f = "var/lib/kubelet/cpu_manager_state";
  n.t.write(f, R"({"policyName":"none","defaultCpuSet":"","checksum":1353318690})");
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Ok, "policy none");
  n.t.write(f, R"({"policyName":"static","defaultCpuSet":"0-7","checksum":1})");
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Ok, "policy static; no CPUs exclusive to containers yet");
  n.t.write(f, "{not json");
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Warn, "cannot read /var/lib/kubelet/cpu_manager_state");
  n.env.config.cpuset.enabled = true;  // the partition needs it: a failure
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Fail, "cannot read");
  std::filesystem::remove(n.t.path / f);
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Warn, "no /var/lib/kubelet/cpu_manager_state");
  n.env.kubelet_dir = "/srv/kubelet";
  n.t.write("srv/kubelet/cpu_manager_state", R"({"policyName":"none","checksum":1})");
  EXPECT_CHECK(n.run(), "cpu manager", CheckLevel::Ok, "policy none");
}

TEST(DoctorChecks, KernelAndBtf) {
  Node n;
  n.env.kernel_release = "5.10.0-28-amd64";
  EXPECT_CHECK(n.run(), "kernel", CheckLevel::Fail, "5.10.0-28-amd64 is too old: khagent needs 5.13 or newer");
  n.env.kernel_release = "5.12.9";
  EXPECT_CHECK(n.run(), "kernel", CheckLevel::Fail, "needs 5.13 or newer");
  n.env.kernel_release = "5.13.0";
  EXPECT_CHECK(n.run(), "kernel", CheckLevel::Ok, ">= 5.13");
  n.env.kernel_release = "4.19.0";
  EXPECT_CHECK(n.run(), "kernel", CheckLevel::Fail, "too old");
  std::filesystem::remove(n.t.path / "sys/kernel/btf/vmlinux");
  EXPECT_CHECK(n.run(), "btf", CheckLevel::Fail, "CONFIG_DEBUG_INFO_BTF=y");
  n.env.is_root = false;
  EXPECT_CHECK(n.run(), "root", CheckLevel::Fail, "run it as root");
}

TEST(DoctorChecks, BpfProbeResults) {
  Node n;
  BpfProbe b = good_bpf();
  b.fentry = false;
  auto cs = n.run(b);
  EXPECT_CHECK(cs, "throttle hooks", CheckLevel::Warn, "fentry refused: throttling read from cpu.stat");
  EXPECT_EQ(doctor_exit_code(cs), 0) << "a WARN alone does not fail";
  EXPECT_NE(format_doctor(cs).find("WARN throttle hooks: fentry refused: throttling read from cpu.stat\n"),
            std::string::npos);
  b.load_error = "loading the runq BPF programs: Permission denied";
  EXPECT_CHECK(n.run(b), "bpf programs", CheckLevel::Fail, "Permission denied");
  b = good_bpf();
  b.ringbuf = false;
  EXPECT_CHECK(n.run(b), "bpf maps", CheckLevel::Fail, "ring buffer");
  BpfProbe skipped;
  skipped.skip_reason = "not checked: loading BPF programs needs root";
  cs = n.run(skipped);
  EXPECT_CHECK(cs, "bpf programs", CheckLevel::Warn, "needs root");
  EXPECT_EQ(check(cs, "throttle hooks"), nullptr);
}

TEST(DoctorChecks, YarnHierarchy) {
  Node n;
  n.env.config.offline.yarn_hierarchy = "yarn-nm";
  EXPECT_CHECK(n.run(), "yarn", CheckLevel::Warn, "no YARN hierarchy 'yarn-nm'");
  // Inside the NodeManager pod's cgroup.
  n.t.write("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/yarn-nm/container_9/cpu.max",
            "max\n");
  n.t.write("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/yarn-nm/cpu.max", "max\n");
  EXPECT_CHECK(n.run(), "yarn", CheckLevel::Ok,
               "hierarchy /kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/yarn-nm (1 container)");
  // Found, but no cpu.max there: the cpu controller does not reach it.
  std::filesystem::remove(n.t.path /
                          ("sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + kPodSd + "/yarn-nm/cpu.max"));
  EXPECT_CHECK(n.run(), "yarn", CheckLevel::Warn, "no cpu.max");
  n.env.config.offline.yarn = false;
  EXPECT_CHECK(n.run(), "yarn", CheckLevel::Ok, "offline.yarn: false");
}

TEST(DoctorChecks, StateFileDirectory) {
  Node n;
  n.env.config.state_file = "/var/lib/khagent-new/sub/state.json";
  EXPECT_CHECK(n.run(), "state file", CheckLevel::Ok, "/var/lib/khagent-new/sub will be created (/var/lib writable)");
  n.t.write("var/lib/blocked", "a file, not a directory");
  n.env.config.state_file = "/var/lib/blocked/state.json";
  auto cs = n.run();
  EXPECT_CHECK(cs, "state file", CheckLevel::Fail, "/var/lib/blocked exists and is not a directory");
  EXPECT_EQ(doctor_exit_code(cs), 1);
  // The check leaves nothing behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(n.t.path / "var/lib/khagent"),
                          std::filesystem::directory_iterator()),
            0);
}

TEST(DoctorChecks, FormatAndExitCode) {
  std::vector<DoctorCheck> cs = {
      {CheckLevel::Ok, "a", "fine"}, {CheckLevel::Warn, "b", "hmm"}, {CheckLevel::Fail, "c", "fix it"}};
  EXPECT_EQ(format_doctor(cs), "OK   a: fine\nWARN b: hmm\nFAIL c: fix it\n1 OK, 1 WARN, 1 FAIL\n");
  EXPECT_EQ(doctor_exit_code(cs), 1);
  cs.pop_back();
  EXPECT_EQ(doctor_exit_code(cs), 0);
}

// The burst report the agent writes (export/burst_report.cpp) is the one
// status reads: each online pod's throttled wait, verdict, and the burst in
// force or why none.
TEST(StatusFormat, BurstReportRoundTripsFromTheAgentToStatus) {
  BurstReport rep;
  rep.share = 0.5;
  BurstPod given;
  given.path = "/kubepods/burstable/pod-a";
  given.window_s = 2;
  given.waits = 9;
  given.wait_ns = 300'000'000;
  given.throttled_wait_ns = 290'000'000;
  given.throttled_periods = 8;
  given.wait_p99_us = 61'000;
  given.verdict = BurstPod::Verdict::SelfThrottled;
  given.why = "over 2.0 s: ...";
  given.burst = BurstPod::Burst::InForce;
  given.burst_us = 10000;
  given.cgroups = 2;
  BurstPod refused = given;
  refused.path = "/kubepods/burstable/pod-b";
  refused.burst = BurstPod::Burst::Refused;
  refused.refusal = BurstPod::Refusal::NoQuota;
  refused.burst_us = 0;
  refused.cgroups = 0;
  BurstPod calm;
  calm.path = "/kubepods/burstable/pod-c";
  calm.waits = 40;
  calm.wait_ns = 4'000'000;
  rep.online = {given, refused, calm};
  Config cfg = default_config();
  StatusReport r;
  r.burst = parse_burst_report("/x/state.burst.json", burst_report_json(rep, cfg, 1000), 1003);
  ASSERT_TRUE(r.burst->error.empty()) << r.burst->error;
  EXPECT_EQ(r.burst->age_s, 3);
  EXPECT_EQ(r.burst->window_s, 2.0);
  ASSERT_EQ(r.burst->pods.size(), 3u);
  EXPECT_EQ(r.burst->pods[0].throttled_wait_ms, 290.0);
  EXPECT_EQ(r.burst->pods[0].burst, "in-force");
  std::string t = format_status(r);
  EXPECT_NE(t.find("/kubepods/burstable/pod-a  throttled wait 290.0 of 300.0 ms (97%, 8 periods throttled) over "
                   "2.0 s, p99 61.0 ms; self-throttled; burst 10000 us on 2 cgroups"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("pod-b  throttled wait 290.0 of 300.0 ms"), std::string::npos) << t;
  EXPECT_NE(t.find("self-throttled; no burst: neither the pod nor its containers has a CPU quota"), std::string::npos)
      << t;
  EXPECT_NE(t.find("pod-c  throttled wait 0.0 of 4.0 ms (0%, 0 periods throttled) over 0.0 s, p99 0.0 ms; "
                   "not-throttled; no burst: not self-throttled"),
            std::string::npos)
      << t;
  auto j = nlohmann::json::parse(status_json(r));
  EXPECT_EQ(j["burst"]["online_pods"][1]["refusal"], refusal_text(BurstPod::Refusal::NoQuota));
  EXPECT_EQ(burst_report_path("/var/lib/khagent/state.json"), "/var/lib/khagent/state.burst.json");
  // A damaged report is said to be one.
  StatusReport bad;
  bad.burst = parse_burst_report("/x/state.burst.json", "{\"time\": 1}", 2);
  EXPECT_NE(format_status(bad).find("online pods' CPU burst: /x/state.burst.json unreadable: not a burst report"),
            std::string::npos)
      << format_status(bad);
}

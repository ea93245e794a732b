#include <gtest/gtest.h>

#include "khagent/app/cli.h"

using namespace khagent;

TEST(Cli, Durations) {
  EXPECT_EQ(*parse_duration_ns("1s"), 1000000000ULL);
  EXPECT_EQ(*parse_duration_ns("250ms"), 250000000ULL);
  EXPECT_EQ(*parse_duration_ns("1.5"), 1500000000ULL);
  EXPECT_EQ(*parse_duration_ns("2m"), 120000000000ULL);
  EXPECT_FALSE(parse_duration_ns("").ok());
  EXPECT_FALSE(parse_duration_ns("abc").ok());
  EXPECT_EQ(*parse_duration_ns("1h"), 3600000000000ULL);  // the longest
  EXPECT_FALSE(parse_duration_ns("61m").ok());
  EXPECT_FALSE(parse_duration_ns("1.5x").ok());
  EXPECT_FALSE(parse_duration_ns("0.1ns").ok());  // not a whole number of ns
  EXPECT_FALSE(parse_duration_ns("-1s").ok());
  EXPECT_FALSE(parse_duration_ns("0").ok());
}

TEST(Cli, ObserveOptions) {
  auto p = parse_cli({"observe", "--interval", "500ms", "--count", "3", "--cgroup", "/kubepods", "--json"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_EQ(p.options->interval_ns, 500000000ULL);
  EXPECT_EQ(p.options->count, 3u);
  EXPECT_EQ(p.options->cgroup_prefix, "/kubepods");
  EXPECT_TRUE(p.options->json);
}

TEST(Cli, GlobalOptions) {
  auto p = parse_cli({"--no-pin", "--no-fentry", "--max-cgroups", "1024", "observe"});
  ASSERT_TRUE(p.options.has_value()) << p.output;
  EXPECT_FALSE(p.options->loader.pin);
  EXPECT_FALSE(p.options->loader.allow_fentry);
  EXPECT_EQ(p.options->loader.max_cgroups, 1024u);
  EXPECT_EQ(p.options->loader.stall_period_ns, 2'000'000u);  // the default
  auto q = parse_cli({"--stall-period", "200us", "observe"});
  ASSERT_TRUE(q.options.has_value()) << q.output;
  EXPECT_EQ(q.options->loader.stall_period_ns, 200'000u);
  auto after = parse_cli({"run", "--stall-period", "0", "--dry-run"});  // after the subcommand too
  ASSERT_TRUE(after.options.has_value()) << after.output;
  EXPECT_EQ(after.options->loader.stall_period_ns, 0u);
  EXPECT_TRUE(after.options->dry_run);
  for (const char* zero : {"0", "0us", "0s"}) {
    auto off = parse_cli({"--stall-period", zero, "observe"});
    ASSERT_TRUE(off.options.has_value()) << zero << ": " << off.output;
    EXPECT_EQ(off.options->loader.stall_period_ns, 0u) << zero;
  }
}

TEST(Cli, ErrorsExitWithTwoAndSayWhy) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{}, "subcommand"},
      {{"observe", "--bogus"}, "--bogus"},
      {{"observe", "--interval", "abc"}, "not a duration"},
      {{"observe", "--interval", "0s"}, "positive"},
      {{"observe", "--interval", "1ms"}, "at least 10ms"},
      {{"observe", "--count", "x"}, "count"},
      {{"--log-level", "loud", "observe"}, "log-level"},
      {{"--max-cgroups", "1", "observe"}, "max-cgroups"},
      {{"--stall-period", "50us", "observe"}, "between 100us and 100ms"},
      {{"--stall-period", "1s", "observe"}, "between 100us and 100ms"},
      {{"--stall-period", "soon", "observe"}, "--stall-period"},
  };
  for (const auto& c : cases) {
    auto p = parse_cli(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_NE(p.output.find(c.says), std::string::npos) << p.output;
  }
}

TEST(Cli, RunRestoreAndConfigCheck) {
  auto r = parse_cli({"run", "--dry-run", "--state-file", "/tmp/s.json", "--node-name", "n1", "--node-label",
                      "pool=colo", "--node-label", "zone=a"});
  ASSERT_TRUE(r.options.has_value()) << r.output;
  EXPECT_EQ(r.options->command, Command::Run);
  EXPECT_TRUE(r.options->dry_run);
  EXPECT_EQ(r.options->state_file, "/tmp/s.json");
  EXPECT_EQ(r.options->node_name, "n1");
  EXPECT_EQ(r.options->node_labels.at("pool"), "colo");
  EXPECT_EQ(r.options->node_labels.at("zone"), "a");
  auto bad = parse_cli({"run", "--node-label", "novalue"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("key=value"), std::string::npos);
  auto missing = parse_cli({"run", "--config", "/nonexistent/khagent.yaml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("/nonexistent/khagent.yaml"), std::string::npos);
  auto rs = parse_cli({"restore", "--state-file", "/tmp/s.json"});
  ASSERT_TRUE(rs.options.has_value());
  EXPECT_EQ(rs.options->command, Command::Restore);
  EXPECT_EQ(parse_cli({"config"}).exit_code, 2);
  EXPECT_EQ(parse_cli({"config", "check"}).exit_code, 2);
}

TEST(Cli, HelpExitsZero) {
  auto p = parse_cli({"--help"});
  EXPECT_FALSE(p.options.has_value());
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_NE(p.output.find("observe"), std::string::npos);
}

TEST(Cli, TopStatusAndDoctor) {
  auto t = parse_cli({"top", "--interval", "250ms", "--cgroup", "/kubepods.slice", "--online-only"});
  ASSERT_TRUE(t.options.has_value()) << t.output;
  EXPECT_EQ(t.options->command, Command::Top);
  EXPECT_EQ(t.options->interval_ns, 250000000ULL);
  EXPECT_EQ(t.options->cgroup_prefix, "/kubepods.slice");
  EXPECT_TRUE(t.options->online_only);
  auto td = parse_cli({"top"});
  ASSERT_TRUE(td.options.has_value()) << td.output;
  EXPECT_EQ(td.options->interval_ns, 1000000000ULL);
  EXPECT_FALSE(td.options->online_only);
  auto tbad = parse_cli({"top", "-i", "5ms"});
  EXPECT_EQ(tbad.exit_code, 2);
  EXPECT_NE(tbad.output.find("at least 10ms"), std::string::npos) << tbad.output;

  auto s = parse_cli({"--pin-dir", "/sys/fs/bpf/other", "status", "--json", "--state-file", "/tmp/s.json"});
  ASSERT_TRUE(s.options.has_value()) << s.output;
  EXPECT_EQ(s.options->command, Command::Status);
  EXPECT_TRUE(s.options->json);
  EXPECT_EQ(s.options->loader.pin_dir, "/sys/fs/bpf/other");
  EXPECT_EQ(s.options->state_file, "/tmp/s.json");
  auto sm = parse_cli({"status", "--config", "/nonexistent/khagent.yaml"});
  EXPECT_EQ(sm.exit_code, 2);
  EXPECT_NE(sm.output.find("/nonexistent/khagent.yaml"), std::string::npos) << sm.output;

  auto d = parse_cli({"doctor", "--state-file", "/tmp/d.json"});
  ASSERT_TRUE(d.options.has_value()) << d.output;
  EXPECT_EQ(d.options->command, Command::Doctor);
  EXPECT_EQ(d.options->state_file, "/tmp/d.json");
  EXPECT_EQ(parse_cli({"doctor", "--json"}).exit_code, 2);

  struct Help {
    std::string cmd, says;
  } helps[] = {{"top", "q quit"}, {"status", "--json"}, {"doctor", "FAIL"}};
  for (const auto& h : helps) {
    auto p = parse_cli({h.cmd, "--help"});
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_NE(p.output.find(h.says), std::string::npos) << h.cmd << ":\n" << p.output;
  }
  auto all = parse_cli({"--help"});
  for (const char* c : {"top", "status", "doctor"}) EXPECT_NE(all.output.find(c), std::string::npos) << all.output;
}

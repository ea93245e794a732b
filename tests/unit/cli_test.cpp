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
  EXPECT_FALSE(parse_duration_ns("1h").ok());
  EXPECT_FALSE(parse_duration_ns("-1s").ok());
  EXPECT_FALSE(parse_duration_ns("0").ok());
}

TEST(Cli, ObserveOptions) {
  auto p = parse_cli({"observe", "--interval", "500ms", "--count", "3", "--cgroup", "/kubepods",
                      "--json"});
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
  };
  for (const auto& c : cases) {
    auto p = parse_cli(c.args);
    EXPECT_FALSE(p.options.has_value());
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_NE(p.output.find(c.says), std::string::npos) << p.output;
  }
}

TEST(Cli, RunRestoreAndConfigCheck) {
  auto r = parse_cli({"run", "--dry-run", "--state-file", "/tmp/s.json", "--node-name", "n1",
                      "--node-label", "pool=colo", "--node-label", "zone=a"});
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

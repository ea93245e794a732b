// Regressions for what the libFuzzer targets (tests/fuzz, scripts/fuzz.sh)
// found in the parsers of outside input, each with the input that showed it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "khagent/actuate/cgroup_writer.h"
#include "khagent/config/config.h"
#include "khagent/util/cpuset.h"

using namespace khagent;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string repeated(const std::string& item, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; i++) out += (i ? "," : "") + item;
  return out;
}

}  // namespace

// fuzz_cpu_list: "0-65536" repeated cost 65537 set insertions a range, so a
// cpuset.cpus value within the 4 KiB the writer accepts (and the state file
// stores for each entry) took seconds, and a kubelet cpu_manager_state of a
// few MB hours. The ranges of one list may name 2 x 65537 CPUs in all.
TEST(HardeningFuzz, CpuListsNamingTooManyCpusAreRefusedQuickly) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = parse_cpu_list(repeated("0-65536", 500));
  EXPECT_LT(seconds_since(t0), 1.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ERANGE);
  EXPECT_NE(r.error().message.find("names more than"), std::string::npos) << r.error().message;

  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(validate_cgroup_value(CgroupFile::CpusetCpus, repeated("0-65536", 500), {}).ok());
  EXPECT_LT(seconds_since(t0), 1.0);

  // Every list a kernel or kubelet writes still parses, overlaps included.
  auto all = parse_cpu_list("0-65536");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 65537u);
  EXPECT_TRUE(parse_cpu_list("0-65536,0-65536").ok());
  EXPECT_FALSE(parse_cpu_list("0-65536,0-65536,0").ok());
  EXPECT_EQ(format_cpu_list(*parse_cpu_list("0-3,2-5,8")), "0-5,8");
}

// fuzz_config: yaml-cpp 0.7 never ends a document that starts with a flow
// entry outside a flow collection (",", one byte): its parser emits nodes
// without end. load_config_file's shape scan counts them and stops; this
// keeps it in front of every yaml-cpp tree built from outside text.
TEST(HardeningFuzz, ACommaAloneIsRefusedByTheShapeScan) {
  for (const char* text : {",", ",ick: 200ms\ndry_run: false\n", "tick: 1s\n---\n,"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = load_config_bounded(text, "c.yaml", {});
    EXPECT_LT(seconds_since(t0), 5.0) << text;
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().err, EINVAL) << text;
  }
}

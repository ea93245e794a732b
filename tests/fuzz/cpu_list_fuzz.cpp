// CPU lists ("0-3,8"): cpuset.cpus files, the kubelet's cpu_manager_state,
// sysfs (online, nodeN/cpulist) and the configuration. A list that parses
// formats and parses back to the same set.
#include "khagent/util/cpuset.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto cpus = parse_cpu_list(khagent_fuzz::text_of(data, size));
  if (!cpus) return 0;
  for (int c : *cpus) FUZZ_CHECK(c >= 0);
  auto back = parse_cpu_list(format_cpu_list(*cpus));
  FUZZ_CHECK(back.ok() && *back == *cpus);
  return 0;
}

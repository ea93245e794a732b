// The kubelet's cpu_manager_state (JSON), read every tick when cpusets are
// on: the CPUs given to exclusive containers are never given to offline work.
#include "khagent/collect/topology.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto st = parse_cpu_manager_state(khagent_fuzz::text_of(data, size));
  if (!st) return 0;
  for (int c : st->exclusive) FUZZ_CHECK(c >= 0);
  for (int c : st->default_set) FUZZ_CHECK(c >= 0);
  return 0;
}

// cpu.stat (and any flat keyed cgroup file) and /proc/<pid>/cgroup, as the
// cpu.stat throttling fallback reads them for every active cgroup.
#include "khagent/collect/cpustat.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);
  for (const auto& [key, value] : parse_flat_keyed(text)) {
    FUZZ_CHECK(!key.empty() && key.find('\n') == std::string::npos);
    (void)value;
  }
  if (auto path = v1_cpu_path(text)) FUZZ_CHECK(path->find('\n') == std::string::npos);
  return 0;
}

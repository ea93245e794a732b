// What khagent reads from cgroupfs besides statistics: the current value of
// each file it owns (validated, normalised, converted between v2 and v1)
// and cgroup paths (directory names that kubelets, container runtimes and
// NodeManagers choose), classified by identify_cgroup. A v2 value that
// validates converts to a v1 value that validates too.
#include "khagent/actuate/cgroup_writer.h"
#include "khagent/signals/workload.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);
  static const CpuSet kNode = {0, 1, 2, 3};
  for (CgroupFile f : kAllCgroupFiles) {
    bool ok = validate_cgroup_value(f, text, {}).ok();
    (void)validate_cgroup_value(f, text, kNode);
    (void)normalize_cgroup_value(f, text);
    if (hierarchy_of(f) == Hierarchy::Unified) {
      FileValue v1 = to_backend(CgroupBackend::V1Hybrid, f, text);
      if (ok) FUZZ_CHECK(validate_cgroup_value(v1.file, v1.value, {}).ok());
    }
  }
  if (is_clean_cgroup_path(text)) (void)identify_cgroup(text, "hadoop-yarn");
  return 0;
}

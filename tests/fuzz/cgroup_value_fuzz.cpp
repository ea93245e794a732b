// What khagent reads from cgroupfs besides statistics: the current value of
// each file it owns (validated, normalised) and cgroup paths (directory
// names that kubelets, container runtimes and NodeManagers choose),
// classified by identify_cgroup. And what it writes: a typed value that
// renders, for either backend, is text the file's grammar accepts, already
// in the form the kernel prints.
#include "khagent/actuate/cgroup_writer.h"
#include "khagent/signals/workload.h"

#include <cstring>
#include <vector>

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);
  static const CpuSet kNode = {0, 1, 2, 3};
  for (CgroupFile f : kAllCgroupFiles) {
    bool ok = validate_cgroup_value(f, text, {}).ok();
    (void)validate_cgroup_value(f, text, kNode);
    (void)normalize_cgroup_value(f, text);
    if (ok && (f == CgroupFile::CpusetCpus || f == CgroupFile::V1CpusetCpus)) FUZZ_CHECK(parse_cpu_list(text).ok());
  }
  std::vector<KnobValue> values;
  if (size >= 12) {
    uint32_t a = 0, b = 0, c = 0;
    std::memcpy(&a, data, 4);
    std::memcpy(&b, data + 4, 4);
    std::memcpy(&c, data + 8, 4);
    values.push_back(CpuQuota{a % 3 ? std::optional<uint64_t>(a) : std::nullopt, b});
    values.push_back(CpuWeight{c});
    values.push_back(CpuIdle{(a & 1) != 0});
  }
  if (auto cpus = parse_cpu_list(text)) values.push_back(CpuList{*cpus});
  for (CgroupBackend b : {CgroupBackend::V2, CgroupBackend::V1Hybrid})
    for (const auto& v : values)
      if (auto d = render(b, {"/f", v}, {})) {
        FUZZ_CHECK(validate_cgroup_value(d->file, d->value, {}).ok());
        FUZZ_CHECK(normalize_cgroup_value(d->file, d->value) == d->value);
      }
  if (is_clean_cgroup_path(text)) (void)identify_cgroup(text, "hadoop-yarn");
  return 0;
}

// /proc/self/mountinfo as parse_mountinfo reads it to find the cgroup2
// mount and the v1 cpu and cpuset hierarchies.
#include "khagent/collect/cgroupfs.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Mounts m = parse_mountinfo(khagent_fuzz::text_of(data, size));
  (void)m;
  return 0;
}

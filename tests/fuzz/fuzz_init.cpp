// Linked into every fuzz target: the parsers must not log per input (a
// fuzz run makes millions).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  khagent_fuzz::quiet();
  return 0;
}

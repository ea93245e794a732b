#include "khagent/model/runq_maps.h"

namespace khagent {

const char* throttle_source_name(ThrottleSource s) {
  switch (s) {
    case ThrottleSource::Fentry: return "fentry";
    case ThrottleSource::CpuStat: return "cpu.stat";
    case ThrottleSource::None: return "none";
  }
  return "none";
}

}  // namespace khagent

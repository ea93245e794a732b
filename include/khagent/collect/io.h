// Block IO per cgroup: what each cgroup read and wrote, per device, from
// cgroup v2's io.stat or, on a hybrid host, the v1 blkio hierarchy's
// throttle counters (which count what went through blk-throttle: direct IO
// and reads; buffered writeback is charged to the root on v1). The stall
// side is io.pressure, parsed by parse_psi (collect/memory.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "khagent/util/result.h"

namespace khagent {

struct IoCounters {
  uint64_t rbytes = 0;
  uint64_t wbytes = 0;
  uint64_t rios = 0;
  uint64_t wios = 0;
};

// Totals since the cgroup was made, by device "major:minor".
using IoStat = std::map<std::string, IoCounters>;

// cgroup v2 io.stat: one line a device,
//   "254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0"
// (keys it does not know are skipped; a device line without any is kept
// at zeros). EINVAL for a line whose device is not major:minor or whose
// value is not a number.
Result<IoStat> parse_io_stat(std::string_view text);

// A v1 blkio hierarchy's blkio.throttle.io_service_bytes_recursive and
// blkio.throttle.io_serviced_recursive: "254:0 Read 4096" lines, with
// Write, Sync, Async, Discard and Total lines per device and a last
// "Total N" line (only Read and Write are taken).
Result<IoStat> parse_blkio_throttle(std::string_view bytes, std::string_view ios);

}  // namespace khagent

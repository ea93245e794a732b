// The YARN maximum record, <state_file>.yarn: the most the NodeManager was
// ever seen with (YarnMaxRecord, policy/yarn.h), kept across restarts so
// that a restart after a shrink still knows the size to restore.
#pragma once

#include <optional>
#include <string>

#include "khagent/policy/yarn.h"
#include "khagent/util/result.h"

namespace khagent {

// Parses the record ({"node_id":"h:8041","vcores":8,"memory_mb":16384,
// "others":{"yarn.io/gpu":4}}), checking it as if the NodeManager had just
// said it. Errors: the text is not a small JSON object (64 KiB, 4 levels,
// 4096 values; E2BIG or EINVAL),
// a field is missing or not an integer (EINVAL), the node id is not
// printable or a number is out of range (ERANGE).
Result<YarnMaxRecord> parse_yarn_max_record(const std::string& text);

// Reads the record back from `path` (a regular file of at most 64 KiB, read
// without blocking); a missing file is no record, and a bad one (or a FIFO,
// a device, a directory in its place) is logged and no record. "" = not kept.
std::optional<YarnMaxRecord> load_yarn_max_record(const std::string& path);

// Writes the record to `path` (write_file_atomic, util/file.h), creating
// its directory. A record the readers would refuse (a node id that is not
// printable, resources out of range) is not written; failures are logged.
// "" = not kept.
void save_yarn_max_record(const std::string& path, const YarnMaxRecord& r);

}  // namespace khagent

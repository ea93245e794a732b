// The state files: khagent's original values (StateStore::parse; the file
// at state_file) and the YARN maximum kept next to it (<state_file>.yarn,
// parse_yarn_max_record). Both are read back after a crash and decide what
// is written, so everything they keep must be something khagent could have
// written itself: a clean cgroup path below the root, a file it owns, a
// value of that file's grammar; and what is kept saves and parses back the
// same.
#include "khagent/actuate/state_store.h"
#include "khagent/actuate/yarn_max_record.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);

  if (auto st = StateStore::parse(text)) {
    StateStore kept("");
    for (const auto& e : st->entries) {
      FUZZ_CHECK(e.cgroup != "/" && is_clean_cgroup_path(e.cgroup));
      FUZZ_CHECK(validate_cgroup_value(e.file, e.value, {}).ok());
      kept.record(e.cgroup, e.file, e.value);
    }
    auto again = StateStore::parse(kept.serialize());
    FUZZ_CHECK(again.ok() && again->refused.empty());
    auto want = kept.entries();
    FUZZ_CHECK(again->entries.size() == want.size());
    for (size_t i = 0; i < want.size(); i++) {
      FUZZ_CHECK(again->entries[i].cgroup == want[i].cgroup && again->entries[i].file == want[i].file &&
                 again->entries[i].value == want[i].value);
    }
  }

  if (auto rec = parse_yarn_max_record(text)) {
    FUZZ_CHECK(yarn_resource_sane(rec->max));
    FUZZ_CHECK(!rec->node_id.empty());
  }
  return 0;
}

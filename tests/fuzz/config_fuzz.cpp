// The YAML configuration as the agent reads it (load_config_bounded: what
// load_config_file does with the text of a file or a ConfigMap), for a node
// that `nodes` overrides can match. A configuration that loads must
// round-trip: its effective YAML (config_to_yaml, what `khagent config
// check` prints and the agent logs) loads back to the same YAML.
#include "khagent/config/config.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const NodeIdentity kNode{"worker1", {{"pool", "colo"}}};
  auto c = load_config_bounded(khagent_fuzz::text_of(data, size), "fuzz.yaml", kNode);
  if (!c) return 0;
  const std::string yaml = config_to_yaml(*c);
  auto back = load_config_text(yaml, "effective.yaml", {});
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(config_to_yaml(*back) == yaml);
  return 0;
}

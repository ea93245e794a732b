// The API server's Node object (actuate/kube_node_status): every input goes
// to the node parser, its batch patch is built from what it found, and each
// line to the quantity parser. A value found is whole and not negative, or
// -1; the patch is always a JSON array.
#include <nlohmann/json.hpp>

#include "khagent/actuate/kube_node_status.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);
  if (auto v = parse_node_batch(text)) {
    FUZZ_CHECK(v->shown.cpu_milli >= -1 && v->shown.memory_bytes >= -1);
    const std::string patch = batch_patch(*v, {1500, 1 << 30}, v->explanation);
    FUZZ_CHECK(nlohmann::json::parse(patch, nullptr, false).is_array());
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    FUZZ_CHECK(whole_quantity(std::string_view(text).substr(start, end - start)) >= -1);
    start = end + 1;
  }
  return 0;
}

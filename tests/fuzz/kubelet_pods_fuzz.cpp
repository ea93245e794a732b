// The kubelet's pod list (GET /pods), parsed as KubeletPodsClient::fetch
// parses the body: with the agent's limits, and with small ones so the
// limit checks themselves are reached. What parses within the small limits
// parses the same within the large ones.
#include "khagent/collect/kubelet_pods.h"

#include "fuzz_util.h"

using namespace khagent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = khagent_fuzz::text_of(data, size);
  auto full = parse_pod_list(text);
  auto small = parse_pod_list(text, JsonLimits{4096, 8, 200});
  if (small) {
    FUZZ_CHECK(full.ok());
    FUZZ_CHECK(pods_equal(*small, *full));
  }
  if (!full) FUZZ_CHECK(full.error().err == EINVAL || full.error().err == E2BIG);
  return 0;
}

#include "khagent/util/curl_util.h"

#include <mutex>
#include <string_view>

namespace khagent {

CURLcode curl_global() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return rc;
}

size_t curl_sink_write(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* sink = static_cast<CurlSink*>(userdata);
  size_t len = size * nmemb;
  if (len > sink->cap - sink->body.size()) {
    sink->overflow = true;
    return 0;  // anything but len aborts the transfer (CURLE_WRITE_ERROR)
  }
  sink->body.append(data, len);
  return len;
}

int curl_abort_progress(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* abort = static_cast<const std::atomic<bool>*>(userdata);
  return abort != nullptr && abort->load() ? 1 : 0;  // non-zero: CURLE_ABORTED_BY_CALLBACK
}

std::string body_excerpt(const std::string& body, size_t max) {
  std::string s;
  for (char c : std::string_view(body).substr(0, max)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
    if (c == ' ' && (s.empty() || s.back() == ' ')) continue;
    s += c;
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (body.size() > max) s += "...";
  return s;
}

}  // namespace khagent

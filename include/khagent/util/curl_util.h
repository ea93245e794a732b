// libcurl plumbing shared by the agent's HTTP clients (util/http_client,
// collect/kubelet_pods): RAII handles, one-time global init, a size-capped
// body sink, an abort-flag progress callback, and body excerpts for errors.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

namespace khagent {

struct CurlEasyDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyDeleter>;

struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;

// curl_global_init, once per process (it must not race other curl calls),
// never cleaned up (other users of libcurl in the process may still need it).
CURLcode curl_global();

// A response body with a size cap: past the cap, `overflow` is set and the
// transfer is aborted (CURLE_WRITE_ERROR).
struct CurlSink {
  std::string body;
  size_t cap = 0;
  bool overflow = false;
};
// CURLOPT_WRITEFUNCTION for a CurlSink* in CURLOPT_WRITEDATA.
size_t curl_sink_write(char* data, size_t size, size_t nmemb, void* userdata);
// CURLOPT_XFERINFOFUNCTION for a const std::atomic<bool>* in
// CURLOPT_XFERINFODATA: aborts the transfer once the flag is set.
int curl_abort_progress(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

// The first `max` bytes of a body for an error message, on one line: control
// characters become spaces, runs of spaces one; "..." when cut.
std::string body_excerpt(const std::string& body, size_t max = 200);

}  // namespace khagent

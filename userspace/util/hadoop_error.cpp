#include "khagent/util/hadoop_error.h"

#include <cctype>
#include <cerrno>
#include <string>

#include <nlohmann/json.hpp>

#include "khagent/util/curl_util.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

using json = nlohmann::json;

// Error answers are a few hundred bytes; a larger body is not one of them.
constexpr JsonLimits kErrorLimits{size_t{1} << 20, 64, 100'000};

struct Remote {
  std::string exception;
  std::string message;
  std::string java_class;
};

bool remote_exception(const std::string& body, Remote& out) {
  auto parsed = parse_json_bounded(body, kErrorLimits);
  if (!parsed || !parsed.value().is_object()) return false;
  const json& doc = parsed.value();
  auto it = doc.find("RemoteException");
  if (it == doc.end() || !it->is_object()) return false;
  auto text = [&](const char* k) {
    auto f = it->find(k);
    return f != it->end() && f->is_string() ? f->get<std::string>() : std::string();
  };
  out.exception = text("exception");
  out.message = text("message");
  out.java_class = text("javaClassName");
  return !out.exception.empty() || !out.message.empty();
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The text of <title>...</title> of an HTML page, "" if none.
std::string html_title(const std::string& body) {
  const std::string l = lower(body.substr(0, 4096));
  size_t open = l.find("<title");
  if (open == std::string::npos) return "";
  size_t start = l.find('>', open);
  if (start == std::string::npos) return "";
  size_t end = l.find("</title", start);
  if (end == std::string::npos) return "";
  return body_excerpt(body.substr(start + 1, end - start - 1), 160);
}

// Jetty's own error page as JSON (what it writes for a client that accepts
// JSON): {"servlet","message","url","status"}.
std::string jetty_message(const std::string& body) {
  auto parsed = parse_json_bounded(body, kErrorLimits);
  if (!parsed || !parsed.value().is_object()) return "";
  auto it = parsed.value().find("message");
  return it != parsed.value().end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string hadoop_error_text(const std::string& body) {
  Remote r;
  if (remote_exception(body, r)) {
    return r.exception + (r.exception.empty() || r.message.empty() ? "" : ": ") + body_excerpt(r.message, 300);
  }
  if (std::string m = jetty_message(body); !m.empty()) return body_excerpt(m, 300) + " (web server)";
  std::string title = html_title(body);
  if (!title.empty()) return title + " (HTML page)";
  return body_excerpt(body);
}

HadoopError hadoop_http_error(long status, const std::string& body) {
  HadoopError e;
  e.err = EIO;
  std::string text = hadoop_error_text(body);
  Remote r;
  const bool remote = remote_exception(body, r);
  if (status == 401 || status == 403) {
    e.err = EACCES;
  } else if (status == 404) {
    // A REST resource that ran and found nothing answers with Hadoop's
    // NotFoundException. No REST resource for the path at all is the servlet
    // container's HTML page (Hadoop 3), or Jersey 1's own NotFoundException,
    // "null for uri: ..." (Hadoop 2, which has no update-resource endpoint).
    bool jersey = r.java_class.rfind("com.sun.jersey", 0) == 0 || r.message.find("for uri") != std::string::npos;
    e.err = remote && r.exception.find("NotFound") != std::string::npos && !jersey ? ENOENT : EOPNOTSUPP;
    if (e.err == EOPNOTSUPP) text += "; the server has no such REST endpoint";
  } else if (status == 400) {
    e.err = EINVAL;
  }
  e.message = "HTTP " + std::to_string(status) + ": " + text;
  return e;
}

}  // namespace khagent

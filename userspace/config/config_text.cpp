#include "config_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace khagent::config_text {

// ---------------------------------------------------------------------------
// Numbers and durations as text.

// Shortest text that reads back as the same double ("0.5", "2", "1e-05").
std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// The whole of `s` as a finite double, or nothing.
std::optional<double> parse_double(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

namespace {
const char* const kQosClasses[] = {"guaranteed", "burstable", "besteffort"};
}  // namespace

bool known_qos(const std::string& qos) {
  for (const char* q : kQosClasses) {
    if (qos == q) return true;
  }
  return false;
}

}  // namespace khagent::config_text

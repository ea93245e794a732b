#include "khagent/util/bytes.h"

#include <array>
#include <charconv>
#include <utility>

namespace khagent {

namespace {

constexpr uint64_t kKi = 1024;
constexpr std::array<std::pair<const char*, uint64_t>, 8> kUnits = {{
    {"Ki", kKi},
    {"Mi", kKi* kKi},
    {"Gi", kKi* kKi* kKi},
    {"Ti", kKi* kKi* kKi* kKi},
    {"K", 1000},
    {"M", 1000 * 1000},
    {"G", 1000 * 1000 * 1000},
    {"T", uint64_t{1000} * 1000 * 1000 * 1000},
}};

}  // namespace

std::string parse_bytes(std::string_view s, uint64_t& bytes) {
  static const char* const kHint = " (use e.g. 512Mi, 2Gi, 1G or a number of bytes)";
  if (s.empty()) return std::string("empty size") + kHint;
  if (s.front() == '-') return "must not be negative, got \"" + std::string(s) + "\"";
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') digits++;
  if (digits == 0) return "\"" + std::string(s) + "\" is not a size" + kHint;
  uint64_t n = 0;
  const std::string_view number = s.substr(0, digits);
  auto [end, ec] = std::from_chars(number.begin(), number.end(), n);
  if (ec != std::errc() || end != number.end()) return "\"" + std::string(s) + "\" is too large";
  const std::string_view unit = s.substr(digits);
  uint64_t mult = 1;
  if (!unit.empty()) {
    mult = 0;
    for (const auto& [name, size] : kUnits)
      if (unit == name) mult = size;
    if (mult == 0) return "unknown unit \"" + std::string(unit) + "\" in \"" + std::string(s) + "\"" + kHint;
  }
  if (n > UINT64_MAX / mult) return "\"" + std::string(s) + "\" is too large";
  bytes = n * mult;
  return "";
}

std::string format_bytes(uint64_t bytes) {
  if (bytes == 0) return "0";
  for (size_t i = 4; i-- > 0;) {
    const auto& [name, size] = kUnits[i];
    if (bytes % size == 0) return std::to_string(bytes / size) + name;
  }
  return std::to_string(bytes);
}

std::string mib_text(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace khagent

#include "khagent/util/duration.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace khagent::duration_text {

namespace {

// The whole of `s` as a finite double, or nothing.
std::optional<double> parse_double(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A duration split into its number ("1.5") and unit size in ns ("s" -> 1e9).
struct DurationText {
  std::string_view integer;   // digits before the point, maybe empty (".5s")
  std::string_view fraction;  // digits after the point, maybe empty
  uint64_t unit_ns = 0;
};

// "<digits>[.<digits>]<unit>" with unit ns, us, ms, s, m or h. Returns an
// error text (empty on success) so both parsers below word problems alike.
std::string split_duration(std::string_view s, DurationText& out) {
  static const char* const kHint = " (use e.g. 500us, 200ms, 1.5s, 2m)";
  if (s.empty()) return std::string("empty duration") + kHint;
  if (s.front() == '-') return "must not be negative, got \"" + std::string(s) + "\"";
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') i++;
  out.integer = s.substr(0, i);
  out.fraction = {};
  if (i < s.size() && s[i] == '.') {
    size_t start = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') i++;
    out.fraction = s.substr(start, i - start);
  }
  if (out.integer.empty() && out.fraction.empty()) {
    return "not a duration: \"" + std::string(s) + "\"" + kHint;
  }
  std::string_view unit = s.substr(i);
  if (unit.empty()) return "duration \"" + std::string(s) + "\" needs a unit" + kHint;
  static const std::pair<std::string_view, uint64_t> kUnits[] = {
      {"ns", 1}, {"us", kNsPerUs}, {"ms", kNsPerMs}, {"s", kNsPerS}, {"m", kNsPerMin}, {"h", kNsPerHour},
  };
  out.unit_ns = 0;
  for (const auto& [name, ns] : kUnits) {
    if (unit == name) out.unit_ns = ns;
  }
  if (out.unit_ns == 0) return "unknown unit in duration \"" + std::string(s) + "\"" + kHint;
  return "";
}

}  // namespace

// Exact integer arithmetic, so "1.1s" is 1100000000ns and not 1099999999.
std::string parse_duration_ns(std::string_view s, uint64_t& ns) {
  DurationText d;
  if (auto err = split_duration(s, d); !err.empty()) return err;
  std::string too_long = "duration \"" + std::string(s) + "\" is too long";
  uint64_t whole = 0;
  if (!d.integer.empty()) {
    auto [end, ec] = std::from_chars(d.integer.data(), d.integer.data() + d.integer.size(), whole);
    if (ec != std::errc() || end != d.integer.data() + d.integer.size()) return too_long;
  }
  if (__builtin_mul_overflow(whole, d.unit_ns, &ns)) return too_long;
  // The fraction: F / 10^digits units; trailing zeros do not count.
  std::string_view frac = d.fraction;
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
  if (frac.empty()) return "";
  std::string not_whole = "duration \"" + std::string(s) + "\" is not a whole number of ns";
  if (frac.size() > 18) return not_whole;
  uint64_t f = 0, scale = 1;
  std::from_chars(frac.data(), frac.data() + frac.size(), f);
  for (size_t k = 0; k < frac.size(); k++) scale *= 10;
  unsigned __int128 part = static_cast<unsigned __int128>(f) * d.unit_ns;  // < 10^18 * 3.6e12
  if (part % scale != 0) return not_whole;
  if (__builtin_add_overflow(ns, static_cast<uint64_t>(part / scale), &ns)) return too_long;
  return "";
}

// For the one duration stored as a double (microseconds): any precision.
std::string parse_duration_us(std::string_view s, double& us) {
  DurationText d;
  if (auto err = split_duration(s, d); !err.empty()) return err;
  // Re-join the number; parse_double wants "0.5", not ".5".
  std::string number = d.integer.empty() ? "0" : std::string(d.integer);
  if (!d.fraction.empty()) {
    number.push_back('.');
    number.append(d.fraction);
  }
  auto v = parse_double(number);
  if (!v) return "duration \"" + std::string(s) + "\" is too long";
  // Units of 1us and up are whole multiples of 1us: one exact multiplication.
  // Both divisions are exact: every unit is a multiple or a divisor of 1us.
  us = d.unit_ns >= kNsPerUs ? *v * static_cast<double>(d.unit_ns / kNsPerUs)   // NOLINT(bugprone-integer-division)
                             : *v / static_cast<double>(kNsPerUs / d.unit_ns);  // NOLINT(bugprone-integer-division)
  return "";
}

// The largest unit that divides the value exactly: "200ms", "5s", "2m".
std::string format_duration_ns(uint64_t ns) {
  if (ns == 0) return "0s";
  struct Unit {
    uint64_t ns;
    const char* name;
  };
  static const Unit kUnits[] = {{kNsPerHour, "h"}, {kNsPerMin, "m"}, {kNsPerS, "s"},
                                {kNsPerMs, "ms"},  {kNsPerUs, "us"}, {1, "ns"}};
  for (const auto& u : kUnits) {
    if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.name;
  }
  return std::to_string(ns) + "ns";  // not reached: the last unit divides everything
}

std::string format_duration_us(uint64_t us) {
  if (us > UINT64_MAX / kNsPerUs) return std::to_string(us) + "us";
  return format_duration_ns(us * kNsPerUs);
}

// A duration kept as a double in microseconds. Shown in the nicest unit when
// that reads back as the same double (see parse_duration_us), otherwise as
// the exact number of microseconds in fixed notation ("1234.5678us").
std::string format_duration_us(double us) {
  double ns = us * static_cast<double>(kNsPerUs);
  if (std::isfinite(ns) && ns >= 0 && ns < 1.8e19 && ns == std::floor(ns)) {
    auto whole = static_cast<uint64_t>(ns);
    double back = whole % kNsPerUs == 0
                      ? static_cast<double>(whole / kNsPerUs)  // NOLINT(bugprone-integer-division): exact
                      : static_cast<double>(whole) / static_cast<double>(kNsPerUs);
    if (back == us) return format_duration_ns(whole);
  }
  std::string buf(1100, '\0');  // enough for any double in fixed notation
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), us, std::chars_format::fixed);
  buf.resize(ec == std::errc() ? end - buf.data() : 0);
  return buf + "us";
}

}  // namespace khagent::duration_text

// Durations as text, one grammar for the configuration and the command line:
// "<digits>[.<digits>]<unit>", unit ns, us, ms, s, m or h ("500us", "1.5s").
// Parsing is exact integer arithmetic ("1.1s" is 1100000000 ns). The parsers
// return an error text, empty on success, worded for a person.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace khagent::duration_text {

inline constexpr uint64_t kNsPerUs = 1'000;
inline constexpr uint64_t kNsPerMs = 1'000'000;
inline constexpr uint64_t kNsPerS = 1'000'000'000;
inline constexpr uint64_t kNsPerMin = 60 * kNsPerS;
inline constexpr uint64_t kNsPerHour = 60 * kNsPerMin;

// Exact: a fraction that is not a whole number of ns is an error.
std::string parse_duration_ns(std::string_view s, uint64_t& ns);
// For durations kept as a double in microseconds: any precision.
std::string parse_duration_us(std::string_view s, double& us);
// The largest unit that divides the value exactly: "200ms", "5s", "2m".
std::string format_duration_ns(uint64_t ns);
std::string format_duration_us(uint64_t us);
// In the nicest unit when that reads back as the same double, else the
// exact number of microseconds ("1234.5678us").
std::string format_duration_us(double us);

}  // namespace khagent::duration_text

// Numbers and durations as configuration text, shared by the YAML reader,
// the validation and the emitter of the configuration (private to config/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace khagent::config_text {

inline constexpr uint64_t kNsPerUs = 1'000;
inline constexpr uint64_t kNsPerMs = 1'000'000;
inline constexpr uint64_t kNsPerS = 1'000'000'000;
inline constexpr uint64_t kNsPerMin = 60 * kNsPerS;
inline constexpr uint64_t kNsPerHour = 60 * kNsPerMin;

std::string format_double(double v);
std::optional<double> parse_double(std::string_view s);
std::string parse_duration_ns(std::string_view s, uint64_t& ns);
std::string parse_duration_us(std::string_view s, double& us);
std::string format_duration_ns(uint64_t ns);
std::string format_duration_us(uint64_t us);
std::string format_duration_us(double us);
bool known_qos(const std::string& qos);

}  // namespace khagent::config_text

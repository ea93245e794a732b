// Numbers and durations as configuration text, shared by the YAML reader,
// the validation and the emitter of the configuration (private to config/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "khagent/util/duration.h"

namespace khagent::config_text {

// Durations: util/duration.h, the grammar the command line shares.
using duration_text::format_duration_ns;
using duration_text::format_duration_us;
using duration_text::kNsPerHour;
using duration_text::kNsPerMin;
using duration_text::kNsPerMs;
using duration_text::kNsPerS;
using duration_text::kNsPerUs;
using duration_text::parse_duration_ns;
using duration_text::parse_duration_us;

std::string format_double(double v);
std::optional<double> parse_double(std::string_view s);
bool known_qos(const std::string& qos);

}  // namespace khagent::config_text

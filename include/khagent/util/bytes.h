// Sizes in bytes as text, one grammar for the configuration and the logs:
// "<digits>[<unit>]", unit Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T
// (powers of 1000), as Kubernetes writes memory quantities ("512Mi", "2Gi",
// "1G"); no unit: bytes. The parser returns an error text, empty on
// success, worded for a person.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace khagent {

std::string parse_bytes(std::string_view s, uint64_t& bytes);
// The largest binary unit that divides the value exactly ("512Mi", "3Gi",
// "4095"), so that it parses back to the same number.
std::string format_bytes(uint64_t bytes);
// For logs: mebibytes with no fraction ("1536 MiB").
std::string mib_text(uint64_t bytes);

}  // namespace khagent

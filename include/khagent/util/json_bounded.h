// Bounded JSON parsing for bodies that come from peers (the kubelet's pod
// list, the YARN ResourceManager and NodeManager): a body of a few MB can
// describe a document that takes GBs to build ("[" x 30M is 2 GB of nested
// arrays; 30M zeros are 30M json values), so a cap on the bytes alone does
// not bound memory. The document is built through nlohmann::json's SAX
// interface, counting nesting and values as they come; parsing stops at the
// first limit crossed, before anything more is built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "khagent/util/result.h"

namespace khagent {

struct JsonLimits {
  size_t max_bytes = size_t{16} << 20;  // of the text
  // Nesting of arrays and objects; a scalar or an empty [] at the top is 1,
  // [[1]] is 2. The parser keeps no recursion, but every level is a
  // container built.
  size_t max_depth = 64;
  // Values of every kind (objects, arrays, strings, numbers, booleans,
  // nulls; object keys are not values). Memory is bounded by
  // max_bytes + max_values * (about 100 bytes for the costliest kind, an
  // object member), whatever the text says.
  size_t max_values = 1'000'000;
};

// Parses `text` (one JSON document; nothing but whitespace after it) within
// `limits`. Errors: E2BIG for a limit crossed (the message names it and the
// byte offset), EINVAL for text that is not JSON. Neither throws.
Result<nlohmann::json> parse_json_bounded(std::string_view text, const JsonLimits& limits);

// A JSON number as an integer in [lo, hi], or nothing: integers as they
// are; floating-point values when finite, truncated toward zero. Never
// undefined behaviour, whatever the value (1e300, -0.0, 2^64 - 1); anything
// else (strings, null, NaN) is nothing.
std::optional<int64_t> json_int_in_range(const nlohmann::json& v, int64_t lo, int64_t hi);

}  // namespace khagent

// Shared by the libFuzzer targets: the input as a string, a quiet logger,
// and a check that stops the run (a crash libFuzzer reports, with the
// reproducer) when a property that must hold does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

namespace khagent_fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// The parsers must not log per input (a fuzz run makes millions).
inline void quiet() { spdlog::set_level(spdlog::level::off); }

[[noreturn]] inline void property_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz property failed at %s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace khagent_fuzz

#define FUZZ_CHECK(cond) ((cond) ? (void)0 : khagent_fuzz::property_failed(#cond, __FILE__, __LINE__))

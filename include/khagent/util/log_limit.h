// Lets a log line that would repeat (every tick, every refresh) through
// once per period per key, so a problem that lasts does not flood the log.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace khagent {

class LogLimiter {
 public:
  explicit LogLimiter(uint64_t period_ns = 60'000'000'000ULL) : period_ns_(period_ns) {}
  // Whether to log `key` at monotonic time `now_ns`; if so, the period
  // starts again from now.
  bool allow(const std::string& key, uint64_t now_ns) {
    auto [it, fresh] = last_ns_.try_emplace(key, now_ns);
    if (fresh) return true;
    if (now_ns - it->second < period_ns_) return false;
    it->second = now_ns;
    return true;
  }
  // Forgets `key` (one about something gone), so that keys do not pile up.
  void forget(const std::string& key) { last_ns_.erase(key); }

 private:
  uint64_t period_ns_;
  std::map<std::string, uint64_t> last_ns_;
};

}  // namespace khagent

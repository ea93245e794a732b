#include "khagent/export/doctor_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace khagent {

std::string format_doctor(const std::vector<DoctorCheck>& checks) {
  std::string out;
  size_t counts[3] = {0, 0, 0};
  for (const auto& c : checks) {
    const char* tag = c.level == CheckLevel::Ok ? "OK  " : c.level == CheckLevel::Warn ? "WARN" : "FAIL";
    counts[static_cast<size_t>(c.level)]++;
    out += fmt::format("{} {}{}\n", tag, c.name, c.detail.empty() ? "" : ": " + c.detail);
  }
  out += fmt::format("{} OK, {} WARN, {} FAIL\n", counts[0], counts[1], counts[2]);
  return out;
}

int doctor_exit_code(const std::vector<DoctorCheck>& checks) {
  return std::any_of(checks.begin(), checks.end(), [](const DoctorCheck& c) { return c.level == CheckLevel::Fail; })
             ? 1
             : 0;
}

}  // namespace khagent

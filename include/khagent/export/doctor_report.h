// `khagent doctor`'s checks as plain data and their rendering. Pure:
// app/doctor.cpp runs the checks.
#pragma once

#include <string>
#include <vector>

namespace khagent {

enum class CheckLevel { Ok, Warn, Fail };

struct DoctorCheck {
  CheckLevel level = CheckLevel::Ok;
  std::string name;
  std::string detail;  // what was found (OK) or what to fix (WARN/FAIL)
};

// One line per check ("OK   name: detail", "WARN ...", "FAIL ..."), then a summary.
std::string format_doctor(const std::vector<DoctorCheck>& checks);
int doctor_exit_code(const std::vector<DoctorCheck>& checks);  // 1 if any FAIL

}  // namespace khagent

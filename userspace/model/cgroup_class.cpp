#include "khagent/model/cgroup_class.h"

namespace khagent {

const char* class_name(CgroupClass c) {
  switch (c) {
    case CgroupClass::Online: return "online";
    case CgroupClass::Offline: return "offline";
    case CgroupClass::System: return "system";
  }
  return "system";
}

std::optional<CgroupClass> parse_class(const std::string& s) {
  if (s == "online") return CgroupClass::Online;
  if (s == "offline") return CgroupClass::Offline;
  if (s == "system") return CgroupClass::System;
  return std::nullopt;
}

}  // namespace khagent

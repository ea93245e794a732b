#include "khagent/config/config.h"

namespace khagent {

const char* lever_name(Lever l) { return l == Lever::Cpuset ? "cpuset" : "quota"; }

Config default_config() {
  Config c;
  // The platform's priority classes decide first, then YARN and QoS.
  ClassRule online_prio;
  online_prio.priority_class = "high-priority-online";
  online_prio.cls = CgroupClass::Online;
  ClassRule offline_prio;
  offline_prio.priority_class = "low-priority-offline";
  offline_prio.cls = CgroupClass::Offline;
  ClassRule yarn;
  yarn.yarn = true;
  yarn.cls = CgroupClass::Offline;
  ClassRule besteffort;
  besteffort.qos = "besteffort";
  besteffort.cls = CgroupClass::Offline;
  c.classes.rules = {online_prio, offline_prio, yarn, besteffort};
  return c;
}

}  // namespace khagent

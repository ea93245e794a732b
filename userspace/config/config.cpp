#include "khagent/config/config.h"

namespace khagent {

const char* vcore_rounding_name(VcoreRounding r) {
  switch (r) {
    case VcoreRounding::Down: return "down";
    case VcoreRounding::Nearest: return "nearest";
    case VcoreRounding::Up: return "up";
  }
  return "down";
}

const char* reclaimer_name(Reclaimer r) { return r == Reclaimer::Rm ? "rm" : "khagent"; }

const char* capacity_split_name(CapacitySplitRule r) { return r == CapacitySplitRule::Usage ? "usage" : "fixed"; }

const char* http_auth_name(HttpAuth a) {
  switch (a) {
    case HttpAuth::None: return "none";
    case HttpAuth::Simple: return "simple";
    case HttpAuth::Kerberos: return "kerberos";
  }
  return "simple";
}

Config default_config() {
  Config c;
  // The platform's priority classes decide first, then YARN and QoS.
  ClassRule online_prio;
  online_prio.priority_class = "high-priority-online";
  online_prio.cls = CgroupClass::Online;
  ClassRule offline_prio;
  offline_prio.priority_class = "low-priority-offline";
  offline_prio.cls = CgroupClass::Offline;
  // A pod that asks for the batch resources khagent publishes runs on them.
  ClassRule batch;
  batch.batch_resources = true;
  batch.cls = CgroupClass::Offline;
  ClassRule yarn;
  yarn.yarn = true;
  yarn.cls = CgroupClass::Offline;
  ClassRule besteffort;
  besteffort.qos = "besteffort";
  besteffort.cls = CgroupClass::Offline;
  c.classes.rules = {online_prio, offline_prio, batch, yarn, besteffort};
  return c;
}

}  // namespace khagent

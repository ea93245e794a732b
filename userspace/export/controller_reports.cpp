#include "khagent/export/controller_reports.h"

#include <variant>

namespace khagent {

void ReportExporter::report(const ControllerReport& r, uint64_t now_ns) {
  now_ns_ = now_ns;
  std::visit(*this, r);
}

void ReportExporter::wakeup(size_t psi_triggers) {
  if (metrics_ && psi_triggers) metrics_->record_psi_triggers(psi_triggers);
}

}  // namespace khagent

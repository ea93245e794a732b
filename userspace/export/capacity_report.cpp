// The capacity publisher's report file, read by `khagent status`.
#include <ctime>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "khagent/export/controller_reports.h"
#include "khagent/export/status_report.h"
#include "khagent/util/file.h"

namespace khagent {

void ReportExporter::capacity(const CapacityStatus& st, uint64_t now_ns) {
  if (cfg_.dry_run || cfg_.state_file.empty()) return;  // a dry run writes nothing
  StatusCapacity c;
  c.node = st.node;
  if (st.wanted) {
    c.cpu_milli = st.wanted->cpu_milli;
    c.memory_bytes = st.wanted->memory_bytes;
  }
  if (st.on_node) {
    c.on_node_cpu_milli = st.on_node->cpu_milli;
    c.on_node_memory_bytes = st.on_node->memory_bytes;
  }
  c.explanation = st.explanation;
  c.patches_ok = st.patches_ok;
  c.patches_failed = st.patches_failed;
  c.reasserts = st.reasserts;
  c.stale = st.stale;
  c.last_error = st.last_error;
  const std::string same = capacity_report_text(c);
  if (same == capacity_written_ && now_ns - capacity_written_ns_ < 10'000'000'000ULL) return;
  c.time = static_cast<int64_t>(std::time(nullptr));
  const std::string path = capacity_report_path(cfg_.state_file);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  auto w = write_file_atomic(path, capacity_report_text(c), 0644, false);
  if (!w) {
    if (!capacity_write_failed_)
      spdlog::warn("capacity: cannot write {}: {} (khagent status will not show it)", path, w.error().message);
    capacity_write_failed_ = true;
    return;
  }
  capacity_write_failed_ = false;
  capacity_written_ = same;
  capacity_written_ns_ = now_ns;
}

}  // namespace khagent

#include "khagent/actuate/yarn_max_record.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "khagent/util/file.h"
#include "khagent/util/json_bounded.h"

namespace khagent {

namespace {

constexpr int64_t kMaxOtherResource = 1'000'000'000'000;
constexpr size_t kMaxRecordBytes = size_t{64} * 1024;  // a record is ~80 bytes

// A NodeManager id as the RM writes it (host:port): printable, no spaces.
bool plausible_node_id(const std::string& id) {
  if (id.empty() || id.size() > 1024) return false;
  return std::all_of(id.begin(), id.end(), [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return c > 0x20 && c < 0x7f;
  });
}

}  // namespace

// Checked as if the NodeManager had just said it: a bad value saved by an
// older version (or a hand edit) must not become the size the node is
// restored to.
Result<YarnMaxRecord> parse_yarn_max_record(const std::string& text) {
  auto parsed = parse_json_bounded(text, JsonLimits{kMaxRecordBytes, 4, 4096});
  if (!parsed) return parsed.error();
  const nlohmann::json& j = parsed.value();
  auto field = [&j](const char* k) -> const nlohmann::json* {
    auto it = j.is_object() ? j.find(k) : j.end();
    return it == j.end() ? nullptr : &*it;
  };
  const auto* id = field("node_id");
  const auto* vc = field("vcores");
  const auto* mb = field("memory_mb");
  if (id == nullptr || !id->is_string() || vc == nullptr || !vc->is_number_integer() || mb == nullptr ||
      !mb->is_number_integer()) {
    return make_error(EINVAL, "not a resource record");
  }
  auto v = json_int_in_range(*vc, 0, kYarnMaxVcores);
  auto m = json_int_in_range(*mb, 0, kYarnMaxMemoryMb);
  if (!plausible_node_id(id->get<std::string>()) || !v || !m) {
    return make_error(ERANGE, fmt::format("node {} with {} vcores/{} MB is out of range (at most {} vcores/{} MB)",
                                          id->dump(), vc->dump(), mb->dump(), kYarnMaxVcores, kYarnMaxMemoryMb));
  }
  YarnMaxRecord rec{id->get<std::string>(), {*v, *m}, {}};
  if (const auto* others = field("others"); others != nullptr && others->is_object()) {
    for (const auto& [name, value] : others->items()) {
      auto n = json_int_in_range(value, 0, kMaxOtherResource);
      if (!n || name.empty() || name.size() > 256)
        return make_error(ERANGE, fmt::format("resource type {} is out of range", nlohmann::json(name).dump()));
      rec.others[name] = *n;
    }
  }
  return rec;
}

std::optional<YarnMaxRecord> load_yarn_max_record(const std::string& path) {
  if (path.empty()) return std::nullopt;
  // Not blocking on a FIFO, not reading a device to its end.
  auto text = read_regular_file(path, kMaxRecordBytes);
  if (!text) {
    if (text.error().err != ENOENT) spdlog::warn("yarn: ignoring {}: {}", path, text.error().str());
    return std::nullopt;
  }
  auto rec = parse_yarn_max_record(*text);
  if (!rec) {
    spdlog::warn("yarn: ignoring {}: {}", path, rec.error().message);
    return std::nullopt;
  }
  return std::move(rec).value();
}

void save_yarn_max_record(const std::string& path, const YarnMaxRecord& r) {
  if (path.empty()) return;
  if (!yarn_resource_sane(r.max) || !plausible_node_id(r.node_id)) {  // the readers refuse these already
    spdlog::error("yarn: not saving {} with {} vcores/{} MB to {}: out of range", r.node_id, r.max.vcores,
                  r.max.memory_mb, path);
    return;
  }
  nlohmann::json j = {{"node_id", r.node_id}, {"vcores", r.max.vcores}, {"memory_mb", r.max.memory_mb}};
  if (!r.others.empty()) j["others"] = r.others;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (auto w = write_file_atomic(path, j.dump() + "\n", 0644); !w) spdlog::warn("yarn: {}", w.error().str());
}

}  // namespace khagent

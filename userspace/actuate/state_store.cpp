#include "khagent/actuate/state_store.h"

#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "khagent/model/knob_table.h"
#include "khagent/util/file.h"

namespace khagent {

namespace {

constexpr int kVersion = 1;

// The checksum covers the canonical dump of the entries.
uint32_t checksum_of(const nlohmann::json& entries) {
  std::string s = entries.dump();
  return static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

constexpr size_t kMaxStateBytes = 4u << 20;  // thousands of entries fit in far less
constexpr int kMaxDepth = 8;                 // {"entries":[{...}]} is 3 deep

// Reads a regular file (no symlink, no FIFO) of at most kMaxStateBytes;
// anything else in its place is a damaged state file (EBADMSG).
Result<std::string> slurp(const std::string& path) {
  auto text = read_regular_file(path, kMaxStateBytes, Symlinks::Refuse);
  if (!text && (text.error().err == EINVAL || text.error().err == EISDIR))
    return make_error(EBADMSG, text.error().message);
  return text;
}

// The nesting depth of JSON text, strings skipped; the parsed document is
// dumped and destroyed recursively, so a deep one must never be parsed.
int json_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') depth--;
  }
  return max_depth;
}

}  // namespace

std::string StateStore::serialize() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, value] : values_)
    entries.push_back(
        {{"cgroup", key.first}, {"file", cgroup_file_name(static_cast<CgroupFile>(key.second))}, {"original", value}});
  nlohmann::json doc = {{"version", kVersion}, {"entries", entries}, {"checksum", checksum_of(entries)}};
  return doc.dump(1) + "\n";
}

Result<ParsedState> StateStore::parse(const std::string& text) {
  if (text.size() > kMaxStateBytes)
    return make_error(EFBIG, "larger than " + std::to_string(kMaxStateBytes) + " bytes");
  if (json_depth(text) > kMaxDepth)
    return make_error(EBADMSG, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(EBADMSG, "not valid JSON");
  if (!doc.contains("version") || doc["version"] != kVersion)
    return make_error(EBADMSG, "unknown version (want " + std::to_string(kVersion) + ")");
  if (!doc.contains("entries") || !doc["entries"].is_array() || !doc.contains("checksum") ||
      !doc["checksum"].is_number_unsigned())
    return make_error(EBADMSG, "missing entries or checksum");
  if (doc["checksum"].get<uint32_t>() != checksum_of(doc["entries"]))
    return make_error(EBADMSG, "checksum mismatch: the file was changed or damaged");
  ParsedState out;
  for (const auto& e : doc["entries"]) {
    if (!e.is_object() || !e.contains("cgroup") || !e.contains("file") || !e.contains("original") ||
        !e["cgroup"].is_string() || !e["file"].is_string() || !e["original"].is_string())
      return make_error(EBADMSG, "malformed entry " + e.dump());
    // The checksum only says the file is as written; whoever wrote it may
    // not be khagent. Every entry must name a cgroup below the root with a
    // clean path, a file khagent owns and a value of that file's grammar.
    const std::string cg = e["cgroup"].get<std::string>();
    const std::string name = e["file"].get<std::string>();
    const std::string value = e["original"].get<std::string>();
    auto f = cgroup_file_from_name(name);
    std::string why;
    if (!f) why = "not a file khagent writes";
    else if (knob_row(*f).persistence == Persistence::WriteOnly) why = "a write-only file, never saved or restored";
    else if (cg == "/" || !is_clean_cgroup_path(cg))
      why = "not a cgroup path below the root (no '..', '.', '//' or control characters)";
    else if (auto v = validate_cgroup_value(*f, value, {}); !v) why = v.error().message;
    if (!f || !why.empty()) {  // (no f always has a why)
      out.refused.push_back("entry " + e.dump() + " refused: " + why);
      continue;
    }
    out.entries.push_back({cg, *f, value});
  }
  return out;
}

Result<void> StateStore::load() {
  values_.clear();
  note_.clear();
  refused_.clear();
  auto try_one = [&](const std::string& p) -> Result<ParsedState> {
    auto text = slurp(p);
    if (!text) return text.error();
    auto parsed = parse(*text);
    if (!parsed) return make_error(EBADMSG, p + ": " + parsed.error().message);
    return parsed;
  };
  struct stat st{};
  if (::lstat(path_.c_str(), &st) != 0) {
    if (errno != ENOENT) return make_error(errno, "cannot access state file " + path_);
    note_ = "no state file: nothing to restore";
    return {};
  }
  auto main = try_one(path_);
  ParsedState got;
  if (main) {
    got = std::move(main.value());
    note_ = "state file " + path_ + ": " + std::to_string(got.entries.size()) + " original values";
  } else {
    auto prev = try_one(path_ + ".prev");
    if (!prev)
      return make_error(EBADMSG, "state file " + main.error().message + "; no intact previous generation (" +
                                     prev.error().message + ")");
    got = std::move(prev.value());
    note_ = "state file " + main.error().message + "; using the previous generation " + path_ + ".prev (" +
            std::to_string(got.entries.size()) + " original values)";
  }
  for (const auto& v : got.entries) values_[{v.cgroup, static_cast<int>(v.file)}] = v.value;
  refused_ = std::move(got.refused);
  if (!refused_.empty()) note_ += "; " + std::to_string(refused_.size()) + " entries refused";
  return {};
}

Result<void> StateStore::save() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path_);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  // Keep the last good generation (written the same careful way), then move
  // the new one in place.
  if (auto cur = slurp(path_); cur && parse(*cur).ok()) {
    if (auto r = write_file_atomic(path_ + ".prev", *cur); !r) return r;
  }
  return write_file_atomic(path_, serialize());
}

bool StateStore::has(const std::string& cgroup, CgroupFile f) const {
  return values_.count({cgroup, static_cast<int>(f)}) > 0;
}

std::optional<std::string> StateStore::original(const std::string& cgroup, CgroupFile f) const {
  auto it = values_.find({cgroup, static_cast<int>(f)});
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void StateStore::record(const std::string& cgroup, CgroupFile f, const std::string& value) {
  values_.emplace(std::make_pair(cgroup, static_cast<int>(f)), value);
}

void StateStore::forget(const std::string& cgroup, CgroupFile f) { values_.erase({cgroup, static_cast<int>(f)}); }

void StateStore::forget_cgroup(const std::string& cgroup) {
  for (auto it = values_.begin(); it != values_.end();)
    it = it->first.first == cgroup ? values_.erase(it) : std::next(it);
}

std::vector<OriginalValue> StateStore::entries() const {
  std::vector<OriginalValue> out;
  out.reserve(values_.size());
  for (const auto& [key, value] : values_) out.push_back({key.first, static_cast<CgroupFile>(key.second), value});
  return out;
}

void load_or_set_aside(StateStore& store, bool dry_run) {
  auto loaded = store.load();
  for (const auto& r : store.refused()) spdlog::error("state file {}: {}", store.path(), r);
  if (loaded) {
    spdlog::info("{}", store.note());
  } else if (dry_run) {
    spdlog::error("{}; dry run: leaving it as it is", loaded.error().str());
  } else {
    std::string aside = store.path() + ".corrupt-" + std::to_string(time(nullptr));
    spdlog::error(
        "{}; moved to {} and starting a new state file (originals recorded there may "
        "include values khagent wrote before)",
        loaded.error().str(), aside);
    if (::rename(store.path().c_str(), aside.c_str()) != 0)
      spdlog::error("cannot move {} aside: {}", store.path(), std::strerror(errno));
  }
}

}  // namespace khagent

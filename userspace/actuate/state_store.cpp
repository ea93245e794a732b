#include "khagent/actuate/state_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace khagent {

namespace {

constexpr int kVersion = 1;

std::optional<CgroupFile> file_from_name(const std::string& s) {
  for (CgroupFile f : {CgroupFile::CpuMax, CgroupFile::CpuWeight, CgroupFile::CpuIdle, CgroupFile::CpusetCpus})
    if (s == cgroup_file_name(f)) return f;
  return std::nullopt;
}

// The checksum covers the canonical dump of the entries.
uint32_t checksum_of(const nlohmann::json& entries) {
  std::string s = entries.dump();
  return static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

Result<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return make_error(errno, "cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string StateStore::serialize() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, value] : values_)
    entries.push_back({{"cgroup", key.first},
                       {"file", cgroup_file_name(static_cast<CgroupFile>(key.second))},
                       {"original", value}});
  nlohmann::json doc = {{"version", kVersion}, {"entries", entries}, {"checksum", checksum_of(entries)}};
  return doc.dump(1) + "\n";
}

Result<std::vector<OriginalValue>> StateStore::parse(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error(EBADMSG, "not valid JSON");
  if (!doc.contains("version") || doc["version"] != kVersion)
    return make_error(EBADMSG, "unknown version (want " + std::to_string(kVersion) + ")");
  if (!doc.contains("entries") || !doc["entries"].is_array() || !doc.contains("checksum") ||
      !doc["checksum"].is_number_unsigned())
    return make_error(EBADMSG, "missing entries or checksum");
  if (doc["checksum"].get<uint32_t>() != checksum_of(doc["entries"]))
    return make_error(EBADMSG, "checksum mismatch: the file was changed or damaged");
  std::vector<OriginalValue> out;
  for (const auto& e : doc["entries"]) {
    if (!e.is_object() || !e.contains("cgroup") || !e.contains("file") || !e.contains("original") ||
        !e["cgroup"].is_string() || !e["file"].is_string() || !e["original"].is_string())
      return make_error(EBADMSG, "malformed entry " + e.dump());
    auto f = file_from_name(e["file"].get<std::string>());
    if (!f) return make_error(EBADMSG, "unknown cgroup file in entry " + e.dump());
    out.push_back({e["cgroup"].get<std::string>(), *f, e["original"].get<std::string>()});
  }
  return out;
}

Result<void> StateStore::load() {
  values_.clear();
  note_.clear();
  auto try_one = [&](const std::string& p) -> Result<std::vector<OriginalValue>> {
    auto text = slurp(p);
    if (!text) return text.error();
    auto parsed = parse(*text);
    if (!parsed) return make_error(EBADMSG, p + ": " + parsed.error().message);
    return parsed;
  };
  if (::access(path_.c_str(), F_OK) != 0) {
    if (errno != ENOENT) return make_error(errno, "cannot access state file " + path_);
    note_ = "no state file: nothing to restore";
    return {};
  }
  auto main = try_one(path_);
  std::vector<OriginalValue> got;
  if (main) {
    got = std::move(main.value());
    note_ = "state file " + path_ + ": " + std::to_string(got.size()) + " original values";
  } else {
    auto prev = try_one(path_ + ".prev");
    if (!prev)
      return make_error(EBADMSG, "state file " + main.error().message +
                                     "; no intact previous generation (" + prev.error().message + ")");
    got = std::move(prev.value());
    note_ = "state file " + main.error().message + "; using the previous generation " + path_ +
            ".prev (" + std::to_string(got.size()) + " original values)";
  }
  for (const auto& v : got) values_[{v.cgroup, static_cast<int>(v.file)}] = v.value;
  return {};
}

Result<void> StateStore::save() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path_);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  std::string tmp = path_ + ".tmp";
  std::string text = serialize();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(errno, "cannot write state file " + tmp);
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  bool ok = n == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (!ok && n >= 0) err = errno ? errno : EIO;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return make_error(err, "cannot write state file " + tmp);
  }
  // Keep the last good generation, then move the new one in place.
  if (::access(path_.c_str(), F_OK) == 0) {
    auto cur = slurp(path_);
    if (cur && parse(*cur).ok()) fs::copy_file(path_, path_ + ".prev", fs::copy_options::overwrite_existing, ec);
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) return make_error(errno, "cannot rename " + tmp);
  if (p.has_parent_path()) {
    int dfd = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return {};
}

bool StateStore::has(const std::string& cgroup, CgroupFile f) const {
  return values_.count({cgroup, static_cast<int>(f)}) > 0;
}

void StateStore::record(const std::string& cgroup, CgroupFile f, const std::string& value) {
  values_.emplace(std::make_pair(cgroup, static_cast<int>(f)), value);
}

void StateStore::forget(const std::string& cgroup, CgroupFile f) {
  values_.erase({cgroup, static_cast<int>(f)});
}

void StateStore::forget_cgroup(const std::string& cgroup) {
  for (auto it = values_.begin(); it != values_.end();)
    it = it->first.first == cgroup ? values_.erase(it) : std::next(it);
}

std::vector<OriginalValue> StateStore::entries() const {
  std::vector<OriginalValue> out;
  for (const auto& [key, value] : values_)
    out.push_back({key.first, static_cast<CgroupFile>(key.second), value});
  return out;
}

}  // namespace khagent

// The schema walker of the YAML configuration (config_walk.h): where a value
// sits, the scalars a key may hold, and a Field per kind of key.
#include "config_walk.h"

#include <charconv>
#include <set>

#include "khagent/util/bytes.h"
#include "khagent/util/cpuset.h"

#include "config_text.h"

namespace khagent::config_yaml {

using namespace config_text;

YAML::Mark mark_of(const YAML::Node& value, const YAML::Mark& fallback) {
  return value.IsNull() ? fallback : value.Mark();
}

std::string describe(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return "\"" + n.Scalar() + "\"";
}

bool is_plain_scalar(const YAML::Node& n) { return n.IsScalar() && n.Tag() != "!"; }

void Walker::fail(const Where& at, const std::string& what) const {
  std::string msg = source_;
  if (!at.mark.is_null()) msg += ":" + std::to_string(at.mark.line + 1);
  msg += ": ";
  if (!at.path.empty()) msg += at.path + ": ";
  throw ConfigError{msg + what};
}

void Walker::section(const YAML::Node& n, const Where& at, const std::vector<Field>& fields) const {
  if (n.IsNull()) return;
  if (!n.IsMap()) fail(at, "expected a map, got " + describe(n));
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) fail(at.key("?", kv.first.Mark()), "keys must be strings");
    const std::string& key = kv.first.Scalar();
    Where here = at.key(key, kv.first.Mark());
    if (!seen.insert(key).second) fail(here, "duplicate key");
    const Field* field = nullptr;
    for (const auto& f : fields) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      std::string known;
      for (const auto& f : fields) known += (known.empty() ? "" : ", ") + std::string(f.key);
      fail(here, "unknown key (known: " + known + ")");
    }
    here.mark = mark_of(kv.second, kv.first.Mark());
    field->apply(kv.second, here);
  }
}

bool Walker::boolean(const YAML::Node& n, const Where& at) const {
  bool v = false;
  if (!is_plain_scalar(n) || !YAML::convert<bool>::decode(n, v)) {
    fail(at, "expected true or false, got " + describe(n));
  }
  return v;
}

double Walker::number(const YAML::Node& n, const Where& at) const {
  std::optional<double> v;
  if (is_plain_scalar(n)) v = parse_double(n.Scalar());
  if (!v) fail(at, "expected a number, got " + describe(n));
  return *v;
}

uint64_t Walker::count(const YAML::Node& n, const Where& at, uint64_t max) const {
  if (!is_plain_scalar(n)) fail(at, "expected a whole number, got " + describe(n));
  const std::string& s = n.Scalar();
  if (!s.empty() && s.front() == '-') fail(at, "must not be negative, got " + s);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const std::string too_big = s + " is out of range (at most " + std::to_string(max) + ")";
  if (ec == std::errc::result_out_of_range) fail(at, too_big);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    fail(at, "expected a whole number, got " + describe(n));
  }
  if (v > max) fail(at, too_big);
  return v;
}

std::string Walker::string(const YAML::Node& n, const Where& at) const {
  if (n.IsNull()) return "";
  if (!n.IsScalar()) fail(at, "expected a string, got " + describe(n));
  return n.Scalar();
}

uint64_t Walker::duration_ns(const YAML::Node& n, const Where& at) const {
  if (!n.IsScalar()) fail(at, "expected a duration (e.g. 200ms), got " + describe(n));
  uint64_t ns = 0;
  if (auto err = parse_duration_ns(n.Scalar(), ns); !err.empty()) fail(at, err);
  return ns;
}

uint64_t Walker::duration_whole_us(const YAML::Node& n, const Where& at) const {
  uint64_t ns = duration_ns(n, at);
  if (ns % kNsPerUs != 0) fail(at, "must be a whole number of microseconds, got " + n.Scalar());
  return ns / kNsPerUs;
}

double Walker::duration_us(const YAML::Node& n, const Where& at) const {
  if (!n.IsScalar()) fail(at, "expected a duration (e.g. 2ms), got " + describe(n));
  double us = 0;
  if (auto err = parse_duration_us(n.Scalar(), us); !err.empty()) fail(at, err);
  return us;
}

CgroupClass Walker::cls(const YAML::Node& n, const Where& at) const {
  auto c = parse_class(string(n, at));
  if (!c) fail(at, "unknown class " + describe(n) + " (known: online, offline, system)");
  return *c;
}

std::vector<std::string> Walker::string_list(const YAML::Node& n, const Where& at) const {
  std::vector<std::string> out;
  if (n.IsNull()) return out;
  if (!n.IsSequence()) fail(at, "expected a list, got " + describe(n));
  for (size_t i = 0; i < n.size(); i++) {
    const YAML::Node item = n[i];
    Where here = at.item(i, mark_of(item, at.mark));
    if (!item.IsScalar()) fail(here, "expected a string, got " + describe(item));
    out.push_back(item.Scalar());
  }
  return out;
}

std::map<std::string, std::string> Walker::string_map(const YAML::Node& n, const Where& at) const {
  std::map<std::string, std::string> out;
  if (n.IsNull()) return out;
  if (!n.IsMap()) fail(at, "expected a map, got " + describe(n));
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) fail(at.key("?", kv.first.Mark()), "keys must be strings");
    Where here = at.key(kv.first.Scalar(), mark_of(kv.second, kv.first.Mark()));
    if (!kv.second.IsScalar()) fail(here, "expected a string, got " + describe(kv.second));
    if (!out.emplace(kv.first.Scalar(), kv.second.Scalar()).second) fail(here, "duplicate key");
  }
  return out;
}

Field Walker::flag(const char* key, bool& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = boolean(n, at); }};
}

Field Walker::num(const char* key, double& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = number(n, at); }};
}

Field Walker::text(const char* key, std::string& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = string(n, at); }};
}

Field Walker::cpus(const char* key, CpuSet& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) {
            auto c = parse_cpu_list(string(n, at));
            if (!c) fail(at, "not a cpu list: " + c.error().message);
            dst = std::move(*c);
          }};
}

Field Walker::bytes(const char* key, uint64_t& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) {
            if (!n.IsScalar()) fail(at, "expected a size (e.g. 512Mi), got " + describe(n));
            if (auto err = parse_bytes(n.Scalar(), dst); !err.empty()) fail(at, err);
          }};
}

Field Walker::ns(const char* key, uint64_t& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = duration_ns(n, at); }};
}

Field Walker::us(const char* key, uint64_t& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = duration_whole_us(n, at); }};
}

Field Walker::us(const char* key, double& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = duration_us(n, at); }};
}

Field Walker::klass(const char* key, CgroupClass& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = cls(n, at); }};
}

Field Walker::strings(const char* key, std::vector<std::string>& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = string_list(n, at); }};
}

Field Walker::dict(const char* key, std::map<std::string, std::string>& dst) const {
  return {key, [this, &dst](const YAML::Node& n, const Where& at) { dst = string_map(n, at); }};
}

}  // namespace khagent::config_yaml

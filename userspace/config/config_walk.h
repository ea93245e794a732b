// Walking a YAML document against a schema written as tables of known keys
// (Walker::section and one Field per key), so unknown keys and wrong types
// are caught where they are, with the key path and line. Private to config/:
// the configuration's schema is config_yaml.cpp's Loader. A problem is thrown
// as ConfigError, which the public entry points turn into an Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "khagent/config/config.h"
#include "khagent/util/cpuset.h"

namespace khagent::config_yaml {

struct ConfigError {
  std::string message;
};

// Where a value sits: the key path ("budget.floor", "classes.rules[1].qos")
// and its place in the file, if known.
struct Where {
  std::string path;
  YAML::Mark mark = YAML::Mark::null_mark();

  Where key(const std::string& k, const YAML::Mark& m) const { return {path.empty() ? k : path + "." + k, m}; }
  Where item(size_t i, const YAML::Mark& m) const { return {path + "[" + std::to_string(i) + "]", m}; }
};

// A null value (`floor:` with nothing after it) carries the mark of whatever
// follows it, so the key's line is the better place to point at.
YAML::Mark mark_of(const YAML::Node& value, const YAML::Mark& fallback);

// What a node is, for "expected X, got Y".
std::string describe(const YAML::Node& n);

// A plain (unquoted) scalar; quoted ones are strings, never numbers or bools.
bool is_plain_scalar(const YAML::Node& n);

using Handler = std::function<void(const YAML::Node& value, const Where& at)>;

struct Field {
  const char* key;
  Handler apply;
};

class Walker {
 public:
  explicit Walker(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const Where& at, const std::string& what) const;

  // A map whose keys must all be in `fields`; each value goes to its handler.
  // A null section (`budget:` with nothing) is an empty one.
  void section(const YAML::Node& n, const Where& at, const std::vector<Field>& fields) const;

  // --- Scalars -------------------------------------------------------------

  bool boolean(const YAML::Node& n, const Where& at) const;
  double number(const YAML::Node& n, const Where& at) const;
  uint64_t count(const YAML::Node& n, const Where& at, uint64_t max) const;
  // Any scalar is a string; nothing is the empty string.
  std::string string(const YAML::Node& n, const Where& at) const;
  uint64_t duration_ns(const YAML::Node& n, const Where& at) const;
  uint64_t duration_whole_us(const YAML::Node& n, const Where& at) const;
  double duration_us(const YAML::Node& n, const Where& at) const;
  CgroupClass cls(const YAML::Node& n, const Where& at) const;
  // A list of scalars; nothing is the empty list.
  std::vector<std::string> string_list(const YAML::Node& n, const Where& at) const;
  // A map of string to string (labels, annotations).
  std::map<std::string, std::string> string_map(const YAML::Node& n, const Where& at) const;

  // --- Field builders: one line per key in the schema tables ----------------

  Field flag(const char* key, bool& dst) const;
  Field num(const char* key, double& dst) const;
  template <typename T>
  Field whole(const char* key, T& dst) const {
    return {key, [this, &dst](const YAML::Node& n, const Where& at) {
              dst = static_cast<T>(count(n, at, std::numeric_limits<T>::max()));
            }};
  }
  Field text(const char* key, std::string& dst) const;
  // One of a few names, each naming a value of E.
  template <typename E>
  Field choice(const char* key, E& dst, std::vector<E> values, const char* (*name)(E)) const {
    return {key, [this, &dst, values = std::move(values), name, key](const YAML::Node& n, const Where& at) {
              const std::string s = string(n, at);
              std::string known;
              for (E e : values) {
                if (s == name(e)) {
                  dst = e;
                  return;
                }
                known += (known.empty() ? "" : ", ") + std::string(name(e));
              }
              fail(at, std::string("unknown ") + key + " " + describe(n) + " (known: " + known + ")");
            }};
  }
  Field cpus(const char* key, CpuSet& dst) const;
  Field bytes(const char* key, uint64_t& dst) const;
  Field ns(const char* key, uint64_t& dst) const;
  Field us(const char* key, uint64_t& dst) const;
  Field us(const char* key, double& dst) const;
  Field klass(const char* key, CgroupClass& dst) const;
  Field strings(const char* key, std::vector<std::string>& dst) const;
  Field dict(const char* key, std::map<std::string, std::string>& dst) const;
  template <typename T>
  Field optional(const char* key, std::optional<T>& dst,
                 T (Walker::*read)(const YAML::Node&, const Where&) const) const {
    return {key, [this, &dst, read](const YAML::Node& n, const Where& at) { dst = (this->*read)(n, at); }};
  }

 private:
  std::string source_;
};

}  // namespace khagent::config_yaml

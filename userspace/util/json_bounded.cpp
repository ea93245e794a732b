#include "khagent/util/json_bounded.h"

#include <cerrno>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace khagent {

namespace {

using json = nlohmann::json;

// Builds the document like nlohmann's own DOM parser (one json per value,
// containers on a stack of pointers to the values being filled), but counts
// first and refuses a value that would cross a limit. Only the container at
// the top of the stack is ever added to, so the pointers below it stay valid.
class BoundedBuilder final : public nlohmann::json_sax<json> {
 public:
  BoundedBuilder(json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() override { return add(nullptr) != nullptr; }
  bool boolean(bool v) override { return add(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return add(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return add(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return add(v) != nullptr; }
  bool string(string_t& v) override { return add(std::move(v)) != nullptr; }
  bool binary(binary_t& v) override { return add(std::move(v)) != nullptr; }

  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool key(string_t& k) override {
    // A repeated key replaces the earlier value, as nlohmann's parser does.
    member_ = &stack_.back()->operator[](k);
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    if (error_.message.empty()) {
      // e.what() names the byte ("[json.exception.parse_error.101] parse error at line 1, column 9: ...").
      error_ = make_error(EINVAL, "malformed JSON near byte " + std::to_string(pos) + ": " + e.what());
    }
    return false;
  }

  const Error& error() const { return error_; }

 private:
  bool limit(const std::string& what) {
    error_ = make_error(E2BIG, what);
    return false;
  }

  bool open(json::value_t type) {
    if (stack_.size() + 1 > limits_.max_depth) {
      return limit("JSON nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    json* v = add(type);
    if (v == nullptr) return false;
    stack_.push_back(v);
    return true;
  }

  template <typename V>
  json* add(V&& v) {
    if (++values_ > limits_.max_values) {
      limit("JSON with more than " + std::to_string(limits_.max_values) + " values");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = json(std::forward<V>(v));
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      auto& arr = parent.get_ref<json::array_t&>();
      arr.emplace_back(std::forward<V>(v));
      return &arr.back();
    }
    *member_ = json(std::forward<V>(v));
    return member_;
  }

  json& root_;
  const JsonLimits& limits_;
  std::vector<json*> stack_;
  json* member_ = nullptr;  // the object member the next value goes to
  size_t values_ = 0;
  Error error_;
};

}  // namespace

Result<json> parse_json_bounded(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return make_error(
        E2BIG, "JSON text of " + std::to_string(text.size()) + " bytes, more than " + std::to_string(limits.max_bytes));
  }
  json doc;
  BoundedBuilder b(doc, limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text.data(), text.data() + text.size(), &b, json::input_format_t::json, /*strict=*/true);
  } catch (const std::bad_alloc&) {
    return make_error(ENOMEM, "out of memory parsing JSON");
  } catch (const json::exception& e) {  // not expected: errors go to parse_error()
    return make_error(EINVAL, std::string("malformed JSON: ") + e.what());
  }
  if (!ok) {
    if (!b.error().message.empty()) return b.error();
    return make_error(EINVAL, "malformed JSON");
  }
  return doc;
}

std::optional<int64_t> json_int_in_range(const json& v, int64_t lo, int64_t hi) {
  if (lo > hi) return std::nullopt;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) return std::nullopt;
    auto i = static_cast<int64_t>(u);
    if (i < lo) return std::nullopt;
    return i;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return std::nullopt;
    return i;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d)) return std::nullopt;
    d = std::trunc(d);
    // Only values inside int64's range may be converted: [-2^63, 2^63).
    constexpr double kTwo63 = 9223372036854775808.0;
    if (d < -kTwo63 || d >= kTwo63) return std::nullopt;
    auto i = static_cast<int64_t>(d);
    if (i < lo || i > hi) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

}  // namespace khagent

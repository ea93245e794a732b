// Small string helpers shared by the stages.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace khagent {

// The whole of `s` as a decimal number (no sign, no spaces); false otherwise.
inline bool parse_u64(std::string_view s, uint64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// Whether `word` is one of the whitespace-separated words of `text`
// (cgroup.controllers, cgroup.subtree_control).
inline bool has_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

// Whether cgroup `path` is `parent` or below it ("/a/b" is below "/a", not
// "/ab"); everything is below "/". Both as cgroup paths, normalized.
inline bool path_at_or_below(const std::string& path, const std::string& parent) {
  if (parent == "/") return true;
  if (path.size() < parent.size() || path.compare(0, parent.size(), parent) != 0) return false;
  return path.size() == parent.size() || path[parent.size()] == '/';
}

// The whole of a (small) file as text; "" if it cannot be read.
std::string read_text_file(const std::string& path);

// `s` without leading and trailing white space (std::isspace).
std::string trim_space(std::string s);

// A duration for people: "950ns", "12.3us", "4.5ms", "1.20s".
std::string human_ns(double ns);

// Display width of UTF-8 text, counting code points (cgroup paths are ASCII
// in practice; this keeps a stray multi-byte name from overflowing a line).
size_t width_of(const std::string& s);

// The first `cols` code points of `s`.
std::string cut_to_width(const std::string& s, size_t cols);

// `s` in `width` columns, the start replaced by "..." if it is too long (the
// end of a cgroup path is the part that tells them apart).
std::string shorten_left(const std::string& s, size_t width);

// `s` padded with spaces to `width` columns (unchanged if already as wide).
std::string pad_right(const std::string& s, size_t width);

}  // namespace khagent

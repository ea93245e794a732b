#include "khagent/util/strings.h"

#include <cctype>
#include <fstream>

#include <fmt/format.h>

namespace khagent {

std::string human_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f}ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f}us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.1f}ms", ns / 1e6);
  return fmt::format("{:.2f}s", ns / 1e9);
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim_space(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
  return s.substr(i);
}

size_t width_of(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string cut_to_width(const std::string& s, size_t cols) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i++) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (n == cols) return s.substr(0, i);
      n++;
    }
  }
  return s;
}

std::string shorten_left(const std::string& s, size_t width) {
  size_t w = width_of(s);
  if (w <= width) return s;
  if (width <= 3) return cut_to_width("...", width);
  size_t drop = w - (width - 3);
  size_t n = 0, i = 0;
  for (; i < s.size() && n < drop; i++)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) n++;
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) i++;
  return "..." + s.substr(i);
}

std::string pad_right(const std::string& s, size_t width) {
  size_t w = width_of(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

}  // namespace khagent

// Small string helpers shared by the stages.
#pragma once

#include <sstream>
#include <string>

namespace khagent {

// Whether `word` is one of the whitespace-separated words of `text`
// (cgroup.controllers, cgroup.subtree_control).
inline bool has_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

}  // namespace khagent

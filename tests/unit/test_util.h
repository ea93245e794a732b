// Helpers shared by unit tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

// A directory removed with everything in it when the test ends.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "khagent-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    auto p = path / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

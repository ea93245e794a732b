// Reading a configuration file: bounds on its size and on the YAML it may
// hold, checked before the node tree the loader walks (config_yaml.cpp) is
// built, so a hostile or broken file costs little.

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "khagent/config/config.h"
#include "khagent/util/file.h"

#include "config_yaml.h"

namespace khagent {

namespace {

// Bounds on a configuration file, checked before a node tree is built: the
// file is read whole and walked several times (overrides are merged per
// node), and YAML aliases let a short text stand for a large tree.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;  // a real one is a few KB
constexpr size_t kMaxConfigAliases = 1000;           // "*name" uses
constexpr size_t kMaxConfigExpandedNodes = 200'000;  // YAML nodes with every alias expanded
constexpr size_t kMaxNodeOverrides = 1000;           // entries of `nodes`
// load_config_text merges each override that applies to this node into a
// new tree, and each merge costs about the size of the document (yaml-cpp
// merges node sets): 200 applying overrides in a 1 MiB file took 7.7 s.
// Bound the product (~1 s at worst).
constexpr size_t kMaxMergeWork = 2'000'000;  // applying overrides x expanded YAML nodes

// Counts, from yaml-cpp's parse events (no node tree), the aliases, the
// nodes the document stands for with every alias expanded, and the entries
// of the top-level `nodes` list; throws Limit past a bound.
class ConfigShapeScan final : public YAML::EventHandler {
 public:
  struct Limit {
    std::string what;
  };

  void OnDocumentStart(const YAML::Mark&) override { stack_.clear(); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { leaf(anchor, nullptr); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    if (++aliases_ > kMaxConfigAliases) {
      throw Limit{"more than " + std::to_string(kMaxConfigAliases) + " YAML aliases (*name)"};
    }
    position(nullptr);
    auto it = sizes_.find(anchor);
    grow(it == sizes_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    leaf(anchor, &value);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(anchor, false);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(anchor, true);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    bool map = false;
    bool want_key = true;    // map: the next node is a key
    bool overrides = false;  // the sequence under the top-level key `nodes`
    std::string key;         // map: the last scalar key
    YAML::anchor_t anchor = 0;
    size_t expanded_at_start = 0;
  };

  void grow(size_t n) {
    expanded_ += n;
    if (expanded_ > kMaxConfigExpandedNodes) {
      throw Limit{"more than " + std::to_string(kMaxConfigExpandedNodes) + " YAML nodes with its aliases expanded"};
    }
  }

  // Places a new node in its parent; true if it is the value of the
  // top-level key `nodes`.
  bool position(const std::string* scalar) {
    if (stack_.empty()) return false;
    Frame& top = stack_.back();
    if (top.map) {
      if (top.want_key) {
        top.key = scalar != nullptr ? *scalar : std::string();
        top.want_key = false;
        return false;
      }
      top.want_key = true;
      return stack_.size() == 1 && top.key == "nodes";
    }
    if (top.overrides && ++overrides_ > kMaxNodeOverrides) {
      throw Limit{"more than " + std::to_string(kMaxNodeOverrides) + " entries in nodes"};
    }
    return false;
  }

  void leaf(YAML::anchor_t anchor, const std::string* scalar) {
    position(scalar);
    grow(1);
    if (anchor != 0) sizes_[anchor] = 1;
  }

  void open(YAML::anchor_t anchor, bool map) {
    bool under_nodes = position(nullptr);
    grow(1);
    Frame f;
    f.map = map;
    f.overrides = under_nodes && !map;
    f.anchor = anchor;
    f.expanded_at_start = expanded_;
    stack_.push_back(std::move(f));
  }

  void close() {
    if (stack_.empty()) return;
    const Frame& f = stack_.back();
    if (f.anchor != 0) sizes_[f.anchor] = expanded_ - f.expanded_at_start + 1;
    stack_.pop_back();
  }

 public:
  size_t expanded() const { return expanded_; }

 private:
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, size_t> sizes_;  // anchor -> nodes it stands for, expanded
  size_t aliases_ = 0;
  size_t expanded_ = 0;
  size_t overrides_ = 0;
};

}  // namespace

// Regular files only, opened without blocking (a FIFO would wait for a
// writer) and read up to kMaxConfigBytes (a device would never end). Errors
// carry the reason in the message as well as in `err`: callers print the
// message alone.
Result<Config> load_config_file(const std::string& path, const NodeIdentity& node) {
  auto text = read_regular_file(path, kMaxConfigBytes);
  if (!text) {
    const Error& e = text.error();
    // "config file /x is a FIFO, not a regular file"; "config file: cannot
    // open /x: No such file or directory".
    const bool described = e.err == EISDIR || e.err == EINVAL || e.err == EFBIG;
    return make_error(e.err, described ? "config file " + e.message : "config file: " + e.str());
  }
  return load_config_bounded(*text, path, node);
}

Result<Config> load_config_bounded(const std::string& text, const std::string& source, const NodeIdentity& node) {
  if (text.size() > kMaxConfigBytes) {
    return make_error(EFBIG, source + " is larger than " + std::to_string(kMaxConfigBytes >> 10) + " KiB");
  }
  // Aliases and the size of `nodes` are bounded before the node tree is
  // built; then the work of merging the overrides that apply.
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ConfigShapeScan scan;
    while (parser.HandleNextDocument(scan)) {
    }
    const YAML::Node doc = YAML::Load(text);
    size_t applying = config_yaml::applying_overrides(doc, node);
    if (applying > 1 && applying * scan.expanded() > kMaxMergeWork) {
      return make_error(
          EINVAL, source + ": " + std::to_string(applying) + " entries of nodes apply to this node in a document of " +
                      std::to_string(scan.expanded()) + " YAML nodes, more than the loader merges in good time (" +
                      std::to_string(kMaxMergeWork) + " for the product); combine them into fewer entries");
    }
  } catch (const ConfigShapeScan::Limit& l) {
    return make_error(EINVAL, source + ": " + l.what);
  } catch (const YAML::Exception&) {  // NOLINT(bugprone-empty-catch)
    // A syntax error (or several documents): load_config_text reports it with its line.
  }
  return load_config_text(text, source, node);
}

}  // namespace khagent

#include "khagent/collect/io.h"

#include <cerrno>

#include "khagent/util/strings.h"

namespace khagent {

namespace {

bool is_device(std::string_view d) {
  const size_t colon = d.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == d.size()) return false;
  for (size_t i = 0; i < d.size(); i++)
    if (i != colon && (d[i] < '0' || d[i] > '9')) return false;
  return true;
}

// The next space-separated field of `line` from `pos`.
std::string_view field(std::string_view line, size_t& pos) {
  while (pos < line.size() && line[pos] == ' ') pos++;
  const size_t start = pos;
  while (pos < line.size() && line[pos] != ' ') pos++;
  return line.substr(start, pos - start);
}

template <typename F>
void each_line(std::string_view text, F&& f) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty()) f(line);
    start = end + 1;
  }
}

Result<void> blkio_lines(std::string_view text, IoStat& out, bool bytes) {
  Result<void> r;
  each_line(text, [&](std::string_view line) {
    if (!r) return;
    size_t pos = 0;
    const std::string_view dev = field(line, pos);
    if (dev == "Total") return;
    const std::string_view op = field(line, pos);
    const std::string_view val = field(line, pos);
    uint64_t v = 0;
    if (!is_device(dev) || !parse_u64(val, v)) {
      r = make_error(EINVAL, "blkio line '" + std::string(line) + "'");
      return;
    }
    IoCounters& c = out[std::string(dev)];
    if (op == "Read") (bytes ? c.rbytes : c.rios) = v;
    if (op == "Write") (bytes ? c.wbytes : c.wios) = v;
  });
  return r;
}

}  // namespace

Result<IoStat> parse_io_stat(std::string_view text) {
  IoStat out;
  Result<void> r;
  each_line(text, [&](std::string_view line) {
    if (!r) return;
    size_t pos = 0;
    const std::string_view dev = field(line, pos);
    if (!is_device(dev)) {
      r = make_error(EINVAL, "io.stat line '" + std::string(line) + "' does not start with major:minor");
      return;
    }
    IoCounters& c = out[std::string(dev)];
    for (std::string_view kv = field(line, pos); !kv.empty(); kv = field(line, pos)) {
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view k = kv.substr(0, eq);
      uint64_t v = 0;
      if (!parse_u64(kv.substr(eq + 1), v)) {
        r = make_error(EINVAL, "io.stat value '" + std::string(kv) + "'");
        return;
      }
      if (k == "rbytes") c.rbytes = v;
      if (k == "wbytes") c.wbytes = v;
      if (k == "rios") c.rios = v;
      if (k == "wios") c.wios = v;
    }
  });
  if (!r) return r.error();
  return out;
}

Result<IoStat> parse_blkio_throttle(std::string_view bytes, std::string_view ios) {
  IoStat out;
  if (auto r = blkio_lines(bytes, out, true); !r) return r.error();
  if (auto r = blkio_lines(ios, out, false); !r) return r.error();
  return out;
}

}  // namespace khagent

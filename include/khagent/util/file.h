// Files with errors as values: an owned descriptor, whole-file reads that keep
// the errno, bounded reads of regular files, and atomic replacement.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "khagent/util/result.h"

namespace khagent {

// A file descriptor closed when it goes out of scope; moves, never copies.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_;
};

// "a directory", "a FIFO", "a character device", "a block device",
// "a socket", "a symlink", "a regular file".
const char* file_kind(mode_t mode);

// The whole file. The errno survives in the error (callers tell ENOENT from
// EACCES); for sysfs, procfs and cgroupfs files, which report size 0.
Result<std::string> read_file(const std::string& path);

enum class Symlinks { Follow, Refuse };
// A regular file of at most `max_bytes`, opened without blocking, so a FIFO
// or a device planted in its place cannot stall or flood the reader. A
// symlink as the last component is followed, or refused like a FIFO.
// Errors: the errno of open, fstat or read; EISDIR for a directory and
// EINVAL for another kind ("PATH is a FIFO, not a regular file"); EFBIG past
// the bound ("PATH is larger than 1024 KiB").
Result<std::string> read_regular_file(const std::string& path, size_t max_bytes, Symlinks symlinks = Symlinks::Follow);

// Replaces `path` with `text` so that a reader sees the old content or the
// new, never a part: written to PATH.tmp (a stale one, or a symlink planted
// there, is removed, never followed; O_EXCL), fsynced, renamed over `path`,
// and the directory synced. The directory must exist. Nothing is left
// behind on failure. `durable` false: neither synced (a report that a crash
// may lose, written often; readers still see the old file or the new).
Result<void> write_file_atomic(const std::string& path, const std::string& text, mode_t mode = 0600,
                               bool durable = true);

}  // namespace khagent

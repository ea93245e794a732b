#include "khagent/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace khagent {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "a regular file";
}

namespace {

Error too_large(const std::string& path, size_t max_bytes) {
  std::string bound =
      max_bytes % 1024 == 0 ? std::to_string(max_bytes >> 10) + " KiB" : std::to_string(max_bytes) + " bytes";
  return make_error(EFBIG, path + " is larger than " + bound);
}

// Reads `fd` to its end; EFBIG past `max_bytes` (0: no bound).
Result<std::string> read_all(int fd, const std::string& path, size_t max_bytes) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(errno, "cannot read " + path);
    if (n == 0) break;
    if (max_bytes && out.size() + static_cast<size_t>(n) > max_bytes) return too_large(path, max_bytes);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

Result<std::string> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return make_error(errno, "cannot open " + path);
  return read_all(fd.get(), path, 0);
}

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes, Symlinks symlinks) {
  const int nofollow = symlinks == Symlinks::Refuse ? O_NOFOLLOW : 0;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | nofollow));
  if (!fd.valid() && errno == ELOOP && nofollow) {
    struct stat st{};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return make_error(EINVAL, path + " is a symlink, not a regular file");
  }
  if (!fd.valid()) return make_error(errno, "cannot open " + path);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return make_error(errno, "cannot stat " + path);
  if (!S_ISREG(st.st_mode)) {
    return make_error(S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                      path + " is " + file_kind(st.st_mode) + ", not a regular file");
  }
  if (max_bytes && st.st_size > static_cast<off_t>(max_bytes)) return too_large(path, max_bytes);
  return read_all(fd.get(), path, max_bytes);
}

Result<void> write_file_atomic(const std::string& path, const std::string& text, mode_t mode, bool durable) {
  const std::string tmp = path + ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return make_error(errno, "cannot remove " + tmp);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return make_error(errno, "cannot create " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::unlink(tmp.c_str());
      return make_error(err, "cannot write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (durable && ::fsync(fd.get()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return make_error(err, "cannot sync " + tmp);
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return make_error(err, "cannot rename " + tmp + " to " + path);
  }
  if (!durable) return {};
  // The rename itself survives a crash once its directory is synced (best
  // effort: the new content is in place either way).
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.valid()) ::fsync(d.get());
  return {};
}

}  // namespace khagent

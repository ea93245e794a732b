// util/file: the owned descriptor, bounded reads, atomic replacement.
#include "khagent/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "khagent/actuate/yarn_max_record.h"
#include "test_util.h"

namespace khagent {
namespace {

std::string contents(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(File, FdClosesOnceWhereverItIsMoved) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    Fd a(raw);
    Fd b(std::move(a));
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from state is defined
    EXPECT_EQ(b.get(), raw);
    Fd c;
    c = std::move(b);
    EXPECT_EQ(c.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));

  int kept = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(kept, 0);
  {
    Fd d(kept);
    EXPECT_EQ(d.release(), kept);
  }
  EXPECT_TRUE(is_open(kept));  // released: the caller owns it again
  ::close(kept);
}

TEST(File, ReadFileKeepsTheErrno) {
  TempDir dir;
  dir.write("a", "text\n");
  auto ok = read_file((dir.path / "a").string());
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(*ok, "text\n");
  auto missing = read_file((dir.path / "missing").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().err, ENOENT);
}

TEST(File, ReadRegularFileRefusesOtherKindsAndBigFiles) {
  TempDir dir;
  dir.write("small", "0123456789");
  auto ok = read_regular_file((dir.path / "small").string(), 10);
  ASSERT_TRUE(ok.ok()) << ok.error().str();
  EXPECT_EQ(*ok, "0123456789");

  auto big = read_regular_file((dir.path / "small").string(), 9);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().err, EFBIG);
  EXPECT_NE(big.error().message.find("larger than 9 bytes"), std::string::npos) << big.error().message;

  auto d = read_regular_file(dir.path.string(), 1024);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().err, EISDIR);

  const std::string fifo = (dir.path / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = read_regular_file(fifo, 1024);  // returns at once: opened without blocking
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().err, EINVAL);
  EXPECT_NE(f.error().message.find("is a FIFO, not a regular file"), std::string::npos) << f.error().message;

  // A symlink to a regular file is followed (projected tokens are reached so).
  std::filesystem::create_symlink(dir.path / "small", dir.path / "link");
  auto l = read_regular_file((dir.path / "link").string(), 1 << 10);
  ASSERT_TRUE(l.ok()) << l.error().str();
  EXPECT_EQ(*l, "0123456789");
  // Or refused, where a planted link must not redirect the read.
  auto refused = read_regular_file((dir.path / "link").string(), 1 << 10, Symlinks::Refuse);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().err, EINVAL);
  EXPECT_NE(refused.error().message.find("is a symlink"), std::string::npos) << refused.error().message;
}

TEST(File, WriteFileAtomicReplacesAndLeavesNoTemporary) {
  TempDir dir;
  const auto path = dir.path / "state.json";
  ASSERT_TRUE(write_file_atomic(path.string(), "one\n").ok());
  EXPECT_EQ(contents(path), "one\n");
  ASSERT_TRUE(write_file_atomic(path.string(), "two\n", 0640).ok());
  EXPECT_EQ(contents(path), "two\n");
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
}

TEST(File, WriteFileAtomicNeverFollowsAPlantedTemporary) {
  TempDir dir;
  const auto path = dir.path / "state.json";
  const auto victim = dir.path / "victim";
  dir.write("victim", "untouched\n");
  std::filesystem::create_symlink(victim, path.string() + ".tmp");
  ASSERT_TRUE(write_file_atomic(path.string(), "new\n").ok());
  EXPECT_EQ(contents(victim), "untouched\n");
  EXPECT_EQ(contents(path), "new\n");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
}

TEST(File, WriteFileAtomicFailsWithTheErrnoAndWritesNothing) {
  TempDir dir;
  const auto path = dir.path / "no-such-dir" / "state.json";
  auto r = write_file_atomic(path.string(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "no-such-dir"));

  // Renaming over a directory fails: the temporary is removed, the directory kept.
  std::filesystem::create_directory(dir.path / "taken");
  dir.write("taken/inside", "keep");
  auto over = write_file_atomic((dir.path / "taken").string(), "x");
  ASSERT_FALSE(over.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path / "taken.tmp"));
  EXPECT_EQ(contents(dir.path / "taken" / "inside"), "keep");
}

// The YARN downscaler's record of the node's own size goes through the same
// reader and writer: a FIFO in its place is ignored without blocking, and a
// record saved and loaded again is the same.
TEST(File, TheYarnRecordIsReadBoundedAndWrittenWhole) {
  TempDir dir;
  const std::string path = (dir.path / "yarn" / "max.json").string();
  YarnMaxRecord rec{"nm-1:45454", {16, 65536}, {{"yarn.io/gpu", 2}}};
  save_yarn_max_record(path, rec);
  auto back = load_yarn_max_record(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->node_id, "nm-1:45454");
  EXPECT_EQ(back->max, (YarnResource{16, 65536}));
  EXPECT_EQ(back->others.at("yarn.io/gpu"), 2);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const std::string fifo = (dir.path / "fifo.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return load_yarn_max_record(fifo); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let the blocked open through
    if (w >= 0) ::close(w);
    pending.wait();
    FAIL() << "load_yarn_max_record blocked on a FIFO";
  }
  EXPECT_FALSE(pending.get().has_value());
}

}  // namespace
}  // namespace khagent

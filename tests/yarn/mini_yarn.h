// A real ResourceManager and NodeManager for the yarn tier: starts the
// MiniYARNCluster launcher (tests/yarn-mini) as a child process, reads where
// it listens, sends it commands (submit/status/kill an application of
// `sleep` containers) and stops it by closing its stdin, then by signals to
// its pid only. One cluster per test binary run (see main in the tests).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yarnreal {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct MiniNode {
  std::string id;    // NodeManager id host:port
  std::string http;  // its web address host:port
};

class MiniYarn {
 public:
  MiniYarn() = default;
  MiniYarn(const MiniYarn&) = delete;
  MiniYarn& operator=(const MiniYarn&) = delete;
  ~MiniYarn() { stop(); }

  // Starts the launcher and waits (at most `timeout_s`) for it to be ready.
  // Returns "" or why it could not.
  std::string start(const std::string& java, const std::string& jar, const std::string& classpath_file,
                    const std::string& log_file, int timeout_s = 180) {
    if (java.empty()) return "no java found at configure time: install a JDK 17 (scripts/setup.sh)";
    if (!std::filesystem::exists(jar)) {
      return "the MiniYARNCluster launcher " + jar +
             " was not built (Maven missing at configure time? run "
             "scripts/setup.sh, then scripts/build.sh)";
    }
    std::ifstream cpf(classpath_file);
    std::string cp((std::istreambuf_iterator<char>(cpf)), std::istreambuf_iterator<char>());
    while (!cp.empty() && (cp.back() == '\n' || cp.back() == '\r')) cp.pop_back();
    if (cp.empty()) return "no classpath in " + classpath_file + " (rebuild the launcher)";
    char tmpl[] = "/tmp/khagent-yarn-mini.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    work_ = tmpl;
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return "pipe failed";
    std::vector<std::string> args = {java,
                                     "-Xmx1g",
                                     "-XX:+UseSerialGC",
                                     "-Dyarnmini.log=" + log_file,
                                     "-cp",
                                     jar + ":" + cp,
                                     "khagent.yarnmini.MiniCluster",
                                     "--work",
                                     work_ + "/cluster"};
    pid_ = ::fork();
    if (pid_ < 0) return "fork failed";
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      int err = ::open((log_file + ".stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (err >= 0) ::dup2(err, 2);
      ::chdir(work_.c_str());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "exec %s failed\n", argv[0]);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    std::string line;
    if (!read_line(line, timeout_s * 1000)) {
      return "the launcher did not become ready within " + std::to_string(timeout_s) + " s (see " + log_file + " and " +
             log_file + ".stderr)";
    }
    if (line.rfind("ready ", 0) != 0) return "unexpected first line from the launcher: " + line;
    json info = json::parse(line.substr(6), nullptr, false);
    if (!info.is_object()) return "unreadable ready line: " + line;
    rm_url_ = info.value("rm", "");
    for (const auto& n : info["nodes"]) nodes_.push_back({n.value("id", ""), n.value("http", "")});
    // "localhost:port": talk to the loopback address the servers bind.
    auto loop = [](std::string s) {
      auto p = s.find("localhost");
      if (p != std::string::npos) s.replace(p, 9, "127.0.0.1");
      return s;
    };
    rm_url_ = loop(rm_url_);
    for (auto& n : nodes_) n.http = loop(n.http);
    if (rm_url_.empty() || nodes_.empty()) return "incomplete ready line: " + line;
    return "";
  }

  // Sends one command; the answer's JSON, or throws with the launcher's error.
  json command(const std::string& cmd, int timeout_ms = 120'000) {
    std::string line = cmd + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      throw std::runtime_error("launcher: cannot send " + cmd);
    }
    std::string answer;
    if (!read_line(answer, timeout_ms)) throw std::runtime_error("launcher: no answer to " + cmd);
    if (answer.rfind("ok ", 0) != 0) throw std::runtime_error("launcher: " + cmd + ": " + answer);
    return json::parse(answer.substr(3));
  }

  // Closes stdin (the launcher kills its applications and exits), then
  // SIGTERM and SIGKILL to its pid if it lingers. Returns the seconds taken.
  double stop() {
    if (pid_ <= 0) return 0;
    auto t0 = Clock::now();
    ::close(to_);
    to_ = -1;
    if (!wait_exit(40'000)) {
      ::kill(pid_, SIGTERM);
      if (!wait_exit(10'000)) {
        ::kill(pid_, SIGKILL);
        wait_exit(10'000);
      }
    }
    pid_ = -1;
    ::close(from_);
    from_ = -1;
    std::error_code ec;
    std::filesystem::remove_all(work_, ec);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  pid_t pid() const { return pid_; }
  const std::string& rm_url() const { return rm_url_; }
  const std::vector<MiniNode>& nodes() const { return nodes_; }

 private:
  bool read_line(std::string& line, int timeout_ms) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{from_, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      char chunk[4096];
      ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) return false;  // the launcher exited
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  bool wait_exit(int timeout_ms) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < until) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) return true;
      ::usleep(50'000);
    }
    return false;
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buf_;
  std::string work_;
  std::string rm_url_;
  std::vector<MiniNode> nodes_;
};

}  // namespace yarnreal

// What wakes the agent's loop before its next tick: the BPF ring buffer of
// online tasks' over-threshold waits (its events go to the callback given
// to RunqBpf::open_events), and PSI triggers on online pods'
// memory.pressure. One poll over both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "khagent/collect/memory.h"
#include "khagent/loader/runq_loader.h"
#include "khagent/util/log_limit.h"

namespace khagent {

class Wakeups {
 public:
  // `psi` may be null (no memory lever, or no trigger window configured).
  Wakeups(RunqBpf& bpf, std::unique_ptr<PsiTriggers> psi) : bpf_(bpf), psi_(std::move(psi)) {}

  struct Woken {
    std::vector<std::string> memory_stalled;  // cgroups whose PSI trigger fired
    std::vector<std::string> problems;        // one line each: a failed poll or read
  };
  // Waits up to `timeout_ms` for either.
  Woken wait(int timeout_ms);

  // One trigger on each of `online` and none elsewhere; logs the triggers
  // the first time there are some, and those that could not be made (tried
  // again at the next call) once a minute.
  void sync(const std::vector<std::string>& online, LogLimiter& warned);

 private:
  RunqBpf& bpf_;
  std::unique_ptr<PsiTriggers> psi_;
  bool started_ = false;
};

}  // namespace khagent

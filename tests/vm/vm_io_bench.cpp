// The IO benchmark, in the guest (scripts/bench-io.sh boots it with
// vmtest/run.sh --modules null_blk): an online pod reading a null_blk
// device of known capacity (queue depth 4, 500 us a request) with 4 KiB
// O_DIRECT reads, one at a time, next to a YARN container writing 64 KiB
// O_DIRECT from 8 threads. Rows, interleaved round after round (each
// round starts one row later):
//   alone     the reader only
//   free      the reader and the writer, nothing limited
//   weight    io.weight 10 on the YARN root by hand, where the kernel
//             honours it (iocost or BFQ on the device: SCHED=bfq, IOCOST=1;
//             else left out)
//   max       io.max on the YARN root by hand: half of the writer's free
//             rate (bytes and IOs) measured in this round's "free" row
//   khagent   `khagent run` (defaults but a 200 ms tick), the writer
//             started 1.5 s after the agent runs (the reader's baseline)
// Each row: the reader's p50 and p99 latency over SECONDS after a settle,
// and the writer's MiB/s. The last line states the goal's figures.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "khagent/model/knob_values.h"
#include "vm_io_util.h"

using namespace vmio;

namespace {

struct Row {
  double p50_us = 0, p99_us = 0, writer_mib_s = 0, reaction_ms = -1;
  std::string note;
};

double env_num(const char* name, double dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : dflt;
}

double percentile(std::vector<uint32_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The reader's latencies and the writer's rate over `seconds`.
Row measure(IoShared* reader, IoShared* writer, double seconds) {
  reader->n = 0;
  reader->recording = 1;
  const uint64_t w0 = writer->bytes.load(), t0 = mono_ns();
  sleep_s(seconds);
  reader->recording = 0;
  const uint64_t w1 = writer->bytes.load(), t1 = mono_ns();
  const uint32_t n = std::min(reader->n.load(), IoShared::kMaxLatencies);
  std::vector<uint32_t> lat(reader->latency_us, reader->latency_us + n);
  Row r;
  r.p50_us = percentile(lat, 0.50);
  r.p99_us = percentile(lat, 0.99);
  r.writer_mib_s = static_cast<double>(w1 - w0) / 1048576.0 / (static_cast<double>(t1 - t0) / 1e9);
  return r;
}

}  // namespace

int main() {
  if (geteuid() != 0) {
    std::fprintf(stderr, "bench-io: run as root inside the guest (scripts/bench-io.sh)\n");
    return 2;
  }
  const int rounds = static_cast<int>(env_num("ROUNDS", 3));
  const double seconds = env_num("SECONDS_PER_ROW", 4), settle = env_num("SETTLE", 2);
  NullBlk nb;
  if (!nb.problem.empty()) {
    std::fprintf(stderr, "bench-io: %s\n", nb.problem.c_str());
    return 2;
  }
  write_file(kCg + "/cgroup.subtree_control", "+io");
  if (hosttest::read_file(kCg + "/cgroup.subtree_control").find("io") == std::string::npos) {
    std::fprintf(stderr, "bench-io: the io controller could not be enabled at the root\n");
    return 2;
  }
  const std::string yarn = "/khbio-yarn", cont = yarn + "/container_e01_1700000000000_0001_01_000002";
  const std::string kube = "/khbio-kubepods.slice", burstable = kube + "/kubepods-burstable.slice";
  const std::string pod = burstable + "/kubepods-burstable-pod5555_6666.slice";
  const std::string ctr = pod + "/cri-containerd-0123456789ab.scope";
  for (const auto& c : {yarn, cont, kube, burstable, pod, ctr}) std::filesystem::create_directories(kCg + c);
  for (const auto& c : {kube, burstable, pod}) write_file(kCg + c + "/cgroup.subtree_control", "+io");
  write_file(kCg + yarn + "/cgroup.subtree_control", "+io");
  // SCHED=bfq: BFQ as the device's scheduler (its io.bfq.weight is what
  // io.weight sets); IOCOST=1: iocost enabled on the device with the
  // kernel's default model (io.cost.qos "enable=1").
  const std::string disk = nb.dev.substr(nb.dev.rfind('/') + 1);
  if (const char* s = std::getenv("SCHED"); s && *s && !write_file("/sys/block/" + disk + "/queue/scheduler", s))
    std::fprintf(stderr, "bench-io: cannot set the scheduler %s on %s\n", s, disk.c_str());
  if (env_num("IOCOST", 0) > 0 && !write_file(kCg + "/io.cost.qos", nb.majmin + " enable=1"))
    std::fprintf(stderr, "bench-io: cannot enable iocost on %s\n", nb.majmin.c_str());
  // io.weight where the kernel honours it: iocost enabled on the device,
  // or BFQ as its scheduler.
  const std::string sched = hosttest::read_file("/sys/block/" + disk + "/queue/scheduler");
  const bool bfq = sched.find("[bfq]") != std::string::npos;
  const bool weight_row =
      bfq || hosttest::read_file(kCg + "/io.cost.qos").find(nb.majmin + " enable=1") != std::string::npos;

  IoShared* reader_sh = new_shared();
  IoShared* writer_sh = new_shared();
  if (!reader_sh || !writer_sh) return 2;
  pid_t reader = io_loop(kCg + ctr, nb.dev, false, 4096, 1, reader_sh);
  std::vector<std::string> rows = {"alone", "free", "max", "khagent"};
  if (weight_row) rows.insert(rows.begin() + 2, "weight");
  std::map<std::string, std::vector<Row>> got;
  double free_bps = 0, free_iops = 0;
  const std::string cfg = "/tmp/khbio.yaml", state = "/tmp/khbio-state.json", log = "/tmp/khbio.log";
  std::ofstream(cfg) << "tick: 200ms\noffline:\n  yarn_hierarchy: " << yarn.substr(1)
                     << "\nmemory:\n  enabled: false\n";
  for (int round = 0; round < rounds; round++) {
    for (size_t i = 0; i < rows.size(); i++) {
      const std::string& row = rows[(i + static_cast<size_t>(round)) % rows.size()];
      Row r;
      pid_t writer = -1, agent = -1;
      uint64_t writer_start = 0;
      if (row == "khagent") {
        ::unlink(log.c_str());
        agent = hosttest::start_agent(cfg, state, log);
        sleep_s(1.5);  // ticks with the reader alone: its baseline wait per IO
      }
      if (row == "max") {
        if (free_bps <= 0) {  // no "free" row yet in this run: measure it first
          writer = io_loop(kCg + cont, nb.dev, true, 64 << 10, 8, writer_sh);
          sleep_s(settle);
          const uint64_t b0 = writer_sh->bytes.load(), d0 = writer_sh->done.load(), t0 = mono_ns();
          sleep_s(seconds);
          const double s = static_cast<double>(mono_ns() - t0) / 1e9;
          free_bps = static_cast<double>(writer_sh->bytes.load() - b0) / s;
          free_iops = static_cast<double>(writer_sh->done.load() - d0) / s;
          stop(writer);
          writer = -1;
        }
        r.note = "wbps=" + std::to_string(static_cast<uint64_t>(free_bps / 2)) +
                 " wiops=" + std::to_string(static_cast<uint64_t>(free_iops / 2));
        write_file(kCg + yarn + "/io.max", nb.majmin + " " + r.note);
      }
      // BFQ's own weight file when it schedules the device, else iocost's.
      const std::string weight_file = kCg + yarn + (bfq ? "/io.bfq.weight" : "/io.weight");
      if (row == "weight") write_file(weight_file, "default 10");
      if (row != "alone") {
        writer_start = mono_ns();
        writer = io_loop(kCg + cont, nb.dev, true, 64 << 10, 8, writer_sh);
      }
      if (row == "khagent") {
        for (int k = 0; k < 200 && io_max_line(yarn, nb.majmin).empty(); k++) sleep_s(0.025);
        if (!io_max_line(yarn, nb.majmin).empty()) r.reaction_ms = static_cast<double>(mono_ns() - writer_start) / 1e6;
        sleep_s(std::max(settle, 4.0));  // its verdicts and tighter steps
      } else {
        sleep_s(settle);
      }
      const std::string note = r.note;
      const double reaction = r.reaction_ms;
      const uint64_t d0 = writer_sh->done.load(), b0 = writer_sh->bytes.load(), t0 = mono_ns();
      r = measure(reader_sh, writer_sh, seconds);
      r.note = row == "khagent" ? io_max_line(yarn, nb.majmin) : note;
      r.reaction_ms = reaction;
      if (row == "free") {
        const double s = static_cast<double>(mono_ns() - t0) / 1e9;
        free_bps = static_cast<double>(writer_sh->bytes.load() - b0) / s;
        free_iops = static_cast<double>(writer_sh->done.load() - d0) / s;
      }
      stop(writer);
      if (agent > 0) {
        ::kill(agent, SIGTERM);
        waitpid(agent, nullptr, 0);
      }
      if (row == "max") write_file(kCg + yarn + "/io.max", nb.majmin + " rbps=max wbps=max riops=max wiops=max");
      if (row == "weight") write_file(weight_file, "default 100");
      std::printf("round %d %-8s reader p50 %7.0f us p99 %7.0f us; writer %6.1f MiB/s%s%s%s\n", round + 1, row.c_str(),
                  r.p50_us, r.p99_us, r.writer_mib_s,
                  r.reaction_ms >= 0 ? ("; limited " + std::to_string(static_cast<int>(r.reaction_ms)) +
                                        " ms after "
                                        "the writer started")
                                           .c_str()
                                     : "",
                  r.note.empty() ? "" : "; ", r.note.c_str());
      std::fflush(stdout);
      got[row].push_back(r);
    }
  }
  stop(reader);
  if (hosttest::read_file(log).find("io limit") != std::string::npos) {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);)
      if (line.find(" io limit") != std::string::npos && line.find("io.max:") == std::string::npos)
        std::printf("  last khagent row: %s\n", line.c_str());
  }
  for (const auto& f : {cfg, state, state + ".prev", log}) ::unlink(f.c_str());
  for (const auto& c : {ctr, pod, burstable, kube, cont, yarn}) ::rmdir((kCg + c).c_str());
  free_shared(reader_sh);
  free_shared(writer_sh);

  auto med = [&](const std::string& row, double Row::* f) {
    std::vector<double> v;
    for (const auto& r : got[row])
      if (r.*f >= 0) v.push_back(r.*f);
    return median(v);
  };
  std::printf("\nmedians over %d rounds (reader p99 as a ratio of alone; writer as a share of its free rate):\n",
              rounds);
  const double alone99 = med("alone", &Row::p99_us), free_w = med("free", &Row::writer_mib_s);
  for (const auto& row : rows)
    std::printf("  %-8s p50 %7.0f us  p99 %7.0f us (%.2fx alone)  writer %6.1f MiB/s (%3.0f%%)\n", row.c_str(),
                med(row, &Row::p50_us), med(row, &Row::p99_us), med(row, &Row::p99_us) / alone99,
                med(row, &Row::writer_mib_s), free_w > 0 ? med(row, &Row::writer_mib_s) / free_w * 100 : 0);
  if (!weight_row)
    std::printf("  (no weight row: the device's scheduler is %s and iocost is off on it; io.weight would do nothing)\n",
                khagent::trim_blank(hosttest::read_file("/sys/block/" + disk + "/queue/scheduler")).c_str());
  else
    std::printf("  (weight row: scheduler %s, iocost %s)\n",
                khagent::trim_blank(hosttest::read_file("/sys/block/" + disk + "/queue/scheduler")).c_str(),
                hosttest::read_file(kCg + "/io.cost.qos").find("enable=1") != std::string::npos ? "on" : "off");
  std::printf(
      "(the device throughput online left: the writer's rate next to the unprotected reader, row free; QEMU's TCG "
      "clock: ratios only)\n");
  std::printf(
      "io: online p99 %.2fx alone, offline kept %.0f%% of the device throughput online left, reaction %.0f ms\n",
      med("khagent", &Row::p99_us) / alone99, free_w > 0 ? med("khagent", &Row::writer_mib_s) / free_w * 100 : 0,
      med("khagent", &Row::reaction_ms));
  return 0;
}

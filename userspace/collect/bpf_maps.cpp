#include "khagent/collect/bpf_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <vector>

#include <spdlog/spdlog.h>

namespace khagent {

namespace {

// Calls fn(key, values[ncpus]) for every entry of a per-CPU hash map.
template <typename K, typename V>
Result<void> for_each_percpu(int fd, int ncpus, bool& batch_ok, PercpuBatchBuffers<K, V>& buf,
                             const std::function<void(const K&, const V*)>& fn) {
  if (buf.chunk == 0) {
    // Batch: about 1 MiB of values per call, at least 16 entries.
    size_t per_entry = sizeof(V) * static_cast<size_t>(ncpus);
    buf.chunk = static_cast<uint32_t>(std::clamp<size_t>((1u << 20) / per_entry, 16, 4096));
    buf.keys.resize(buf.chunk);
    buf.vals.resize(static_cast<size_t>(buf.chunk) * ncpus);
  }
  uint32_t& chunk = buf.chunk;
  std::vector<K>& keys = buf.keys;
  std::vector<V>& vals = buf.vals;

  if (batch_ok) {
    K in{}, out{};
    bool first = true;
    for (;;) {
      uint32_t n = chunk;
      LIBBPF_OPTS(bpf_map_batch_opts, opts);
      int err = bpf_map_lookup_batch(fd, first ? nullptr : &in, &out, keys.data(), vals.data(), &n,
                                     &opts);
      if (err && errno == ENOSPC && n == 0) {  // a bucket larger than the chunk
        chunk *= 2;
        keys.resize(chunk);
        vals.resize(static_cast<size_t>(chunk) * ncpus);
        continue;
      }
      if (err && errno != ENOENT) {
        if (first && (errno == EINVAL || errno == ENOTSUP || errno == EOPNOTSUPP)) {
          spdlog::info("map batch lookup unsupported ({}), iterating key by key",
                       std::strerror(errno));
          batch_ok = false;
          break;
        }
        return make_error(errno, "bpf_map_lookup_batch");
      }
      for (uint32_t i = 0; i < n; i++) fn(keys[i], &vals[static_cast<size_t>(i) * ncpus]);
      if (err) return {};  // ENOENT: that was the last batch
      in = out;
      first = false;
    }
  }

  // Key-by-key iteration (kernels without batch ops for this map type).
  K key{}, next{};
  const K* cur = nullptr;
  while (bpf_map_get_next_key(fd, cur, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, vals.data()) == 0) fn(next, vals.data());
    key = next;
    cur = &key;
  }
  if (errno != ENOENT) return make_error(errno, "bpf_map_get_next_key");
  return {};
}

}  // namespace

BpfMapSource::BpfMapSource(RunqMapFds fds) : fds_(fds), ncpus_(libbpf_num_possible_cpus()) {
  if (ncpus_ <= 0) ncpus_ = 1;
}

Result<RawMaps> BpfMapSource::read() {
  RawMaps raw;
  auto r = for_each_percpu<uint64_t, kh_cgroup_stats>(
      fds_.cgroup_stats, ncpus_, batch_ok_, cgroup_buf_, [&](const uint64_t& id, const kh_cgroup_stats* v) {
        CgroupCounters& c = raw.cgroups[id];
        for (int cpu = 0; cpu < ncpus_; cpu++) {
          const kh_cgroup_stats& s = v[cpu];
          c.wait_ns += s.wait_ns;
          c.waits += s.waits;
          c.cpu_ns += s.cpu_ns;
          c.preemptions += s.preemptions;
          for (int i = 0; i < KH_NR_WAIT_CAUSES; i++) c.cause_ns[i] += s.cause_ns[i];
          for (int i = 0; i < KH_HIST_BUCKETS; i++) c.hist[i] += s.hist[i];
        }
      });
  if (!r) return make_error(r.error().err, "reading cgroup_stats: " + r.error().message);

  r = for_each_percpu<kh_pair, kh_pair_stats>(
      fds_.interference, ncpus_, batch_ok_, pair_buf_, [&](const kh_pair& k, const kh_pair_stats* v) {
        RawPair p{k.victim, k.aggressor, 0, 0};
        for (int cpu = 0; cpu < ncpus_; cpu++) {
          p.wait_ns += v[cpu].wait_ns;
          p.count += v[cpu].count;
        }
        raw.pairs.push_back(p);
      });
  if (!r) return make_error(r.error().err, "reading interference: " + r.error().message);

  if (fds_.throttle_stats >= 0) {
    r = for_each_percpu<uint64_t, kh_throttle_stats>(
        fds_.throttle_stats, ncpus_, batch_ok_, throttle_buf_,
        [&](const uint64_t& id, const kh_throttle_stats* v) {
          ThrottleCounters& t = raw.throttle[id];
          for (int cpu = 0; cpu < ncpus_; cpu++) {
            t.events += v[cpu].events;
            t.throttled_ns += v[cpu].throttled_ns;
          }
        });
    if (!r) return make_error(r.error().err, "reading throttle_stats: " + r.error().message);
  }

  counter_vals_.resize(static_cast<size_t>(ncpus_));
  for (uint32_t k = 0; k < KH_NR_COUNTERS; k++) {
    if (bpf_map_lookup_elem(fds_.counters, &k, counter_vals_.data()) != 0)
      return make_error(errno, "reading counters");
    for (auto v : counter_vals_) raw.counters[k] += v;
  }
  return raw;
}

void BpfMapSource::forget(const std::vector<uint64_t>& ids,
                          const std::vector<std::pair<uint64_t, uint64_t>>& pairs) {
  for (uint64_t id : ids) {
    bpf_map_delete_elem(fds_.cgroup_stats, &id);
    if (fds_.throttle_stats >= 0) bpf_map_delete_elem(fds_.throttle_stats, &id);
  }
  for (const auto& [v, a] : pairs) {
    kh_pair k{v, a};
    bpf_map_delete_elem(fds_.interference, &k);
  }
}

}  // namespace khagent

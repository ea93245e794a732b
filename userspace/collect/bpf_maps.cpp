#include "khagent/collect/bpf_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "khagent/util/clock.h"
#include "khagent/util/file.h"

namespace khagent {

namespace {

// Calls fn(key, value) for every entry of a (shared, not per-CPU) hash map:
// batch lookups of about 256 KiB of values per call, or key by key where the
// kernel has no batch ops for the map type. A value is copied while CPUs add
// to it: each 8-byte counter is whole, related fields may be one update apart.
template <typename K, typename V>
Result<void> for_each_entry(int fd, bool& batch_ok, BatchBuffers<K, V>& buf,
                            const std::function<void(const K&, const V&)>& fn) {
  if (buf.chunk == 0) {
    buf.chunk = static_cast<uint32_t>(std::clamp<size_t>((256u << 10) / sizeof(V), 16, 4096));
    buf.keys.resize(buf.chunk);
    buf.vals.resize(buf.chunk);
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
      int err = bpf_map_lookup_batch(fd, first ? nullptr : &in, &out, keys.data(), vals.data(), &n, &opts);
      if (err && errno == ENOSPC && n == 0) {  // a bucket larger than the chunk
        chunk *= 2;
        keys.resize(chunk);
        vals.resize(chunk);
        continue;
      }
      if (err && errno != ENOENT) {
        // (ENOTSUP is EOPNOTSUPP on Linux.)
        if (first && (errno == EINVAL || errno == EOPNOTSUPP)) {
          spdlog::info("map batch lookup unsupported ({}), iterating key by key", std::strerror(errno));
          batch_ok = false;
          break;
        }
        return make_error(errno, "bpf_map_lookup_batch");
      }
      for (uint32_t i = 0; i < n; i++) fn(keys[i], vals[i]);
      if (err) return {};  // ENOENT: that was the last batch
      in = out;
      first = false;
    }
  }

  // Key-by-key iteration (kernels without batch ops for this map type).
  K key{}, next{};
  const K* cur = nullptr;
  while (bpf_map_get_next_key(fd, cur, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, vals.data()) == 0) fn(next, vals[0]);
    key = next;
    cur = &key;
  }
  if (errno != ENOENT) return make_error(errno, "bpf_map_get_next_key");
  return {};
}

void copy_counters(CgroupCounters& c, const kh_cgroup_stats& s) {
  c.wait_ns = s.wait_ns;
  c.waits = s.waits;
  c.cpu_ns = s.cpu_ns;
  c.preemptions = s.preemptions;
  for (int i = 0; i < KH_NR_WAIT_CAUSES; i++) c.cause_ns[i] = s.cause_ns[i];
  for (int i = 0; i < KH_HIST_BUCKETS; i++) c.hist[i] = s.hist[i];
}

}  // namespace

BpfMapSource::BpfMapSource(RunqMapFds fds) : fds_(fds), ncpus_(libbpf_num_possible_cpus()) {
  if (ncpus_ <= 0) ncpus_ = 1;
}

Result<void> BpfMapSource::read_into(RawMaps& raw) {
  // Removals first: a cgroup removed after this is still in the maps read
  // below, and is reported by the next read.
  raw.removed.clear();
  if (fds_.removed_cgroups >= 0) {
    uint64_t id = 0;
    while (bpf_map_lookup_and_delete_elem(fds_.removed_cgroups, nullptr, &id) == 0) raw.removed.push_back(id);
    if (errno != ENOENT) return make_error(errno, "reading removed_cgroups");
  }

  // cgroup_stats: only what moved where the reader is attached, whole once
  // a minute (entries deleted by another reader of the pins drop out then)
  // and whenever the last read is not at hand.
  constexpr uint64_t kWholeReadNs = 60'000'000'000ULL;
  const uint64_t now = mono_ns();
  bool done = false;
  if (fds_.moved_reader >= 0 && raw.primed && now - full_read_ns_ < kWholeReadNs) done = read_stats_moved(raw);
  if (!done) {
    if (auto r = read_stats_whole(raw); !r) return r;
    full_read_ns_ = now;
  }

  raw.pairs.clear();
  auto r = for_each_entry<kh_pair, kh_pair_stats>(
      fds_.interference, batch_ok_, pair_buf_, [&](const kh_pair& k, const kh_pair_stats& v) {
        raw.pairs.push_back(RawPair{k.victim, k.aggressor, v.wait_ns, v.count});
      });
  if (!r) return make_error(r.error().err, "reading interference: " + r.error().message);

  raw.throttle.clear();
  if (fds_.throttle_stats >= 0) {
    r = for_each_entry<uint64_t, kh_throttle_stats>(fds_.throttle_stats, batch_ok_, throttle_buf_,
                                                    [&](const uint64_t& id, const kh_throttle_stats& v) {
                                                      raw.throttle[id] = ThrottleCounters{v.events, v.throttled_ns};
                                                    });
    if (!r) return make_error(r.error().err, "reading throttle_stats: " + r.error().message);
  }

  counter_vals_.resize(static_cast<size_t>(ncpus_));
  raw.counters.fill(0);
  for (uint32_t k = 0; k < KH_NR_COUNTERS; k++) {
    if (bpf_map_lookup_elem(fds_.counters, &k, counter_vals_.data()) != 0) return make_error(errno, "reading counters");
    for (auto v : counter_vals_) raw.counters[k] += v;
  }
  return {};
}

Result<void> BpfMapSource::read_stats_whole(RawMaps& raw) {
  raw.moved_only = false;
  raw.moved.clear();
  // Entries are updated in place: an entry whose counts did not move since
  // the last read (most of them, on a node with thousands of cgroups) costs
  // a lookup and a compare, no allocation and no copy.
  const size_t before = raw.cgroups.size();
  size_t kept = 0;
  seen_.clear();
  auto r = for_each_entry<uint64_t, kh_cgroup_stats>(
      fds_.cgroup_stats, batch_ok_, cgroup_buf_, [&](const uint64_t& id, const kh_cgroup_stats& s) {
        seen_.push_back(id);
        auto [it, added] = raw.cgroups.try_emplace(id);
        CgroupCounters& c = it->second;
        if (!added) {
          kept++;
          if (c.waits == s.waits && c.cpu_ns == s.cpu_ns && c.wait_ns == s.wait_ns && c.preemptions == s.preemptions)
            return;
        }
        copy_counters(c, s);
      });
  if (!r) {
    raw.cgroups.clear();  // nothing half-updated
    raw.primed = false;
    return make_error(r.error().err, "reading cgroup_stats: " + r.error().message);
  }
  if (kept != before) {  // entries deleted since the last read (by us or another reader)
    std::unordered_set<uint64_t> now(seen_.begin(), seen_.end());
    for (auto it = raw.cgroups.begin(); it != raw.cgroups.end();)
      it = now.count(it->first) ? std::next(it) : raw.cgroups.erase(it);
  }

  raw.primed = true;
  return {};
}

bool BpfMapSource::read_stats_moved(RawMaps& raw) {
  raw.moved.clear();
  int fd = bpf_iter_create(fds_.moved_reader);
  if (fd < 0) {
    spdlog::warn("creating a read_moved_stats iterator: {}; reading cgroup_stats whole", std::strerror(errno));
    return false;
  }
  Fd owned(fd);
  constexpr size_t kRecord = sizeof(uint64_t) + sizeof(kh_cgroup_stats);
  if (iter_buf_.size() < (64u << 10)) iter_buf_.resize(64u << 10);
  size_t have = 0;  // bytes of a record cut by the last read()
  for (;;) {
    ssize_t n = ::read(fd, iter_buf_.data() + have, iter_buf_.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      // Entries already marked seen were read into `raw`; the next read is
      // whole all the same, so nothing that moved is lost.
      spdlog::warn("reading the read_moved_stats iterator: {}; reading cgroup_stats whole", std::strerror(errno));
      raw.primed = false;
      return false;
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
    size_t off = 0;
    for (; have - off >= kRecord; off += kRecord) {
      uint64_t id;
      kh_cgroup_stats st;
      std::memcpy(&id, iter_buf_.data() + off, sizeof id);
      std::memcpy(&st, iter_buf_.data() + off + sizeof id, sizeof st);
      copy_counters(raw.cgroups[id], st);
      raw.moved.push_back(id);
    }
    std::memmove(iter_buf_.data(), iter_buf_.data() + off, have - off);
    have -= off;
  }
  raw.moved_only = true;
  moved_reads_++;
  spdlog::trace("cgroup_stats: {} of {} entries moved", raw.moved.size(), raw.cgroups.size());
  return true;
}

void BpfMapSource::forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) {
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

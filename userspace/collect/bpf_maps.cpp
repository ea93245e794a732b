#include "khagent/collect/bpf_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mman.h>
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

// A counter of a slot that CPUs add to: read whole (8-byte aligned).
inline uint64_t load(const uint64_t& v) { return __atomic_load_n(&v, __ATOMIC_RELAXED); }

void copy_counters(CgroupCounters& c, const kh_cgroup_stats& s) {
  c.wait_ns = load(s.wait_ns);
  c.waits = load(s.waits);
  c.cpu_ns = load(s.cpu_ns);
  c.preemptions = load(s.preemptions);
  for (int i = 0; i < KH_NR_WAIT_CAUSES; i++) c.cause_ns[i] = load(s.cause_ns[i]);
  for (int i = 0; i < KH_HIST_BUCKETS; i++) c.hist[i] = load(s.hist[i]);
}

// Calls fn(slot) for each bit set in the moved bitmap, clearing the words it
// reads (a CPU that sets a bit after that shows in the next read).
template <typename Fn>
void take_moved(const MappedArray& bits, uint32_t slots, Fn fn) {
  for (uint32_t w = 0; w < bits.entries(); w++) {
    uint64_t* word = bits.at<uint64_t>(w);
    if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0) continue;
    uint64_t v = __atomic_exchange_n(word, 0, __ATOMIC_ACQ_REL);
    while (v) {
      uint32_t slot = w * 64 + static_cast<uint32_t>(__builtin_ctzll(v));
      v &= v - 1;
      if (slot < slots) fn(slot);
    }
  }
}

// A slot forgotten less than this long ago may still be added to by a BPF
// program that looked it up before its index entry was deleted.
constexpr uint64_t kQuarantineNs = 1'000'000'000ULL;

}  // namespace

MappedArray::~MappedArray() {
  if (addr_) ::munmap(addr_, len_);
}

Result<void> MappedArray::map(int fd, size_t value_size, bool writable, const char* name) {
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    return make_error(errno, std::string("reading the info of ") + name);
  if (info.type != BPF_MAP_TYPE_ARRAY || !(info.map_flags & BPF_F_MMAPABLE))
    return make_error(EINVAL, std::string(name) + " is not an mmapable array (a map of an older layout?)");
  if (info.value_size != value_size)
    return make_error(EINVAL, std::string(name) + ": values of " + std::to_string(info.value_size) +
                                  " bytes, this build expects " + std::to_string(value_size));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  stride_ = (value_size + 7) & ~size_t{7};  // the kernel's element size
  len_ = (stride_ * info.max_entries + page - 1) / page * page;
  void* p = ::mmap(nullptr, len_, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return make_error(errno, std::string("mapping ") + name);
  addr_ = p;
  entries_ = info.max_entries;
  return {};
}

BpfMapSource::BpfMapSource(RunqMapFds fds) : fds_(fds), ncpus_(libbpf_num_possible_cpus()) {
  if (ncpus_ <= 0) ncpus_ = 1;
}

Result<void> BpfMapSource::map_arrays() {
  const bool owner = fds_.owner();
  if (auto r = cgroup_stats_.map(fds_.cgroup_stats, sizeof(kh_cgroup_stats), owner, "cgroup_stats"); !r) return r;
  if (auto r = interference_.map(fds_.interference, sizeof(kh_pair_stats), owner, "interference"); !r) return r;
  if (owner) {
    if (auto r = cgroup_moved_.map(fds_.cgroup_moved, sizeof(uint64_t), true, "cgroup_moved"); !r) return r;
    if (auto r = pair_moved_.map(fds_.pair_moved, sizeof(uint64_t), true, "pair_moved"); !r) return r;
  }
  cgroup_q_.held.assign(cgroup_stats_.entries(), false);
  pair_q_.held.assign(interference_.entries(), false);
  mapped_ = true;
  return {};
}

Result<void> BpfMapSource::read_into(RawMaps& raw) {
  if (!mapped_) {
    if (auto r = map_arrays(); !r) return r;
  }
  const uint64_t now = mono_ns();
  if (fds_.owner()) release_quarantined(now);

  // Removals first: a cgroup removed after this is still in the maps read
  // below, and is reported by the next read.
  raw.removed.clear();
  if (fds_.removed_cgroups >= 0) {
    uint64_t id = 0;
    while (bpf_map_lookup_and_delete_elem(fds_.removed_cgroups, nullptr, &id) == 0) raw.removed.push_back(id);
    if (errno != ENOENT) return make_error(errno, "reading removed_cgroups");
  }

  if (fds_.owner() && raw.primed) read_stats_moved(raw);
  else if (auto r = read_stats_whole(raw); !r) return r;
  read_pairs(raw);

  raw.throttle.clear();
  if (fds_.throttle_stats >= 0) {
    auto r = for_each_entry<uint64_t, kh_throttle_stats>(
        fds_.throttle_stats, batch_ok_, throttle_buf_, [&](const uint64_t& id, const kh_throttle_stats& v) {
          raw.throttle[id] = ThrottleCounters{v.events, v.throttled_ns};
        });
    if (!r) return make_error(r.error().err, "reading throttle_stats: " + r.error().message);
  }

  raw.reclaim.clear();
  raw.reclaim_moved.clear();
  raw.reclaim_moved_known = true;
  if (fds_.reclaim_stats >= 0) {
    auto r = for_each_entry<uint64_t, kh_reclaim_stats>(fds_.reclaim_stats, batch_ok_, reclaim_buf_,
                                                        [&](const uint64_t& id, const kh_reclaim_stats& v) {
                                                          ReclaimCounters& c = raw.reclaim[id];
                                                          for (size_t k = 0; k < KH_NR_RECLAIM_KINDS; k++) {
                                                            c.ns[k] = v.ns[k];
                                                            c.count[k] = v.count[k];
                                                            c.pages[k] = v.pages[k];
                                                          }
                                                        });
    if (!r) return make_error(r.error().err, "reading reclaim_stats: " + r.error().message);
    // Only the entries that changed are looked at this tick: a cgroup that
    // reclaimed once keeps its entry while it lives.
    for (const auto& [id, c] : raw.reclaim) {
      auto [it, fresh] = reclaim_last_.try_emplace(id, c);
      if (fresh || it->second.ns != c.ns || it->second.count != c.count || it->second.pages != c.pages) {
        raw.reclaim_moved.push_back(id);
        it->second = c;
      }
    }
    if (reclaim_last_.size() != raw.reclaim.size())
      std::erase_if(reclaim_last_, [&](const auto& kv) { return !raw.reclaim.count(kv.first); });
  }

  counter_vals_.resize(static_cast<size_t>(ncpus_));
  raw.counters.fill(0);
  for (uint32_t k = 0; k < KH_NR_COUNTERS; k++) {
    if (bpf_map_lookup_elem(fds_.counters, &k, counter_vals_.data()) != 0) return make_error(errno, "reading counters");
    for (auto v : counter_vals_) raw.counters[k] += v;
  }
  return read_stalls(raw.stall);
}

Result<void> BpfMapSource::read_stalls(StallCounters& out) {
  out = {};
  if (fds_.stall_stats < 0) return {};
  stall_vals_.resize(static_cast<size_t>(ncpus_));
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(fds_.stall_stats, &zero, stall_vals_.data()) != 0) {
    // The stall figures only: the tick goes on without them.
    if (!stall_read_failed_)
      spdlog::warn("reading stall_stats failed ({}): no CPU stall figures", std::strerror(errno));
    stall_read_failed_ = true;
    return {};
  }
  out.available = true;
  for (const auto& v : stall_vals_) {
    out.stolen_ns += v.stolen_ns;
    out.stalls += v.stalls;
    out.longest_ns = std::max<uint64_t>(out.longest_ns, v.longest_ns);
    out.ticks += v.ticks;
    if (v.state == KH_STALL_ARMED) out.cpus_armed++;
    if (v.state == KH_STALL_FAILED) {
      out.cpus_failed++;
      out.err = v.err;
    }
  }
  return {};
}

Result<void> BpfMapSource::read_stats_whole(RawMaps& raw) {
  raw.moved_only = false;
  raw.moved.clear();
  // The moved bits stay: a whole read may be into another RawMaps than the
  // one the moved reads bring up to date (the next of those then copies a
  // few slots again, which changes nothing).
  std::unordered_set<uint64_t> seen;
  for (uint32_t slot = 0; slot < cgroup_stats_.entries(); slot++) {
    const auto& st = *cgroup_stats_.at<const kh_cgroup_stats>(slot);
    const uint64_t id = load(st.id);
    if (id == 0 || cgroup_q_.held[slot]) continue;
    CgroupCounters& c = raw.cgroups[id];
    // Two slots of one id: a CPU that lost the race to publish a new
    // cgroup's slot has not given its empty one back yet. Keep the counts.
    if (!seen.insert(id).second && load(st.waits) + load(st.cpu_ns) <= c.waits + c.cpu_ns) continue;
    copy_counters(c, st);
  }
  if (seen.size() != raw.cgroups.size()) {  // entries gone since the last read
    for (auto it = raw.cgroups.begin(); it != raw.cgroups.end();)
      it = seen.count(it->first) ? std::next(it) : raw.cgroups.erase(it);
  }
  raw.primed = true;
  return {};
}

void BpfMapSource::read_stats_moved(RawMaps& raw) {
  raw.moved.clear();
  take_moved(cgroup_moved_, cgroup_stats_.entries(), [&](uint32_t slot) {
    const auto& st = *cgroup_stats_.at<const kh_cgroup_stats>(slot);
    const uint64_t id = load(st.id);
    if (id == 0 || cgroup_q_.held[slot]) return;
    copy_counters(raw.cgroups[id], st);
    raw.moved.push_back(id);
  });
  raw.moved_only = true;
  moved_reads_++;
  spdlog::trace("cgroup_stats: {} of {} slots moved", raw.moved.size(), raw.cgroups.size());
}

void BpfMapSource::read_pairs(RawMaps& raw) {
  const uint32_t n = interference_.entries();
  if (pair_by_slot_.size() != n) {
    pair_by_slot_.assign(n, RawPair{});
    pair_moved_now_.assign(n, 0);
  }
  auto read_slot = [&](uint32_t slot) {
    const auto& v = *interference_.at<const kh_pair_stats>(slot);
    RawPair& p = pair_by_slot_[slot];
    p.victim = pair_q_.held[slot] ? 0 : load(v.victim);
    p.aggressor = load(v.aggressor);
    p.wait_ns = load(v.wait_ns);
    p.count = load(v.count);
    pair_moved_now_[slot] = 1;
  };
  const bool moved_only = fds_.owner() && pairs_primed_;
  if (moved_only) {
    take_moved(pair_moved_, n, read_slot);
  } else {
    if (fds_.owner()) take_moved(pair_moved_, n, [](uint32_t) {});  // all read below
    for (uint32_t slot = 0; slot < n; slot++) read_slot(slot);
    pairs_primed_ = fds_.owner();
  }
  // Every live pair, in slot order; the indexes of those read just now.
  raw.pairs.clear();
  raw.pairs_moved.clear();
  for (uint32_t slot = 0; slot < n; slot++) {
    const RawPair& p = pair_by_slot_[slot];
    if (pair_moved_now_[slot]) {
      pair_moved_now_[slot] = 0;
      if (p.victim) raw.pairs_moved.push_back(static_cast<uint32_t>(raw.pairs.size()));
    }
    if (p.victim) raw.pairs.push_back(p);
  }
  raw.pairs_moved_only = moved_only;
}

void BpfMapSource::release_quarantined(uint64_t now) {
  auto release = [&](Quarantine& q, const MappedArray& arr, size_t size, int free_fd) {
    size_t keep = 0;
    for (const auto& [slot, when] : q.slots) {
      if (now - when < kQuarantineNs) {
        q.slots[keep++] = {slot, when};
        continue;
      }
      std::memset(arr.at<char>(slot), 0, size);
      __atomic_thread_fence(__ATOMIC_RELEASE);
      if (bpf_map_update_elem(free_fd, nullptr, &slot, BPF_ANY) != 0) {
        // Cannot happen with a queue as large as the array; the slot stays
        // out of use (and unread) rather than being given out twice.
        spdlog::warn("giving back slot {}: {}", slot, std::strerror(errno));
        continue;
      }
      q.held[slot] = false;
    }
    q.slots.resize(keep);
  };
  release(cgroup_q_, cgroup_stats_, sizeof(kh_cgroup_stats), fds_.cgroup_free);
  release(pair_q_, interference_, sizeof(kh_pair_stats), fds_.pair_free);
}

bool BpfMapSource::Quarantine::hold(int index_fd, const void* key, uint64_t now, uint32_t& slot) {
  if (bpf_map_lookup_elem(index_fd, key, &slot) != 0 || bpf_map_delete_elem(index_fd, key) != 0) return false;
  if (slot >= held.size() || held[slot]) return false;
  held[slot] = true;
  slots.emplace_back(slot, now);
  return true;
}

void BpfMapSource::forget(const std::vector<uint64_t>& ids, const std::vector<std::pair<uint64_t, uint64_t>>& pairs) {
  // Only the owner frees slots; another reader leaves the maps as they are.
  if (!fds_.owner() || !mapped_) return;
  const uint64_t now = mono_ns();
  for (uint64_t id : ids) {
    uint32_t slot = 0;
    cgroup_q_.hold(fds_.cgroup_slots, &id, now, slot);
    if (fds_.throttle_stats >= 0) bpf_map_delete_elem(fds_.throttle_stats, &id);
    if (fds_.reclaim_stats >= 0) bpf_map_delete_elem(fds_.reclaim_stats, &id);
  }
  for (const auto& [v, a] : pairs) {
    kh_pair k{v, a};
    uint32_t slot = 0;
    if (pair_q_.hold(fds_.pair_slots, &k, now, slot) && slot < pair_by_slot_.size()) pair_by_slot_[slot] = RawPair{};
  }
}

}  // namespace khagent

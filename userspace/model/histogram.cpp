#include "khagent/model/histogram.h"

#include <cmath>

namespace khagent {

uint32_t hist_bucket(uint64_t ns) { return kh_hist_bucket(ns); }

uint64_t hist_bucket_low(uint32_t b) {
  if (b == 0) return 0;
  uint32_t k = KH_HIST_MIN_SHIFT + (b - 1) / KH_HIST_SUBS;
  uint32_t sub = (b - 1) % KH_HIST_SUBS;
  return (1ULL << k) + sub * (1ULL << (k - KH_HIST_SUB_SHIFT));
}

uint64_t hist_bucket_high(uint32_t b) {
  if (b + 1 >= KH_HIST_BUCKETS) return 1ULL << KH_HIST_MAX_SHIFT;
  return hist_bucket_low(b + 1);
}

double hist_bucket_value(uint32_t b) {
  return (static_cast<double>(hist_bucket_low(b)) + static_cast<double>(hist_bucket_high(b))) / 2.0;
}

uint64_t hist_count(const WaitHistogram& h) {
  uint64_t n = 0;
  for (auto c : h) n += c;
  return n;
}

double hist_quantile(const WaitHistogram& h, double q) {
  uint64_t n = hist_count(h);
  if (n == 0) return 0.0;
  if (q <= 0) q = 1e-9;
  if (q > 1) q = 1;
  // Rank of the sample that is the q-quantile (nearest rank, 1-based).
  auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(n)));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (uint32_t b = 0; b < KH_HIST_BUCKETS; b++) {
    seen += h[b];
    if (seen >= rank) return hist_bucket_value(b);
  }
  return hist_bucket_value(KH_HIST_BUCKETS - 1);
}

}  // namespace khagent

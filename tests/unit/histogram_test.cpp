#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "khagent/model/histogram.h"

using namespace khagent;

TEST(Histogram, BucketBoundsAreConsistent) {
  for (uint32_t b = 0; b + 1 < KH_HIST_BUCKETS; b++) {
    EXPECT_LT(hist_bucket_low(b), hist_bucket_high(b)) << b;
    EXPECT_EQ(hist_bucket(hist_bucket_low(b)), b) << b;
    EXPECT_EQ(hist_bucket(hist_bucket_high(b) - 1), b) << b;
    EXPECT_EQ(hist_bucket_high(b), hist_bucket_low(b + 1)) << b;
  }
}

TEST(Histogram, CoversOneMicrosecondToTenSeconds) {
  EXPECT_EQ(hist_bucket(0), 0u);
  EXPECT_EQ(hist_bucket(999), 0u);  // below 1 us: the first bucket
  EXPECT_GT(hist_bucket(1100), 0u);
  uint32_t ten_s = hist_bucket(10'000'000'000ULL);
  EXPECT_LT(ten_s, KH_HIST_BUCKETS - 1u);  // 10 s still has its own bucket
  EXPECT_EQ(hist_bucket(UINT64_MAX), KH_HIST_BUCKETS - 1u);
}

TEST(Histogram, AtLeastFourSubBucketsPerPowerOfTwo) {
  for (uint32_t b = 1; b + 1 < KH_HIST_BUCKETS; b++) {
    double width = static_cast<double>(hist_bucket_high(b) - hist_bucket_low(b));
    EXPECT_LE(width / static_cast<double>(hist_bucket_low(b)), 0.25 + 1e-12) << b;
  }
}

TEST(Histogram, EmptyHasZeroQuantiles) {
  WaitHistogram h{};
  EXPECT_EQ(hist_quantile(h, 0.5), 0.0);
  EXPECT_EQ(hist_count(h), 0u);
}

TEST(Histogram, SingleValueQuantileIsItsBucket) {
  WaitHistogram h{};
  h[hist_bucket(50'000)] = 7;
  double q = hist_quantile(h, 0.99);
  EXPECT_NEAR(q, 50'000, 50'000 * 0.125);
}

// Percentiles read from the histogram are within ~20% of exact ones.
TEST(Histogram, QuantilesWithinTwentyPercentOfExact) {
  std::mt19937_64 rng(42);
  for (double mu : {8.0, 11.0, 14.0, 18.0}) {
    std::lognormal_distribution<double> dist(mu, 1.5);
    std::vector<uint64_t> v;
    WaitHistogram h{};
    for (int i = 0; i < 100000; i++) {
      auto x = static_cast<uint64_t>(dist(rng)) + 1;
      v.push_back(x);
      h[hist_bucket(x)]++;
    }
    std::sort(v.begin(), v.end());
    for (double q : {0.5, 0.9, 0.99, 0.999}) {
      auto exact = static_cast<double>(v[static_cast<size_t>(std::ceil(q * v.size())) - 1]);
      double got = hist_quantile(h, q);
      if (exact < 1024) {
        EXPECT_LT(got, 1024) << "mu " << mu << " q " << q;
        continue;
      }
      EXPECT_NEAR(got / exact, 1.0, 0.2) << "mu " << mu << " q " << q << " exact " << exact;
    }
  }
}

// Counter-based random numbers (random.h): determinism and moments.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/random.h"

namespace tessera {
namespace {

TEST(Philox, SameSeedAndIndexGiveTheSameValue) {
  for (uint64_t i = 0; i < 1000; i += 7) {
    EXPECT_EQ(philox::uniform(42, i), philox::uniform(42, i));
    EXPECT_EQ(philox::normal(42, i), philox::normal(42, i));
  }
  int differ_seed = 0, differ_index = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    differ_seed += philox::uniform(42, i) != philox::uniform(43, i);
    differ_index += philox::uniform(42, i) != philox::uniform(42, i + 1);
  }
  EXPECT_GT(differ_seed, 990);
  EXPECT_GT(differ_index, 990);
}

TEST(Philox, KnownAnswer) {
  // Random123's published known-answer vector for philox4x32-10 with zero counter and key.
  const philox::Block b = philox::philox4x32_10(0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
}

TEST(Philox, UniformMoments) {
  constexpr int kN = 100000;
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < kN; ++i) {
    const float u = philox::uniform(7, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += double(u) * u;
  }
  const double mean = sum / kN, var = sum_sq / kN - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.01);
  EXPECT_NEAR(var, 1.0 / 12, 0.005);
  EXPECT_LT(lo, 0.001f);
  EXPECT_GT(hi, 0.999f);
}

TEST(Philox, NormalMoments) {
  constexpr int kN = 100000;
  double sum = 0, sum_sq = 0;
  int beyond_2sigma = 0;
  for (int i = 0; i < kN; ++i) {
    const float z = philox::normal(11, uint64_t(i));
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum_sq += double(z) * z;
    beyond_2sigma += std::fabs(z) > 2.0f;
  }
  const double mean = sum / kN, var = sum_sq / kN - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
  EXPECT_NEAR(double(beyond_2sigma) / kN, 0.0455, 0.005);
}

}  // namespace
}  // namespace tessera

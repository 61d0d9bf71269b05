// Half and bfloat16 conversions against an independent reference: every representable value
// enumerated in double, nearest chosen with ties to the even mantissa.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tessera/half.h"

namespace tessera {
namespace {

// Value of a finite binary16 bit pattern, computed from the definition in double.
double half_value_reference(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -mag : mag;
}

// Nearest value among sorted non-negative patterns (bits 0..max_bits), ties to even bits; values
// beyond max + half an ulp go to inf_bits.
uint16_t nearest_reference(double x, const std::vector<double>& values, uint16_t inf_bits, double overflow_threshold) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  uint16_t bits;
  if (a >= overflow_threshold) {
    bits = inf_bits;
  } else {
    auto it = std::lower_bound(values.begin(), values.end(), a);
    size_t hi = size_t(it - values.begin());
    if (hi == values.size()) hi = values.size() - 1;
    if (values[hi] == a) {
      bits = uint16_t(hi);
    } else {
      const size_t lo = hi - 1;
      const double dlo = a - values[lo], dhi = values[hi] - a;
      if (dlo < dhi) bits = uint16_t(lo);
      else if (dhi < dlo) bits = uint16_t(hi);
      else bits = uint16_t((lo & 1) == 0 ? lo : hi);
    }
  }
  return uint16_t(bits | (neg ? 0x8000 : 0));
}

class HalfReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    half_values_.clear();
    for (uint32_t b = 0; b <= 0x7bff; ++b) half_values_.push_back(half_value_reference(uint16_t(b)));
    bf16_values_.clear();
    for (uint32_t b = 0; b <= 0x7f7f; ++b) bf16_values_.push_back(double(detail::bits_to_float(b << 16)));
  }
  static uint16_t half_ref(float f) {
    // 65504 + half an ulp (16) = 65520: ties there go to the even pattern, which is inf.
    return nearest_reference(double(f), half_values_, 0x7c00, 65520.0);
  }
  static uint16_t bf16_ref(float f) {
    const double max = bf16_values_.back(), ulp = max - bf16_values_[bf16_values_.size() - 2];
    return nearest_reference(double(f), bf16_values_, 0x7f80, max + ulp / 2);
  }
  static std::vector<double> half_values_, bf16_values_;
};
std::vector<double> HalfReference::half_values_, HalfReference::bf16_values_;

TEST_F(HalfReference, EveryHalfPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = detail::half_bits_to_float(h);
    const bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
      const uint16_t back = detail::float_to_half_bits(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << b;
      EXPECT_NE(back & 0x3ff, 0) << std::hex << b;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << b;
      continue;
    }
    if (((h >> 10) & 0x1f) == 0x1f) {
      EXPECT_TRUE(std::isinf(f)) << std::hex << b;
    } else {
      EXPECT_EQ(double(f), half_value_reference(h)) << std::hex << b;
    }
    EXPECT_EQ(detail::float_to_half_bits(f), h) << std::hex << b;
  }
}

TEST_F(HalfReference, TiesRoundToEvenAtEveryMidpoint) {
  // The midpoint between two neighbouring halves is exact in float (it has 12 significant bits).
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    const double mid = (half_value_reference(uint16_t(b)) + half_value_reference(uint16_t(b + 1))) / 2;
    const float f = float(mid);
    ASSERT_EQ(double(f), mid);
    const uint16_t expected = uint16_t((b & 1) == 0 ? b : b + 1);
    EXPECT_EQ(detail::float_to_half_bits(f), expected) << std::hex << b;
    EXPECT_EQ(detail::float_to_half_bits(-f), uint16_t(expected | 0x8000)) << std::hex << b;
    // One float ulp either side of the midpoint decides the direction.
    EXPECT_EQ(detail::float_to_half_bits(std::nextafter(f, 0.0f)), uint16_t(b)) << std::hex << b;
    EXPECT_EQ(detail::float_to_half_bits(std::nextafter(f, 1e30f)), uint16_t(b + 1)) << std::hex << b;
  }
}

TEST_F(HalfReference, RandomFloatsMatchReference) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover every exponent; scale half of them into the half range.
    float f = detail::bits_to_float(bits(rng));
    if (std::isnan(f)) continue;
    if (i % 2) {
      int e = 0;
      f = std::ldexp(std::frexp(f, &e), int(bits(rng) % 44) - 27);
    }
    ASSERT_EQ(detail::float_to_half_bits(f), half_ref(f)) << f;
  }
}

TEST_F(HalfReference, OverflowUnderflowAndSpecials) {
  EXPECT_EQ(detail::float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(detail::float_to_half_bits(65519.996f), 0x7bff);
  EXPECT_EQ(detail::float_to_half_bits(65520.0f), 0x7c00);
  EXPECT_EQ(detail::float_to_half_bits(1e10f), 0x7c00);
  EXPECT_EQ(detail::float_to_half_bits(-1e10f), 0xfc00);
  EXPECT_EQ(detail::float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(detail::float_to_half_bits(5.9604645e-8f), 0x0001);    // smallest subnormal
  EXPECT_EQ(detail::float_to_half_bits(2.9802322e-8f), 0x0000);    // exactly half of it: tie to even (0)
  EXPECT_EQ(detail::float_to_half_bits(2.9802326e-8f), 0x0001);    // just above the tie
  EXPECT_EQ(detail::float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(detail::float_to_half_bits(6.1035156e-5f), 0x0400);    // smallest normal
  EXPECT_TRUE(std::isnan(float(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float(Half(1.0f)), 1.0f);
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
}

TEST_F(HalfReference, BFloat16MatchesReference) {
  std::mt19937 rng(777);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = detail::bits_to_float(bits(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(BFloat16(f))));
      continue;
    }
    ASSERT_EQ(BFloat16(f).bits, bf16_ref(f)) << f;
  }
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; the even neighbour is 1.
  EXPECT_EQ(BFloat16(1.0f + 1.0f / 256).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 3.0f / 256).bits, 0x3f82);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = float(BFloat16::from_bits(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(BFloat16(f).bits, h);
  }
}

}  // namespace
}  // namespace tessera

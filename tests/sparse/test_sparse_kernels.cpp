// The 2:4 CPU kernels (plugins/sparse, Note [CPU 2:4 layout]) at every ISA level this CPU has,
// against a naive double-precision loop over the densified pruned weight: fresh random inputs,
// shapes with tails (k not a multiple of 64 or 16, odd n, batch 0..33 so that every split of the
// batch into register tiles occurs), with and without bias.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels_isa.h"
#include "cpu_layout.h"
#include "dense_batch_env.h"

namespace {

namespace sc = tessera::sparse_cpu;
using LayoutPtr = std::unique_ptr<sc::CpuLayout, decltype(&std::free)>;

// A random (n, k) weight with at most two non-zeros per group of four along k: each group keeps
// two, one or zero positions at random (the last group may be short).
std::vector<float> random_2_4(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 3), keep(0, 2);
  std::vector<float> w(size_t(n * k), 0.f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; 4 * g < k; ++g) {
      const int kept = 2 - (keep(rng) == 0 ? pick(rng) % 3 : 0);
      for (int j = 0; j < kept; ++j) {
        const int64_t pos = 4 * g + pick(rng);
        if (pos < k) w[size_t(r * k + pos)] = normal(rng);
      }
    }
  return w;
}

std::vector<sc::Isa> levels() {
  std::vector<sc::Isa> out;
  for (sc::Isa isa : {sc::Isa::Scalar, sc::Isa::AVX2, sc::Isa::AVX512}) {
    sc::Isa got;
    std::string error;
    if (sc::select_isa(sc::isa_name(isa), &got, &error)) out.push_back(got);
  }
  return out;
}

float round_bf16(float f) { return sc::bf16_to_float(sc::float_to_bf16(f)); }

void check(int64_t n, int64_t k, int64_t batch, bool with_bias, bool bf16, std::mt19937& rng) {
  std::vector<float> w = random_2_4(n, k, rng);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(batch * k));
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  if (bf16) {
    for (float& v : w) v = round_bf16(v);
    for (float& v : x) v = round_bf16(v);
    for (float& v : bias) v = round_bf16(v);
  }
  // Reference: y = x w^T + bias in double over the dense weight.
  std::vector<double> ref(size_t(batch * n)), mag(size_t(batch * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < n; ++r) {
      double acc = with_bias ? bias[size_t(r)] : 0.0, m = std::abs(acc);
      for (int64_t i = 0; i < k; ++i) {
        acc += double(x[size_t(b * k + i)]) * double(w[size_t(r * k + i)]);
        m += std::abs(double(x[size_t(b * k + i)]) * double(w[size_t(r * k + i)]));
      }
      ref[size_t(b * n + r)] = acc;
      mag[size_t(b * n + r)] = m;
    }
  std::string error;
  for (sc::Isa isa : levels()) {
    SCOPED_TRACE(std::string("isa ") + sc::isa_name(isa) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                 " batch " + std::to_string(batch) + (with_bias ? " bias" : "") + (bf16 ? " bf16" : " f32"));
    std::vector<float> y(size_t(batch * n));
    if (bf16) {
      auto to16 = [](const std::vector<float>& v) {
        std::vector<uint16_t> o(v.size());
        for (size_t i = 0; i < v.size(); ++i) o[i] = sc::float_to_bf16(v[i]);
        return o;
      };
      std::vector<uint16_t> w16 = to16(w), x16 = to16(x), b16 = to16(bias), y16(y.size());
      LayoutPtr l(sc::build_layout(w16.data(), sc::ElementType::BF16, n, k, &error), &std::free);
      ASSERT_TRUE(l) << error;
      sc::linear_bf16(x16.data(), batch, *l, with_bias ? b16.data() : nullptr, y16.data(), isa);
      for (size_t i = 0; i < y.size(); ++i) y[i] = sc::bf16_to_float(y16[i]);
    } else {
      LayoutPtr l(sc::build_layout(w.data(), sc::ElementType::F32, n, k, &error), &std::free);
      ASSERT_TRUE(l) << error;
      sc::linear_f32(x.data(), batch, *l, with_bias ? bias.data() : nullptr, y.data(), isa);
    }
    // f32: accumulation error of k/2 terms; bf16: the output rounding (2^-8) dominates.
    const double rel = bf16 ? 1.0 / 128 : 1e-5 * std::sqrt(double(k) + 1);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], ref[i], rel * (mag[i] + 1e-3) + (bf16 ? std::abs(ref[i]) / 128 : 0)) << "at " << i;
  }
}

TEST(SparseKernels, LinearMatchesDoubleLoopWithTails) {
  std::mt19937 rng(20261202);
  for (bool bf16 : {false, true})
    for (int64_t n : {1, 3, 5, 8, 17})
      for (int64_t k : {1, 4, 7, 16, 33, 64, 100, 130, 1000})
        for (int64_t batch : {0, 1, 2, 5, 6, 7, 8, 13, 16, 33})
          for (bool with_bias : {false, true}) check(n, k, batch, with_bias, bf16, rng);
}

// int8: exact, wrapping around in int8 like the dense integer linear; reference in int64.
TEST(SparseKernels, Int8LinearIsExactModulo256) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> value(-128, 127);
  for (int64_t n : {1, 5, 8})
    for (int64_t k : {3, 64, 100, 200, 4100})
      for (int64_t batch : {1, 4, 5, 6, 11})
        for (bool with_bias : {false, true}) {
          std::vector<float> pattern = random_2_4(n, k, rng);
          std::vector<int8_t> w(pattern.size()), x(static_cast<size_t>(batch * k));
          std::vector<int8_t> bias(static_cast<size_t>(n)), y(static_cast<size_t>(batch * n));
          for (size_t i = 0; i < w.size(); ++i) w[i] = pattern[i] != 0.f ? int8_t(value(rng) | 1) : int8_t(0);
          for (int8_t& v : x) v = int8_t(value(rng));
          for (int8_t& v : bias) v = int8_t(value(rng));
          std::string error;
          LayoutPtr l(sc::build_layout(w.data(), sc::ElementType::I8, n, k, &error), &std::free);
          ASSERT_TRUE(l) << error;
          for (sc::Isa isa : levels()) {
            SCOPED_TRACE(std::string("isa ") + sc::isa_name(isa) + " n " + std::to_string(n) + " k " +
                         std::to_string(k) + " batch " + std::to_string(batch));
            sc::linear_i8(x.data(), batch, *l, with_bias ? bias.data() : nullptr, y.data(), isa);
            for (int64_t b = 0; b < batch; ++b)
              for (int64_t r = 0; r < n; ++r) {
                int64_t acc = with_bias ? bias[size_t(r)] : 0;
                for (int64_t i = 0; i < k; ++i) acc += int64_t(x[size_t(b * k + i)]) * int64_t(w[size_t(r * k + i)]);
                ASSERT_EQ(y[size_t(b * n + r)], int8_t(uint8_t(uint64_t(acc)))) << "b " << b << " r " << r;
              }
          }
        }
}

// The AVX2 int8 kernel itself (vpmaddwd over int16-widened values), against a naive int64 loop:
// batch tiles and tails of 16 positions, values at the extremes of int8.
TEST(SparseKernels, Avx2Int8KernelIsExactModulo256) {
  sc::Isa got;
  std::string error;
  ASSERT_TRUE(sc::select_isa("avx2", &got, &error)) << "this test needs an AVX2 CPU: " << error;
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> value(-128, 127);
  for (int64_t n : {1, 2, 7, 64})
    for (int64_t k : {1, 15, 16, 17, 63, 1000})
      for (int64_t batch : {1, 3, 4, 9}) {
        std::vector<float> pattern = random_2_4(n, k, rng);
        std::vector<int8_t> w(pattern.size()), x(static_cast<size_t>(batch * k));
        std::vector<int8_t> bias(static_cast<size_t>(n)), y(static_cast<size_t>(batch * n));
        for (size_t i = 0; i < w.size(); ++i)
          w[i] = pattern[i] == 0.f ? int8_t(0) : i % 3 == 0 ? int8_t(-128) : int8_t(value(rng) | 1);
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 5 == 0 ? int8_t(-128) : int8_t(value(rng));
        for (int8_t& v : bias) v = int8_t(value(rng));
        LayoutPtr l(sc::build_layout(w.data(), sc::ElementType::I8, n, k, &error), &std::free);
        ASSERT_TRUE(l) << error;
        sc::isa_avx2::linear_i8(x.data(), batch, *l, bias.data(), y.data());
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t r = 0; r < n; ++r) {
            int64_t acc = bias[size_t(r)];
            for (int64_t i = 0; i < k; ++i) acc += int64_t(x[size_t(b * k + i)]) * int64_t(w[size_t(r * k + i)]);
            ASSERT_EQ(y[size_t(b * n + r)], int8_t(uint8_t(uint64_t(acc))))
                << "n " << n << " k " << k << " batch " << batch << " b " << b << " r " << r;
          }
      }
}

TEST(SparseKernels, LinearLargeShape) {
  std::mt19937 rng(7);
  check(256, 4096, 16, true, false, rng);
  check(256, 4096, 3, false, true, rng);
}

TEST(SparseKernels, RefusesWeightsThatBreakThePattern) {
  std::vector<float> w(2 * 12, 0.f);
  w[12 + 4] = w[12 + 5] = w[12 + 7] = 1.f;  // row 1, group 1: three non-zeros
  std::string error;
  LayoutPtr l(sc::build_layout(w.data(), sc::ElementType::F32, 2, 12, &error), &std::free);
  EXPECT_FALSE(l);
  EXPECT_EQ(error,
            "weight is not 2:4 sparse: row 1, group 1 (columns 4..7) has more than two non-zeros; prune it first "
            "(tessera::sparse::prune_2_4)");
}

TEST(SparseKernels, NegativeZeroIsZeroAndNanIsKept) {
  std::vector<float> w = {-0.f, 1.f, -0.f, 2.f, std::nanf(""), 0.f, 0.f, 3.f};
  std::string error;
  LayoutPtr l(sc::build_layout(w.data(), sc::ElementType::F32, 1, 8, &error), &std::free);
  ASSERT_TRUE(l) << error;
  std::vector<float> x = {1, 1, 1, 1, 1, 1, 1, 1}, y(1);
  sc::linear_f32(x.data(), 1, *l, nullptr, y.data(), sc::Isa::Scalar);
  EXPECT_TRUE(std::isnan(y[0]));
}

TEST(SparseKernels, CapabilityRequestsAreChecked) {
  sc::Isa got;
  std::string error;
  EXPECT_FALSE(sc::select_isa("avx1024", &got, &error));
  EXPECT_EQ(error,
            "TESSERA_CPU_CAPABILITY='avx1024' is not a capability level; expected one of default, avx2, avx512 (or "
            "unset for the best)");
  EXPECT_TRUE(sc::select_isa("default", &got, &error));
  EXPECT_EQ(got, sc::Isa::Scalar);
}

}  // namespace

// TESSERA_SPARSE_DENSE_BATCH: a whole number from 1 to 2^31 overrides the thresholds; anything else
// is ignored with a warning naming the variable (it used to be read with strtoll alone, so "8x"
// meant 8 and "-1" or "abc" silently meant no override).
TEST(SparseEnv, DenseBatchTakesWholeNumbersAndWarnsAboutAnythingElse) {
  using tessera::sparse_env::parse_dense_batch;
  std::string warning;
  EXPECT_EQ(parse_dense_batch(nullptr, &warning), 0);
  EXPECT_EQ(parse_dense_batch("", &warning), 0);
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(parse_dense_batch("8", &warning), 8);
  EXPECT_EQ(parse_dense_batch("1", &warning), 1);
  EXPECT_EQ(parse_dense_batch("2147483648", &warning), int64_t(1) << 31);
  EXPECT_TRUE(warning.empty()) << warning;
  for (const char* bad : {"abc", "8x", "0", "-1", " ", "2147483649", "99999999999999999999999", "1.5"}) {
    warning.clear();
    EXPECT_EQ(parse_dense_batch(bad, &warning), 0) << bad;
    EXPECT_NE(warning.find("TESSERA_SPARSE_DENSE_BATCH='" + std::string(bad) + "'"), std::string::npos) << warning;
    EXPECT_NE(warning.find("whole number from 1 to 2^31"), std::string::npos) << warning;
  }
}

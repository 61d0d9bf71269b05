// The CUDA reductions' states (plugins/cuda/src/reduce_state.h, Note [CUDA reduction states]) on
// the host: the kernels' ways of cutting a reduction (threads striding over a split, splits merged
// by a second pass, warps merged by xor shuffles) are replayed with the same state functions, in
// random cuts and merge orders, against naive loops. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "reduce_state.h"

namespace {

using tessera::cuda::ArgState;
using tessera::cuda::kNoIndex;
using tessera::cuda::LogSumExpState;
using tessera::cuda::ReduceOp;
using tessera::cuda::ValueState;
using tessera::cuda::WelfordState;

// Reduces `x` as a split block reduction would: `splits` contiguous chunks, each spread over
// `threads` threads striding through it, the threads merged as a warp tree (xor partners) in
// groups of 32 and the groups in order, the chunks' states merged in a shuffled order.
template <typename S, typename V>
S reduce_like_the_kernels(const std::vector<V>& x, int64_t splits, int threads, std::mt19937& rng) {
  const int64_t n = int64_t(x.size());
  const int64_t chunk = std::max<int64_t>(1, (n + splits - 1) / splits);
  std::vector<S> partials;
  for (int64_t begin = 0; begin < n || (n == 0 && partials.empty()); begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    std::vector<S> lane(size_t(threads), S::identity());
    for (int t = 0; t < threads; ++t)
      for (int64_t r = begin + t; r < end; r += threads) lane[size_t(t)].add(x[size_t(r)], r);
    // Warp trees: after the xor rounds lane 0 of each group of 32 holds the group's state.
    for (int base = 0; base < threads; base += 32) {
      for (int o = 16; o > 0; o >>= 1) {
        std::vector<S> before(lane.begin() + base, lane.begin() + std::min(threads, base + 32));
        for (int l = 0; l < int(before.size()); ++l)
          if ((l ^ o) < int(before.size())) lane[size_t(base + l)].merge(before[size_t(l ^ o)]);
      }
    }
    S block = S::identity();
    for (int base = 0; base < threads; base += 32) block.merge(lane[size_t(base)]);
    partials.push_back(block);
    if (n == 0) break;
  }
  std::shuffle(partials.begin(), partials.end(), rng);
  S total = S::identity();
  for (const S& p : partials) total.merge(p);
  return total;
}

template <bool kMin>
int64_t naive_arg(const std::vector<double>& x) {
  int64_t best = 0;
  for (int64_t i = 1; i < int64_t(x.size()); ++i) {
    const double b = x[size_t(best)], v = x[size_t(i)];
    if (std::isnan(b)) break;  // the first NaN wins
    if (std::isnan(v) || (kMin ? v < b : v > b)) best = i;
  }
  return best;
}

TEST(ReduceState, ArgmaxAndArgminAreTheFirstIndexOfTheExtremeInAnyMergeOrder) {
  std::mt19937 rng(20261206);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = 1 + int64_t(rng() % 3000);
    std::vector<double> x(static_cast<size_t>(n));
    const int levels = 1 + int(rng() % 6);  // few distinct values: many ties
    for (double& v : x) v = double(int(rng() % unsigned(levels))) - 2.0;
    const int nans = trial % 3 == 0 ? int(rng() % 3) : 0;
    for (int k = 0; k < nans; ++k) x[size_t(rng() % uint64_t(n))] = std::nan("");
    if (trial % 7 == 0) x[size_t(rng() % uint64_t(n))] = -INFINITY;
    const int64_t splits = 1 + int64_t(rng() % 9);
    const int threads = (trial % 2) ? 64 : 256;
    const auto mx = reduce_like_the_kernels<ArgState<double, false>>(x, splits, threads, rng);
    const auto mn = reduce_like_the_kernels<ArgState<double, true>>(x, splits, threads, rng);
    EXPECT_EQ(mx.i, naive_arg<false>(x)) << "argmax, trial " << trial << ", n " << n << ", " << nans << " NaN";
    EXPECT_EQ(mn.i, naive_arg<true>(x)) << "argmin, trial " << trial << ", n " << n << ", " << nans << " NaN";
  }
}

TEST(ReduceState, ArgOfIntegersIncludingTheExtremesOfInt64) {
  std::mt19937 rng(7);
  const std::vector<int64_t> x = {5, INT64_MIN, 3, INT64_MAX, INT64_MIN, INT64_MAX, 0};
  auto mx = reduce_like_the_kernels<ArgState<int64_t, false>>(x, 3, 32, rng);
  auto mn = reduce_like_the_kernels<ArgState<int64_t, true>>(x, 2, 32, rng);
  EXPECT_EQ(mx.i, 3);
  EXPECT_EQ(mn.i, 1);
  // Every element equal to the identity's value: the first index, never the identity's kNoIndex.
  const std::vector<int64_t> lows(100, INT64_MIN);
  EXPECT_EQ((reduce_like_the_kernels<ArgState<int64_t, false>>(lows, 7, 32, rng).i), 0);
  const std::vector<float> infs(50, INFINITY);
  EXPECT_EQ((reduce_like_the_kernels<ArgState<float, true>>(infs, 4, 64, rng).i), 0);
  EXPECT_EQ((ArgState<float, false>::identity().i), kNoIndex);
}

TEST(ReduceState, WelfordVarianceMatchesTwoPassInDoubleForAnyCut) {
  std::mt19937 rng(99);
  std::normal_distribution<double> normal(3.0, 2.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + int64_t(rng() % 5000);
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = normal(rng);
    long double mean = 0;
    for (double v : x) mean += v;
    mean /= n;
    long double m2 = 0;
    for (double v : x) m2 += (v - mean) * (v - mean);
    const auto s = reduce_like_the_kernels<WelfordState<double>>(x, 1 + int64_t(rng() % 12), 256, rng);
    ASSERT_EQ(s.n, n);
    EXPECT_NEAR(s.mean, double(mean), 1e-12 * std::abs(double(mean)) + 1e-13) << "trial " << trial;
    for (double correction : {0.0, 1.0, 2.0}) {
      if (double(n) - correction <= 0) continue;
      const double expected = double(m2 / (n - correction));
      EXPECT_NEAR(s.variance(correction), expected, 1e-11 * expected) << "trial " << trial << " correction " << correction;
    }
  }
  // float accumulation over many elements with a large mean stays close (one pass, no
  // catastrophic cancellation of sum(x^2) - n mean^2).
  std::vector<float> big(size_t(1) << 20);
  for (float& v : big) v = float(1000.0 + normal(rng));
  long double mean = 0, m2 = 0;
  for (float v : big) mean += v;
  mean /= big.size();
  for (float v : big) m2 += (v - mean) * (v - mean);
  const auto s = reduce_like_the_kernels<WelfordState<float>>(big, 64, 512, rng);
  EXPECT_NEAR(s.variance(1.0), double(m2 / (big.size() - 1)), 1e-3 * double(m2 / big.size()));
}

TEST(ReduceState, VarianceWithoutEnoughElementsIsNanOrInfAsInPyTorch) {
  std::mt19937 rng(3);
  const auto one = reduce_like_the_kernels<WelfordState<double>>(std::vector<double>{4.0}, 1, 32, rng);
  EXPECT_TRUE(std::isnan(one.variance(1.0))) << "0 / 0";
  EXPECT_EQ(one.variance(0.0), 0.0);
  const auto two = reduce_like_the_kernels<WelfordState<double>>(std::vector<double>{1.0, 3.0}, 2, 32, rng);
  EXPECT_EQ(two.variance(1.0), 2.0);
  EXPECT_EQ(two.variance(2.0), INFINITY) << "m2 = 2 over max(0, 0)";
  const auto empty = WelfordState<double>::identity();
  EXPECT_TRUE(std::isnan(empty.variance(1.0)));
  const auto with_nan =
      reduce_like_the_kernels<WelfordState<float>>(std::vector<float>{1.0f, std::nanf(""), 2.0f, 3.0f}, 2, 32, rng);
  EXPECT_TRUE(std::isnan(with_nan.variance(1.0)));
}

TEST(ReduceState, IntegerSumsAndProductsWrapModulo2To64) {
  std::mt19937 rng(11);
  std::vector<int64_t> x(3001);
  for (int64_t& v : x) v = int64_t(rng()) * int64_t(rng() | 1) * ((rng() & 1) ? 1 : -1);
  x[17] = INT64_MAX;
  x[18] = INT64_MAX;
  uint64_t sum = 0, prod = 1;
  for (int64_t v : x) {
    sum += uint64_t(v);
    prod *= uint64_t(v);
  }
  for (int64_t splits : {1, 5, 64}) {
    EXPECT_EQ((reduce_like_the_kernels<ValueState<int64_t, ReduceOp::Sum>>(x, splits, 256, rng).v), int64_t(sum));
    EXPECT_EQ((reduce_like_the_kernels<ValueState<int64_t, ReduceOp::Prod>>(x, splits, 64, rng).v), int64_t(prod));
  }
  EXPECT_EQ((ValueState<int64_t, ReduceOp::Sum>::identity().v), 0);
  EXPECT_EQ((ValueState<double, ReduceOp::Prod>::identity().v), 1.0);
  // amax / amin of integers are exact at the extremes; of floats they keep a NaN.
  const std::vector<int64_t> ext = {INT64_MIN, -1, INT64_MAX, 0};
  EXPECT_EQ((reduce_like_the_kernels<ValueState<int64_t, ReduceOp::Max>>(ext, 2, 32, rng).v), INT64_MAX);
  EXPECT_EQ((reduce_like_the_kernels<ValueState<int64_t, ReduceOp::Min>>(ext, 3, 32, rng).v), INT64_MIN);
  std::vector<float> f(1000, 1.0f);
  f[999] = std::nanf("");
  EXPECT_TRUE(std::isnan(reduce_like_the_kernels<ValueState<float, ReduceOp::Max>>(f, 4, 64, rng).v));
}

TEST(ReduceState, LogSumExpMatchesTheCpuRuleInAnyMergeOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 30.0);
  auto naive = [](const std::vector<double>& v) {  // the CPU kernel's rule
    double m = -INFINITY;
    for (double x : v) {
      if (x != x) return x;
      m = std::max(m, x);
    }
    if (std::isinf(m)) return m;
    double s = 0;
    for (double x : v) s += std::exp(x - m);
    return m + std::log(s);
  };
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> x(size_t(1 + rng() % 3000));
    for (double& e : x) e = normal(rng);
    if (trial % 5 == 1) x[rng() % x.size()] = INFINITY;
    if (trial % 5 == 2) x[rng() % x.size()] = std::nan("");
    if (trial % 5 == 3) x[rng() % x.size()] = -INFINITY;
    const double got = reduce_like_the_kernels<LogSumExpState<double>>(x, 1 + int64_t(rng() % 9), 256, rng).value();
    const double want = naive(x);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << trial;
    else if (std::isinf(want)) EXPECT_EQ(got, want) << trial;
    else EXPECT_NEAR(got, want, 1e-12 * std::abs(want) + 1e-12) << trial;
  }
  EXPECT_EQ((reduce_like_the_kernels<LogSumExpState<float>>(std::vector<float>(40, -INFINITY), 3, 32, rng).value()), -INFINITY);
  EXPECT_EQ(LogSumExpState<float>::identity().value(), -INFINITY) << "an empty logsumexp";
}

}  // namespace

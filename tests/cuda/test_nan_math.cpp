// nan_math.h on the host: the NaN-propagating max / min and the online softmax statistic that the
// CUDA reduction, softmax and attention kernels use (Note [NaN in CUDA row maxima]). The kernels'
// ways of splitting a row (a warp's 32 lanes merged by xor shuffles, a block's warps merged in
// order, one thread walking a column) are replayed here with the same functions and checked
// against naive double loops, so the NaN rule is proven without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nan_math.h"

namespace {

using tessera::cuda::nan_max;
using tessera::cuda::nan_min;
using tessera::cuda::SoftmaxStat;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NanMath, FmaxDropsNaNWhichIsWhyTheKernelsDoNotUseIt) {
  EXPECT_EQ(std::fmax(1.0f, kNaN), 1.0f);
  EXPECT_EQ(std::fmax(kNaN, -kInf), -kInf);
}

TEST(NanMath, MaxAndMinPropagateNaNFromEitherSide) {
  EXPECT_TRUE(std::isnan(nan_max(kNaN, 1.0f)));
  EXPECT_TRUE(std::isnan(nan_max(1.0f, kNaN)));
  EXPECT_TRUE(std::isnan(nan_max(-kInf, kNaN)));
  EXPECT_TRUE(std::isnan(nan_max(kNaN, kInf)));
  EXPECT_TRUE(std::isnan(nan_min(kNaN, -kInf)));
  EXPECT_TRUE(std::isnan(nan_min(-1.0f, kNaN)));
  EXPECT_EQ(nan_max(2.0f, 3.0f), 3.0f);
  EXPECT_EQ(nan_max(3.0f, 2.0f), 3.0f);
  EXPECT_EQ(nan_max(-kInf, 2.0f), 2.0f);
  EXPECT_EQ(nan_min(2.0f, 3.0f), 2.0f);
  EXPECT_EQ(nan_min(kInf, 3.0f), 3.0f);
  EXPECT_EQ(nan_max(-5, 7), 7);  // integers: the plain max
  EXPECT_EQ(nan_min(int64_t(-5), int64_t(7)), -5);
  EXPECT_TRUE(std::isnan(nan_max(1.0, std::numeric_limits<double>::quiet_NaN())));
}

// ---- the kernels' row splits, replayed on the host

// A warp: lane l takes elements l, l + 32, ... of the row (from `first`, stepping `step` lanes
// apart), then five xor-shuffle rounds merge the lanes; every lane ends with the row's statistic.
SoftmaxStat warp_statistic(const std::vector<float>& x, size_t first, size_t step) {
  SoftmaxStat lane[32];
  for (size_t l = 0; l < 32; ++l)
    for (size_t j = first + l; j < x.size(); j += step) lane[l].add(x[j]);
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxStat before[32];
    for (int l = 0; l < 32; ++l) before[l] = lane[l];
    for (int l = 0; l < 32; ++l) lane[l].merge(before[l ^ o].m, before[l ^ o].s);
  }
  for (int l = 1; l < 32; ++l) {  // the butterfly leaves every lane with the same result
    EXPECT_TRUE(lane[l].m == lane[0].m || (std::isnan(lane[l].m) && std::isnan(lane[0].m)));
  }
  return lane[0];
}
// softmax_warp_kernel: one warp per row.
SoftmaxStat warp_kernel(const std::vector<float>& x) { return warp_statistic(x, 0, 32); }
// softmax_block_kernel: `threads` threads per row, thread t takes t, t + threads, ...; each warp
// merges its lanes, then the warps' statistics are merged in order.
SoftmaxStat block_kernel(const std::vector<float>& x, size_t threads) {
  SoftmaxStat total;
  for (size_t w = 0; w < threads / 32; ++w) {
    const SoftmaxStat s = warp_statistic(x, w * 32, threads);
    total.merge(s.m, s.s);
  }
  return total;
}
// softmax_column_kernel: one thread walks the whole row.
SoftmaxStat column_kernel(const std::vector<float>& x) {
  SoftmaxStat s;
  for (float v : x) s.add(v);
  return s;
}

// PyTorch's softmax / log_softmax of a row in double: NaN everywhere when the row holds a NaN.
std::vector<double> reference(const std::vector<float>& x, bool log) {
  double m = -INFINITY;
  bool nan = false;
  for (float v : x) {
    nan = nan || std::isnan(v);
    m = std::max(m, double(v));
  }
  std::vector<double> y(x.size(), std::numeric_limits<double>::quiet_NaN());
  if (nan) return y;
  double s = 0;
  for (float v : x) s += std::exp(double(v) - m);
  for (size_t i = 0; i < x.size(); ++i) y[i] = log ? (double(x[i]) - m) - std::log(s) : std::exp(double(x[i]) - m) / s;
  return y;
}

void expect_row(const std::vector<float>& x, const SoftmaxStat& st, const std::string& what) {
  for (bool log : {false, true}) {
    const std::vector<double> want = reference(x, log);
    for (size_t i = 0; i < x.size(); ++i) {
      const double got = st.value(log, x[i]);
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got)) << what << (log ? " log_softmax" : " softmax") << " element " << i << " got " << got;
      } else if (std::isinf(want[i])) {  // log_softmax of -inf; |inf - inf| would be NaN
        ASSERT_EQ(got, want[i]) << what << " log_softmax element " << i;
      } else {
        ASSERT_NEAR(got, want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << (log ? " log_softmax" : " softmax")
                                                                     << " element " << i;
      }
    }
  }
}

std::vector<float> random_row(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

TEST(SoftmaxStat, ARowWithANaNAnywhereIsNaNOnEveryKernelSplit) {
  std::mt19937 rng(20261205);
  for (size_t n : {1u, 2u, 5u, 31u, 32u, 33u, 100u, 1024u, 1025u, 3000u}) {
    const std::vector<float> clean = random_row(n, rng);
    std::vector<size_t> positions = {0, n / 2, n - 1};
    if (n > 33) positions.insert(positions.end(), {1, 31, 32, 33, n - 2});
    for (size_t at : positions) {
      std::vector<float> x = clean;
      x[at] = kNaN;
      const std::string what = "n=" + std::to_string(n) + " NaN at " + std::to_string(at);
      if (n <= 1024) expect_row(x, warp_kernel(x), what + " (warp)");
      expect_row(x, block_kernel(x, 512), what + " (block)");
      expect_row(x, column_kernel(x), what + " (column)");
    }
    const std::string what = "n=" + std::to_string(n) + " without NaN";
    if (n <= 1024) expect_row(clean, warp_kernel(clean), what + " (warp)");
    expect_row(clean, block_kernel(clean, 512), what + " (block)");
    expect_row(clean, column_kernel(clean), what + " (column)");
  }
}

TEST(SoftmaxStat, InfinitiesFollowPyTorch) {
  // softmax([inf, 1]) = [nan, nan]; softmax([-inf, -inf]) = [nan, nan]; softmax([-inf, 0]) = [0, 1].
  for (const auto& split : {warp_kernel, column_kernel}) {
    const std::vector<float> a = {kInf, 1.0f}, b = {-kInf, -kInf}, c = {-kInf, 0.0f};
    expect_row(a, split(a), "[inf, 1]");
    expect_row(b, split(b), "[-inf, -inf]");
    expect_row(c, split(c), "[-inf, 0]");
    const SoftmaxStat sc = split(c);
    EXPECT_EQ(sc.value(false, -kInf), 0.0f);
    EXPECT_EQ(sc.value(false, 0.0f), 1.0f);
    EXPECT_EQ(sc.value(true, -kInf), -kInf);
    EXPECT_EQ(sc.value(true, 0.0f), 0.0f);
    EXPECT_TRUE(std::isnan(split(a).value(false, 1.0f)));
  }
  // A long row of -inf with one number: that number gets 1 (the block kernel's empty warps merge).
  std::vector<float> x(2000, -kInf);
  x[1234] = 3.0f;
  const SoftmaxStat s = block_kernel(x, 512);
  EXPECT_EQ(s.value(false, 3.0f), 1.0f);
  EXPECT_EQ(s.value(false, -kInf), 0.0f);
}

TEST(SoftmaxStat, LogSoftmaxKeepsPrecisionFarFromZero) {
  // log_softmax([1e5, 1e5 - 1]) = [-log(1 + e^-1), -1 - log(1 + e^-1)].
  const double l = std::log1p(std::exp(-1.0));
  const std::vector<float> x = {1e5f, 1e5f - 1};
  const SoftmaxStat s = column_kernel(x);
  EXPECT_NEAR(s.value(true, x[0]), -l, 1e-6);
  EXPECT_NEAR(s.value(true, x[1]), -1 - l, 1e-6);
}

// ---- amax / amin as reduce_block_kernel combines them: threads stride the row, a warp butterfly,
// then warp 0 over the warps' results; and reduce_finish_kernel over split partials.
float block_reduce_max(const std::vector<float>& x, size_t threads, bool max) {
  const float init = max ? -kInf : kInf;
  auto combine = [max](float a, float b) { return max ? nan_max(a, b) : nan_min(a, b); };
  std::vector<float> t(threads, init);
  for (size_t i = 0; i < threads; ++i)
    for (size_t j = i; j < x.size(); j += threads) t[i] = combine(t[i], x[j]);
  std::vector<float> warps;
  for (size_t w = 0; w < threads / 32; ++w) {
    float lane[32];
    for (int l = 0; l < 32; ++l) lane[l] = t[w * 32 + size_t(l)];
    for (int o = 16; o > 0; o >>= 1) {
      float before[32];
      for (int l = 0; l < 32; ++l) before[l] = lane[l];
      for (int l = 0; l < 32; ++l) lane[l] = combine(before[l], before[l ^ o]);
    }
    warps.push_back(lane[0]);
  }
  float r = init;
  for (float w : warps) r = combine(r, w);
  return r;
}

TEST(NanMath, AmaxAndAminOfARowWithANaNAreNaNOnEveryThreadCount) {
  std::mt19937 rng(7);
  for (size_t n : {1u, 3u, 64u, 257u, 5000u}) {
    const std::vector<float> clean = random_row(n, rng);
    double want_max = -INFINITY, want_min = INFINITY;
    for (float v : clean) {
      want_max = std::max(want_max, double(v));
      want_min = std::min(want_min, double(v));
    }
    for (size_t threads : {32u, 128u, 512u}) {
      EXPECT_EQ(block_reduce_max(clean, threads, true), float(want_max)) << n << " " << threads;
      EXPECT_EQ(block_reduce_max(clean, threads, false), float(want_min)) << n << " " << threads;
      for (size_t at : {size_t(0), n / 2, n - 1}) {
        std::vector<float> x = clean;
        x[at] = kNaN;
        EXPECT_TRUE(std::isnan(block_reduce_max(x, threads, true))) << n << " " << threads << " at " << at;
        EXPECT_TRUE(std::isnan(block_reduce_max(x, threads, false))) << n << " " << threads << " at " << at;
      }
    }
  }
}

}  // namespace

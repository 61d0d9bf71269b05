// Integer matmul, linear, conv2d, max_pool2d and avg_pool2d on the CPU, as PyTorch's CPU backend:
// exact integer arithmetic that wraps around in the integer type (references: exact sums in int64
// reduced modulo 2^bits here), bool refused, avg_pool2d on int64 only, with integer division.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::read;
using cpu_test::Ref;
using cpu_test::seed_trace;

const DType kIntTypes[] = {kUInt8, kInt8, kInt16, kInt32, kInt64};

int bits_of(DType d) {
  switch (d) {
    case kUInt8:
    case kInt8: return 8;
    case kInt16: return 16;
    case kInt32: return 32;
    default: return 64;
  }
}

// The exact value `v` stored in integer dtype `d` (two's complement wraparound).
double wrap_to(int64_t v, DType d) {
  const int b = bits_of(d);
  if (b == 64) return double(v);
  const int64_t m = int64_t(1) << b;
  int64_t r = ((v % m) + m) % m;
  if (d != kUInt8 && r >= m / 2) r -= m;
  return double(r);
}

// Random integers that make products and sums overflow the narrow types.
std::vector<int64_t> random_ints(int64_t n, DType d) {
  const bool u = d == kUInt8;
  std::uniform_int_distribution<int64_t> dist(u ? 0 : -120, u ? 250 : 120);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(cpu_test::rng());
  return v;
}

Tensor as(const std::vector<int64_t>& v, const std::vector<int64_t>& sizes, DType d) { return tensor(v, sizes).to(d); }

TEST(CpuNnInt, MatmulEveryIntegerDtypeWraps) {
  SCOPED_TRACE(seed_trace());
  for (DType d : kIntTypes) {
    SCOPED_TRACE(dtype_name(d));
    // [2, 1, M, K] @ [3, K, N] -> [2, 3, M, N]
    const int64_t m = 5, k = 37, n = 6;
    const auto av = random_ints(2 * m * k, d), bv = random_ints(3 * k * n, d);
    const Ref y = read(matmul(as(av, {2, 1, m, k}, d), as(bv, {3, k, n}, d)));
    ASSERT_EQ(y.sizes, (std::vector<int64_t>{2, 3, m, n}));
    for (int64_t b0 = 0; b0 < 2; ++b0)
      for (int64_t b1 = 0; b1 < 3; ++b1)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int64_t s = 0;
            for (int64_t q = 0; q < k; ++q) s += av[size_t((b0 * m + i) * k + q)] * bv[size_t((b1 * k + q) * n + j)];
            ASSERT_EQ(y.v[size_t(((b0 * 3 + b1) * m + i) * n + j)], wrap_to(s, d)) << b0 << "," << b1 << "," << i << "," << j;
          }
    // 1-D @ 2-D, 2-D @ 1-D, 1-D @ 1-D, and a transposed operand
    const auto xv = random_ints(k, d);
    const Tensor b2 = as(random_ints(k * n, d), {k, n}, d);
    const Ref bref = read(b2);
    const Ref r1 = read(matmul(as(xv, {k}, d), b2));
    const Ref r2 = read(matmul(b2.transpose(0, 1), as(xv, {k}, d)));
    const Ref r3 = read(matmul(as(xv, {k}, d), as(xv, {k}, d)));
    int64_t dot = 0;
    for (int64_t q = 0; q < k; ++q) dot += xv[size_t(q)] * xv[size_t(q)];
    EXPECT_EQ(r3.v[0], wrap_to(dot, d));
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t q = 0; q < k; ++q) s += xv[size_t(q)] * int64_t(bref.v[size_t(q * n + j)]);
      EXPECT_EQ(r1.v[size_t(j)], wrap_to(s, d)) << j;
      EXPECT_EQ(r2.v[size_t(j)], wrap_to(s, d)) << j;
    }
  }
}

TEST(CpuNnInt, PyTorchValues) {
  // Values printed by PyTorch 2.x on the CPU.
  EXPECT_EQ(read(matmul(as({100, 100}, {1, 2}, kInt8), as({2, 1}, {2, 1}, kInt8))).v[0], 44.0);
  EXPECT_EQ(read(matmul(as({200, 200}, {1, 2}, kUInt8), as({2, 1}, {2, 1}, kUInt8))).v[0], 88.0);
  EXPECT_EQ(read(linear(as({100, 100}, {1, 2}, kInt8), as({2, 1}, {1, 2}, kInt8), as({100}, {1}, kInt8))).v[0], -112.0);
  EXPECT_EQ(read(conv2d(full({1, 1, 2, 2}, 100, TensorOptions().dtype(kInt8)), full({1, 1, 2, 2}, 2, TensorOptions().dtype(kInt8)),
                        as({5}, {1}, kInt8)))
                .v[0],
            37.0);
  EXPECT_EQ(read(avg_pool2d(as({7, -7, 0, 1}, {1, 1, 2, 2}, kInt64), {2, 2})).v[0], 0.0);
  EXPECT_EQ(read(avg_pool2d(as({-7, 0, 0, 0}, {1, 1, 2, 2}, kInt64), {2, 2})).v[0], -1.0);
  const Ref padded = read(avg_pool2d(as({5, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 3, 3}, kInt64), {2, 2}, {2, 2}, {1, 1}));
  EXPECT_EQ(padded.v, (std::vector<double>{1, 0, 0, 0}));
  const Ref mp = read(max_pool2d(full({1, 1, 2, 2}, -128, TensorOptions().dtype(kInt8)), {2, 2}, {2, 2}, {1, 1}));
  EXPECT_EQ(mp.v, (std::vector<double>{-128, -128, -128, -128}));
}

TEST(CpuNnInt, LinearWithAndWithoutBias) {
  SCOPED_TRACE(seed_trace());
  for (DType d : kIntTypes) {
    SCOPED_TRACE(dtype_name(d));
    const int64_t m = 7, k = 19, n = 5;
    const auto xv = random_ints(m * k, d), wv = random_ints(n * k, d), bv = random_ints(n, d);
    for (bool with_bias : {false, true}) {
      const Ref y = with_bias ? read(linear(as(xv, {m, k}, d), as(wv, {n, k}, d), as(bv, {n}, d)))
                              : read(linear(as(xv, {m, k}, d), as(wv, {n, k}, d)));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          int64_t s = with_bias ? bv[size_t(j)] : 0;
          for (int64_t q = 0; q < k; ++q) s += xv[size_t(i * k + q)] * wv[size_t(j * k + q)];
          ASSERT_EQ(y.v[size_t(i * n + j)], wrap_to(s, d)) << i << "," << j << " bias " << with_bias;
        }
    }
  }
}

TEST(CpuNnInt, Conv2dStridePaddingGroups) {
  SCOPED_TRACE(seed_trace());
  for (DType d : kIntTypes) {
    SCOPED_TRACE(dtype_name(d));
    const int64_t nb = 2, c = 4, h = 7, w = 6, oc = 6, g = 2, kh = 3, kw = 2, s = 2, p = 1;
    const auto xv = random_ints(nb * c * h * w, d), wv = random_ints(oc * (c / g) * kh * kw, d), bv = random_ints(oc, d);
    const Ref y = read(conv2d(as(xv, {nb, c, h, w}, d), as(wv, {oc, c / g, kh, kw}, d), as(bv, {oc}, d), {s, s}, {p, p},
                              {1, 1}, g));
    const int64_t oh = (h + 2 * p - kh) / s + 1, ow = (w + 2 * p - kw) / s + 1;
    ASSERT_EQ(y.sizes, (std::vector<int64_t>{nb, oc, oh, ow}));
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t y0 = 0; y0 < oh; ++y0)
          for (int64_t x0 = 0; x0 < ow; ++x0) {
            int64_t acc = bv[size_t(o)];
            const int64_t gi = o / (oc / g);
            for (int64_t ci = 0; ci < c / g; ++ci)
              for (int64_t i = 0; i < kh; ++i)
                for (int64_t j = 0; j < kw; ++j) {
                  const int64_t ih = y0 * s - p + i, iw = x0 * s - p + j;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                  acc += xv[size_t(((n * c + gi * (c / g) + ci) * h + ih) * w + iw)] *
                         wv[size_t(((o * (c / g) + ci) * kh + i) * kw + j)];
                }
            ASSERT_EQ(y.v[size_t(((n * oc + o) * oh + y0) * ow + x0)], wrap_to(acc, d));
          }
  }
}

TEST(CpuNnInt, PoolingIntegers) {
  SCOPED_TRACE(seed_trace());
  const int64_t c = 3, h = 9, w = 8, k = 3, s = 2, p = 1;
  const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
  for (DType d : kIntTypes) {
    SCOPED_TRACE(dtype_name(d));
    const auto xv = random_ints(c * h * w, d);
    const Tensor x = as(xv, {c, h, w}, d);
    const Ref mx = read(max_pool2d(x, {k, k}, {s, s}, {p, p}));
    const bool avg = d == kInt64;
    const Ref av = avg ? read(avg_pool2d(x, {k, k}, {s, s}, {p, p})) : Ref{};
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t y0 = 0; y0 < oh; ++y0)
        for (int64_t x0 = 0; x0 < ow; ++x0) {
          int64_t best = INT64_MIN, sum = 0;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const int64_t ih = y0 * s - p + i, iw = x0 * s - p + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              best = std::max(best, xv[size_t((ci * h + ih) * w + iw)]);
              sum += xv[size_t((ci * h + ih) * w + iw)];
            }
          const size_t o = size_t((ci * oh + y0) * ow + x0);
          ASSERT_EQ(mx.v[o], double(best)) << o;
          if (avg) {
            ASSERT_EQ(av.v[o], double(sum / (k * k))) << o;  // C++ division truncates, as PyTorch's
          }
        }
  }
}

void expect_refused(const std::function<void()>& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

TEST(CpuNnInt, UnsupportedDtypesNameOpDtypeAndAlternatives) {
  const Tensor b = ones({2, 2}, TensorOptions().dtype(kBool));
  expect_refused([&] { matmul(b, b); }, {"matmul", "bool", "int64", "float32"});
  expect_refused([&] { linear(b, b); }, {"linear", "bool", "int64"});
  expect_refused([&] { conv2d(ones({1, 1, 2, 2}, TensorOptions().dtype(kBool)), ones({1, 1, 1, 1}, TensorOptions().dtype(kBool))); },
                 {"conv2d", "bool"});
  expect_refused([&] { max_pool2d(ones({1, 2, 2}, TensorOptions().dtype(kBool)), {2, 2}); }, {"max_pool2d", "bool", "uint8"});
  expect_refused([&] { avg_pool2d(ones({1, 2, 2}, TensorOptions().dtype(kInt32)), {2, 2}); },
                 {"avg_pool2d", "int32", "int64", "float32"});
  // the process keeps working
  EXPECT_EQ(read(avg_pool2d(ones({1, 2, 2}, TensorOptions().dtype(kInt64)), {2, 2})).v[0], 1.0);
}

}  // namespace
}  // namespace tessera

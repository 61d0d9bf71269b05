// Edge cases of the CPU nn and reduction kernels: NaN propagation (PyTorch: a NaN makes its whole
// softmax / normalisation row NaN, amax of a row with a NaN is NaN, argmax points at the first
// NaN), precision of log_softmax far from zero, and empty tensors. Runs at every ISA level
// (ctest cpu_nn_*), so the AVX-512, AVX2 and scalar row kernels all see the same cases.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <limits>
#include <optional>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::read;
using cpu_test::Ref;
using cpu_test::seed_trace;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const DType kFloatTypes[] = {kFloat32, kBFloat16, kFloat16, kFloat64};

// Uniform values in [-3, 3) with NaN at the given flat positions, as `dtype`.
Tensor with_nans(const std::vector<int64_t>& sizes, DType dtype, const std::vector<int64_t>& nan_at,
                 std::vector<double>* values = nullptr) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  std::uniform_real_distribution<double> dist(-3, 3);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = cpu_test::round_to(dist(cpu_test::rng()), dtype);
  for (auto i : nan_at) v[size_t(i)] = kNaN;
  if (values) *values = v;
  return tensor(v, sizes).to(dtype);
}

// Rows of length `n` (last dim) that hold a NaN: true for each row.
std::vector<bool> nan_rows(const std::vector<double>& v, int64_t n) {
  std::vector<bool> r(v.size() / size_t(n), false);
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isnan(v[i])) r[i / size_t(n)] = true;
  return r;
}

// ---------------------------------------------------------------- softmax / log_softmax NaN

TEST(CpuNnEdgeSoftmax, RowWithNaNIsAllNaN) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 5, 16, 37, 100, 1000}) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n) + (log ? " log_softmax" : " softmax"));
        // row 0: NaN first, row 1: clean, row 2: NaN last, row 3: NaN in the middle
        std::vector<double> v;
        const Tensor x = with_nans({4, n}, dt, {0, 3 * n - 1, 3 * n + n / 2}, &v);
        const Ref y = read(log ? log_softmax(x, 1) : softmax(x, 1));
        const auto bad = nan_rows(v, n);
        for (int64_t r = 0; r < 4; ++r) {
          double mx = -INFINITY, s = 0;
          if (!bad[size_t(r)]) {
            for (int64_t c = 0; c < n; ++c) mx = std::max(mx, v[size_t(r * n + c)]);
            for (int64_t c = 0; c < n; ++c) s += std::exp(v[size_t(r * n + c)] - mx);
          }
          for (int64_t c = 0; c < n; ++c) {
            const double got = y.v[size_t(r * n + c)];
            if (bad[size_t(r)]) {
              ASSERT_TRUE(std::isnan(got)) << "row " << r << " col " << c << " got " << got;
            } else {
              const double e = v[size_t(r * n + c)] - mx;
              const double want = log ? e - std::log(s) : std::exp(e) / s;
              ASSERT_NEAR(got, want, 2e-2 * std::fabs(want) + 1e-3) << "row " << r << " col " << c;
            }
          }
        }
      }
    }
  }
}

TEST(CpuNnEdgeSoftmax, NaNAlongAnOuterDim) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : kFloatTypes) {
    // softmax over dim 0 of [n, 3]: column 1 holds a NaN, columns 0 and 2 do not.
    const int64_t n = 40;
    std::vector<double> v;
    const Tensor x = with_nans({n, 3}, dt, {3 * 17 + 1}, &v);
    for (bool log : {false, true}) {
      const Ref y = read(log ? log_softmax(x, 0) : softmax(x, 0));
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(std::isnan(y.v[size_t(r * 3 + 1)])) << dtype_name(dt) << " row " << r;
        EXPECT_FALSE(std::isnan(y.v[size_t(r * 3)])) << dtype_name(dt) << " row " << r;
        EXPECT_FALSE(std::isnan(y.v[size_t(r * 3 + 2)])) << dtype_name(dt) << " row " << r;
      }
    }
  }
}

TEST(CpuNnEdgeSoftmax, InfinitiesFollowPyTorch) {
  // PyTorch: softmax([inf, 1]) = [nan, nan]; softmax([-inf, -inf]) = [nan, nan];
  // softmax([-inf, 0]) = [0, 1].
  const double inf = INFINITY;
  for (DType dt : kFloatTypes) {
    for (bool log : {false, true}) {
      const Ref a = read(log ? log_softmax(tensor(std::vector<double>{inf, 1}).to(dt), 0)
                             : softmax(tensor(std::vector<double>{inf, 1}).to(dt), 0));
      EXPECT_TRUE(std::isnan(a.v[0]) && std::isnan(a.v[1])) << dtype_name(dt) << " " << a.v[0] << " " << a.v[1];
      const Ref b = read(log ? log_softmax(tensor(std::vector<double>{-inf, -inf}).to(dt), 0)
                             : softmax(tensor(std::vector<double>{-inf, -inf}).to(dt), 0));
      EXPECT_TRUE(std::isnan(b.v[0]) && std::isnan(b.v[1])) << dtype_name(dt);
      const Ref c = read(log ? log_softmax(tensor(std::vector<double>{-inf, 0}).to(dt), 0)
                             : softmax(tensor(std::vector<double>{-inf, 0}).to(dt), 0));
      EXPECT_EQ(c.v[0], log ? -inf : 0.0) << dtype_name(dt);
      EXPECT_EQ(c.v[1], log ? 0.0 : 1.0) << dtype_name(dt);
    }
  }
}

// ---------------------------------------------------------------- log_softmax precision

TEST(CpuNnEdgeLogSoftmax, LargeRowMaximumKeepsPrecision) {
  // log_softmax([1e5, 1e5 - 1]) = [-log(1 + e^-1), -1 - log(1 + e^-1)] = [-0.31326..., -1.31326...].
  const double l = std::log1p(std::exp(-1.0));
  for (DType dt : {kFloat32, kFloat64}) {
    const Ref y = read(log_softmax(tensor(std::vector<double>{1e5, 1e5 - 1}).to(dt), 0));
    EXPECT_NEAR(y.v[0], -l, 1e-6) << dtype_name(dt);
    EXPECT_NEAR(y.v[1], -1 - l, 1e-6) << dtype_name(dt);
  }
  // Long rows (vector loops and tails) of integers near 1e5, exactly representable in f32.
  SCOPED_TRACE(seed_trace());
  for (int64_t n : {7, 16, 33, 250}) {
    std::uniform_int_distribution<int> dist(-8, 0);
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = 1e5 + dist(cpu_test::rng());
    double mx = -INFINITY, s = 0;
    for (double x : v) mx = std::max(mx, x);
    for (double x : v) s += std::exp(x - mx);
    const Ref y = read(log_softmax(tensor(v).to(kFloat32), 0));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y.v[size_t(i)], (v[size_t(i)] - mx) - std::log(s), 2e-6 * (1 + std::fabs(v[size_t(i)] - mx)))
          << "n=" << n << " i=" << i;
  }
}

// ---------------------------------------------------------------- layer_norm / rms_norm NaN

TEST(CpuNnEdgeNorm, NaNMakesItsRowNaN) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : kFloatTypes) {
    for (int64_t n : {3, 16, 37}) {
      std::vector<double> v;
      const Tensor x = with_nans({3, n}, dt, {n + n / 2});
      const Ref ln = read(layer_norm(x, {n}));
      const Ref rn = read(rms_norm(x, {n}));
      for (int64_t c = 0; c < n; ++c) {
        EXPECT_TRUE(std::isnan(ln.v[size_t(n + c)])) << dtype_name(dt) << " n=" << n << " c=" << c;
        EXPECT_TRUE(std::isnan(rn.v[size_t(n + c)])) << dtype_name(dt) << " n=" << n << " c=" << c;
        EXPECT_FALSE(std::isnan(ln.v[size_t(c)]));
        EXPECT_FALSE(std::isnan(rn.v[size_t(2 * n + c)]));
      }
    }
  }
}

// ---------------------------------------------------------------- max reductions NaN

TEST(CpuNnEdgeReduce, AmaxAndArgmaxPropagateNaN) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 9, 64, 1000}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      // row 1 holds NaN at n/3 and at n-1 (argmax: the first one)
      const Tensor x = with_nans({3, n}, dt, {n + n / 3, 2 * n - 1});
      const Ref m = read(amax(x, {1}));
      const Ref mn = read(amin(x, {1}));
      const Ref am = read(argmax(x, 1));
      EXPECT_FALSE(std::isnan(m.v[0]));
      EXPECT_TRUE(std::isnan(m.v[1]));
      EXPECT_TRUE(std::isnan(mn.v[1]));
      EXPECT_FALSE(std::isnan(m.v[2]));
      EXPECT_EQ(am.v[1], double(n / 3));
      EXPECT_TRUE(std::isnan(read(amax(x)).v[0]));
      EXPECT_EQ(read(argmax(x)).v[0], double(n + n / 3));
      // over dim 0 (columns): column n/3 and n-1 have a NaN
      const Ref c = read(amax(x, {0}));
      const Ref ac = read(argmax(x, 0));
      EXPECT_TRUE(std::isnan(c.v[size_t(n / 3)]));
      EXPECT_EQ(ac.v[size_t(n / 3)], 1.0);
      EXPECT_TRUE(std::isnan(c.v[size_t(n - 1)]));
    }
  }
}

TEST(CpuNnEdgePool, MaxPoolPropagatesNaN) {
  for (DType dt : kFloatTypes) {
    // [1, 1, 4, 4], NaN at (1, 2): the 2x2 window (0..1, 2..3) is NaN, the others are not.
    std::vector<double> v(16);
    for (int i = 0; i < 16; ++i) v[size_t(i)] = double(i);
    v[6] = kNaN;
    const Ref y = read(max_pool2d(tensor(v, {1, 1, 4, 4}).to(dt), {2, 2}));
    EXPECT_EQ(y.v[0], 5.0) << dtype_name(dt);
    EXPECT_TRUE(std::isnan(y.v[1])) << dtype_name(dt);
    EXPECT_EQ(y.v[2], 13.0) << dtype_name(dt);
    EXPECT_EQ(y.v[3], 15.0) << dtype_name(dt);
  }
}

// ---------------------------------------------------------------- attention NaN

Tensor sdpa_math(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask = {}) {
  Dispatcher& d = Dispatcher::instance();
  Stack args{q, k, v, mask, false, std::monostate{}};
  Stack out = d.call_boxed(d.op("_sdpa_math"), std::move(args));
  return std::get<Tensor>(out.at(0));
}

TEST(CpuNnEdgeSdpa, NaNScoreMakesItsQueryRowNaN) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : kFloatTypes) {
    for (int64_t s : {5, 300}) {  // one key block, and several (the online softmax update)
      SCOPED_TRACE(std::string(dtype_name(dt)) + " S=" + std::to_string(s));
      const int64_t l = 4, e = 8;
      // query row 2 holds a NaN: its output row is NaN, the others are finite.
      const Tensor q = with_nans({1, l, e}, dt, {2 * e + 3});
      const Tensor k = with_nans({1, s, e}, dt, {});
      const Tensor v = with_nans({1, s, e}, dt, {});
      for (int path = 0; path < 2; ++path) {
        const Ref o = read(path == 0 ? scaled_dot_product_attention(q, k, v) : sdpa_math(q, k, v));
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < e; ++c)
            EXPECT_EQ(std::isnan(o.v[size_t(i * e + c)]), i == 2)
                << (path == 0 ? "flash" : "math") << " row " << i << " col " << c;
      }
      // a NaN in the last key: every query row sees it.
      const Tensor k2 = with_nans({1, s, e}, dt, {(s - 1) * e});
      for (int path = 0; path < 2; ++path) {
        const Ref o = read(path == 0 ? scaled_dot_product_attention(q, k2, v) : sdpa_math(q, k2, v));
        for (size_t i = 0; i < o.v.size(); ++i)
          EXPECT_TRUE(std::isnan(o.v[i])) << (path == 0 ? "flash" : "math") << " element " << i;
      }
    }
  }
}

// PyTorch's answers around fully masked rows (Note [Fully masked attention rows] in
// plugins/cpu/nn/attention.cpp): such a row is 0 @ V, so a NaN value still reaches it; a masked key
// whose score is NaN still makes every row NaN (the bool mask adds -inf); an +inf score makes its
// row NaN; a row whose scores are all -inf without any mask (infinite query) is 0.
TEST(CpuNnEdgeSdpa, FullyMaskedRowsFollowPyTorch) {
  SCOPED_TRACE(seed_trace());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (DType dt : kFloatTypes) {
    for (int64_t s : {5, 300}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " S=" + std::to_string(s));
      const int64_t l = 4, e = 8;
      const int64_t jn = s - 2, cn = 3;  // the NaN value / key
      std::vector<bool> keep(size_t(l * s), true);
      for (int64_t j = 0; j < s; ++j) keep[size_t(1 * s + j)] = false;  // row 1 fully masked
      keep[size_t(2 * s + jn)] = false;                                 // row 2 masks key jn only
      const Tensor mask = tensor(keep, {l, s});
      const Tensor q = with_nans({1, l, e}, dt, {});
      const Tensor k = with_nans({1, s, e}, dt, {});
      const Tensor v_nan = with_nans({1, s, e}, dt, {jn * e + cn});
      const Tensor k_nan = with_nans({1, s, e}, dt, {jn * e});
      for (int path = 0; path < 2; ++path) {
        const char* pn = path == 0 ? "flash" : "math";
        auto run = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const std::optional<Tensor>& m) {
          return read(path == 0 ? scaled_dot_product_attention(qq, kk, vv, m) : sdpa_math(qq, kk, vv, m));
        };
        // NaN in value jn, column cn: every row's column cn is NaN (0 * NaN in the masked ones),
        // the fully masked row is 0 elsewhere, the others finite.
        const Ref o1 = run(q, k, v_nan, mask);
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < e; ++c) {
            const double x = o1.v[size_t(i * e + c)];
            if (c == cn)
              EXPECT_TRUE(std::isnan(x)) << pn << " row " << i << " col " << c;
            else if (i == 1)
              EXPECT_EQ(x, 0.0) << pn << " col " << c;
            else
              EXPECT_TRUE(std::isfinite(x)) << pn << " row " << i << " col " << c;
          }
        // NaN in key jn, masked out in rows 1 and 2: NaN + -inf is NaN, every row is NaN.
        const Ref o2 = run(q, k_nan, k, mask);
        for (size_t x = 0; x < o2.v.size(); ++x) EXPECT_TRUE(std::isnan(o2.v[x])) << pn << " element " << x;
        // Query row 1 = [+inf, 0, ...]. With every key's feature 0 negative its scores are all
        // -inf (no mask): 0. With one key's feature 0 positive, one score is +inf: NaN.
        std::vector<double> qv, kv;
        with_nans({1, l, e}, dt, {}, &qv);
        with_nans({1, s, e}, dt, {}, &kv);
        for (int64_t c = 0; c < e; ++c) qv[size_t(e + c)] = c == 0 ? kInf : 0.0;
        for (int64_t j = 0; j < s; ++j) kv[size_t(j * e)] = -std::fabs(kv[size_t(j * e)]) - 0.5;
        const Tensor qi = tensor(qv, {1, l, e}).to(dt), kneg = tensor(kv, {1, s, e}).to(dt);
        const Ref o3 = run(qi, kneg, k, std::nullopt);
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < e; ++c) {
            const double x = o3.v[size_t(i * e + c)];
            if (i == 1)
              EXPECT_EQ(x, 0.0) << pn << " all -inf row, col " << c;
            else
              EXPECT_TRUE(std::isfinite(x)) << pn << " row " << i << " col " << c;
          }
        kv[size_t(jn * e)] = 1.0;
        const Ref o4 = run(qi, tensor(kv, {1, s, e}).to(dt), k, std::nullopt);
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < e; ++c)
            EXPECT_EQ(std::isnan(o4.v[size_t(i * e + c)]), i == 1)
                << pn << " +inf score, row " << i << " col " << c;
      }
    }
  }
}

// ---------------------------------------------------------------- empty tensors

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuNnEdgeEmpty, ReductionsFollowPyTorch) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    const Tensor x = zeros({0, 3}, TensorOptions().dtype(dt));
    // over the empty dim: sum -> 0, mean -> nan, amax -> error, argmax -> error
    EXPECT_EQ(read(sum(x, {0})).v, (std::vector<double>{0, 0, 0})) << dtype_name(dt);
    const Ref mn = read(mean(x, {0}));
    ASSERT_EQ(mn.v.size(), 3u);
    for (double v : mn.v) EXPECT_TRUE(std::isnan(v)) << dtype_name(dt);
    const std::string e1 = error_of([&] { amax(x, {0}); });
    EXPECT_NE(e1.find("amax"), std::string::npos) << e1;
    EXPECT_NE(e1.find("dim"), std::string::npos) << e1;
    const std::string e2 = error_of([&] { argmax(x, 0); });
    EXPECT_NE(e2.find("argmax"), std::string::npos) << e2;
    EXPECT_NE(e2.find("dim"), std::string::npos) << e2;
    EXPECT_FALSE(error_of([&] { argmax(x); }).empty());
    // over the non-empty dim: empty results
    EXPECT_EQ(sum(x, {1}).numel(), 0);
    EXPECT_EQ(amax(x, {1}).numel(), 0);
    EXPECT_EQ(argmax(x, 1).numel(), 0);
    EXPECT_EQ(argmax(x, 1, true).sizes(), (IntArrayRef{0, 1}));
  }
}

TEST(CpuNnEdgeEmpty, NnKernelsOnEmptyInputs) {
  for (DType dt : kFloatTypes) {
    const TensorOptions o = TensorOptions().dtype(dt);
    EXPECT_EQ(softmax(zeros({0, 5}, o), 1).numel(), 0);
    EXPECT_EQ(log_softmax(zeros({4, 0}, o), 1).numel(), 0);
    EXPECT_EQ(softmax(zeros({4, 0}, o), 0).numel(), 0);
    EXPECT_EQ(layer_norm(zeros({0, 5}, o), {5}).numel(), 0);
    EXPECT_EQ(rms_norm(zeros({0, 5}, o), {5}).numel(), 0);
    EXPECT_EQ(max_pool2d(zeros({0, 2, 4, 4}, o), {2, 2}).numel(), 0);
    EXPECT_EQ(avg_pool2d(zeros({0, 2, 4, 4}, o), {2, 2}).numel(), 0);
    EXPECT_EQ(matmul(zeros({0, 3}, o), zeros({3, 4}, o)).sizes(), (IntArrayRef{0, 4}));
    EXPECT_EQ(read(matmul(zeros({2, 0}, o), zeros({0, 3}, o))).v, std::vector<double>(6, 0.0));
    EXPECT_EQ(linear(zeros({0, 3}, o), zeros({4, 3}, o)).sizes(), (IntArrayRef{0, 4}));
    EXPECT_EQ(conv2d(zeros({0, 1, 4, 4}, o), zeros({2, 1, 3, 3}, o)).sizes(), (IntArrayRef{0, 2, 2, 2}));
  }
}

// ---------------------------------------------------------------- rank above the plugin's limit

// Note [Rank limit in the CPU plugin]: a rank the plugin's fixed arrays cannot hold is an error that
// names the rank, never a stack overflow; the process keeps working.
TEST(CpuNnEdgeRank, RankAboveSixteenIsAnErrorNotACrash) {
  for (int64_t rank : {17, 40, 1000}) {
    std::vector<int64_t> sizes(static_cast<size_t>(rank), 1);
    sizes[0] = 2;
    Tensor x;
    try {
      x = zeros(sizes);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
      continue;
    }
    const std::vector<std::function<Tensor()>> calls = {
        [&] { return x.transpose(0, 1).contiguous(); },
        [&] { return sum(x, {0}); },
        [&] { return amax(x, {1}); },
        [&] { return cat({x, x}, 0); },
        [&] { return gather(x, 0, zeros(sizes, TensorOptions().dtype(kInt64))); },
        [&] { return softmax(x, 0); },
    };
    for (size_t i = 0; i < calls.size(); ++i) {
      try {
        calls[i]();
        ADD_FAILURE() << "rank " << rank << " call " << i << ": no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << "call " << i << ": " << e.what();
      }
    }
  }
  EXPECT_EQ(read(sum(ones({2, 3}))).v[0], 6.0);
}

}  // namespace
}  // namespace tessera

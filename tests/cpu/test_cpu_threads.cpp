// The parallel kernels of the CPU plugin under oversubscription: ctest runs this binary with
// OMP_NUM_THREADS well above the core count (threads are preempted in the middle of their chunks,
// which is when state shared between chunks shows up), on inputs large enough to be split, several
// times. Every result is checked element by element against a naive loop written here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::read;
using cpu_test::rng;
using cpu_test::seed_trace;

constexpr int kRepeats = 10;

std::vector<int64_t> random_indices(int64_t n, int64_t bound) {
  std::uniform_int_distribution<int64_t> dist(0, bound - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng());
  return v;
}

std::vector<float> random_floats(int64_t n) {
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng());
  return v;
}

// Elements of a contiguous f32 / int64 tensor, read straight from its memory.
template <typename T>
std::vector<T> values(const Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  const T* p = static_cast<const T*>(t.raw_data_ptr());
  return std::vector<T>(p, p + t.numel());
}

TEST(CpuThreads, GatherLargeIndexEveryElementRight) {
  SCOPED_TRACE(seed_trace());
  const int64_t rows = 64, cols = 4096, src_cols = 1000;  // 262144 outputs
  const std::vector<float> xv = random_floats(rows * src_cols);
  const Tensor x = tensor(xv, {rows, src_cols});
  for (int rep = 0; rep < kRepeats; ++rep) {
    const std::vector<int64_t> iv = random_indices(rows * cols, src_cols);
    const Tensor out = gather(x, 1, tensor(iv, {rows, cols}));
    const std::vector<float> got = values<float>(out);
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t o = size_t(r * cols + c);
        wrong += got[o] != xv[size_t(r * src_cols + iv[o])];
      }
    ASSERT_EQ(wrong, 0) << "repeat " << rep;
  }
}

TEST(CpuThreads, GatherInt32IndexNonContiguous) {
  SCOPED_TRACE(seed_trace());
  const int64_t n = 1 << 17, src = 5000;
  const std::vector<float> xv = random_floats(src);
  const Tensor x = tensor(xv, {src});
  for (int rep = 0; rep < kRepeats; ++rep) {
    const std::vector<int64_t> iv = random_indices(2 * n, src);
    const Tensor idx = tensor(iv, {2 * n}).to(kInt32).slice(0, 0, std::nullopt, 2);
    const std::vector<float> got = values<float>(gather(x, 0, idx));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[size_t(i)] != xv[size_t(iv[size_t(2 * i)])];
    ASSERT_EQ(wrong, 0) << "repeat " << rep;
  }
}

TEST(CpuThreads, IndexSelectAndEmbedding) {
  SCOPED_TRACE(seed_trace());
  const int64_t rows = 3000, d = 37, n = 20000;
  const std::vector<float> wv = random_floats(rows * d);
  const Tensor w = tensor(wv, {rows, d});
  for (int rep = 0; rep < kRepeats; ++rep) {
    const std::vector<int64_t> iv = random_indices(n, rows);
    const Tensor idx = tensor(iv, {n});
    const std::vector<float> a = values<float>(index_select(w, 0, idx));
    const std::vector<float> b = values<float>(embedding(w, idx));
    int64_t wrong = 0;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < d; ++c) {
        const float want = wv[size_t(iv[size_t(j)] * d + c)];
        wrong += a[size_t(j * d + c)] != want;
        wrong += b[size_t(j * d + c)] != want;
      }
    ASSERT_EQ(wrong, 0) << "repeat " << rep;
  }
}

TEST(CpuThreads, ReductionsAndArgmax) {
  SCOPED_TRACE(seed_trace());
  const int64_t rows = 4096, cols = 301;
  for (int rep = 0; rep < kRepeats; ++rep) {
    const std::vector<float> xv = random_floats(rows * cols);
    const Tensor x = tensor(xv, {rows, cols});
    const std::vector<float> s = values<float>(sum(x, {1}));
    const std::vector<float> m = values<float>(amax(x, {1}));
    const std::vector<int64_t> am = values<int64_t>(argmax(x, 1));
    const std::vector<float> cs = values<float>(sum(x.transpose(0, 1).contiguous(), {1}));
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      float best = xv[size_t(r * cols)];
      int64_t bi = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = xv[size_t(r * cols + c)];
        acc += v;
        if (v > best) best = v, bi = c;
      }
      ASSERT_NEAR(s[size_t(r)], acc, 1e-3) << "row " << r << " repeat " << rep;
      ASSERT_EQ(m[size_t(r)], best) << "row " << r << " repeat " << rep;
      ASSERT_EQ(am[size_t(r)], bi) << "row " << r << " repeat " << rep;
    }
    for (int64_t c = 0; c < cols; ++c) {
      double acc = 0;
      for (int64_t r = 0; r < rows; ++r) acc += xv[size_t(r * cols + c)];
      ASSERT_NEAR(cs[size_t(c)], acc, 1e-2) << "column " << c << " repeat " << rep;
    }
  }
}

TEST(CpuThreads, SoftmaxRowsAndCopies) {
  SCOPED_TRACE(seed_trace());
  const int64_t rows = 2048, cols = 129;
  for (int rep = 0; rep < kRepeats; ++rep) {
    std::vector<float> xv = random_floats(rows * cols);
    for (auto& v : xv) v *= 0.05f;
    const Tensor x = tensor(xv, {rows, cols});
    const std::vector<float> y = values<float>(softmax(x, 1));
    const std::vector<float> t = values<float>(x.transpose(0, 1).contiguous());
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(xv[size_t(r * cols + c)]));
      for (int64_t c = 0; c < cols; ++c) s += std::exp(double(xv[size_t(r * cols + c)]) - mx);
      for (int64_t c = 0; c < cols; ++c) {
        const double want = std::exp(double(xv[size_t(r * cols + c)]) - mx) / s;
        ASSERT_NEAR(y[size_t(r * cols + c)], want, 1e-6 + 1e-5 * want) << r << "," << c << " repeat " << rep;
        ASSERT_EQ(t[size_t(c * rows + r)], xv[size_t(r * cols + c)]) << r << "," << c << " repeat " << rep;
      }
    }
  }
}

}  // namespace
}  // namespace tessera

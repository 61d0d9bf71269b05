// The CPU plugin's grain-size rule (Note [Grain size] in plugins/cpu/src/grain.h): work below
// 2 * grain(kind) runs on the calling thread alone, work at or above it on every thread, for the
// plugin's own loops and for oneDNN's primitives alike; results are right on both sides of each cut.
//
// How the thread count is observed: this executable defines GOMP_parallel, the libgomp entry point
// through which every `#pragma omp parallel` in the plugin and in oneDNN starts a team (both import
// only that one; `nm -D`), exported so that it takes precedence over libgomp's for the libraries
// the runtime loads later. It forwards to libgomp's own and records the size of each team from
// inside it (omp_get_num_threads). No team, or teams of one thread, means the op ran on one thread.
// ctest runs the suite with OMP_NUM_THREADS=2; the CpuGrainForce1 / CpuGrainOff cases run in their
// own ctest entries with TESSERA_CPU_GRAIN set.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "cpu_test_util.h"
#include "grain.h"
#include "tessera/tessera.h"

namespace {

std::atomic<int> g_max_team{0};
std::atomic<int64_t> g_teams{0};

struct Forward {
  void (*fn)(void*);
  void* data;
};

void record_and_run(void* p) {
  const Forward* f = static_cast<const Forward*>(p);
  if (omp_get_thread_num() == 0) {
    const int n = omp_get_num_threads();
    g_teams.fetch_add(1);
    int seen = g_max_team.load();
    while (n > seen && !g_max_team.compare_exchange_weak(seen, n)) {
    }
  }
  f->fn(f->data);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void GOMP_parallel(void (*fn)(void*), void* data,
                                                                     unsigned num_threads, unsigned flags) {
  using Real = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Real real = reinterpret_cast<Real>(dlvsym(RTLD_NEXT, "GOMP_parallel", "GOMP_4.0"));
  if (!real) std::abort();
  Forward f{fn, data};
  real(&record_and_run, &f, num_threads, flags);
}

namespace tessera {
namespace {

using cpu::grain;
using cpu::OpKind;
using cpu_test::close;
using cpu_test::linear_ref;
using cpu_test::matmul_ref;
using cpu_test::random_tensor;
using cpu_test::read;
using cpu_test::Ref;
using cpu_test::round_to;
using cpu_test::seed_trace;
using cpu_test::Tol;

// The largest OpenMP team any parallel region started while `op` ran (0: none started).
template <typename F>
int team_of(F&& op) {
  g_max_team.store(0);
  g_teams.store(0);
  op();
  return g_max_team.load();
}

// 2 * grain: the least work that gets every thread.
int64_t cut(OpKind kind) { return 2 * grain(kind); }

// Sums of `terms` products of values in [-2, 2): f32 rounding grows with the number of terms.
Tol tol_for(DType dt, int64_t terms) {
  if (dt == kBFloat16) return cpu_test::tol(dt);
  return Tol{1e-5, 1e-6 * double(terms)};
}

// conv2d, stride 1, no padding, groups 1.
std::vector<double> conv_ref(const Tensor& x, const Tensor& w) {
  const Ref X = read(x), W = read(w);
  const int64_t nb = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), kh = w.size(2), kw = w.size(3), oh = h - kh + 1, ow = wd - kw + 1;
  std::vector<double> y(size_t(nb * oc * oh * ow));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = 0;
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v)
                s += X.v[size_t(((b * c + ci) * h + i + u) * wd + j + v)] *
                     W.v[size_t(((o * c + ci) * kh + u) * kw + v)];
          y[size_t(((b * oc + o) * oh + i) * ow + j)] = round_to(s, x.dtype());
        }
  return y;
}

// Flops of a [m, k] @ [k, n] product.
int64_t mm_flops(int64_t m, int64_t k, int64_t n) { return 2 * m * k * n; }

TEST(CpuGrain, MatmulBothSidesOfTheCutMatchNaiveLoops) {
  SCOPED_TRACE(seed_trace());
  const int64_t m = 32, k = 64;
  const int64_t n_at = cut(OpKind::Matmul) / (2 * m * k);  // exactly at the cut
  ASSERT_EQ(mm_flops(m, k, n_at), cut(OpKind::Matmul));
  for (DType dt : {kFloat32, kBFloat16})
    for (int64_t n : {n_at - 1, n_at}) {
      const Tensor a = random_tensor({m, k}, dt), b = random_tensor({k, n}, dt);
      Tensor c;
      const int team = team_of([&] { c = matmul(a, b); });
      EXPECT_TRUE(close(c, matmul_ref(a, b, dt), tol_for(dt, k), "matmul n=" + std::to_string(n)));
      if (n < n_at) {
        EXPECT_LE(team, 1) << "matmul below the cut, n=" << n << " dtype " << dtype_name(dt);
      }
    }
}

TEST(CpuGrain, SmallMatmulRunsOnOneThreadLargeOnAll) {
  SCOPED_TRACE(seed_trace());
  ASSERT_EQ(omp_get_max_threads(), 2) << "ctest runs this suite with OMP_NUM_THREADS=2";
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor a = random_tensor({64, 64}, dt), b = random_tensor({64, 64}, dt);
    ASSERT_LT(mm_flops(64, 64, 64), cut(OpKind::Matmul));
    EXPECT_LE(team_of([&] { (void)matmul(a, b); }), 1) << dtype_name(dt);
    const Tensor x = random_tensor({512, 512}, dt), y = random_tensor({512, 512}, dt);
    ASSERT_GE(mm_flops(512, 512, 512), cut(OpKind::Matmul));
    EXPECT_EQ(team_of([&] { (void)matmul(x, y); }), 2) << dtype_name(dt);
  }
}

TEST(CpuGrain, SmallLinearRunsOnOneThreadLargeOnAll) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor w = random_tensor({256, 256}, dt), bias = random_tensor({256}, dt);
    const Tensor x1 = random_tensor({1, 256}, dt), x512 = random_tensor({512, 256}, dt);
    ASSERT_LT(mm_flops(1, 256, 256), cut(OpKind::Matmul));
    ASSERT_GE(mm_flops(512, 256, 256), cut(OpKind::Matmul));
    Tensor y1, y512;
    EXPECT_LE(team_of([&] { y1 = linear(x1, w, bias); }), 1) << dtype_name(dt);
    EXPECT_EQ(team_of([&] { y512 = linear(x512, w, bias); }), 2) << dtype_name(dt);
    EXPECT_TRUE(close(y1, linear_ref(x1, w, bias), tol_for(dt, 256), "linear batch 1"));
    EXPECT_TRUE(close(y512, linear_ref(x512, w, bias), tol_for(dt, 256), "linear batch 512"));
  }
}

// One weight, used by calls on both sides of the cut in turn (primitives for one and for two
// threads), then written in place: every result matches the weight's current values
// (Note [Weight cache]).
TEST(CpuGrain, WeightCacheServesBothThreadCounts) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kBFloat16}) {
    Tensor w = random_tensor({256, 256}, dt);
    const Tensor bias = random_tensor({256}, dt);
    const Tensor small = random_tensor({2, 256}, dt), large = random_tensor({256, 256}, dt);
    for (int round = 0; round < 3; ++round) {
      EXPECT_TRUE(close(linear(small, w, bias), linear_ref(small, w, bias), tol_for(dt, 256), "small"));
      EXPECT_TRUE(close(linear(large, w, bias), linear_ref(large, w, bias), tol_for(dt, 256), "large"));
    }
    w.mul_(scalar_tensor(-0.5, TensorOptions().dtype(dt)));
    for (int round = 0; round < 2; ++round) {
      EXPECT_TRUE(
          close(linear(large, w, bias), linear_ref(large, w, bias), tol_for(dt, 256), "large after write"));
      EXPECT_TRUE(
          close(linear(small, w, bias), linear_ref(small, w, bias), tol_for(dt, 256), "small after write"));
    }
  }
}

TEST(CpuGrain, SmallConvRunsOnOneThreadLargeOnAll) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor ws = random_tensor({4, 3, 3, 3}, dt), xs = random_tensor({1, 3, 10, 10}, dt);
    ASSERT_LT(2 * 4 * 8 * 8 * 3 * 9, cut(OpKind::Conv));
    Tensor ys;
    EXPECT_LE(team_of([&] { ys = conv2d(xs, ws); }), 1) << dtype_name(dt);
    EXPECT_TRUE(close(ys, conv_ref(xs, ws), tol_for(dt, 27), "small conv2d"));
    const Tensor wl = random_tensor({32, 16, 3, 3}, dt), xl = random_tensor({2, 16, 66, 66}, dt);
    ASSERT_GE(int64_t(2) * 2 * 32 * 64 * 64 * 16 * 9, cut(OpKind::Conv));
    Tensor yl;
    EXPECT_EQ(team_of([&] { yl = conv2d(xl, wl); }), 2) << dtype_name(dt);
    EXPECT_TRUE(close(yl, conv_ref(xl, wl), tol_for(dt, 144), "large conv2d"));
  }
}

// Elementwise loops: add (OpKind::Elementwise) and exp (OpKind::Transcendental) on one thread one
// element below the cut, on two at it.
TEST(CpuGrain, ElementwiseLoopsSplitAtTheCut) {
  SCOPED_TRACE(seed_trace());
  for (OpKind kind : {OpKind::Elementwise, OpKind::Transcendental})
    for (int64_t n : {cut(kind) - 1, cut(kind)}) {
      const Tensor a = random_tensor({n}, kFloat32), b = random_tensor({n}, kFloat32);
      Tensor y;
      const int team = team_of([&] { y = kind == OpKind::Elementwise ? add(a, b) : exp(a); });
      if (n < cut(kind)) {
        EXPECT_LE(team, 1) << "n=" << n;
      } else {
        EXPECT_EQ(team, 2) << "n=" << n;
      }
      const Ref A = read(a), B = read(b);
      std::vector<double> want(static_cast<size_t>(n));
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = double(float(kind == OpKind::Elementwise ? A.v[i] + B.v[i] : std::exp(A.v[i])));
      EXPECT_TRUE(close(y, want, Tol{2e-6, 0}, "n=" + std::to_string(n)));
    }
}

TEST(CpuGrain, SumSplitsAtTheCut) {
  SCOPED_TRACE(seed_trace());
  for (int64_t n : {cut(OpKind::Reduction) - 1, cut(OpKind::Reduction)}) {
    const Tensor a = random_tensor({n}, kFloat32);
    Tensor s;
    const int team = team_of([&] { s = sum(a); });
    if (n < cut(OpKind::Reduction)) {
      EXPECT_LE(team, 1) << "n=" << n;
    } else {
      EXPECT_EQ(team, 2) << "n=" << n;
    }
    double want = 0;
    for (double v : read(a).v) want += v;
    EXPECT_TRUE(close(s, {double(float(want))}, Tol{1e-5, 1e-3}, "sum n=" + std::to_string(n)));
  }
}

// Softmax and layer_norm over rows of 256: one row short of the cut, and at it.
TEST(CpuGrain, RowOpsSplitAtTheCut) {
  SCOPED_TRACE(seed_trace());
  const int64_t d = 256;
  for (OpKind kind : {OpKind::Softmax, OpKind::Normalization})
    for (int64_t rows : {cut(kind) / d - 1, cut(kind) / d}) {
      const Tensor x = random_tensor({rows, d}, kFloat32);
      Tensor y;
      const int team = team_of([&] { y = kind == OpKind::Softmax ? softmax(x, 1) : layer_norm(x, {d}); });
      if (rows * d < cut(kind)) {
        EXPECT_LE(team, 1) << "rows=" << rows;
      } else {
        EXPECT_EQ(team, 2) << "rows=" << rows;
      }
      const Ref X = read(x);
      std::vector<double> want(size_t(rows * d));
      for (int64_t r = 0; r < rows; ++r) {
        const double* row = X.v.data() + r * d;
        double* out = want.data() + r * d;
        if (kind == OpKind::Softmax) {
          double mx = row[0], s = 0;
          for (int64_t i = 0; i < d; ++i) mx = std::max(mx, row[i]);
          for (int64_t i = 0; i < d; ++i) s += std::exp(row[i] - mx);
          for (int64_t i = 0; i < d; ++i) out[i] = std::exp(row[i] - mx) / s;
        } else {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < d; ++i) mean += row[i];
          mean /= double(d);
          for (int64_t i = 0; i < d; ++i) var += (row[i] - mean) * (row[i] - mean);
          const double rstd = 1 / std::sqrt(var / double(d) + 1e-5);
          for (int64_t i = 0; i < d; ++i) out[i] = (row[i] - mean) * rstd;
        }
      }
      EXPECT_TRUE(close(y, want, Tol{1e-5, 1e-6}, "rows=" + std::to_string(rows)));
    }
}

// Attention [1, 1, l, 64] on the flash path: a short sequence on one thread, a long one on two.
TEST(CpuGrain, SdpaSmallOnOneThreadLargeOnAll) {
  SCOPED_TRACE(seed_trace());
  const int64_t e = 64;
  for (int64_t l : {int64_t(32), int64_t(512)}) {
    const Tensor q = random_tensor({1, 2, l, e}, kFloat32), k = random_tensor({1, 2, l, e}, kFloat32),
                 v = random_tensor({1, 2, l, e}, kFloat32);
    const int64_t flops = 2 * 2 * l * l * (e + e);
    Tensor o;
    const int team = team_of([&] { o = scaled_dot_product_attention(q, k, v); });
    if (flops < cut(OpKind::Sdpa)) {
      EXPECT_LE(team, 1) << "l=" << l;
    } else {
      EXPECT_EQ(team, 2) << "l=" << l;
    }
    const Ref Q = read(q), K = read(k), V = read(v);
    std::vector<double> want(size_t(2 * l * e));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < l; ++i) {
        std::vector<double> s(static_cast<size_t>(l));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < l; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < e; ++c)
            dot += Q.v[size_t((h * l + i) * e + c)] * K.v[size_t((h * l + j) * e + c)];
          s[size_t(j)] = dot / std::sqrt(double(e));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (double& x : s) z += (x = std::exp(x - mx));
        for (int64_t c = 0; c < e; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < l; ++j) acc += s[size_t(j)] * V.v[size_t((h * l + j) * e + c)];
          want[size_t((h * l + i) * e + c)] = acc / z;
        }
      }
    EXPECT_TRUE(close(o, want, Tol{1e-4, 1e-5}, "sdpa l=" + std::to_string(l)));
  }
}

// TESSERA_CPU_GRAIN=force1 (its own ctest entry): large work stays on one thread too.
TEST(CpuGrainForce1, LargeWorkRunsOnOneThread) {
  SCOPED_TRACE(seed_trace());
  ASSERT_STREQ(std::getenv("TESSERA_CPU_GRAIN"), "force1");
  const Tensor x = random_tensor({512, 512}, kFloat32), y = random_tensor({512, 512}, kFloat32);
  Tensor c;
  EXPECT_LE(team_of([&] { c = matmul(x, y); }), 1);
  EXPECT_TRUE(close(c, matmul_ref(x, y, kFloat32), tol_for(kFloat32, 512), "matmul 512"));
  const Tensor a = random_tensor({1 << 20}, kFloat32);
  EXPECT_LE(team_of([&] { (void)add(a, a); }), 1);
  EXPECT_LE(team_of([&] { (void)sum(a); }), 1);
}

// TESSERA_CPU_GRAIN=off (its own ctest entry): small work is split too.
TEST(CpuGrainOff, SmallWorkRunsOnAllThreads) {
  SCOPED_TRACE(seed_trace());
  ASSERT_STREQ(std::getenv("TESSERA_CPU_GRAIN"), "off");
  const Tensor a = random_tensor({4096}, kFloat32);
  EXPECT_EQ(team_of([&] { (void)add(a, a); }), 2);
  const Tensor x = random_tensor({64, 64}, kFloat32), y = random_tensor({64, 64}, kFloat32);
  const Tensor c = matmul(x, y);
  EXPECT_TRUE(close(c, matmul_ref(x, y, kFloat32), tol_for(kFloat32, 64), "matmul 64"));
}

}  // namespace
}  // namespace tessera

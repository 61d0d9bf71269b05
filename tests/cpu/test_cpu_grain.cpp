// The CPU plugin's grain-size rule (Note [Grain size] in plugins/cpu/src/grain.h): work below
// 2 * grain(kind) runs on the calling thread alone, work at or above it on every thread, for the
// plugin's own loops and for oneDNN's primitives alike; results are right on both sides of each cut.
// Each kind has a quiet and a loaded grain; the automatic mode picks one by the machine load
// estimate (Note [Machine load estimate] in machine_load.h) for work between the two cuts. The
// thread-count checks pin the table they test (TESSERA_CPU_GRAIN=loaded for CpuGrain.*, =quiet for
// CpuGrainQuiet.*) so that they hold whatever the machine's load; CpuGrainAuto.* checks only work
// outside the band, and CpuGrainLoadEstimate.* tests the estimate on hand-written samples.
//
// How the thread count is observed: this executable defines GOMP_parallel, the libgomp entry point
// through which every `#pragma omp parallel` in the plugin and in oneDNN starts a team (both import
// only that one; `nm -D`), exported so that it takes precedence over libgomp's for the libraries
// the runtime loads later. It forwards to libgomp's own and records the size of each team from
// inside it (omp_get_num_threads). No team, or teams of one thread, means the op ran on one thread.
// ctest runs the suite with OMP_NUM_THREADS=2; each test group runs in its own ctest entry with
// TESSERA_CPU_GRAIN set as its name says.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu_test_util.h"
#include "grain.h"
#include "machine_load.h"
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

using cpu::loaded_grain;
using cpu::OpKind;
using cpu::quiet_grain;
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

bool grain_env_is(const char* value) {
  const char* env = std::getenv("TESSERA_CPU_GRAIN");
  return value ? env && std::strcmp(env, value) == 0 : env == nullptr;
}

int64_t quiet_cut(OpKind kind) { return 2 * quiet_grain(kind); }
int64_t loaded_cut(OpKind kind) { return 2 * loaded_grain(kind); }

// 2 * grain: the least work that gets every thread under the table the ctest entry pins
// (TESSERA_CPU_GRAIN=quiet or loaded; the CpuGrain.* tests run under both).
int64_t cut(OpKind kind) { return grain_env_is("quiet") ? quiet_cut(kind) : loaded_cut(kind); }

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

// Work between the quiet and the loaded cut: a team of two under the quiet table, one thread under
// the loaded one (the matmul 256 rows of docs/performance.md's PyTorch table).
TEST(CpuGrain, WorkBetweenTheCutsFollowsThePinnedTable) {
  SCOPED_TRACE(seed_trace());
  ASSERT_TRUE(grain_env_is("quiet") || grain_env_is("loaded")) << "ctest pins TESSERA_CPU_GRAIN";
  const int want = grain_env_is("quiet") ? 2 : 1;
  auto between = [](OpKind kind, int64_t work) { return work >= quiet_cut(kind) && work < loaded_cut(kind); };
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor a = random_tensor({256, 256}, dt), b = random_tensor({256, 256}, dt);
    ASSERT_TRUE(between(OpKind::Matmul, mm_flops(256, 256, 256)));
    Tensor c;
    const int team = team_of([&] { c = matmul(a, b); });
    if (want == 2) {
      EXPECT_EQ(team, 2) << "matmul 256 " << dtype_name(dt);
    } else {
      EXPECT_LE(team, 1) << "matmul 256 " << dtype_name(dt);
    }
    EXPECT_TRUE(close(c, matmul_ref(a, b, dt), tol_for(dt, 256), "matmul 256"));

    const Tensor x = random_tensor({64, 512}, dt), w = random_tensor({512, 512}, dt),
                 bias = random_tensor({512}, dt);
    ASSERT_TRUE(between(OpKind::Matmul, mm_flops(64, 512, 512)));
    Tensor y;
    const int linear_team = team_of([&] { y = linear(x, w, bias); });
    if (want == 2) {
      EXPECT_EQ(linear_team, 2) << "linear 64x512x512 " << dtype_name(dt);
    } else {
      EXPECT_LE(linear_team, 1) << "linear 64x512x512 " << dtype_name(dt);
    }
    EXPECT_TRUE(close(y, linear_ref(x, w, bias), tol_for(dt, 512), "linear 64x512x512"));
  }
}

// Unset TESSERA_CPU_GRAIN (its own ctest entry): the automatic choice. Whatever the machine's load,
// work below the quiet cut runs on one thread and work at the loaded cut on two; work between them
// may get either (Note [Machine load estimate]) and is right either way.
TEST(CpuGrainAuto, OutsideTheBandTheLoadDoesNotMatter) {
  SCOPED_TRACE(seed_trace());
  ASSERT_TRUE(grain_env_is(nullptr)) << "this entry runs without TESSERA_CPU_GRAIN";
  for (int round = 0; round < 3; ++round) {
    const int64_t n_small = 64, n_large = 512;
    ASSERT_LT(mm_flops(n_small, n_small, n_small), quiet_cut(OpKind::Matmul));
    ASSERT_GE(mm_flops(n_large, n_large, n_large), loaded_cut(OpKind::Matmul));
    const Tensor a = random_tensor({n_small, n_small}, kFloat32),
                 b = random_tensor({n_small, n_small}, kFloat32);
    const Tensor x = random_tensor({n_large, n_large}, kFloat32),
                 y = random_tensor({n_large, n_large}, kFloat32);
    Tensor small, large, between;
    EXPECT_LE(team_of([&] { small = matmul(a, b); }), 1);
    EXPECT_EQ(team_of([&] { large = matmul(x, y); }), 2);
    EXPECT_TRUE(close(small, matmul_ref(a, b, kFloat32), tol_for(kFloat32, n_small), "matmul 64"));
    EXPECT_TRUE(close(large, matmul_ref(x, y, kFloat32), tol_for(kFloat32, n_large), "matmul 512"));
    const Tensor p = random_tensor({256, 256}, kFloat32), q = random_tensor({256, 256}, kFloat32);
    const int team = team_of([&] { between = matmul(p, q); });
    EXPECT_TRUE(team <= 2) << team;
    EXPECT_TRUE(close(between, matmul_ref(p, q, kFloat32), tol_for(kFloat32, 256), "matmul 256"));
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past a refresh of the estimate
  }
}

// The load estimate (Note [Machine load estimate]) on hand-written /proc/stat lines and samples.
TEST(CpuGrainLoadEstimate, ParsesTheAggregateCpuLine) {
  // user nice system idle iowait irq softirq steal guest guest_nice: busy = 100+20+30+6+7+8.
  const auto t = cpu::parse_proc_stat("cpu  100 20 30 400 50 6 7 8 9 10\ncpu0 50 10 15 200 25 3 3 4 4 5\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->busy, 171u);
  EXPECT_EQ(t->total, 621u);
  const auto old_kernel = cpu::parse_proc_stat("cpu 1 2 3 4\n");  // four fields only
  ASSERT_TRUE(old_kernel.has_value());
  EXPECT_EQ(old_kernel->busy, 6u);
  EXPECT_EQ(old_kernel->total, 10u);
  EXPECT_FALSE(cpu::parse_proc_stat(""));
  EXPECT_FALSE(cpu::parse_proc_stat("cpu0 1 2 3 4\n"));  // a per-CPU line, not the aggregate
  EXPECT_FALSE(cpu::parse_proc_stat("cpu 1 2 3\n"));     // too few fields
  EXPECT_FALSE(cpu::parse_proc_stat("cpu 1 x 3 4\n"));   // not a number
  EXPECT_FALSE(cpu::parse_proc_stat("cpu 1 -2 3 4\n"));  // negative
  EXPECT_FALSE(cpu::parse_proc_stat("cpu 18446744073709551615 1 0 0\n"));  // busy overflows
  EXPECT_FALSE(cpu::parse_proc_stat("cpu 99999999999999999999 0 0 0\n"));  // out of range
}

cpu::LoadSample sample(uint64_t busy, uint64_t total, int64_t process_ms, int64_t wall_ms) {
  cpu::LoadSample s;
  s.cpu = {busy, total};
  s.process_cpu_ns = process_ms * 1'000'000;
  s.wall_ns = wall_ms * 1'000'000;
  return s;
}

TEST(CpuGrainLoadEstimate, OthersAreBusyTimeLessOurOwn) {
  using cpu::MachineLoad;
  const int64_t hz = 100;  // one tick = 10 ms
  const cpu::LoadSample t0 = sample(1000, 5000, 300, 10'000);
  // 100 ms on 2 CPUs (20 ticks of total); busy 20 ticks = 200 ms; we used all of it: others 0.
  const cpu::LoadSample ours = sample(1020, 5020, 500, 10'100);
  ASSERT_TRUE(cpu::others_cpus(t0, ours, hz).has_value());
  EXPECT_NEAR(*cpu::others_cpus(t0, ours, hz), 0.0, 1e-12);
  EXPECT_EQ(cpu::classify_load(t0, ours, hz), MachineLoad::Quiet);
  // The same busy time, none of it ours: two CPUs' worth of other work.
  const cpu::LoadSample theirs = sample(1020, 5020, 300, 10'100);
  EXPECT_NEAR(*cpu::others_cpus(t0, theirs, hz), 2.0, 1e-12);
  EXPECT_EQ(cpu::classify_load(t0, theirs, hz), MachineLoad::Loaded);
  // 4 ticks of others over 100 ms = 0.4 CPU: quiet; 5 ticks = 0.5: loaded (the bound is exclusive).
  EXPECT_EQ(cpu::classify_load(t0, sample(1004, 5020, 300, 10'100), hz), MachineLoad::Quiet);
  EXPECT_NEAR(*cpu::others_cpus(t0, sample(1005, 5020, 300, 10'100), hz), 0.5, 1e-12);
  EXPECT_EQ(cpu::classify_load(t0, sample(1005, 5020, 300, 10'100), hz), MachineLoad::Loaded);
  // Our spinning threads show as busy ticks and as our own time: they cancel (2 CPUs busy, 1.9 ours).
  EXPECT_EQ(cpu::classify_load(t0, sample(1020, 5020, 490, 10'100), hz), MachineLoad::Quiet);
  // Tick rounding can make others slightly negative: still quiet.
  EXPECT_NEAR(*cpu::others_cpus(t0, sample(1010, 5020, 410, 10'100), hz), -0.1, 1e-12);
  EXPECT_EQ(cpu::classify_load(t0, sample(1010, 5020, 410, 10'100), hz), MachineLoad::Quiet);
  // Samples that cannot be compared give no estimate, and the classification the safe side.
  for (const cpu::LoadSample& bad : {sample(1010, 5020, 300, 10'000),   // no wall time
                                     sample(999, 5020, 300, 10'100),    // busy went backwards
                                     sample(1010, 4999, 300, 10'100),   // total went backwards
                                     sample(1010, 5020, 299, 10'100)})  // process time went backwards
  {
    EXPECT_FALSE(cpu::others_cpus(t0, bad, hz).has_value());
    EXPECT_EQ(cpu::classify_load(t0, bad, hz), MachineLoad::Loaded);
  }
  EXPECT_FALSE(cpu::others_cpus(t0, ours, 0).has_value());
}

// Two child processes spinning on the two cores make the real estimate say "loaded", whatever else
// runs on the machine (other work only adds to the children's time).
TEST(CpuGrainLoadEstimate, TwoBusyChildrenMakeTheMachineLoaded) {
  const std::optional<cpu::LoadSample> before_children = cpu::sample_load();
  ASSERT_TRUE(before_children.has_value()) << "/proc/stat is readable on Linux";
  cpu::MachineLoadEstimate estimate;
  EXPECT_FALSE(estimate.quiet()) << "one sample: no estimate yet, the safe side";
  // Killed and reaped on every way out of the test, failed assertions included.
  struct Spinners {
    std::vector<pid_t> pids;
    ~Spinners() {
      for (const pid_t pid : pids) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  };
  std::optional<cpu::LoadSample> t0, t1;
  bool quiet_after = true;
  {
    Spinners spinners;
    for (int i = 0; i < 2; ++i) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0) << std::strerror(errno);
      if (pid == 0) {
        volatile uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      spinners.pids.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    t0 = cpu::sample_load();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    t1 = cpu::sample_load();
    quiet_after = estimate.quiet();  // its second sample, 450 ms after the first
  }
  ASSERT_TRUE(t0 && t1);
  const std::optional<double> others = cpu::others_cpus(*t0, *t1, sysconf(_SC_CLK_TCK));
  ASSERT_TRUE(others.has_value());
  EXPECT_GE(*others, 0.9) << "two spinning children";
  EXPECT_EQ(cpu::classify_load(*t0, *t1, sysconf(_SC_CLK_TCK)), cpu::MachineLoad::Loaded);
  EXPECT_FALSE(quiet_after);
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

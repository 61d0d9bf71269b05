// The CUDA compiler plugin's generated kernels (Note [Fused CUDA kernels]) without a GPU:
// - NVRTC (the toolkit's real libnvrtc, Note [Loading NVRTC]) compiles every generated source to a
//   cubin for sm_80 and sm_90;
// - the same body over the host prelude, compiled by the system C++ compiler and run, matches a naive
//   double evaluation of each chain on fresh random inputs, for float32 / float64 / float16 /
//   bfloat16, with broadcast and strided inputs and NaNs;
// - the loader's errors and the program checks.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cubin_cache.h"
#include "fused_program.h"
#include "host_kernel.h"
#include "nvrtc_loader.h"
#include "tessera/float16.h"

namespace {

namespace cf = tessera::cuda_fuser;
using cf::FDType;
using cf::FOp;
using tessera::cuda_fuser_test::build_host;
using tessera::cuda_fuser_test::FusedFn;

cf::Operand R(int32_t reg) { return cf::Operand{reg, 0}; }
cf::Operand N(double v) { return cf::Operand{-1, v}; }

// Program A: binary ops, constants, alpha, broadcasting and NaN. Inputs x (S), y (S), z (last dim
// of S, broadcast). Registers: 0 x, 1 y, 2 z, then the steps from 3.
cf::FusedProgram program_a(FDType t) {
  cf::FusedProgram p;
  p.dtype = t;
  p.num_inputs = 3;
  p.steps = {
      {FOp::Add, R(0), R(1), 2.0},    // 3: x + 2y
      {FOp::Sub, R(0), R(2), 0.5},    // 4: x - 0.5z
      {FOp::Mul, R(0), N(2.5), 1},    // 5: 2.5x
      {FOp::Div, R(0), R(1), 1},      // 6: x / y
      {FOp::Maximum, R(0), R(2), 1},  // 7
      {FOp::Minimum, R(1), R(2), 1},  // 8
      {FOp::Relu, R(0), {}, 1},       // 9
      {FOp::Neg, R(9), {}, 1},        // 10: -relu(x)
      {FOp::Abs, R(1), {}, 1},        // 11
      {FOp::Mul, R(11), R(0), 1},     // 12: |y| x
      {FOp::Sub, N(1.0), R(5), 1},    // 13: 1 - 2.5x
  };
  p.output_regs = {3, 4, 13, 6, 7, 8, 10, 12};
  return p;
}

// Program B: the unary functions. Inputs x (S), y (S, strided). t = |x| + 0.5 keeps logs real.
cf::FusedProgram program_b(FDType t) {
  cf::FusedProgram p;
  p.dtype = t;
  p.num_inputs = 2;
  p.steps = {
      {FOp::Abs, R(0), {}, 1},            // 2
      {FOp::Add, R(2), N(0.5), 1},        // 3: t
      {FOp::Log, R(3), {}, 1},            // 4
      {FOp::Sqrt, R(3), {}, 1},           // 5
      {FOp::Add, R(4), R(5), 1},          // 6: log t + sqrt t
      {FOp::Rsqrt, R(3), {}, 1},          // 7
      {FOp::Exp, R(1), {}, 1},            // 8
      {FOp::Sin, R(1), {}, 1},            // 9
      {FOp::Add, R(8), R(9), 1},          // 10: exp y + sin y
      {FOp::Cos, R(0), {}, 1},            // 11
      {FOp::Tanh, R(1), {}, 1},           // 12
      {FOp::Mul, R(11), R(12), 1},        // 13: cos x tanh y
      {FOp::Sigmoid, R(0), {}, 1},        // 14
      {FOp::Silu, R(1), {}, 1},           // 15
      {FOp::Add, R(14), R(15), 1},        // 16
      {FOp::GeluErf, R(0), {}, 1},        // 17
      {FOp::GeluTanh, R(1), {}, 1},       // 18
      {FOp::Erf, R(0), {}, 1},            // 19
      {FOp::Add, R(18), R(19), 1},        // 20
      {FOp::Reciprocal, R(3), {}, 1},     // 21
      {FOp::PowScalar, R(3), N(1.7), 1},  // 22
      {FOp::PowScalar, R(1), N(2.0), 1},  // 23
      {FOp::Add, R(21), R(22), 1},        // 24
      {FOp::Add, R(24), R(23), 1},        // 25
  };
  p.output_regs = {6, 7, 10, 13, 16, 17, 20, 25};
  return p;
}

// The same chains in double, per element (the oracle).
double gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}
double relu(double v) { return std::isnan(v) ? v : v > 0 ? v : 0; }
double max_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double min_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

std::vector<double> expect_a(double x, double y, double z) {
  return {x + 2 * y,     x - 0.5 * z,   1 - 2.5 * x, x / y,
          max_nan(x, z), min_nan(y, z), -relu(x),    std::abs(y) * x};
}
std::vector<double> expect_b(double x, double y) {
  const double t = std::abs(x) + 0.5;
  return {std::log(t) + std::sqrt(t),
          1 / std::sqrt(t),
          std::exp(y) + std::sin(y),
          std::cos(x) * std::tanh(y),
          1 / (1 + std::exp(-x)) + y / (1 + std::exp(-y)),
          gelu(x),
          gelu_tanh(y) + std::erf(x),
          1 / t + std::pow(t, 1.7) + y * y};
}

const char* dtype_name(FDType t) {
  switch (t) {
    case FDType::Float32:
      return "float32";
    case FDType::Float64:
      return "float64";
    case FDType::Float16:
      return "float16";
    case FDType::BFloat16:
      return "bfloat16";
  }
  return "?";
}

// Elements of one dtype in bytes, written from and read as double.
struct Buffer {
  FDType t;
  std::vector<unsigned char> bytes;
  Buffer(FDType type, size_t n) : t(type), bytes(n * size()) {}
  size_t size() const { return t == FDType::Float64 ? 8 : t == FDType::Float32 ? 4 : 2; }
  void set(size_t i, double v) {
    unsigned char* p = bytes.data() + i * size();
    if (t == FDType::Float64) {
      std::memcpy(p, &v, 8);
    } else if (t == FDType::Float32) {
      const float f = float(v);
      std::memcpy(p, &f, 4);
    } else {
      const uint16_t h = t == FDType::Float16 ? tessera::fp16::float_to_half_bits(float(v))
                                              : tessera::fp16::float_to_bfloat16_bits(float(v));
      std::memcpy(p, &h, 2);
    }
  }
  double get(size_t i) const {
    const unsigned char* p = bytes.data() + i * size();
    if (t == FDType::Float64) {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    if (t == FDType::Float32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return t == FDType::Float16 ? tessera::fp16::half_bits_to_float(h)
                                : tessera::fp16::bfloat16_bits_to_float(h);
  }
};

// Relative tolerance of a chain's result: the output rounding of the dtype plus float arithmetic.
double tolerance(FDType t) {
  switch (t) {
    case FDType::Float64:
      return 1e-12;
    case FDType::Float32:
      return 2e-6;
    case FDType::Float16:
      return 2e-3;
    case FDType::BFloat16:
      return 1.6e-2;
  }
  return 0;
}

void expect_close(double got, double want, FDType t, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where << ": got " << got << ", want NaN";
    return;
  }
  EXPECT_NEAR(got, want, tolerance(t) * (1 + std::abs(want))) << where;
}

constexpr FDType kAll[] = {FDType::Float32, FDType::Float64, FDType::Float16, FDType::BFloat16};

TEST(CudaFuser, GeneratedChainsMatchADoubleLoopOnTheHost) {
  std::mt19937 rng(20261206);
  std::normal_distribution<double> normal(0, 1.5);
  const int64_t rows = 37, cols = 29, n = rows * cols;
  for (FDType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    // Program A: x and y of shape (rows, cols), z of shape (cols) broadcast over the rows.
    {
      std::string error;
      FusedFn fn = build_host(cf::host_source(program_a(t)), &error);
      ASSERT_NE(fn, nullptr) << error;
      Buffer x(t, n), y(t, n), z(t, cols);
      for (int64_t i = 0; i < n; ++i) {
        x.set(i, i % 17 == 3 ? NAN : normal(rng));
        double v = normal(rng);
        y.set(i, std::abs(v) < 0.05 ? 0.5 : v);
      }
      for (int64_t c = 0; c < cols; ++c) z.set(c, c % 11 == 5 ? NAN : normal(rng));
      std::vector<Buffer> out(8, Buffer(t, n));
      cf::TsArgs a{};
      a.in[0] = x.bytes.data();
      a.in[1] = y.bytes.data();
      a.in[2] = z.bytes.data();
      for (int o = 0; o < 8; ++o) a.out[o] = out[o].bytes.data();
      a.n = n;
      a.rank = 2;
      a.sizes[0] = rows;
      a.sizes[1] = cols;
      a.contiguous[0] = a.contiguous[1] = 1;
      a.strides[2][0] = 0;  // z repeats over the rows
      a.strides[2][1] = 1;
      fn(a);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<double> want = expect_a(x.get(i), y.get(i), z.get(i % cols));
        for (int o = 0; o < 8; ++o)
          expect_close(out[o].get(i), want[o], t,
                       "output " + std::to_string(o) + " element " + std::to_string(i));
      }
    }
    // Program B: x contiguous (rows, cols); y the transpose of a (cols, rows) buffer (strided).
    {
      std::string error;
      FusedFn fn = build_host(cf::host_source(program_b(t)), &error);
      ASSERT_NE(fn, nullptr) << error;
      Buffer x(t, n), yt(t, n);
      for (int64_t i = 0; i < n; ++i) {
        x.set(i, normal(rng));
        yt.set(i, normal(rng));
      }
      std::vector<Buffer> out(8, Buffer(t, n));
      cf::TsArgs a{};
      a.in[0] = x.bytes.data();
      a.in[1] = yt.bytes.data();
      for (int o = 0; o < 8; ++o) a.out[o] = out[o].bytes.data();
      a.n = n;
      a.rank = 2;
      a.sizes[0] = rows;
      a.sizes[1] = cols;
      a.contiguous[0] = 1;
      a.strides[1][0] = 1;  // y(r, c) = yt[c * rows + r]
      a.strides[1][1] = rows;
      fn(a);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          const std::vector<double> want = expect_b(x.get(i), yt.get(c * rows + r));
          for (int o = 0; o < 8; ++o)
            expect_close(out[o].get(i), want[o], t,
                         "output " + std::to_string(o) + " element " + std::to_string(i));
        }
    }
  }
}

// Program R (Note [Fused row reductions]): a softmax over (0.5x + m), a layer norm of x times w,
// and row values, over a domain [rows, K]. Inputs x (element), w ([K], an element broadcast over
// rows), m ([rows, 1], one value per row). Registers: 0 x, 1 w, 2 m, then the steps from 3.
cf::FusedProgram program_r(FDType t) {
  cf::FusedProgram p;
  p.dtype = t;
  p.num_inputs = 3;
  p.row_input = {0, 0, 1};
  p.steps = {
      {FOp::Mul, R(0), N(0.5), 1},    // 3: 0.5x
      {FOp::Add, R(3), R(2), 1},      // 4: s = 0.5x + m
      {FOp::RowMax, R(4), {}, 1},     // 5: max s (row)
      {FOp::Sub, R(4), R(5), 1},      // 6
      {FOp::Exp, R(6), {}, 1},        // 7
      {FOp::RowSum, R(7), {}, 1},     // 8: z (row)
      {FOp::Div, R(7), R(8), 1},      // 9: softmax(s)
      {FOp::RowMean, R(0), {}, 1},    // 10: mean x (row)
      {FOp::Sub, R(0), R(10), 1},     // 11: c
      {FOp::Mul, R(11), R(11), 1},    // 12
      {FOp::RowMean, R(12), {}, 1},   // 13: var (row)
      {FOp::Add, R(13), N(1e-5), 1},  // 14 (row)
      {FOp::Rsqrt, R(14), {}, 1},     // 15 (row)
      {FOp::Mul, R(11), R(15), 1},    // 16
      {FOp::Mul, R(16), R(1), 1},     // 17: layer_norm(x) * w
      {FOp::RowMin, R(0), {}, 1},     // 18: min x (row)
      {FOp::Add, R(18), R(2), 1},     // 19: min x + m (row)
  };
  p.output_regs = {9, 17, 19, 8, 5};
  return p;
}

// Program R by rows in double: [softmax, layer norm * w] per element, [min x + m, z, max s] per row.
struct RowExpect {
  std::vector<double> softmax, norm;
  double min_plus_m, z, max_s;
};
RowExpect expect_r(const std::vector<double>& x, const std::vector<double>& w, double m) {
  const size_t k = x.size();
  RowExpect e;
  std::vector<double> s(k);
  e.max_s = -INFINITY;
  double mean = 0, low = INFINITY;
  bool nan = false;
  for (size_t j = 0; j < k; ++j) {
    s[j] = 0.5 * x[j] + m;
    nan |= std::isnan(s[j]);
    e.max_s = std::max(e.max_s, s[j]);
    mean += x[j];
    low = std::min(low, x[j]);
  }
  if (nan) e.max_s = low = NAN;
  mean /= double(k);
  e.z = 0;
  double var = 0;
  for (size_t j = 0; j < k; ++j) {
    e.z += std::exp(s[j] - e.max_s);
    var += (x[j] - mean) * (x[j] - mean);
  }
  var /= double(k);
  for (size_t j = 0; j < k; ++j) {
    e.softmax.push_back(std::exp(s[j] - e.max_s) / e.z);
    e.norm.push_back((x[j] - mean) / std::sqrt(var + 1e-5) * w[j]);
  }
  e.min_plus_m = low + m;
  return e;
}

// Fills TsArgs through fill_args from host buffers of the given sizes and strides.
cf::ArgTensor arg(const Buffer& b, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  cf::ArgTensor a;
  a.data = b.bytes.data();
  a.sizes = std::move(sizes);
  a.strides = std::move(strides);
  return a;
}

TEST(CudaFuser, RowProgramsMatchADoubleLoopOnTheHost) {
  std::mt19937 rng(20261207);
  std::normal_distribution<double> normal(0, 1.5);
  for (FDType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    std::string error;
    const cf::FusedProgram p = program_r(t);
    ASSERT_EQ(cf::check_program(p), "");
    FusedFn fn = build_host(cf::host_source(p), &error);
    ASSERT_NE(fn, nullptr) << error;
    for (const int64_t k : {int64_t(1), int64_t(37), int64_t(300)}) {
      SCOPED_TRACE("K = " + std::to_string(k));
      const int64_t rows = 7, n = rows * k;
      // x is stored transposed (K, rows): strided; w is [K]; m is [rows, 1].
      Buffer xt(t, size_t(n)), w(t, size_t(k)), m(t, size_t(rows));
      for (int64_t i = 0; i < n; ++i) xt.set(size_t(i), normal(rng));
      if (k > 1) xt.set(size_t(5 * rows + 3), NAN);  // row 3 holds a NaN
      for (int64_t j = 0; j < k; ++j) w.set(size_t(j), normal(rng));
      for (int64_t r = 0; r < rows; ++r) m.set(size_t(r), normal(rng));
      std::vector<Buffer> out = {Buffer(t, size_t(n)), Buffer(t, size_t(n)), Buffer(t, size_t(rows)),
                                 Buffer(t, size_t(rows)), Buffer(t, size_t(rows))};
      cf::TsArgs a{};
      const cf::LaunchShape shape = cf::fill_args(
          p, {arg(xt, {rows, k}, {1, rows}), arg(w, {k}, {1}), arg(m, {rows, 1}, {1, 1})},
          {arg(out[0], {rows, k}, {k, 1}), arg(out[1], {rows, k}, {k, 1}), arg(out[2], {rows, 1}, {1, 1}),
           arg(out[3], {rows}, {1}), arg(out[4], {rows, 1}, {1, 1})},
          &a);
      EXPECT_EQ(shape.rows, rows);
      EXPECT_EQ(shape.k, k);
      EXPECT_EQ(a.contiguous[0], k == 1 ? 1 : 0) << "x is strided (a single column is dense)";
      EXPECT_EQ(a.strides[1][0], 0) << "w repeats over the rows";
      EXPECT_EQ(a.strides[2][1], 0) << "m repeats along a row";
      fn(a);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> xs, ws;
        for (int64_t j = 0; j < k; ++j) {
          xs.push_back(xt.get(size_t(j * rows + r)));
          ws.push_back(w.get(size_t(j)));
        }
        const RowExpect e = expect_r(xs, ws, m.get(size_t(r)));
        const std::string where = "row " + std::to_string(r);
        for (int64_t j = 0; j < k; ++j) {
          expect_close(out[0].get(size_t(r * k + j)), e.softmax[size_t(j)], t, where + " softmax");
          // A norm divides by a small spread; bfloat16 and float16 inputs give it more room.
          const double norm_slack = t == FDType::Float64 ? 1 : 4;
          const double want = e.norm[size_t(j)], got = out[1].get(size_t(r * k + j));
          if (std::isnan(want))
            EXPECT_TRUE(std::isnan(got)) << where << " norm";
          else if (k > 1)
            EXPECT_NEAR(got, want, norm_slack * tolerance(t) * (1 + std::abs(want))) << where;
          else
            EXPECT_EQ(got, 0) << where << ": a row of one element is its own mean";
        }
        expect_close(out[2].get(size_t(r)), e.min_plus_m, t, where + " min x + m");
        expect_close(out[3].get(size_t(r)), e.z, t, where + " z");
        expect_close(out[4].get(size_t(r)), e.max_s, t, where + " max");
        if (r == 3 && k > 1) {
          EXPECT_TRUE(std::isnan(out[0].get(size_t(r * k)))) << "a NaN makes its row's softmax NaN";
        }
      }
    }
  }
}

// An empty last dim: sum is 0 and mean NaN (eager's values); amax has no identity, so a program
// whose row outputs read it says so (the plugin refuses the launch).
TEST(CudaFuser, RowProgramsOverAnEmptyLastDim) {
  cf::FusedProgram p;
  p.dtype = FDType::Float32;
  p.num_inputs = 1;
  p.row_input = {0};
  p.steps = {{FOp::Exp, R(0), {}, 1}, {FOp::RowSum, R(1), {}, 1}, {FOp::RowMean, R(0), {}, 1}};
  p.output_regs = {2, 3, 1};
  ASSERT_EQ(cf::check_program(p), "");
  EXPECT_EQ(cf::needs_nonempty_rows(p), nullptr);
  std::string error;
  FusedFn fn = build_host(cf::host_source(p), &error);
  ASSERT_NE(fn, nullptr) << error;
  Buffer x(FDType::Float32, 1), sum(FDType::Float32, 4), mean(FDType::Float32, 4), e(FDType::Float32, 1);
  for (size_t r = 0; r < 4; ++r) sum.set(r, 7), mean.set(r, 7);
  cf::TsArgs a{};
  const cf::LaunchShape shape =
      cf::fill_args(p, {arg(x, {4, 0}, {0, 1})},
                    {arg(sum, {4}, {1}), arg(mean, {4, 1}, {1, 1}), arg(e, {4, 0}, {0, 1})}, &a);
  EXPECT_EQ(shape.rows, 4);
  EXPECT_EQ(shape.k, 0);
  EXPECT_EQ(shape.n, 0);
  fn(a);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(sum.get(r), 0) << r;
    EXPECT_TRUE(std::isnan(mean.get(r))) << r;
  }
  // The launch: rows to do, none to launch when there are no rows.
  cf::LaunchPlan plan = cf::plan_launch(p, {arg(x, {4, 0}, {0, 1})},
                                        {arg(sum, {4}, {1}), arg(mean, {4, 1}, {1, 1}), arg(e, {4, 0}, {0, 1})}, 132);
  EXPECT_EQ(plan.blocks, 4);
  EXPECT_EQ(plan.threads, 32);
  plan = cf::plan_launch(p, {arg(x, {0, 5}, {5, 1})}, {arg(sum, {0}, {1}), arg(mean, {0, 1}, {1, 1}), arg(e, {0, 5}, {5, 1})},
                         132);
  EXPECT_EQ(plan.blocks, 0);
  // amax read by a row output needs rows; read only by element outputs it does not.
  cf::FusedProgram q = p;
  q.steps.push_back({FOp::RowMax, R(0), {}, 1});  // 4
  q.steps.push_back({FOp::Sub, R(0), R(4), 1});   // 5: an element
  q.output_regs = {5};
  EXPECT_EQ(cf::needs_nonempty_rows(q), nullptr);
  q.steps.push_back({FOp::Add, R(4), N(1), 1});  // 6: a row value from amax
  q.output_regs = {5, 6};
  ASSERT_NE(cf::needs_nonempty_rows(q), nullptr);
  EXPECT_STREQ(cf::needs_nonempty_rows(q), "amax");
  q.steps[3].op = FOp::RowMin;
  EXPECT_STREQ(cf::needs_nonempty_rows(q), "amin");
  // The launch is refused, naming the op; with a non-empty row it goes.
  Buffer out5(FDType::Float32, 8), out6(FDType::Float32, 4);
  try {
    cf::plan_launch(q, {arg(x, {4, 0}, {0, 1})}, {arg(e, {4, 0}, {0, 1}), arg(out6, {4, 1}, {1, 1})}, 132);
    ADD_FAILURE() << "an amin over empty rows was launched";
  } catch (const std::invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("amin: cannot reduce over the last dimension of size 0"), std::string::npos)
        << err.what();
  }
  Buffer x2(FDType::Float32, 8);
  EXPECT_EQ(cf::plan_launch(q, {arg(x2, {4, 2}, {2, 1})}, {arg(out5, {4, 2}, {2, 1}), arg(out6, {4, 1}, {1, 1})}, 132)
                .blocks,
            4);
}

// fill_args says what does not fit, and the launch grid follows the rows and the row length.
TEST(CudaFuser, RowArgumentsAndLaunches) {
  const cf::FusedProgram p = program_r(FDType::Float32);
  Buffer b(FDType::Float32, 64);
  cf::TsArgs a{};
  auto out = [&](int64_t rows, int64_t k) {
    return std::vector<cf::ArgTensor>{arg(b, {rows, k}, {k, 1}), arg(b, {rows, k}, {k, 1}),
                                      arg(b, {rows, 1}, {1, 1}), arg(b, {rows}, {1}),
                                      arg(b, {rows, 1}, {1, 1})};
  };
  // m varies along the rows' last dim: it was compiled as one value per row.
  EXPECT_THROW(
      cf::fill_args(p, {arg(b, {2, 8}, {8, 1}), arg(b, {8}, {1}), arg(b, {2, 8}, {8, 1})}, out(2, 8), &a),
      std::invalid_argument);
  // w does not broadcast.
  EXPECT_THROW(
      cf::fill_args(p, {arg(b, {2, 8}, {8, 1}), arg(b, {3}, {1}), arg(b, {2, 1}, {1, 1})}, out(2, 8), &a),
      std::invalid_argument);
  // A row output of the wrong size.
  std::vector<cf::ArgTensor> bad = out(2, 8);
  bad[3] = arg(b, {8}, {1});
  try {
    cf::fill_args(p, {arg(b, {2, 8}, {8, 1}), arg(b, {8}, {1}), arg(b, {2, 1}, {1, 1})}, bad, &a);
    ADD_FAILURE() << "a row output of 8 elements for 2 rows was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("output 3 has 8 elements, 2 expected"), std::string::npos)
        << e.what();
  }
  // The wrong number of inputs.
  EXPECT_THROW(cf::fill_args(p, {arg(b, {2, 8}, {8, 1})}, out(2, 8), &a), std::invalid_argument);
  // Sizes whose product overflows.
  EXPECT_THROW(cf::fill_args(p,
                             {arg(b, {int64_t(1) << 40, int64_t(1) << 40}, {0, 0}),
                              arg(b, {int64_t(1) << 40}, {0}), arg(b, {int64_t(1) << 40, 1}, {0, 0})},
                             out(2, 8), &a),
               std::invalid_argument);

  cf::RowLaunch l = cf::row_launch(1000, 37, 132);
  EXPECT_EQ(l.threads, 64);
  EXPECT_EQ(l.blocks, 1000);
  l = cf::row_launch(4, 100000, 132);
  EXPECT_EQ(l.threads, cf::kMaxRowThreads);
  EXPECT_EQ(l.blocks, 4);
  l = cf::row_launch(1 << 20, 512, 132);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(l.blocks, 132 * 4) << "enough blocks to fill every multiprocessor, rows looped";
  l = cf::row_launch(10, 0, 132);
  EXPECT_EQ(l.threads, 32);
  EXPECT_EQ(l.threads % 32, 0);
  // An elementwise program: 256 threads, blocks for every element up to 16 a multiprocessor.
  const cf::FusedProgram ew = program_b(FDType::Float32);
  Buffer big(FDType::Float32, 1);
  const std::vector<cf::ArgTensor> ew_out(8, arg(big, {1000, 1000}, {1000, 1}));
  cf::LaunchPlan plan = cf::plan_launch(ew, {arg(big, {1000, 1000}, {1000, 1}), arg(big, {1000, 1000}, {1, 1000})},
                                        ew_out, 132);
  EXPECT_EQ(plan.threads, cf::kElementwiseThreads);
  EXPECT_EQ(plan.blocks, 132 * 16);
  EXPECT_EQ(plan.args.contiguous[0], 1);
  EXPECT_EQ(plan.args.contiguous[1], 0) << "a transposed input";
  plan = cf::plan_launch(ew, {arg(big, {3, 5}, {5, 1}), arg(big, {3, 5}, {5, 1})},
                         std::vector<cf::ArgTensor>(8, arg(big, {3, 5}, {5, 1})), 132);
  EXPECT_EQ(plan.blocks, 1);
}

// The host compiler lays out TsArgs as the prelude spells it: the generated kernel reads the fields
// the plugin writes.
TEST(CudaFuser, ThePreludeSpellsTsArgsAsTheHeader) {
  const std::string text = cf::kTsArgsText;
  EXPECT_NE(text.find("const void* in[" + std::to_string(cf::kMaxInputs) + "];"), std::string::npos) << text;
  EXPECT_NE(text.find("void* out[" + std::to_string(cf::kMaxOutputs) + "];"), std::string::npos) << text;
  EXPECT_NE(text.find("long long sizes[" + std::to_string(cf::kMaxRank) + "];"), std::string::npos) << text;
  EXPECT_NE(text.find("long long strides[" + std::to_string(cf::kMaxInputs) + "][" +
                      std::to_string(cf::kMaxRank) + "];"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("int contiguous[" + std::to_string(cf::kMaxInputs) + "];"), std::string::npos) << text;
  // And the field order: a kernel built from the text reports the offsets it sees.
  const std::string probe =
      std::string("#include <cstddef>\n") + text +
      "extern \"C\" __attribute__((visibility(\"default\"))) void offsets(size_t* o) {\n"
      "  o[0] = offsetof(TsArgs, out); o[1] = offsetof(TsArgs, n); o[2] = offsetof(TsArgs, sizes);\n"
      "  o[3] = offsetof(TsArgs, strides); o[4] = offsetof(TsArgs, contiguous); o[5] = sizeof(TsArgs);\n}\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) void tessera_fused() {}\n";
  std::string error;
  FusedFn fn = build_host(probe, &error);
  ASSERT_NE(fn, nullptr) << error;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(fn), &info), 0);
  void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto offsets = reinterpret_cast<void (*)(size_t*)>(dlsym(lib, "offsets"));
  ASSERT_NE(offsets, nullptr);
  size_t o[6];
  offsets(o);
  EXPECT_EQ(o[0], offsetof(cf::TsArgs, out));
  EXPECT_EQ(o[1], offsetof(cf::TsArgs, n));
  EXPECT_EQ(o[2], offsetof(cf::TsArgs, sizes));
  EXPECT_EQ(o[3], offsetof(cf::TsArgs, strides));
  EXPECT_EQ(o[4], offsetof(cf::TsArgs, contiguous));
  EXPECT_EQ(o[5], sizeof(cf::TsArgs));
  dlclose(lib);
}

// NVRTC compiles every generated kernel for the architectures the CUDA plugin targets.
TEST(CudaFuser, NvrtcCompilesEveryGeneratedKernel) {
  const cf::NvrtcApi& api = cf::nvrtc_api();
  ASSERT_TRUE(api.loaded) << api.error;
  EXPECT_GE(api.major, 12);
  for (FDType t : kAll)
    for (const cf::FusedProgram& p : {program_a(t), program_b(t), program_r(t)})
      for (int arch : {80, 90}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " sm_" + std::to_string(arch));
        ASSERT_EQ(cf::check_program(p), "");
        const cf::Cubin c = cf::compile_cubin(api, cf::cuda_source(p), arch);
        ASSERT_TRUE(c.error.empty()) << c.error << "\n" << cf::cuda_source(p);
        ASSERT_GT(c.image.size(), 4u);
        EXPECT_EQ(c.image.substr(0, 4), std::string("\x7f"
                                                    "ELF"))
            << "a cubin is an ELF image";
      }
}

TEST(CudaFuser, NvrtcReportsACompileErrorWithItsLog) {
  const cf::NvrtcApi& api = cf::nvrtc_api();
  ASSERT_TRUE(api.loaded) << api.error;
  const cf::Cubin c = cf::compile_cubin(api, "extern \"C\" __global__ void k() { undefined_thing(); }", 90);
  EXPECT_TRUE(c.image.empty());
  EXPECT_NE(c.error.find("NVRTC failed for sm_90"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("undefined_thing"), std::string::npos) << c.error;
}

TEST(CudaFuser, TheLoaderSaysWhatWasTried) {
  const cf::NvrtcApi missing = cf::load_nvrtc_from({"/nonexistent/libnvrtc.so.13"});
  EXPECT_FALSE(missing.loaded);
  EXPECT_NE(missing.error.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << missing.error;
  EXPECT_NE(missing.error.find("TESSERA_CUDA_NVRTC"), std::string::npos) << missing.error;
  const cf::NvrtcApi wrong = cf::load_nvrtc_from({"libm.so.6"});
  EXPECT_FALSE(wrong.loaded);
  EXPECT_NE(wrong.error.find("is not a usable NVRTC"), std::string::npos) << wrong.error;
  const cf::Cubin none = cf::compile_cubin(wrong, "", 90);
  EXPECT_EQ(none.error, wrong.error);
}

TEST(CudaFuser, ProgramChecksAndOpNames) {
  cf::FusedProgram p = program_a(FDType::Float32);
  EXPECT_EQ(cf::check_program(p), "");
  p.steps[0].b = R(5);  // read before written
  EXPECT_NE(cf::check_program(p).find("step 0 reads register 5 before it is written"), std::string::npos);
  p = program_a(FDType::Float32);
  p.output_regs.push_back(99);
  EXPECT_NE(cf::check_program(p).find("outputs"), std::string::npos);
  p.output_regs = {99};
  EXPECT_NE(cf::check_program(p).find("register 99"), std::string::npos);
  p.output_regs.clear();
  EXPECT_NE(cf::check_program(p).find("0 outputs"), std::string::npos);
  p = program_a(FDType::Float32);
  p.num_inputs = cf::kMaxInputs + 1;
  EXPECT_NE(cf::check_program(p).find("inputs"), std::string::npos);

  // Row programs: a reduction reads an element; every input says whether it is one value per row.
  p = program_r(FDType::Float32);
  EXPECT_EQ(cf::check_program(p), "");
  p.steps[2].a = R(2);  // RowMax of m, a row input
  EXPECT_NE(cf::check_program(p).find("step 2 reduces a row value"), std::string::npos)
      << cf::check_program(p);
  p = program_r(FDType::Float32);
  p.row_input.pop_back();
  EXPECT_NE(cf::check_program(p).find("says for 2 of its 3 inputs"), std::string::npos)
      << cf::check_program(p);
  p = program_a(FDType::Float32);
  p.row_input = {0, 1, 0};
  EXPECT_NE(cf::check_program(p).find("without a reduction"), std::string::npos) << cf::check_program(p);

  EXPECT_EQ(cf::fused_op("add.Tensor"), FOp::Add);
  EXPECT_EQ(cf::fused_op("pow.Tensor_Scalar"), FOp::PowScalar);
  EXPECT_EQ(cf::fused_op("gelu", "none"), FOp::GeluErf);
  EXPECT_EQ(cf::fused_op("gelu", "tanh"), FOp::GeluTanh);
  EXPECT_EQ(cf::fused_op("gelu", "fast"), std::nullopt);
  EXPECT_EQ(cf::fused_op("matmul"), std::nullopt);
  EXPECT_TRUE(cf::is_binary(FOp::Minimum));
  EXPECT_FALSE(cf::is_binary(FOp::Neg));
}

// The disk cache of compiled kernels: a miss makes and stores, a hit reads the same bytes without
// making; a corrupt or truncated entry is made again; a folder others can write is refused.
TEST(CudaFuserCache, HitsMissesAndCorruptEntries) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("tessera_fuser_cache_" + std::to_string(getpid()));
  fs::remove_all(root);
  ASSERT_EQ(setenv("TESSERA_CACHE_DIR", root.c_str(), 1), 0);
  std::string error;
  const std::optional<std::string> dir = cf::cache_directory(&error);
  ASSERT_TRUE(dir) << error;
  EXPECT_EQ(fs::path(*dir), root / "cuda");
  int made = 0;
  auto make = [&](std::string*) {
    ++made;
    return std::string(
               "\x7f"
               "ELF image bytes ") +
           std::to_string(made);
  };
  const std::string key = cf::hash_hex("source");
  cf::CacheLookup first = cf::cached_image(*dir, key, make);
  EXPECT_FALSE(first.hit);
  EXPECT_EQ(made, 1);
  cf::CacheLookup second = cf::cached_image(*dir, key, make);
  EXPECT_TRUE(second.hit);
  EXPECT_EQ(second.image, first.image);
  EXPECT_EQ(made, 1);
  // Flip one byte of the image: the hash no longer matches, so it is made again.
  {
    std::fstream f(fs::path(*dir) / (key + ".cubin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
  }
  cf::CacheLookup third = cf::cached_image(*dir, key, make);
  EXPECT_FALSE(third.hit);
  EXPECT_EQ(made, 2);
  // Truncate the meta: made again.
  std::ofstream(fs::path(*dir) / (key + ".meta"), std::ios::trunc) << "tessera-cuda-cache 1\nkey";
  EXPECT_FALSE(cf::cached_image(*dir, key, make).hit);
  EXPECT_EQ(made, 3);
  // A failing make leaves no entry and says why.
  const std::string other = cf::hash_hex("other");
  cf::CacheLookup failed = cf::cached_image(*dir, other, [](std::string* e) {
    *e = "NVRTC failed";
    return std::string();
  });
  EXPECT_TRUE(failed.image.empty());
  EXPECT_EQ(failed.error, "NVRTC failed");
  EXPECT_FALSE(fs::exists(fs::path(*dir) / (other + ".cubin")));
  // A folder writable by the group is refused, naming the fix.
  ASSERT_EQ(chmod(dir->c_str(), 0775), 0);
  EXPECT_FALSE(cf::cache_directory(&error));
  EXPECT_NE(error.find("chmod go-w"), std::string::npos) << error;
  unsetenv("TESSERA_CACHE_DIR");
  fs::remove_all(root);
}

}  // namespace

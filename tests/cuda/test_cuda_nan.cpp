// NaN and infinities through the CUDA reductions and normalisations (Note [NaN in CUDA row maxima]
// in plugins/cuda/src/nan_math.h), against naive double loops on the host over the very values
// the GPU saw (the inputs rounded to their dtype): a NaN anywhere in a softmax / log_softmax row
// makes the whole row NaN, as in PyTorch, on the warp-per-row, block-per-row and column kernels;
// amax / amin of a NaN slice are NaN on the block, thread and split reductions; layer_norm's NaN
// row is NaN; maximum / minimum propagate NaN on the vector and strided paths. Skipped (with the
// reason) where device_count("cuda") == 0; TESSERA_REQUIRE_CUDA=1 makes that a failure.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "tessera/tessera.h"

namespace {

using cuda_test::close_enough;
using cuda_test::tol_for;
using tessera::DType;
using tessera::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloatTypes[] = {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16};

class CudaNaN : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICE();
    std::random_device rd;
    seed_ = rd();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  // N(0, 2) values with NaN at the given flat positions, on the CPU in `t`.
  Tensor with_nans(const std::vector<int64_t>& sizes, DType t, const std::vector<int64_t>& nan_at) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    std::normal_distribution<double> d(0.0, 2.0);
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng_);
    for (int64_t i : nan_at) v[size_t(i)] = kNaN;
    return tessera::tensor(v, sizes).to(t);
  }
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

// The elements of `x` in double, on the host, row-major.
std::vector<double> values(const Tensor& x) {
  Tensor h = x.cpu().to(tessera::kFloat64).contiguous();
  return std::vector<double>(h.data_ptr<double>(), h.data_ptr<double>() + h.numel());
}

// softmax / log_softmax over the last dim of `rows` x `n` values in double; a row with a NaN is NaN.
std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t n, bool log) {
  std::vector<double> y(x.size(), kNaN);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * n;
    double m = -kInf;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      nan = nan || std::isnan(row[j]);
      m = std::max(m, row[j]);
    }
    if (nan) continue;
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(row[j] - m);
    for (int64_t j = 0; j < n; ++j)
      y[size_t(r * n + j)] = log ? (row[j] - m) - std::log(s) : std::exp(row[j] - m) / s;
  }
  return y;
}

void expect_values(const Tensor& got, const std::vector<double>& want, cuda_test::Tol tol, const std::string& what) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (close_enough(g[i], want[i], tol)) continue;
    if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " got " << g[i] << " expected " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}

TEST_F(CudaNaN, SoftmaxRowWithANaNIsAllNaN) {
  // n <= 1024: a warp per row (n <= 32: one element per lane, where a NaN was dropped outright;
  // vector loads where n is a multiple of the vector); up to 8192: a block per row holding it in
  // registers; longer: a block per row reading it twice (Note [Register-resident softmax rows]).
  for (DType t : kFloatTypes) {
    for (int64_t n : {1, 2, 5, 31, 32, 33, 64, 100, 256, 512, 1000, 1024, 1025, 2048, 4096, 5000, 8192, 8193}) {
      // row 0: NaN first; row 1: clean; row 2: NaN last; row 3: NaN in the middle; row 4: clean;
      // row 5: NaN at 32 (lane 0's second element) or last.
      const int64_t rows = 6;
      const Tensor x = with_nans({rows, n}, t, {0, 3 * n - 1, 3 * n + n / 2, 5 * n + std::min<int64_t>(32, n - 1)});
      const std::vector<double> xv = values(x);
      const Tensor dx = x.to("cuda:0");
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax " : "softmax ") + std::string(tessera::dtype_name(t)) +
                                 " n=" + std::to_string(n);
        Tensor got;
        EXPECT_RUNS_ON_CUDA(what, got = log ? tessera::log_softmax(dx, -1) : tessera::softmax(dx, -1));
        expect_values(got, softmax_reference(xv, rows, n, log), tol_for(t, 4), what);
      }
    }
  }
}

TEST_F(CudaNaN, SoftmaxOverAnOuterDimIsNaNOnlyInTheColumnWithTheNaN) {
  // softmax over dim 0 of [40, 3]: the column kernel; column 1 holds a NaN at row 17.
  for (DType t : kFloatTypes) {
    const int64_t n = 40;
    const Tensor x = with_nans({n, 3}, t, {17 * 3 + 1});
    const Tensor dx = x.to("cuda:0");
    // The reference over columns: transpose on the host, rows of length n.
    const std::vector<double> xt = values(x.t());
    for (bool log : {false, true}) {
      const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim 0 " + std::string(tessera::dtype_name(t));
      Tensor got;
      EXPECT_RUNS_ON_CUDA(what, got = log ? tessera::log_softmax(dx, 0) : tessera::softmax(dx, 0));
      expect_values(got.t(), softmax_reference(xt, 3, n, log), tol_for(t, 4), what);
      const std::vector<double> g = values(got);
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(std::isnan(g[size_t(r * 3 + 1)])) << what << " row " << r;
        EXPECT_FALSE(std::isnan(g[size_t(r * 3)])) << what << " row " << r;
      }
    }
  }
}

TEST_F(CudaNaN, SoftmaxInfinitiesFollowPyTorch) {
  // softmax([inf, 1]) = [nan, nan]; softmax([-inf, -inf]) = [nan, nan]; softmax([-inf, 0]) = [0, 1];
  // on a short row (warp kernel), a long row padded with -inf (block kernel) and a column.
  for (DType t : kFloatTypes) {
    for (const std::vector<double>& row :
         std::vector<std::vector<double>>{{kInf, 1.0}, {-kInf, -kInf}, {-kInf, 0.0}, {1.0, kInf, -kInf, 2.0}}) {
      for (int64_t pad : {int64_t(0), int64_t(3000)}) {
        std::vector<double> v = row;
        v.resize(row.size() + size_t(pad), -kInf);
        const Tensor x = tessera::tensor(v, {1, int64_t(v.size())}).to(t);
        const std::vector<double> xv = values(x);
        for (bool log : {false, true}) {
          const std::string what = std::string(log ? "log_softmax " : "softmax ") + std::string(tessera::dtype_name(t)) +
                                   " row [" + std::to_string(row[0]) + ", " + std::to_string(row[1]) + ", ...] + " +
                                   std::to_string(pad) + " x -inf";
          Tensor got;
          EXPECT_RUNS_ON_CUDA(what, got = log ? tessera::log_softmax(x.to("cuda:0"), -1)
                                              : tessera::softmax(x.to("cuda:0"), -1));
          expect_values(got, softmax_reference(xv, 1, int64_t(v.size()), log), tol_for(t, 4), what);
          // The same values down both columns of [N, 2] (softmax over dim 0: the column kernel).
          std::vector<double> two;
          for (double e : v) two.insert(two.end(), {e, e});
          const Tensor dcols = tessera::tensor(two, {int64_t(v.size()), 2}).to(t).to("cuda:0");
          Tensor col;
          EXPECT_RUNS_ON_CUDA(what + " (column)", col = log ? tessera::log_softmax(dcols, 0) : tessera::softmax(dcols, 0));
          const std::vector<double> one = softmax_reference(xv, 1, int64_t(v.size()), log);
          std::vector<double> both = one;
          both.insert(both.end(), one.begin(), one.end());
          expect_values(col.t(), both, tol_for(t, 4), what + " (column)");
        }
      }
    }
  }
}

TEST_F(CudaNaN, AmaxAndAminOfASliceWithANaNAreNaN) {
  for (DType t : kFloatTypes) {
    const std::string tn(tessera::dtype_name(t));
    // [7, n] over the last dim (a block per output), over dim 0 (a thread per output), and in full
    // (split across blocks, then the partials combined): NaN in row 2 at its start and in row 5 at
    // its end, so columns 0 and n - 1 hold a NaN.
    for (int64_t n : {1, 33, 1000, 1 << 16}) {
      const Tensor x = with_nans({7, n}, t, {2 * n, 6 * n - 1});
      const std::vector<double> xv = values(x);
      const Tensor dx = x.to("cuda:0");
      for (bool max : {true, false}) {
        const std::string what = std::string(max ? "amax " : "amin ") + tn + " n=" + std::to_string(n);
        std::vector<double> rows(7, max ? -kInf : kInf), cols(size_t(n), max ? -kInf : kInf);
        double all = max ? -kInf : kInf;
        auto fold = [max](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : (max ? std::max(a, b) : std::min(a, b)); };
        for (int64_t r = 0; r < 7; ++r)
          for (int64_t c = 0; c < n; ++c) {
            const double v = xv[size_t(r * n + c)];
            rows[size_t(r)] = fold(rows[size_t(r)], v);
            cols[size_t(c)] = fold(cols[size_t(c)], v);
            all = fold(all, v);
          }
        Tensor got;
        EXPECT_RUNS_ON_CUDA(what + " dim 1", got = max ? tessera::amax(dx, {1}) : tessera::amin(dx, {1}));
        expect_values(got, rows, {0, 0}, what + " dim 1");
        EXPECT_RUNS_ON_CUDA(what + " dim 0", got = max ? tessera::amax(dx, {0}) : tessera::amin(dx, {0}));
        expect_values(got, cols, {0, 0}, what + " dim 0");
        EXPECT_RUNS_ON_CUDA(what + " all", got = max ? tessera::amax(dx) : tessera::amin(dx));
        expect_values(got, {all}, {0, 0}, what + " all");
        EXPECT_TRUE(std::isnan(rows[2]) && std::isnan(rows[5]) && !std::isnan(rows[0]) && std::isnan(all)) << what;
      }
    }
  }
  // A tall column reduction (split along the reduced dim: partials then a finishing pass) with one
  // NaN deep in column 3.
  const int64_t rows = int64_t(1) << 18, cols = 8;
  const Tensor x = with_nans({rows, cols}, tessera::kFloat32, {(rows - 5) * cols + 3});
  Tensor got;
  EXPECT_RUNS_ON_CUDA("amax tall columns", got = tessera::amax(x.to("cuda:0"), {0}));
  const std::vector<double> g = values(got);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(std::isnan(g[size_t(c)]), c == 3) << "column " << c << " got " << g[size_t(c)];
}

TEST_F(CudaNaN, LayerNormRowWithANaNIsNaN) {
  for (DType t : kFloatTypes) {
    for (int64_t n : {3, 64, 768, 5000}) {
      const Tensor x = with_nans({3, n}, t, {n + n / 2});
      const std::vector<double> xv = values(x);
      std::vector<double> want(xv.size(), kNaN);
      for (int64_t r : {0, 2}) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; ++j) mean += xv[size_t(r * n + j)];
        mean /= double(n);
        for (int64_t j = 0; j < n; ++j) var += (xv[size_t(r * n + j)] - mean) * (xv[size_t(r * n + j)] - mean);
        var /= double(n);
        for (int64_t j = 0; j < n; ++j) want[size_t(r * n + j)] = (xv[size_t(r * n + j)] - mean) / std::sqrt(var + 1e-5);
      }
      const std::string what = "layer_norm " + std::string(tessera::dtype_name(t)) + " n=" + std::to_string(n);
      Tensor got;
      EXPECT_RUNS_ON_CUDA(what, got = tessera::layer_norm(x.to("cuda:0"), {n}));
      expect_values(got, want, tol_for(t, 8), what);
    }
  }
}

TEST_F(CudaNaN, MaximumAndMinimumPropagateNaN) {
  for (DType t : kFloatTypes) {
    // Contiguous and 16-byte aligned (the vector path, with a tail) and transposed (strided).
    const int64_t n = (1 << 12) + 3;
    const Tensor a = with_nans({n}, t, {0, 17, n - 1});
    const Tensor b = with_nans({n}, t, {5, 17, n - 2});
    const std::vector<double> av = values(a), bv = values(b);
    for (bool max : {true, false}) {
      std::vector<double> want(static_cast<size_t>(n));
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = std::isnan(av[i]) || std::isnan(bv[i]) ? kNaN : (max ? std::max(av[i], bv[i]) : std::min(av[i], bv[i]));
      const std::string what = std::string(max ? "maximum " : "minimum ") + std::string(tessera::dtype_name(t));
      Tensor got;
      EXPECT_RUNS_ON_CUDA(what, got = max ? tessera::maximum(a.to("cuda:0"), b.to("cuda:0"))
                                          : tessera::minimum(a.to("cuda:0"), b.to("cuda:0")));
      expect_values(got, want, {0, 0}, what);
      // [64, 64] transposed operands.
      const Tensor a2 = with_nans({64, 64}, t, {0, 64 * 3 + 9}), b2 = with_nans({64, 64}, t, {64 * 40 + 1});
      const std::vector<double> a2v = values(a2.t()), b2v = values(b2.t());
      std::vector<double> want2(a2v.size());
      for (size_t i = 0; i < want2.size(); ++i)
        want2[i] = std::isnan(a2v[i]) || std::isnan(b2v[i]) ? kNaN : (max ? std::max(a2v[i], b2v[i]) : std::min(a2v[i], b2v[i]));
      EXPECT_RUNS_ON_CUDA(what + " strided", got = max ? tessera::maximum(a2.to("cuda:0").t(), b2.to("cuda:0").t())
                                                       : tessera::minimum(a2.to("cuda:0").t(), b2.to("cuda:0").t()));
      expect_values(got, want2, {0, 0}, what + " strided");
    }
  }
}

}  // namespace

// The structural and nn ops ONNX models need (slice_copy, expand_copy, pad, batch_norm, group_norm,
// argmin, cumsum, topk, scatter, scatter_reduce, tril/triu, flip, repeat, conv_transpose2d, _resize,
// logsumexp, linalg_vector_norm) against naive references in double written here (or values worked
// out by hand), over their dtypes, non-contiguous inputs, empty tensors and bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::close;
using cpu_test::random_tensor;
using cpu_test::read;
using cpu_test::round_to;
using cpu_test::tol;
using cpu_test::unravel;

const DType kAllTypes[] = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const DType kFloats[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}
int64_t linear(const std::vector<int64_t>& idx, const std::vector<int64_t>& sizes) {
  int64_t l = 0;
  for (size_t d = 0; d < sizes.size(); ++d) l = l * sizes[d] + idx[d];
  return l;
}
// Exact equality of values (NaN equals NaN).
::testing::AssertionResult same(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  return close(got, want, {0, 0}, what);
}
Stack boxed(const char* op, Stack args) { return Dispatcher::instance().call_boxed(Dispatcher::instance().op(op), std::move(args)); }

// ---- slice_copy

// CPython's PySlice_AdjustIndices, written out: the indices of x[start:end:step].
std::vector<int64_t> py_slice(int64_t n, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  int64_t b, e;
  if (!start) b = step < 0 ? n - 1 : 0;
  else if (*start < 0) b = *start + n < 0 ? (step < 0 ? -1 : 0) : *start + n;
  else b = *start >= n ? (step < 0 ? n - 1 : n) : *start;
  if (!end) e = step < 0 ? -1 : n;
  else if (*end < 0) e = *end + n < 0 ? (step < 0 ? -1 : 0) : *end + n;
  else e = *end >= n ? (step < 0 ? n - 1 : n) : *end;
  std::vector<int64_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(i);
  return out;
}

TEST(OnnxOpsSlice, MatchesPythonSlicingOnEveryDtypeIncludingNegativeSteps) {
  struct S {
    int64_t dim;
    std::optional<int64_t> start, end;
    int64_t step;
  };
  const S cases[] = {{0, 1, 4, 1},       {1, std::nullopt, std::nullopt, 2}, {1, -3, std::nullopt, 1},
                     {0, -100, 100, 3},  {1, std::nullopt, std::nullopt, -1}, {1, 5, 1, -2},
                     {0, -1, -100, -1},  {1, INT64_MAX, INT64_MIN, -3},      {-1, 3, 3, 1},
                     {0, 4, 1, 1},       {1, 2, INT64_MAX, 1}};
  for (DType dt : kAllTypes) {
    // Non-contiguous: a transposed [7, 5].
    Tensor x = random_tensor({7, 5}, dt, -9, 9).t();
    const cpu_test::Ref X = read(x);
    for (const S& s : cases) {
      Tensor y = slice_copy(x, s.dim, s.start, s.end, s.step);
      const int64_t d = s.dim < 0 ? s.dim + 2 : s.dim;
      const std::vector<int64_t> idx = py_slice(x.size(d), s.start, s.end, s.step);
      std::vector<int64_t> want_sizes = {5, 7};
      want_sizes[size_t(d)] = int64_t(idx.size());
      ASSERT_EQ(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), want_sizes);
      std::vector<double> want;
      for (int64_t i = 0; i < numel_of(want_sizes); ++i) {
        auto p = unravel(i, want_sizes);
        p[size_t(d)] = idx[size_t(p[size_t(d)])];
        want.push_back(X.v[size_t(linear(p, {5, 7}))]);
      }
      EXPECT_TRUE(same(y, want, "slice_copy")) << dt << " dim " << s.dim << " step " << s.step;
    }
  }
}

TEST(OnnxOpsSlice, RefusesStepZeroZeroDimAndBadDim) {
  Tensor x = random_tensor({3, 4}, kFloat32);
  EXPECT_THROW(slice_copy(x, 0, 0, 2, 0), Error);
  EXPECT_THROW(slice_copy(x, 2), Error);
  EXPECT_THROW(slice_copy(random_tensor({}, kFloat32), 0), Error);
  EXPECT_EQ(slice_copy(random_tensor({0, 4}, kFloat32), 0, 0, 5).numel(), 0);
}

// ---- expand_copy, flip, repeat

TEST(OnnxOpsExpand, BroadcastsWithNewLeadingDimsAndMinusOne) {
  for (DType dt : kAllTypes) {
    Tensor x = random_tensor({3, 1}, dt, -9, 9);
    const auto X = read(x);
    Tensor y = expand_copy(x, {2, -1, 4});
    ASSERT_EQ(y.sizes(), IntArrayRef({2, 3, 4}));
    EXPECT_TRUE(y.is_contiguous());
    std::vector<double> want;
    for (int64_t i = 0; i < 24; ++i) want.push_back(X.v[size_t(unravel(i, {2, 3, 4})[1])]);
    EXPECT_TRUE(same(y, want, "expand_copy")) << dt;
  }
  EXPECT_THROW(expand_copy(random_tensor({3, 2}, kFloat32), {3, 4}), Error);
  EXPECT_THROW(expand_copy(random_tensor({3, 2}, kFloat32), {2}), Error);
  EXPECT_THROW(expand_copy(random_tensor({3}, kFloat32), {-1, 3}), Error);
  EXPECT_EQ(expand_copy(random_tensor({1, 2}, kFloat32), {0, 2}).numel(), 0);
}

TEST(OnnxOpsFlip, ReversesTheGivenDims) {
  for (DType dt : kAllTypes) {
    Tensor x = random_tensor({4, 3, 2}, dt, -9, 9).permute({1, 0, 2});  // [3, 4, 2], strided
    const auto X = read(x);
    Tensor y = flip(x, {0, -1});
    std::vector<double> want;
    for (int64_t i = 0; i < 24; ++i) {
      auto p = unravel(i, {3, 4, 2});
      p[0] = 2 - p[0];
      p[2] = 1 - p[2];
      want.push_back(X.v[size_t(linear(p, {3, 4, 2}))]);
    }
    EXPECT_TRUE(same(y, want, "flip")) << dt;
  }
  EXPECT_THROW(flip(random_tensor({2, 2}, kFloat32), {0, 0}), Error);
  EXPECT_THROW(flip(random_tensor({2, 2}, kFloat32), {2}), Error);
}

TEST(OnnxOpsRepeat, TilesLikeTensorRepeat) {
  for (DType dt : kAllTypes) {
    Tensor x = random_tensor({3, 2}, dt, -9, 9).t();  // [2, 3] strided
    const auto X = read(x);
    Tensor y = repeat(x, {2, 3, 2});
    ASSERT_EQ(y.sizes(), IntArrayRef({2, 6, 6}));
    std::vector<double> want;
    for (int64_t i = 0; i < 72; ++i) {
      auto p = unravel(i, {2, 6, 6});
      want.push_back(X.v[size_t((p[1] % 2) * 3 + p[2] % 3)]);
    }
    EXPECT_TRUE(same(y, want, "repeat")) << dt;
  }
  EXPECT_EQ(repeat(random_tensor({2}, kFloat32), {0, 2}).numel(), 0);
  EXPECT_THROW(repeat(random_tensor({2, 2}, kFloat32), {2}), Error);
  EXPECT_THROW(repeat(random_tensor({2}, kFloat32), {-1}), Error);
  EXPECT_THROW(repeat(random_tensor({3}, kFloat32), {int64_t(1) << 62}), Error);  // overflows int64
}

// ---- pad

// Circular padding with crops, worked by hand (and what torch.nn.functional.pad and ONNX
// Runtime's Pad "wrap" give): the crop comes first and the wrap reads only what is left.
TEST(OnnxOpsPad, CircularCropsFirstThenWraps) {
  Tensor x = tensor(std::vector<float>{0, 1, 2, 3, 4, 5}, {1, 6});
  const std::vector<std::pair<std::vector<int64_t>, std::vector<double>>> cases = {
      {{-1, 2}, {1, 2, 3, 4, 5, 1, 2}},
      {{2, -1}, {3, 4, 0, 1, 2, 3, 4}},
      {{3, -2}, {1, 2, 3, 0, 1, 2, 3}},
      {{-3, 3}, {3, 4, 5, 3, 4, 5}},
      {{-4, 2}, {4, 5, 4, 5}},
      {{5, -1}, {0, 1, 2, 3, 4, 0, 1, 2, 3, 4}},
  };
  for (const auto& [amounts, want] : cases) {
    SCOPED_TRACE(::testing::PrintToString(amounts));
    EXPECT_EQ(read(pad(x, amounts, "circular")).v, want);
  }
  try {
    (void)pad(x, {6, -1}, "circular");
    ADD_FAILURE() << "padding 6 from the 5 elements a crop leaves was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 elements left after the crops"), std::string::npos) << e.what();
  }
}

TEST(OnnxOpsPad, ConstantReflectReplicateAndNegativeCrops) {
  const std::vector<int64_t> pads = {2, 1, -1, 3};  // last dim: 2 before, 1 after; dim 1: crop 1, 3 after
  for (const char* mode : {"constant", "reflect", "replicate", "circular"}) {
    for (DType dt : kAllTypes) {
      Tensor x = random_tensor({2, 4, 5}, dt, -9, 9);
      const auto X = read(x);
      std::optional<double> value;
      if (std::string(mode) == "constant") value = dt == kBool ? 1.0 : 7.0;
      Tensor y = pad(x, pads, mode, value);
      const std::vector<int64_t> os = {2, 6, 8};
      ASSERT_EQ(y.sizes(), IntArrayRef(os)) << mode;
      std::vector<double> want;
      for (int64_t i = 0; i < numel_of(os); ++i) {
        auto p = unravel(i, os);
        int64_t r = p[1] + 1, c = p[2] - 2;  // input coordinates
        bool inside = r >= 0 && r < 4 && c >= 0 && c < 5;
        if (std::string(mode) == "reflect") {
          r = r < 0 ? -r : (r > 3 ? 6 - r : r);
          c = c < 0 ? -c : (c > 4 ? 8 - c : c);
          inside = true;
        } else if (std::string(mode) == "circular") {
          // Crop first, then wrap within what is left (PyTorch and ONNX Runtime): dim 1 keeps input
          // rows 1..3 and pads 3 after from those; the last dim pads from all 5 columns.
          r = 1 + p[1] % 3;
          c = (c + 5) % 5;
          inside = true;
        } else if (std::string(mode) == "replicate") {
          r = std::min<int64_t>(std::max<int64_t>(r, 0), 3);
          c = std::min<int64_t>(std::max<int64_t>(c, 0), 4);
          inside = true;
        }
        want.push_back(inside ? X.v[size_t(linear({p[0], r, c}, {2, 4, 5}))] : *value);
      }
      EXPECT_TRUE(same(y, want, std::string("pad ") + mode)) << dt;
    }
  }
  Tensor x = random_tensor({3, 3}, kFloat32);
  EXPECT_THROW(pad(x, {3, 0}, "reflect"), Error);        // reflect pad must be < size
  EXPECT_THROW(pad(x, {1, 1}, "wrap"), Error);            // unknown mode (ONNX's wrap is "circular")
  EXPECT_THROW(pad(x, {4, 0}, "circular"), Error);        // wraps more than once
  EXPECT_THROW(pad(x, {3, -1}, "circular"), Error);       // 3 > the 2 elements the crop leaves
  EXPECT_THROW(pad(x, {1}), Error);                       // odd length
  EXPECT_THROW(pad(x, {1, 1, 1, 1, 1, 1}), Error);        // more pairs than dims
  EXPECT_THROW(pad(x, {-2, -2}), Error);                  // negative size
  EXPECT_THROW(pad(x, {1, 1}, "reflect", 1.0), Error);    // value only for constant
  EXPECT_EQ(pad(x, {-3, 0}).numel(), 0);
  EXPECT_THROW(pad(x, {INT64_MAX, 1}), Error);      // overflows int64
  EXPECT_THROW(pad(x, {INT64_MAX - 1, 0}), Error);  // size + pad overflows int64
}

// ---- batch_norm, group_norm

TEST(OnnxOpsNorm, BatchNormInferenceMatchesTheFormula) {
  for (DType dt : kFloats) {
    Tensor x = random_tensor({2, 3, 4, 5}, dt).permute({0, 1, 3, 2});  // non-contiguous [2, 3, 5, 4]
    Tensor w = random_tensor({3}, dt), b = random_tensor({3}, dt), m = random_tensor({3}, dt);
    Tensor v = random_tensor({3}, dt, 0.5, 2);
    const auto X = read(x), W = read(w), B = read(b), M = read(m), V = read(v);
    Tensor y = batch_norm(x, w, b, m, v, false, 0.1, 1e-3, false);
    std::vector<double> want;
    for (int64_t i = 0; i < 120; ++i) {
      const int64_t c = unravel(i, {2, 3, 5, 4})[1];
      want.push_back(round_to((X.v[size_t(i)] - M.v[size_t(c)]) / std::sqrt(V.v[size_t(c)] + 1e-3) * W.v[size_t(c)] +
                                  B.v[size_t(c)],
                              dt));
    }
    EXPECT_TRUE(close(y, want, tol(dt), "batch_norm")) << dt;
  }
  Tensor x = random_tensor({2, 3}, kFloat32), s = random_tensor({3}, kFloat32, 0.5, 1);
  EXPECT_THROW(batch_norm(x, s, s, s, s, true, 0.1, 1e-5, false), Error);
  EXPECT_THROW(batch_norm(x, s, s, std::nullopt, std::nullopt, false, 0.1, 1e-5, false), Error);
  EXPECT_THROW(batch_norm(x, random_tensor({2}, kFloat32), s, s, s, false, 0.1, 1e-5, false), Error);
  EXPECT_THROW(batch_norm(random_tensor({2, 3}, kInt64), s, s, s, s, false, 0.1, 1e-5, false), Error);
}

TEST(OnnxOpsNorm, GroupNormAndInstanceNorm) {
  for (DType dt : kFloats)
    for (int64_t groups : {1, 2, 4}) {  // 4 = C: instance normalisation
      Tensor x = random_tensor({2, 4, 3, 2}, dt);
      Tensor w = random_tensor({4}, dt), b = random_tensor({4}, dt);
      const auto X = read(x), W = read(w), B = read(b);
      Tensor y = group_norm(x, groups, w, b, 1e-5);
      const int64_t per = 4 / groups * 6;
      std::vector<double> want(48);
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t base = (n * groups + g) * per;
          double mean = 0, var = 0;
          for (int64_t i = 0; i < per; ++i) mean += X.v[size_t(base + i)] / double(per);
          for (int64_t i = 0; i < per; ++i) var += std::pow(X.v[size_t(base + i)] - mean, 2) / double(per);
          for (int64_t i = 0; i < per; ++i) {
            const int64_t c = unravel(base + i, {2, 4, 3, 2})[1];
            want[size_t(base + i)] =
                round_to((X.v[size_t(base + i)] - mean) / std::sqrt(var + 1e-5) * W.v[size_t(c)] + B.v[size_t(c)], dt);
          }
        }
      EXPECT_TRUE(close(y, want, {tol(dt).rtol * 4, tol(dt).atol * 4}, "group_norm")) << dt << " groups " << groups;
    }
  EXPECT_THROW(group_norm(random_tensor({2, 6}, kFloat32), 4), Error);
  EXPECT_THROW(group_norm(random_tensor({2, 4}, kFloat32), 2, random_tensor({2}, kFloat32)), Error);
}

// ---- argmin, cumsum, topk

TEST(OnnxOpsReduce, ArgminFirstIndexAndNaN) {
  Tensor x = tensor(std::vector<double>{3, 1, 1, 2, 5, kNaN, 0, 7}, {2, 4});
  EXPECT_TRUE(same(argmin(x, 1), {1, 1}, "argmin dim 1"));
  EXPECT_TRUE(same(argmin(x), {5}, "argmin flattened"));
  EXPECT_TRUE(same(argmin(x, 0, true), {0, 1, 1, 0}, "argmin dim 0"));
  Tensor i = tensor(std::vector<int64_t>{4, -2, 9, -2}, {4}).to(kInt16);
  EXPECT_TRUE(same(argmin(i, 0), {1}, "argmin int16"));
  EXPECT_THROW(argmin(random_tensor({0, 3}, kFloat32)), Error);
}

TEST(OnnxOpsReduce, CumsumPromotesIntegersAndFollowsDim) {
  for (DType dt : kAllTypes) {
    Tensor x = random_tensor({3, 4}, dt, -5, 5).t();  // [4, 3] strided
    const auto X = read(x);
    Tensor y = cumsum(x, -2);
    EXPECT_EQ(y.dtype(), is_floating(dt) ? dt : kInt64);
    std::vector<double> want(12);
    for (int64_t c = 0; c < 3; ++c) {
      double s = 0;
      for (int64_t r = 0; r < 4; ++r) {
        s += X.v[size_t(r * 3 + c)];
        want[size_t(r * 3 + c)] = s;
      }
    }
    EXPECT_TRUE(close(y, want, {tol(dt).rtol * 4, tol(dt).atol * 8}, "cumsum")) << dt;
  }
  Tensor y = cumsum(tensor(std::vector<int64_t>{1, 2, 3}, {3}), 0, kFloat64);
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_TRUE(same(y, {1, 3, 6}, "cumsum dtype"));
  EXPECT_THROW(cumsum(random_tensor({3}, kFloat32), 1), Error);
}

TEST(OnnxOpsTopk, LargestSmallestTiesAndNaN) {
  Tensor x = tensor(std::vector<double>{1, 5, 3, 5, kNaN, 2, 2, 2, 0, 9}, {2, 5});
  auto [v, i] = topk(x, 3);
  EXPECT_TRUE(same(v, {kNaN, 5, 5, 9, 2, 2}, "topk values"));
  EXPECT_TRUE(same(i, {4, 1, 3, 4, 0, 1}, "topk indices"));  // equal values: ascending index
  auto [vs, is] = topk(x, 2, 1, false);
  EXPECT_TRUE(same(vs, {1, 3, 0, 2}, "topk smallest"));
  EXPECT_TRUE(same(is, {0, 2, 3, 0}, "topk smallest indices"));
  for (DType dt : {kInt32, kInt64, kUInt8, kFloat16, kBFloat16, kFloat64}) {
    Tensor r = random_tensor({6, 4}, dt, 0, 50).t();  // [4, 6] strided; topk over dim 0
    const auto R = read(r);
    auto [tv, ti] = topk(r, 2, 0);
    const auto TI = read(ti);
    for (int64_t c = 0; c < 6; ++c) {
      std::vector<std::pair<double, int64_t>> col;
      for (int64_t k = 0; k < 4; ++k) col.push_back({-R.v[size_t(k * 6 + c)], k});
      std::stable_sort(col.begin(), col.end(), [](auto a, auto b) { return a.first < b.first; });
      EXPECT_EQ(TI.v[size_t(c)], col[0].second) << dt;
      EXPECT_EQ(TI.v[size_t(6 + c)], col[1].second) << dt;
    }
  }
  EXPECT_THROW(topk(x, 6), Error);
  EXPECT_THROW(topk(x, -1), Error);
  EXPECT_THROW(topk(x, 1, 2), Error);
  auto [ev, ei] = topk(random_tensor({0, 3}, kFloat32), 2);
  EXPECT_EQ(ev.numel(), 0);
}

// ---- scatter, scatter_reduce

TEST(OnnxOpsScatter, SrcAndEveryReduction) {
  // dim 1 of a [2, 3] self; index [2, 2]; src [2, 3] (only its [2, 2] corner is read).
  Tensor self = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor index = tensor(std::vector<int64_t>{2, 2, -3, 1}, {2, 2});  // -3 wraps to 0
  Tensor src = tensor(std::vector<double>{10, 20, 99, 30, 40, 99}, {2, 3});
  EXPECT_TRUE(same(scatter(self, 1, index, src), {1, 2, 20, 30, 40, 6}, "scatter (last write wins)"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "sum"), {1, 2, 33, 34, 45, 6}, "sum"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "prod"), {1, 2, 600, 120, 200, 6}, "prod"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "amax"), {1, 2, 20, 30, 40, 6}, "amax"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "amin"), {1, 2, 3, 4, 5, 6}, "amin"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "mean"), {1, 2, 11, 17, 22.5, 6}, "mean"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "sum", false), {1, 2, 30, 30, 40, 6}, "sum without self"));
  EXPECT_TRUE(same(scatter_reduce(self, 1, index, src, "mean", false), {1, 2, 15, 30, 40, 6}, "mean without self"));
  for (DType dt : kAllTypes) {
    Tensor s = random_tensor({4, 3}, dt, 0, 9), v = random_tensor({4, 3}, dt, 0, 9);
    Tensor idx = tensor(std::vector<int64_t>{3, 0, 1, 1, 2, 0}, {2, 3}).to(kInt32);
    const auto S = read(s), V = read(v);
    std::vector<double> want = S.v;
    const int64_t rows[6] = {3, 0, 1, 1, 2, 0};
    for (int64_t k = 0; k < 6; ++k) want[size_t(rows[k] * 3 + k % 3)] = V.v[size_t(k)];
    EXPECT_TRUE(same(scatter(s, 0, idx, v), want, "scatter dim 0")) << dt;
  }
  EXPECT_THROW(scatter(self, 1, tensor(std::vector<int64_t>{3}, {1, 1}), src), Error);
  EXPECT_THROW(scatter(self, 1, index, src.to(kFloat32)), Error);
  EXPECT_THROW(scatter_reduce(self, 1, index, src, "median"), Error);
  EXPECT_THROW(scatter(self, 1, tensor(std::vector<double>{0}, {1, 1}), src), Error);
}

// ---- tril, triu

TEST(OnnxOpsTrilu, KeepTheTrianglesOfEveryMatrix) {
  for (DType dt : kAllTypes)
    for (int64_t diag : {-1, 0, 2, 9, -9}) {
      Tensor x = random_tensor({2, 3, 4}, dt, 1, 9);
      const auto X = read(x);
      std::vector<double> lo, up;
      for (int64_t i = 0; i < 24; ++i) {
        auto p = unravel(i, {2, 3, 4});
        lo.push_back(p[2] - p[1] <= diag ? X.v[size_t(i)] : 0);
        up.push_back(p[2] - p[1] >= diag ? X.v[size_t(i)] : 0);
      }
      EXPECT_TRUE(same(tril(x, diag), lo, "tril")) << dt << " " << diag;
      EXPECT_TRUE(same(triu(x, diag), up, "triu")) << dt << " " << diag;
    }
  EXPECT_THROW(tril(random_tensor({3}, kFloat32)), Error);
  // Tensors without elements (any strides count as contiguous, as in PyTorch).
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 0, 5}, {0, 4}, {2, 3, 0}}) {
    Tensor e = tril(tessera::zeros(shape), 1);
    EXPECT_EQ(std::vector<int64_t>(e.sizes().begin(), e.sizes().end()), shape);
    EXPECT_EQ(triu(tessera::zeros(shape)).numel(), 0);
  }
}

// ---- conv_transpose2d

// The definition as a gather: out[n, oc, oy, ox] = bias[oc] + sum over the input pixels (y, x) and
// taps (a, b) with y * stride - pad + a * dil == oy (likewise x) of x[n, ic, y, x] * w[ic, oc_g, a, b].
std::vector<double> conv_transpose_ref(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t s, int64_t p,
                                       int64_t op, int64_t g, int64_t d) {
  const auto X = read(x), W = read(w), B = read(bias);
  const int64_t n = x.size(0), ci = x.size(1), ih = x.size(2), iw = x.size(3);
  const int64_t cog = w.size(1), co = cog * g, k = w.size(2);
  const int64_t oh = (ih - 1) * s - 2 * p + d * (k - 1) + op + 1, ow = (iw - 1) * s - 2 * p + d * (k - 1) + op + 1;
  std::vector<double> out;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < co; ++oc)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = B.v[size_t(oc)];
          const int64_t grp = oc / cog;
          for (int64_t ic = grp * (ci / g); ic < (grp + 1) * (ci / g); ++ic)
            for (int64_t a = 0; a < k; ++a)
              for (int64_t c = 0; c < k; ++c) {
                const int64_t ny = oy + p - a * d, nx = ox + p - c * d;
                if (ny < 0 || nx < 0 || ny % s || nx % s || ny / s >= ih || nx / s >= iw) continue;
                acc += X.v[size_t(((b * ci + ic) * ih + ny / s) * iw + nx / s)] *
                       W.v[size_t(((ic * cog + oc % cog) * k + a) * k + c)];
              }
          out.push_back(acc);
        }
  return out;
}

TEST(OnnxOpsConvTranspose, StridePaddingOutputPaddingGroupsDilation) {
  struct C {
    int64_t s, p, op, g, d;
  };
  for (const C& c : {C{1, 0, 0, 1, 1}, C{2, 1, 1, 2, 1}, C{3, 2, 0, 1, 2}, C{2, 0, 1, 4, 2}})
    for (DType dt : {kFloat32, kFloat64}) {
      Tensor x = random_tensor({2, 4, 5, 3}, dt);
      Tensor w = random_tensor({4, 3, 3, 3}, dt);
      Tensor b = random_tensor({3 * c.g}, dt);
      Tensor y = conv_transpose2d(x, w, b, {c.s}, {c.p}, {c.op}, c.g, {c.d});
      EXPECT_TRUE(close(y, conv_transpose_ref(x, w, b, c.s, c.p, c.op, c.g, c.d), {1e-5, 1e-5}, "conv_transpose2d"))
          << dt << " stride " << c.s << " groups " << c.g;
    }
  Tensor x = random_tensor({1, 4, 3, 3}, kFloat32), w = random_tensor({4, 2, 3, 3}, kFloat32);
  EXPECT_THROW(conv_transpose2d(x, w, std::nullopt, {1}, {0}, {1}), Error);  // output_padding >= stride
  EXPECT_THROW(conv_transpose2d(x, random_tensor({3, 2, 3, 3}, kFloat32)), Error);
  EXPECT_THROW(conv_transpose2d(x, w, std::nullopt, {1}, {0}, {0}, 3), Error);
  EXPECT_THROW(conv_transpose2d(x, w, std::nullopt, {int64_t(1) << 40}), Error);  // attributes below 2^20
}

// ---- _resize

Tensor resize_op(const Tensor& x, std::vector<int64_t> size, const char* mode, const char* coord,
              const char* nearest = "round_prefer_floor") {
  return std::get<Tensor>(boxed("_resize", Stack{x, size, std::string(mode), std::string(coord), std::string(nearest)})[0]);
}

TEST(OnnxOpsResize, NearestAndLinearByHand) {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4}, {1, 1, 4});
  EXPECT_TRUE(same(resize_op(x, {8}, "nearest", "half_pixel"), {1, 1, 2, 2, 3, 3, 4, 4}, "nearest 2x"));
  EXPECT_TRUE(same(resize_op(x, {3}, "nearest", "asymmetric", "floor"), {1, 2, 3}, "nearest down"));
  EXPECT_TRUE(same(resize_op(x, {3}, "nearest", "asymmetric", "ceil"), {1, 3, 4}, "nearest ceil"));
  EXPECT_TRUE(same(resize_op(x, {8}, "linear", "half_pixel"), {1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4}, "linear"));
  EXPECT_TRUE(same(resize_op(x, {7}, "linear", "align_corners"), {1, 1.5, 2, 2.5, 3, 3.5, 4}, "align_corners"));
  EXPECT_TRUE(same(resize_op(x, {8}, "linear", "asymmetric"), {1, 1.5, 2, 2.5, 3, 3.5, 4, 4}, "asymmetric"));
  EXPECT_TRUE(same(resize_op(x, {1}, "linear", "pytorch_half_pixel"), {1}, "pytorch_half_pixel to 1"));
  Tensor sq = tensor(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  for (DType dt : kFloats)
    EXPECT_TRUE(close(resize_op(sq.to(dt), {4, 4}, "linear", "half_pixel"),
                      {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, tol(dt),
                      "bilinear"))
        << dt;
  for (DType dt : kAllTypes) {  // nearest copies values of every dtype
    std::vector<double> want = {1, 1, 2, 2, 3, 3, 4, 4};
    for (double& v : want) v = round_to(v, dt);
    EXPECT_TRUE(same(resize_op(sq.to(dt), {2, 4}, "nearest", "asymmetric", "floor"), want, "nearest")) << dt;
  }
  EXPECT_THROW(resize_op(x, {8}, "bicubic", "half_pixel"), Error);
  EXPECT_THROW(resize_op(x, {8}, "linear", "tf_crop_and_resize"), Error);
  EXPECT_THROW(resize_op(x.to(kInt32), {8}, "linear", "half_pixel"), Error);
  EXPECT_THROW(resize_op(x, {1, 1, 1, 8}, "nearest", "half_pixel"), Error);
}

// onnx.reference's Resize in one dim, written out from its definition: the n neighbours of x in the
// edge-padded input (ties to the smaller index), weights by mode, exclude_outside renormalising.
double onnx_resize_1d(const std::vector<double>& data, double x, const std::string& mode, double a, bool exclude) {
  const int64_t in = int64_t(data.size());
  const double ratio = x == std::floor(x) ? 1.0 : x - std::floor(x);
  const int64_t base = int64_t(std::floor(x)) - (x == std::floor(x) ? 1 : 0);  // ratio in (0, 1]
  std::vector<double> w;
  std::vector<int64_t> at;
  if (mode == "linear") {
    w = {1 - ratio, ratio};
    at = {base, base + 1};
  } else {
    auto k = [a](double t) {
      t = std::fabs(t);
      return t <= 1 ? (a + 2) * t * t * t - (a + 3) * t * t + 1 : t < 2 ? a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a : 0;
    };
    for (int64_t i = -1; i <= 2; ++i) {
      at.push_back(base + i);
      w.push_back(k(double(i) - ratio));
    }
  }
  double sum = 0, v = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (exclude && (at[i] < 0 || at[i] >= in)) w[i] = 0;
    sum += w[i];
  }
  for (size_t i = 0; i < w.size(); ++i)
    v += (exclude ? w[i] / sum : w[i]) * data[size_t(std::clamp<int64_t>(at[i], 0, in - 1))];
  return v;
}

TEST(OnnxOpsResize, CubicAndScalesAgainstTheOnnxDefinition) {
  Dispatcher& d = Dispatcher::instance();
  const std::vector<double> data = {1, 4, 2, 8, 5, 7, 3};
  Tensor x = tensor(data, {1, 7});
  for (const char* mode : {"linear", "cubic"})
    for (bool exclude : {false, true})
      for (double scale : {0.6, 1.7, 2.0}) {
        const int64_t out = int64_t(std::floor(7 * scale));
        Tensor scales = tensor(std::vector<double>{scale}, {1});
        Stack r = d.call_boxed(d.op("_resize"), Stack{x, std::vector<int64_t>{out}, std::string(mode),
                                                      std::string("half_pixel"), std::string("round_prefer_floor"),
                                                      -0.5, exclude, std::optional<Tensor>(scales)});
        std::vector<double> want;
        for (int64_t o = 0; o < out; ++o) want.push_back(onnx_resize_1d(data, (double(o) + 0.5) / scale - 0.5, mode, -0.5, exclude));
        EXPECT_TRUE(close(std::get<Tensor>(r[0]), want, {1e-12, 1e-12}, "resize")) << mode << " " << scale << " " << exclude;
      }
  // Bicubic over two dims is the product of the 1-D weights: a constant image stays constant.
  Stack r = d.call_boxed(d.op("_resize"), Stack{tessera::full({1, 1, 3, 3}, 2.5), std::vector<int64_t>{5, 7},
                                                std::string("cubic"), std::string("align_corners")});
  EXPECT_TRUE(close(std::get<Tensor>(r[0]), std::vector<double>(35, 2.5), {1e-12, 1e-12}, "cubic constant"));
  EXPECT_THROW(d.call_boxed(d.op("_resize"), Stack{x, std::vector<int64_t>{3}, std::string("linear"),
                                                   std::string("half_pixel"), std::string("floor"), -0.75, false,
                                                   std::optional<Tensor>(tensor(std::vector<double>{1, 2}, {2}))}),
               Error);
}

// ---- logsumexp, linalg_vector_norm

TEST(OnnxOpsReduce, LogsumexpStableAndInfinite) {
  Tensor x = tensor(std::vector<double>{1000, 1000, -kInf, -kInf, 0, std::log(3.0)}, {3, 2});
  EXPECT_TRUE(close(logsumexp(x, {1}), {1000 + std::log(2.0), -kInf, std::log(4.0)}, {1e-12, 1e-12}, "logsumexp"));
  for (DType dt : kFloats) {
    Tensor r = random_tensor({3, 4, 2}, dt).permute({2, 0, 1});
    const auto R = read(r);
    Tensor y = logsumexp(r, {0, 2}, true);
    ASSERT_EQ(y.sizes(), IntArrayRef({1, 3, 1}));
    std::vector<double> want(3, 0);
    for (int64_t i = 0; i < 24; ++i) want[size_t(unravel(i, {2, 3, 4})[1])] += std::exp(R.v[size_t(i)]);
    for (double& v : want) v = round_to(std::log(v), dt);
    EXPECT_TRUE(close(y, want, tol(dt), "logsumexp")) << dt;
  }
  EXPECT_EQ(logsumexp(tensor(std::vector<int64_t>{0, 0}, {2}), {0}).dtype(), kFloat32);
}

TEST(OnnxOpsReduce, VectorNormOrders) {
  Tensor x = tensor(std::vector<double>{3, -4, 0, 1, -2, 2}, {2, 3});
  EXPECT_TRUE(close(linalg_vector_norm(x), {std::sqrt(34.0)}, {1e-12, 0}, "l2 all"));
  EXPECT_TRUE(close(linalg_vector_norm(x, 1, IntArrayRef({1})), {7, 5}, {1e-12, 0}, "l1"));
  EXPECT_TRUE(close(linalg_vector_norm(x, kInf, IntArrayRef({0}), true), {3, 4, 2}, {0, 0}, "inf"));
  EXPECT_TRUE(close(linalg_vector_norm(x, -kInf, IntArrayRef({1})), {0, 1}, {0, 0}, "-inf"));
  EXPECT_TRUE(close(linalg_vector_norm(x, 0, IntArrayRef({1})), {2, 3}, {0, 0}, "0"));
  EXPECT_TRUE(close(linalg_vector_norm(x, 3, IntArrayRef({1})), {std::cbrt(91.0), std::cbrt(17.0)}, {1e-12, 0}, "3"));
  Tensor y = linalg_vector_norm(x.to(kFloat16), 2, std::nullopt, false, kFloat32);
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_THROW(linalg_vector_norm(tensor(std::vector<int64_t>{1}, {1})), Error);
  EXPECT_THROW(linalg_vector_norm(random_tensor({0, 2}, kFloat32), kInf, IntArrayRef({0})), Error);
  EXPECT_TRUE(close(linalg_vector_norm(random_tensor({0, 2}, kFloat32), 2, IntArrayRef({0})), {0, 0}, {0, 0}, "empty"));
}

}  // namespace
}  // namespace tessera

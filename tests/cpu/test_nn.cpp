// nn ops of the CPU plugin through the public API (the real plugin loaded): matmul, linear,
// conv2d, softmax, log_softmax, layer_norm, rms_norm, max_pool2d, avg_pool2d, each against a
// naive double-precision reference written here, on fresh random inputs, per dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu_test_util.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using cpu_test::close;
using cpu_test::random_tensor;
using cpu_test::read;
using cpu_test::Ref;
using cpu_test::seed_trace;
using cpu_test::Tol;

const DType kFloatTypes[] = {kFloat32, kBFloat16, kFloat16, kFloat64};

// Tolerance of a K-term dot product stored in `d`: the storage rounding of the result plus an
// accumulation term growing with sqrt(K) (inputs are O(1)). dot_close adds the worst-case
// accumulation bound on top, so that an unlucky draw never fails a correct kernel.
Tol dot_tol(DType d, int64_t k) {
  const double sk = std::sqrt(double(std::max<int64_t>(k, 1)));
  switch (d) {
    case kFloat64: return {1e-10, 1e-10 * sk};
    case kFloat32: return {1e-5, 2e-6 * sk};
    case kFloat16: return {2e-3, 2e-3 * sk};
    default: return {1.6e-2, 1e-2 * sk};
  }
}

// A dot-product reference: the exact (double) values and, per element, the sum of the magnitudes
// of its terms, bias included.
struct DotRef {
  std::vector<double> v, mag;
  void push(double s, double m) {
    v.push_back(s);
    mag.push_back(m);
  }
};

// Compares against a DotRef. Beyond dot_tol, each element may be off by Higham's bound for a
// K-term sum in any order, with or without FMA: gamma_K * sum |a_q b_q|, gamma_K = K u / (1 - K u),
// u the unit roundoff of the accumulation (float for every dtype but float64; the kernels
// accumulate f16/bf16 in float). An input drawn so that the float32 sum lands 2 sigma off (CI
// saw 3.6e-5 at K = 300 against a flat 3.5e-5) passes; a dropped term, a wrong index or a
// low-precision accumulator (errors of order 1e-1 and up at these sizes) still fails.
// With `winograd`, also a normwise term, 64 u max_j mag_j: a float32 3x3 convolution may run
// Winograd's F(4x4, 3x3) (Note [Winograd convolution] in plugins/cpu/nn/onednn_ops.cpp), whose
// transforms mix a whole 6x6 input tile, so an output whose own terms are small can carry the
// rounding of its neighbours'. Measured against double: at most 13 u max mag with one input
// channel, where the componentwise bound is tightest.
::testing::AssertionResult dot_close(const Tensor& got, const DotRef& want, int64_t k, const std::string& what,
                                     bool winograd = false) {
  const double u = got.dtype() == kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double ku = double(std::max<int64_t>(k, 1) + 1) * u;  // +1: the bias term
  const double gamma = ku / (1 - ku);
  double normwise = 0;
  if (winograd && got.dtype() == kFloat32)
    for (double m : want.mag) normwise = std::max(normwise, 64 * u * m);
  std::vector<double> bound(want.mag.size());
  for (size_t i = 0; i < bound.size(); ++i) bound[i] = gamma * want.mag[i] + normwise;
  return close(got, want.v, dot_tol(got.dtype(), k), what, &bound);
}

// ---------------------------------------------------------------- matmul

// Naive batched matmul with PyTorch's 1-D and broadcasting rules.
DotRef ref_matmul(const Ref& a, const Ref& b, const std::vector<int64_t>& out_sizes) {
  std::vector<int64_t> as = a.sizes, bs = b.sizes;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const auto batch = cpu_test::broadcast_shape(ab, bb);
  int64_t nb = 1;
  for (auto s : batch) nb *= s;
  DotRef out;
  auto at = [](const Ref& r, const std::vector<int64_t>& sizes, const std::vector<int64_t>& bidx, int64_t i, int64_t j) {
    // r's data has shape `sizes` (with the inserted unit dims): index batch dims right-aligned.
    const size_t rb = sizes.size() - 2, off = bidx.size() - rb;
    int64_t lin = 0;
    for (size_t d = 0; d < rb; ++d) lin = lin * sizes[d] + (sizes[d] == 1 ? 0 : bidx[d + off]);
    lin = (lin * sizes[rb] + i) * sizes[rb + 1] + j;
    return r.v[size_t(lin)];
  };
  for (int64_t bi = 0; bi < nb; ++bi) {
    const auto bidx = cpu_test::unravel(bi, batch);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double t = at(a, as, bidx, i, q) * at(b, bs, bidx, q, j);
          s += t;
          mag += std::fabs(t);
        }
        out.push(s, mag);
      }
  }
  int64_t expect = 1;
  for (auto s : out_sizes) expect *= s;
  EXPECT_EQ(int64_t(out.v.size()), expect);
  return out;
}

void check_matmul(const Tensor& a, const Tensor& b, const std::string& what) {
  SCOPED_TRACE(seed_trace());
  Tensor c = matmul(a, b);
  const int64_t k = a.size(-1);
  std::vector<int64_t> cs(c.sizes().begin(), c.sizes().end());
  EXPECT_TRUE(dot_close(c, ref_matmul(read(a), read(b), cs), k, what + " " + std::string(dtype_name(a.dtype()))));
}

TEST(CpuNnMatmul, TwoDimensional) {
  for (DType d : kFloatTypes) check_matmul(random_tensor({33, 47}, d), random_tensor({47, 29}, d), "2-D");
}

TEST(CpuNnMatmul, BatchedWithBroadcast) {
  for (DType d : kFloatTypes) {
    check_matmul(random_tensor({2, 1, 5, 7}, d), random_tensor({3, 7, 6}, d), "[2,1,5,7]@[3,7,6]");
    check_matmul(random_tensor({4, 9, 16}, d), random_tensor({16, 5}, d), "[4,9,16]@[16,5]");
    check_matmul(random_tensor({6, 8}, d), random_tensor({2, 3, 8, 10}, d), "[6,8]@[2,3,8,10]");
  }
}

TEST(CpuNnMatmul, OneDimensionalCases) {
  for (DType d : kFloatTypes) {
    check_matmul(random_tensor({19}, d), random_tensor({19}, d), "dot");
    check_matmul(random_tensor({7, 19}, d), random_tensor({19}, d), "matrix @ vector");
    check_matmul(random_tensor({19}, d), random_tensor({19, 5}, d), "vector @ matrix");
    check_matmul(random_tensor({19}, d), random_tensor({3, 19, 5}, d), "vector @ batch");
    check_matmul(random_tensor({3, 4, 19}, d), random_tensor({19}, d), "batch @ vector");
  }
  EXPECT_EQ(matmul(random_tensor({5}, kFloat32), random_tensor({5}, kFloat32)).dim(), 0);
}

TEST(CpuNnMatmul, TransposedAndStridedInputs) {
  for (DType d : kFloatTypes) {
    check_matmul(random_tensor({40, 24}, d).t(), random_tensor({40, 31}, d), "a^T @ b");
    check_matmul(random_tensor({24, 40}, d), random_tensor({31, 40}, d).t(), "a @ b^T");
    check_matmul(random_tensor({3, 17, 12}, d).transpose(1, 2), random_tensor({3, 9, 17}, d).transpose(1, 2),
                 "batched a^T @ b^T");
    // Neither inner dim has unit stride: a slice with step 2 in both.
    check_matmul(random_tensor({20, 30}, d).slice(0, 0, 20, 2).slice(1, 0, 30, 2), random_tensor({15, 6}, d),
                 "step-2 slice");
    // An expanded (stride-0) batch dim.
    check_matmul(random_tensor({1, 5, 8}, d).expand({4, 5, 8}), random_tensor({4, 8, 3}, d), "expanded batch");
    check_matmul(random_tensor({1, 5, 8}, d).expand({4, 5, 8}), random_tensor({1, 8, 3}, d).expand({4, 8, 3}),
                 "both operands expanded");
  }
}

TEST(CpuNnMatmul, LargeF32MatchesReference) {
  SCOPED_TRACE(seed_trace());
  Tensor a = random_tensor({96, 300}, kFloat32), b = random_tensor({300, 130}, kFloat32);
  check_matmul(a, b, "96x300x130");
}

TEST(CpuNnMatmul, ShapeMismatchIsAnError) {
  try {
    matmul(random_tensor({3, 4}, kFloat32), random_tensor({5, 6}, kFloat32));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------- linear

TEST(CpuNnLinear, WithAndWithoutBias) {
  for (DType d : kFloatTypes) {
    SCOPED_TRACE(seed_trace());
    for (bool with_bias : {true, false}) {
      Tensor x = random_tensor({2, 3, 21}, d), w = random_tensor({13, 21}, d), b = random_tensor({13}, d);
      Tensor y = with_bias ? linear(x, w, b) : linear(x, w);
      ASSERT_EQ(y.sizes(), IntArrayRef({2, 3, 13}));
      const Ref rx = read(x), rw = read(w), rb = read(b);
      DotRef want;
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 13; ++j) {
          double s = with_bias ? rb.v[size_t(j)] : 0.0, mag = std::fabs(s);
          for (int64_t q = 0; q < 21; ++q) {
            const double t = rx.v[size_t(i * 21 + q)] * rw.v[size_t(j * 21 + q)];
            s += t;
            mag += std::fabs(t);
          }
          want.push(s, mag);
        }
      EXPECT_TRUE(dot_close(y, want, 21, std::string("linear ") + std::string(dtype_name(d))));
    }
  }
}

TEST(CpuNnLinear, TransposedWeightAndVectorInput) {
  for (DType d : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(seed_trace());
    Tensor w = random_tensor({17, 11}, d).t();  // [11, 17] with strides (1, 11)
    Tensor x = random_tensor({17}, d), b = random_tensor({11}, d);
    Tensor y = linear(x, w, b);
    ASSERT_EQ(y.sizes(), IntArrayRef({11}));
    const Ref rx = read(x), rw = read(w), rb = read(b);
    DotRef want;
    for (int64_t j = 0; j < 11; ++j) {
      double s = rb.v[size_t(j)], mag = std::fabs(s);
      for (int64_t q = 0; q < 17; ++q) {
        const double t = rx.v[size_t(q)] * rw.v[size_t(j * 17 + q)];
        s += t;
        mag += std::fabs(t);
      }
      want.push(s, mag);
    }
    EXPECT_TRUE(dot_close(y, want, 17, "linear with transposed weight"));
  }
}

// ---------------------------------------------------------------- conv2d

DotRef ref_conv2d(const Ref& x, const Ref& w, const Ref* b, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                               int64_t dh, int64_t dw, int64_t g, std::vector<int64_t>* out_sizes) {
  const bool batched = x.sizes.size() == 4;
  const int64_t n = batched ? x.sizes[0] : 1, c = x.sizes[batched], h = x.sizes[batched + 1], wd = x.sizes[batched + 2];
  const int64_t oc = w.sizes[0], cg = w.sizes[1], kh = w.sizes[2], kw = w.sizes[3];
  const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  *out_sizes = batched ? std::vector<int64_t>{n, oc, oh, ow} : std::vector<int64_t>{oc, oh, ow};
  DotRef out;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          double s = b ? b->v[size_t(o)] : 0.0, mag = std::fabs(s);
          const int64_t gi = o / (oc / g);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = y * sh - ph + i * dh, iw = xo * sw - pw + j * dw;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const double t =
                    x.v[size_t(((ni * c + gi * cg + ci) * h + ih) * wd + iw)] * w.v[size_t(((o * cg + ci) * kh + i) * kw + j)];
                s += t;
                mag += std::fabs(t);
              }
          out.push(s, mag);
        }
  return out;
}

struct ConvCase {
  std::vector<int64_t> x, w;
  int64_t s, p, dil, g;
  bool bias;
};

TEST(CpuNnConv2d, StridePaddingDilationGroups) {
  const ConvCase cases[] = {
      {{2, 4, 9, 8}, {6, 2, 3, 3}, 2, 1, 2, 2, true},  // groups + dilation + padding + stride
      {{1, 3, 12, 11}, {5, 3, 3, 3}, 1, 1, 1, 1, true},
      {{2, 6, 7, 7}, {6, 1, 3, 3}, 1, 1, 1, 6, false},  // depthwise
      {{3, 10, 10}, {4, 3, 5, 2}, 1, 2, 1, 1, true},     // unbatched input, rectangular kernel
      {{1, 2, 6, 9}, {4, 2, 1, 1}, 3, 0, 1, 1, false},   // 1x1, stride 3
      {{2, 40, 7, 9}, {48, 40, 1, 1}, 1, 0, 1, 1, true},  // 1x1 as one GEMM on NCHW (Note [Row-major 1x1 convolution])
      {{2, 16, 8, 8}, {24, 16, 1, 1}, 2, 0, 1, 1, true},  // 1x1, stride 2 (a ResNet downsample)
  };
  for (DType d : kFloatTypes) {
    for (const auto& cc : cases) {
      SCOPED_TRACE(seed_trace());
      Tensor x = random_tensor(cc.x, d), w = random_tensor(cc.w, d), b = random_tensor({cc.w[0]}, d);
      Tensor y = cc.bias ? conv2d(x, w, b, {cc.s, cc.s}, {cc.p, cc.p}, {cc.dil, cc.dil}, cc.g)
                         : conv2d(x, w, std::nullopt, {cc.s, cc.s}, {cc.p, cc.p}, {cc.dil, cc.dil}, cc.g);
      std::vector<int64_t> os;
      const Ref rb = read(b);
      auto want = ref_conv2d(read(x), read(w), cc.bias ? &rb : nullptr, cc.s, cc.s, cc.p, cc.p, cc.dil, cc.dil, cc.g, &os);
      ASSERT_EQ(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), os);
      const int64_t k = cc.w[1] * cc.w[2] * cc.w[3];
      EXPECT_TRUE(dot_close(y, want, k, "conv2d " + std::string(dtype_name(d)) + " groups " + std::to_string(cc.g),
                            /*winograd=*/true));
    }
  }
}

TEST(CpuNnConv2d, NonContiguousInput) {
  SCOPED_TRACE(seed_trace());
  Tensor x = random_tensor({2, 9, 8, 3}, kFloat32).permute({0, 3, 1, 2});  // NHWC memory viewed as NCHW
  Tensor w = random_tensor({4, 3, 3, 3}, kFloat32);
  Tensor y = conv2d(x, w, std::nullopt, {1, 1}, {1, 1});
  std::vector<int64_t> os;
  auto want = ref_conv2d(read(x), read(w), nullptr, 1, 1, 1, 1, 1, 1, 1, &os);
  EXPECT_TRUE(dot_close(y, want, 27, "conv2d on a permuted input", /*winograd=*/true));
}

// A layer of the size where TESSERA_CPU_CONV_ALGO=auto computes float32 3x3 convolutions with
// Winograd's F(4x4, 3x3) (at least 32 channels each way, tiles x C x OC >= 2^16): against double, with
// and without bias, padded and unpadded, and with a strided (sliced) input.
TEST(CpuNnConv2d, ThreeByThreeLayersAgainstDouble) {
  SCOPED_TRACE(seed_trace());
  for (int64_t pad : {1, 0}) {
    for (bool with_bias : {true, false}) {
      Tensor x = random_tensor({4, 32, 18, 17}, kFloat32), w = random_tensor({40, 32, 3, 3}, kFloat32);
      Tensor b = random_tensor({40}, kFloat32);
      Tensor y = with_bias ? conv2d(x, w, b, {1, 1}, {pad, pad}) : conv2d(x, w, std::nullopt, {1, 1}, {pad, pad});
      std::vector<int64_t> os;
      const Ref rb = read(b);
      auto want = ref_conv2d(read(x), read(w), with_bias ? &rb : nullptr, 1, 1, pad, pad, 1, 1, 1, &os);
      ASSERT_EQ(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), os);
      EXPECT_TRUE(dot_close(y, want, 32 * 9, "3x3 layer, padding " + std::to_string(pad) + (with_bias ? ", bias" : ""),
                            /*winograd=*/true));
    }
  }
  Tensor xs = random_tensor({4, 64, 20, 36}, kFloat32).slice(3, 0, 36, 2);  // [4, 64, 20, 18], stride 2 in W
  Tensor w = random_tensor({32, 64, 3, 3}, kFloat32);
  Tensor y = conv2d(xs, w, std::nullopt, {1, 1}, {1, 1});
  std::vector<int64_t> os;
  auto want = ref_conv2d(read(xs), read(w), nullptr, 1, 1, 1, 1, 1, 1, 1, &os);
  EXPECT_TRUE(dot_close(y, want, 64 * 9, "3x3 layer on a sliced input", /*winograd=*/true));
}

// ---------------------------------------------------------------- conv2d, channels-last
// Note [Channels-last activations] (docs/semantics.md): a channels-last input or weight gives a
// channels-last output; the CPU kernel reads and writes such tensors in place (Note
// [Channels-last convolution] in plugins/cpu/nn/onednn_ops.cpp).

// Strides worked out by hand for the shape (N, C, H, W): (H W C, 1, W C, C).
std::vector<int64_t> nhwc_strides(const std::vector<int64_t>& s) { return {s[2] * s[3] * s[1], 1, s[3] * s[1], s[1]}; }

bool has_strides(const Tensor& t, const std::vector<int64_t>& want) {
  return std::vector<int64_t>(t.strides().begin(), t.strides().end()) == want;
}

TEST(CpuNnConv2d, ChannelsLastInputOrWeightGivesChannelsLastOutput) {
  struct Case {
    std::vector<int64_t> x, w;
    int64_t s, p, g;
    bool x_cl, w_cl;
  };
  const Case cases[] = {
      {{2, 16, 9, 11}, {24, 16, 3, 3}, 1, 1, 1, true, false},   // input only
      {{2, 16, 9, 11}, {24, 16, 3, 3}, 2, 0, 1, false, true},   // weight only
      {{3, 8, 7, 6}, {12, 8, 1, 1}, 1, 0, 1, true, true},       // 1x1, both
      {{2, 12, 10, 9}, {16, 3, 3, 3}, 1, 1, 4, true, true},     // grouped: GOHWI weight
      {{4, 32, 18, 17}, {40, 32, 3, 3}, 1, 1, 1, true, true},   // a layer Winograd takes under auto
  };
  for (DType d : kFloatTypes)
    for (const Case& cc : cases) {
      SCOPED_TRACE(seed_trace() + " " + std::string(dtype_name(d)) + " groups " + std::to_string(cc.g));
      Tensor x = random_tensor(cc.x, d), w = random_tensor(cc.w, d), b = random_tensor({cc.w[0]}, d);
      if (cc.x_cl) x = contiguous(x, MemoryFormat::ChannelsLast);
      if (cc.w_cl) w = contiguous(w, MemoryFormat::ChannelsLast);
      ASSERT_EQ(cc.x_cl, has_strides(x, nhwc_strides(cc.x)));
      ASSERT_EQ(cc.w_cl, is_contiguous(w, MemoryFormat::ChannelsLast));  // a 1x1 weight is both
      Tensor y = conv2d(x, w, b, {cc.s, cc.s}, {cc.p, cc.p}, {1, 1}, cc.g);
      std::vector<int64_t> os;
      const Ref rb = read(b);
      auto want = ref_conv2d(read(x), read(w), &rb, cc.s, cc.s, cc.p, cc.p, 1, 1, cc.g, &os);
      ASSERT_EQ(std::vector<int64_t>(y.sizes().begin(), y.sizes().end()), os);
      EXPECT_TRUE(has_strides(y, nhwc_strides(os))) << "output strides " << y.strides();
      EXPECT_EQ(suggest_memory_format(y), MemoryFormat::ChannelsLast);
      EXPECT_TRUE(dot_close(y, want, cc.w[1] * cc.w[2] * cc.w[3], "channels-last conv2d", /*winograd=*/true));
    }
}

TEST(CpuNnConv2d, RowMajorOperandsKeepRowMajorOutput) {
  SCOPED_TRACE(seed_trace());
  // C == 1: the row-major input is also channels-last dense; it counts as row-major.
  for (const std::vector<int64_t>& xs : {std::vector<int64_t>{2, 5, 8, 8}, std::vector<int64_t>{2, 1, 8, 8}}) {
    Tensor x = random_tensor(xs, kFloat32), w = random_tensor({6, xs[1], 3, 3}, kFloat32);
    Tensor y = conv2d(x, w, std::nullopt, {1, 1}, {1, 1});
    EXPECT_TRUE(y.is_contiguous()) << "output strides " << y.strides();
    EXPECT_EQ(suggest_memory_format(y), MemoryFormat::Contiguous);
  }
  // A 3-D (C, H, W) input has no channels-last form.
  Tensor x3 = random_tensor({4, 6, 6}, kFloat32), w = random_tensor({5, 4, 3, 3}, kFloat32);
  EXPECT_TRUE(conv2d(x3, contiguous(w, MemoryFormat::ChannelsLast)).is_contiguous());
}

TEST(MemoryFormat, StridesLayoutTestsAndConversions) {
  SCOPED_TRACE(seed_trace());
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (std::vector<int64_t>{60, 1, 15, 3}));
  EXPECT_EQ(channels_last_strides({2, 0, 4, 5}), (std::vector<int64_t>{20, 1, 5, 1}));  // 0 counts as 1
  EXPECT_THROW(channels_last_strides({3, 4, 5}), Error);
  EXPECT_THROW(channels_last_strides({2, -1, 4, 5}), Error);
  EXPECT_STREQ(memory_format_name(MemoryFormat::ChannelsLast), "channels_last");

  Tensor x = random_tensor({2, 3, 4, 5}, kFloat32);
  EXPECT_TRUE(is_contiguous(x, MemoryFormat::Contiguous));
  EXPECT_FALSE(is_contiguous(x, MemoryFormat::ChannelsLast));
  EXPECT_EQ(suggest_memory_format(x), MemoryFormat::Contiguous);
  Tensor cl = contiguous(x, MemoryFormat::ChannelsLast);
  EXPECT_TRUE(has_strides(cl, {60, 1, 15, 3}));
  EXPECT_EQ(read(cl).v, read(x).v);  // same elements at the same (n, c, h, w)
  EXPECT_TRUE(is_contiguous(cl, MemoryFormat::ChannelsLast));
  EXPECT_FALSE(is_contiguous(cl, MemoryFormat::Contiguous));
  EXPECT_EQ(suggest_memory_format(cl), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(contiguous(cl, MemoryFormat::ChannelsLast).is_same(cl));  // already: no copy
  Tensor rm = contiguous(cl, MemoryFormat::Contiguous);
  EXPECT_TRUE(rm.is_contiguous());
  EXPECT_EQ(read(rm).v, read(x).v);
  // An NHWC buffer permuted to (N, C, H, W) is channels-last; a slice of one is not dense.
  Tensor perm = random_tensor({2, 4, 5, 3}, kFloat64).permute({0, 3, 1, 2});
  EXPECT_EQ(suggest_memory_format(perm), MemoryFormat::ChannelsLast);
  EXPECT_EQ(suggest_memory_format(perm.slice(2, 0, 4, 2)), MemoryFormat::Contiguous);
  EXPECT_FALSE(is_contiguous(perm.slice(2, 0, 4, 2), MemoryFormat::ChannelsLast));
  // Size-1 dims take any stride; an empty tensor is contiguous in every format.
  EXPECT_TRUE(is_contiguous(random_tensor({1, 6, 1, 1}, kFloat32), MemoryFormat::ChannelsLast));
  EXPECT_TRUE(is_contiguous(empty({2, 0, 3, 3}), MemoryFormat::ChannelsLast));
  for (DType d : {kBFloat16, kInt32, kBool}) {
    Tensor t = random_tensor({3, 2, 2, 3}, kFloat32).to(d);
    EXPECT_EQ(read(contiguous(t, MemoryFormat::ChannelsLast)).v, read(t).v) << dtype_name(d);
  }
  // Wrong rank and undefined tensors are errors that say what to do.
  try {
    contiguous(random_tensor({3, 4, 5}, kFloat32), MemoryFormat::ChannelsLast);
    ADD_FAILURE() << "no error for a 3-D tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("channels_last needs a 4-D (N, C, H, W) tensor, got 3-D"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(is_contiguous(Tensor(), MemoryFormat::Contiguous), Error);
  EXPECT_THROW(suggest_memory_format(Tensor()), Error);
}

// Pointwise ops, clone and .to(dtype) keep a channels-last input's layout; the first operand of the
// output's shape decides (PyTorch's rule); broadcast operands and numbers do not.
TEST(MemoryFormat, PointwiseOpsFollowTheFirstFullSizeOperand) {
  SCOPED_TRACE(seed_trace());
  const std::vector<int64_t> shape = {2, 6, 5, 7}, cl_strides = {210, 1, 42, 6};
  Tensor a = contiguous(random_tensor(shape, kFloat32), MemoryFormat::ChannelsLast);
  Tensor b = random_tensor(shape, kFloat32);  // row-major
  Tensor bias = random_tensor({1, 6, 1, 1}, kFloat32);
  const Ref ra = read(a), rb = read(b), rbias = read(bias);
  auto expect_cl = [&](const Tensor& t, const char* what) {
    EXPECT_TRUE(has_strides(t, cl_strides)) << what << ": strides " << t.strides();
  };
  auto expect_values = [&](const Tensor& t, double (*f)(double, double), const Ref& other, const char* what) {
    const Ref got = read(t);
    ASSERT_EQ(got.v.size(), ra.v.size()) << what;
    for (size_t i = 0; i < got.v.size(); ++i) {
      const double want = f(ra.v[i], other.at(cpu_test::unravel(int64_t(i), ra.sizes)));
      ASSERT_NEAR(got.v[i], want, 1e-6 * (1 + std::fabs(want))) << what << " at " << i;
    }
  };
  Tensor r = relu(a);
  expect_cl(r, "relu");
  expect_values(r, [](double x, double) { return x > 0 ? x : 0.0; }, rb, "relu");
  expect_cl(exp(a), "exp");
  expect_cl(gelu(a), "gelu");
  Tensor s1 = a + b;
  expect_cl(s1, "cl + row-major");
  expect_values(s1, [](double x, double y) { return x + y; }, rb, "cl + row-major");
  EXPECT_TRUE((b + a).is_contiguous()) << "row-major + cl: the first operand decides";
  Tensor s2 = a * bias;
  expect_cl(s2, "cl * [1, C, 1, 1]");
  expect_values(s2, [](double x, double y) { return x * y; }, rbias, "cl * bias");
  expect_cl(a + 2.0, "cl + number");
  expect_cl(where(gt(a, b), a, b), "where");
  expect_cl(a.clone(), "clone");
  Tensor h = a.to(kFloat64);
  expect_cl(h, "to(float64)");
  EXPECT_EQ(read(h).v, ra.v);
  expect_cl(a.to(kInt32) + a, "int32 cl + float32 cl (cast to the compute dtype)");
  EXPECT_TRUE(a.contiguous().is_contiguous());
  EXPECT_TRUE(relu(b).is_contiguous());
  // 3-D and 5-D tensors have no channels-last form: untouched.
  Tensor p3 = random_tensor({4, 5, 3}, kFloat32).permute({0, 2, 1});
  EXPECT_TRUE(relu(p3).is_contiguous());
}

// conv -> relu -> conv -> relu, eager: the activations stay channels-last throughout.
TEST(MemoryFormat, ConvReluChainStaysChannelsLast) {
  SCOPED_TRACE(seed_trace());
  Tensor x = contiguous(random_tensor({2, 16, 12, 12}, kFloat32), MemoryFormat::ChannelsLast);
  Tensor w1 = random_tensor({32, 16, 3, 3}, kFloat32, -0.3, 0.3), w2 = random_tensor({16, 32, 1, 1}, kFloat32, -0.3, 0.3);
  Tensor h = relu(conv2d(x, w1, std::nullopt, {1, 1}, {1, 1}));
  ASSERT_EQ(suggest_memory_format(h), MemoryFormat::ChannelsLast);
  Tensor y = relu(conv2d(h, w2));
  ASSERT_EQ(suggest_memory_format(y), MemoryFormat::ChannelsLast);
  std::vector<int64_t> os;
  DotRef want = ref_conv2d(read(h), read(w2), nullptr, 1, 1, 0, 0, 1, 1, 1, &os);
  for (double& v : want.v) v = std::max(v, 0.0);
  EXPECT_TRUE(dot_close(y, want, 32, "relu(conv2d(relu(conv2d(x_cl))))"));
}

// Three layers with the activations channels-last throughout (what a ResNet stem and block do):
// each layer's output keeps the layout and matches a double reference computed from that layer's
// actual input.
TEST(CpuNnConv2d, ChannelsLastChainKeepsLayout) {
  for (DType d : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(seed_trace() + " " + std::string(dtype_name(d)));
    Tensor x = contiguous(random_tensor({2, 24, 20, 20}, d), MemoryFormat::ChannelsLast);
    const std::vector<std::vector<int64_t>> weights = {{32, 24, 1, 1}, {32, 32, 3, 3}, {48, 32, 3, 3}};
    const int64_t strides[] = {1, 2, 1};
    for (size_t l = 0; l < weights.size(); ++l) {
      Tensor w = random_tensor(weights[l], d, -0.5, 0.5);
      const int64_t pad = weights[l][2] / 2;
      Tensor y = conv2d(x, w, std::nullopt, {strides[l], strides[l]}, {pad, pad});
      std::vector<int64_t> os;
      auto want = ref_conv2d(read(x), read(w), nullptr, strides[l], strides[l], pad, pad, 1, 1, 1, &os);
      ASSERT_TRUE(is_contiguous(y, MemoryFormat::ChannelsLast)) << "layer " << l << " strides " << y.strides();
      ASSERT_FALSE(y.is_contiguous());
      EXPECT_TRUE(dot_close(y, want, weights[l][1] * weights[l][2] * weights[l][3], "layer " + std::to_string(l),
                            /*winograd=*/true));
      x = y;
    }
  }
}

// One storage viewed as an OIHW weight and as an OHWI weight: the same address and shape, other
// elements. The weight cache (Note [Weight cache]) must not hand the first view's packed copy to
// the second.
TEST(CpuNnConv2d, WeightCacheTellsLayoutsOfOneStorageApart) {
  SCOPED_TRACE(seed_trace());
  const std::vector<int64_t> ws = {16, 8, 3, 3};
  Tensor storage = random_tensor({16 * 8 * 9}, kFloat32);
  Tensor w_oihw = storage.as_strided(ws, {72, 9, 3, 1});
  Tensor w_ohwi = storage.as_strided(ws, nhwc_strides(ws));
  ASSERT_EQ(w_oihw.raw_const_data_ptr(), w_ohwi.raw_const_data_ptr());
  Tensor x = random_tensor({2, 8, 12, 12}, kFloat32);
  for (const Tensor& w : {w_oihw, w_oihw, w_oihw, w_ohwi, w_ohwi, w_ohwi}) {
    Tensor y = conv2d(x, w, std::nullopt, {1, 1}, {1, 1});
    std::vector<int64_t> os;
    auto want = ref_conv2d(read(x), read(w), nullptr, 1, 1, 1, 1, 1, 1, 1, &os);
    EXPECT_TRUE(dot_close(y, want, 72, std::string("weight ") + (w.is_contiguous() ? "OIHW" : "OHWI"),
                          /*winograd=*/true));
  }
}

// ---------------------------------------------------------------- softmax / log_softmax

std::vector<double> ref_softmax(const Ref& x, int64_t dim, bool log) {
  const int64_t nd = int64_t(x.sizes.size());
  if (dim < 0) dim += nd;
  int64_t outer = 1, n = x.sizes[size_t(dim)], inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.sizes[size_t(d)];
  for (int64_t d = dim + 1; d < nd; ++d) inner *= x.sizes[size_t(d)];
  std::vector<double> out(x.v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t i) { return (o * n + i) * inner + j; };
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, x.v[size_t(at(i))]);
      for (int64_t i = 0; i < n; ++i) s += std::exp(x.v[size_t(at(i))] - m);
      for (int64_t i = 0; i < n; ++i) {
        const double z = x.v[size_t(at(i))] - m;
        out[size_t(at(i))] = log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  return out;
}

Tol softmax_tol(DType d) {
  switch (d) {
    case kFloat64: return {1e-12, 1e-12};
    case kFloat32: return {1e-5, 1e-6};
    case kFloat16: return {2e-3, 1e-4};
    default: return {1.6e-2, 1e-3};
  }
}

TEST(CpuNnSoftmax, EveryDimEveryDtype) {
  for (DType d : kFloatTypes)
    for (int64_t dim : {0, 1, 2, -1}) {
      SCOPED_TRACE(seed_trace());
      Tensor x = random_tensor({5, 37, 19}, d, -4, 4);
      EXPECT_TRUE(close(softmax(x, dim), ref_softmax(read(x), dim, false), softmax_tol(d),
                        "softmax dim " + std::to_string(dim) + " " + std::string(dtype_name(d))));
      Tol lt = softmax_tol(d);
      lt.atol = std::max(lt.atol, lt.rtol * 4);  // log values are O(|x|)
      EXPECT_TRUE(close(log_softmax(x, dim), ref_softmax(read(x), dim, true), lt,
                        "log_softmax dim " + std::to_string(dim) + " " + std::string(dtype_name(d))));
    }
}

TEST(CpuNnSoftmax, LongRowsLargeValuesAndStridedInput) {
  SCOPED_TRACE(seed_trace());
  // Values around +-1000 overflow a naive exp; rows of 3001 exercise the vector body and tail.
  Tensor x = random_tensor({4, 3001}, kFloat32, -1000, 1000);
  EXPECT_TRUE(close(softmax(x, -1), ref_softmax(read(x), -1, false), softmax_tol(kFloat32), "softmax large values"));
  EXPECT_TRUE(close(log_softmax(x, -1), ref_softmax(read(x), -1, true), {1e-5, 1e-3}, "log_softmax large values"));
  Tensor xt = random_tensor({40, 6}, kFloat32).t();  // [6, 40], non-contiguous
  EXPECT_TRUE(close(softmax(xt, 1), ref_softmax(read(xt), 1, false), softmax_tol(kFloat32), "softmax transposed"));
}

// ---------------------------------------------------------------- layer_norm / rms_norm

std::vector<double> ref_norm(const Ref& x, int64_t n, const Ref* w, const Ref* b, double eps, bool rms) {
  std::vector<double> out(x.v.size());
  for (size_t r = 0; r < x.v.size() / size_t(n); ++r) {
    const double* row = &x.v[r * size_t(n)];
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i) mean += row[i];
      mean /= double(n);
    }
    for (int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= double(n);
    for (int64_t i = 0; i < n; ++i)
      out[r * size_t(n) + size_t(i)] = (row[i] - mean) / std::sqrt(var + eps) * (w ? w->v[size_t(i)] : 1.0) + (b ? b->v[size_t(i)] : 0.0);
  }
  return out;
}

Tol norm_tol(DType d) {
  switch (d) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {1e-4, 1e-5};
    case kFloat16: return {3e-3, 2e-3};
    default: return {1.6e-2, 1.6e-2};
  }
}

TEST(CpuNnLayerNorm, TrailingDimsWeightBias) {
  for (DType d : kFloatTypes) {
    SCOPED_TRACE(seed_trace());
    Tensor x = random_tensor({3, 4, 70}, d), w = random_tensor({70}, d), b = random_tensor({70}, d);
    const Ref rw = read(w), rb = read(b);
    EXPECT_TRUE(close(layer_norm(x, {70}, w, b, 1e-5), ref_norm(read(x), 70, &rw, &rb, 1e-5, false), norm_tol(d),
                      "layer_norm " + std::string(dtype_name(d))));
    EXPECT_TRUE(close(layer_norm(x, {4, 70}), ref_norm(read(x), 280, nullptr, nullptr, 1e-5, false), norm_tol(d),
                      "layer_norm over two dims " + std::string(dtype_name(d))));
  }
}

TEST(CpuNnLayerNorm, LargeMeanIsStable) {
  SCOPED_TRACE(seed_trace());
  // A mean of 1e4 with unit spread: E[x^2] - mean^2 would lose every digit in f32.
  Tensor x = random_tensor({8, 512}, kFloat32, 1e4 - 1, 1e4 + 1);
  EXPECT_TRUE(close(layer_norm(x, {512}), ref_norm(read(x), 512, nullptr, nullptr, 1e-5, false), {1e-3, 1e-3},
                    "layer_norm with a large mean"));
}

TEST(CpuNnRmsNorm, WeightAndDefaultEps) {
  for (DType d : kFloatTypes) {
    SCOPED_TRACE(seed_trace());
    Tensor x = random_tensor({5, 3, 33}, d), w = random_tensor({33}, d);
    const Ref rw = read(w);
    const double feps = d == kFloat64 ? std::numeric_limits<double>::epsilon()
                        : d == kFloat32 ? double(std::numeric_limits<float>::epsilon())
                        : d == kBFloat16 ? 0.0078125 : 0.0009765625;
    EXPECT_TRUE(close(rms_norm(x, {33}, w), ref_norm(read(x), 33, &rw, nullptr, feps, true), norm_tol(d),
                      "rms_norm eps=None " + std::string(dtype_name(d))));
    EXPECT_TRUE(close(rms_norm(x, {3, 33}, std::nullopt, 0.5), ref_norm(read(x), 99, nullptr, nullptr, 0.5, true),
                      norm_tol(d), "rms_norm eps=0.5 " + std::string(dtype_name(d))));
  }
}

// ---------------------------------------------------------------- pooling

std::vector<double> ref_pool(const Ref& x, int64_t k, int64_t s, int64_t p, int64_t dl, bool is_max) {
  const size_t nd = x.sizes.size();
  const int64_t h = x.sizes[nd - 2], w = x.sizes[nd - 1];
  const int64_t oh = (h + 2 * p - dl * (k - 1) - 1) / s + 1, ow = (w + 2 * p - dl * (k - 1) - 1) / s + 1;
  const int64_t planes = int64_t(x.v.size()) / (h * w);
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xo = 0; xo < ow; ++xo) {
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t ih = y * s - p + i * dl, iw = xo * s - p + j * dl;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = x.v[size_t((pl * h + ih) * w + iw)];
            m = std::max(m, v);
            sum += v;
          }
        out.push_back(is_max ? m : sum / double(k * k));  // count_include_pad
      }
  return out;
}

TEST(CpuNnPool, MaxAndAvgAcrossGeometries) {
  struct Case {
    std::vector<int64_t> x;
    int64_t k, s, p, d;
  };
  const Case cases[] = {{{2, 3, 11, 10}, 3, 2, 1, 1}, {{1, 2, 16, 16}, 2, 2, 0, 1}, {{3, 13, 9}, 3, 1, 1, 2},
                        {{1, 1, 20, 17}, 5, 3, 2, 1}};
  for (DType d : kFloatTypes)
    for (const auto& c : cases) {
      SCOPED_TRACE(seed_trace());
      Tensor x = random_tensor(c.x, d);
      Tensor mp = max_pool2d(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {c.d, c.d});
      EXPECT_TRUE(close(mp, ref_pool(read(x), c.k, c.s, c.p, c.d, true), {0, 0},
                        "max_pool2d k" + std::to_string(c.k) + " " + std::string(dtype_name(d))));
      if (c.d == 1) {
        Tensor ap = avg_pool2d(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p});
        EXPECT_TRUE(close(ap, ref_pool(read(x), c.k, c.s, c.p, 1, false), norm_tol(d),
                          "avg_pool2d k" + std::to_string(c.k) + " " + std::string(dtype_name(d))));
      }
    }
}

TEST(CpuNnPool, DefaultStrideAndStridedInput) {
  SCOPED_TRACE(seed_trace());
  Tensor x = random_tensor({2, 12, 10, 3}, kFloat32).permute({0, 3, 1, 2});  // [2, 3, 12, 10] non-contiguous
  Tensor mp = max_pool2d(x, {2, 2});  // stride defaults to kernel_size
  ASSERT_EQ(mp.sizes(), IntArrayRef({2, 3, 6, 5}));
  EXPECT_TRUE(close(mp, ref_pool(read(x), 2, 2, 0, 1, true), {0, 0}, "max_pool2d default stride"));
}

// Note [Channels-last pooling]: a channels-last input is pooled in place into a channels-last output,
// with the values of the double reference and, the taps being visited in the same order, the same
// values as the row-major path, NaN included (it wins a max window in both).
TEST(CpuNnPool, ChannelsLastKeepsLayoutAndValues) {
  struct Case {
    std::vector<int64_t> x;
    int64_t k, s, p, d;
  };
  const Case cases[] = {{{2, 19, 11, 10}, 3, 2, 1, 1}, {{1, 8, 16, 16}, 2, 2, 0, 1}, {{2, 5, 13, 9}, 3, 1, 1, 2}};
  auto same = [](const Tensor& a, const Tensor& b) {
    const Ref ra = read(a), rb = read(b);
    if (ra.v.size() != rb.v.size()) return false;
    for (size_t i = 0; i < ra.v.size(); ++i)
      if (!(ra.v[i] == rb.v[i] || (std::isnan(ra.v[i]) && std::isnan(rb.v[i])))) return false;
    return true;
  };
  std::vector<DType> types(std::begin(kFloatTypes), std::end(kFloatTypes));
  types.push_back(kInt32);
  for (DType d : types)
    for (const auto& c : cases) {
      SCOPED_TRACE(seed_trace() + " " + std::string(dtype_name(d)));
      Tensor rm = d == kInt32 ? random_tensor(c.x, kFloat32, -100, 100).to(kInt32) : random_tensor(c.x, d);
      Tensor x = contiguous(rm, MemoryFormat::ChannelsLast);
      Tensor mp = max_pool2d(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {c.d, c.d});
      EXPECT_EQ(suggest_memory_format(mp), MemoryFormat::ChannelsLast) << "strides " << mp.strides();
      EXPECT_TRUE(close(mp, ref_pool(read(rm), c.k, c.s, c.p, c.d, true), {0, 0}, "channels-last max_pool2d"));
      EXPECT_TRUE(same(mp, max_pool2d(rm, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {c.d, c.d})));
      if (c.d == 1 && d != kInt32) {
        Tensor ap = avg_pool2d(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p});
        EXPECT_EQ(suggest_memory_format(ap), MemoryFormat::ChannelsLast);
        EXPECT_TRUE(close(ap, ref_pool(read(rm), c.k, c.s, c.p, 1, false), norm_tol(d), "channels-last avg_pool2d"));
        EXPECT_TRUE(same(ap, avg_pool2d(rm, {c.k, c.k}, {c.s, c.s}, {c.p, c.p})));
      }
      if (d == kFloat32) {  // a NaN wins its windows, in both layouts
        rm.data_ptr<float>()[7] = std::numeric_limits<float>::quiet_NaN();
        Tensor xn = contiguous(rm, MemoryFormat::ChannelsLast);
        Tensor got = max_pool2d(xn, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {c.d, c.d});
        EXPECT_TRUE(same(got, max_pool2d(rm, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, {c.d, c.d})));
        bool any_nan = false;
        for (double v : read(got).v) any_nan |= std::isnan(v);
        EXPECT_TRUE(any_nan) << "the NaN input reached no output";
      }
    }
}

}  // namespace
}  // namespace tessera

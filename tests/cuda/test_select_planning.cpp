// Host-side parts of the CUDA plugin's topk, conv_transpose2d, _resize and fake_quantize, run here
// without a GPU: topk's order keys and the bitonic network the kernels run (replayed step for step
// on the host against std::stable_sort), the cuDNN plan of a transposed convolution, the resize taps
// applied one dim at a time (the CUDA kernels' strategy) against the CPU backend's N-d loops, and the
// fake-quantize rule against values worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "conv_plan.h"
#include "tessera/dispatcher.h"
#include "tessera/fake_quantize.h"
#include "tessera/resize_taps.h"
#include "tessera/tessera.h"
#include "topk_plan.h"

namespace {

using tessera::cuda::Geometry;

// ---------------------------------------------------------------- topk

// The reference order, written independently of the keys: NaN above every number, -0 == +0.
template <typename T>
bool value_less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <typename T>
uint64_t key_of(T v) {
  if constexpr (std::is_same_v<T, float>)
    return tessera::cuda::topk_key_f32(v);
  else if constexpr (std::is_same_v<T, double>)
    return tessera::cuda::topk_key_f64(v);
  else if constexpr (std::is_signed_v<T>)
    return tessera::cuda::topk_key_signed(int64_t(v));
  else
    return tessera::cuda::topk_key_unsigned(uint64_t(v));
}

template <typename T>
std::vector<T> special_values() {
  if constexpr (std::is_floating_point_v<T>) {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    return {nan,
            -nan,
            inf,
            -inf,
            T(0),
            -T(0),
            T(1),
            T(-1),
            std::numeric_limits<T>::denorm_min(),
            -std::numeric_limits<T>::denorm_min(),
            std::numeric_limits<T>::max(),
            std::numeric_limits<T>::lowest(),
            T(0.5),
            T(-2.5)};
  } else {
    return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T(0), T(1),
            T(std::numeric_limits<T>::max() / 2)};
  }
}

template <typename T>
void expect_keys_order_like_values(std::mt19937& rng) {
  std::vector<T> v = special_values<T>();
  std::uniform_real_distribution<double> u(-100, 100);
  for (int i = 0; i < 60; ++i) {
    double d = u(rng);
    if constexpr (std::is_unsigned_v<T>) d = std::fabs(d);
    v.push_back(T(d));
  }
  for (T a : v)
    for (T b : v) {
      const uint64_t ka = key_of(a), kb = key_of(b);
      ASSERT_EQ(ka < kb, value_less(a, b)) << double(a) << " vs " << double(b);
      ASSERT_EQ(ka == kb, !value_less(a, b) && !value_less(b, a)) << double(a) << " vs " << double(b);
    }
}

TEST(TopkPlanning, KeysOrderValuesAsTopkDoes) {
  std::mt19937 rng(std::random_device{}());
  expect_keys_order_like_values<float>(rng);
  expect_keys_order_like_values<double>(rng);
  expect_keys_order_like_values<int8_t>(rng);
  expect_keys_order_like_values<int16_t>(rng);
  expect_keys_order_like_values<int32_t>(rng);
  expect_keys_order_like_values<int64_t>(rng);
  expect_keys_order_like_values<uint8_t>(rng);
  // The padding key sorts after everything, NaN included, in both directions.
  for (bool largest : {false, true}) {
    EXPECT_GE(tessera::cuda::kTopkPadKey, tessera::cuda::topk_sort_key(key_of(std::nanf("")), largest));
    EXPECT_GE(tessera::cuda::kTopkPadKey, tessera::cuda::topk_sort_key(key_of(int64_t(INT64_MIN)), largest));
  }
}

TEST(TopkPlanning, PlanCrossesTilesOnlyWithGlobalSteps) {
  using Step = tessera::cuda::BitonicStep;
  EXPECT_TRUE(tessera::cuda::plan_bitonic(1).empty());
  const auto small = tessera::cuda::plan_bitonic(512);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].kind, Step::TileSort);
  const int64_t padded = int64_t(1) << 15, tile = tessera::cuda::kBitonicTile;
  int globals = 0, merges = 0;
  for (const Step& s : tessera::cuda::plan_bitonic(padded)) {
    if (s.kind == Step::Global) {
      ++globals;
      EXPECT_GE(s.stride, tile);
      EXPECT_LT(s.stride, s.size);
    }
    if (s.kind == Step::TileMerge) ++merges;
  }
  EXPECT_EQ(merges, 4);               // sizes 2^12 .. 2^15
  EXPECT_EQ(globals, 1 + 2 + 3 + 4);  // strides 2^11 .. size / 2 of each
  EXPECT_EQ(tessera::cuda::topk_padded(0), 1);
  EXPECT_EQ(tessera::cuda::topk_padded(5), 8);
  EXPECT_EQ(tessera::cuda::topk_padded(4096), 4096);
  EXPECT_EQ(tessera::cuda::topk_padded(INT64_MAX), 0);  // overflow: refused
}

// Rows of every length class (one tile, several tiles, not a power of two), with ties and NaN: the
// replayed network's first k entries are the stable sort's, by value then ascending index.
TEST(TopkPlanning, BitonicStepsSortRowsLikeAStableSort) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int64_t n : {1, 2, 3, 7, 100, 2048, 2049, 5000, 9001})
    for (bool largest : {true, false}) {
      const int64_t rows = 3, padded = tessera::cuda::topk_padded(n);
      std::vector<float> values(size_t(rows * n));
      std::uniform_int_distribution<int> pick(-20, 20);
      for (float& v : values) v = pick(rng) == 20 ? std::nanf("") : float(pick(rng)) * 0.5f;  // many ties
      std::vector<uint64_t> keys(size_t(rows * padded));
      std::vector<int64_t> idx(size_t(rows * padded));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < padded; ++j) {
          keys[size_t(r * padded + j)] =
              j < n ? tessera::cuda::topk_sort_key(tessera::cuda::topk_key_f32(values[size_t(r * n + j)]),
                                                   largest)
                    : tessera::cuda::kTopkPadKey;
          idx[size_t(r * padded + j)] = j;
        }
      tessera::cuda::bitonic_sort_on_host(keys.data(), idx.data(), rows, padded);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int64_t> want(static_cast<size_t>(n));
        std::iota(want.begin(), want.end(), 0);
        const float* row = values.data() + r * n;
        std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
          return largest ? value_less(row[b], row[a]) : value_less(row[a], row[b]);
        });
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(idx[size_t(r * padded + j)], want[size_t(j)])
              << "seed " << seed << " n " << n << (largest ? " largest" : " smallest") << " row " << r
              << " rank " << j;
      }
    }
}

// ---------------------------------------------------------------- conv_transpose2d

Geometry geometry_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  return Geometry{int32_t(sizes.size()), sizes.data(), strides.data()};
}

std::vector<int64_t> packed(const std::vector<int64_t>& sizes, bool channels_last) {
  int64_t s[4];
  tessera::cuda::conv_packed_strides(
      sizes.data(), channels_last ? tessera::cuda::ConvLayout::NHWC : tessera::cuda::ConvLayout::NCHW, s);
  return {s[0], s[1], s[2], s[3]};
}

// The conformance kit's case: input [1, 4, 5, 5], weight [4, 3, 3, 3], groups 2, stride 2, padding
// 1, output_padding 1: output [1, 6, 10, 10] ((5 - 1) * 2 - 2 + 2 + 1 + 1).
TEST(ConvPlanning, TransposedConvIsTheBackwardDataOfItsConvolution) {
  using tessera::cuda::ConvLayout;
  const std::vector<int64_t> xs = {1, 4, 5, 5}, ws = {4, 3, 3, 3}, ys = {1, 6, 10, 10};
  const std::vector<int64_t> xst = packed(xs, false), wst = packed(ws, false), yst = packed(ys, false);
  const int64_t pad[2] = {1, 1}, stride[2] = {2, 2}, dil[2] = {1, 1}, op1[2] = {1, 1}, op0[2] = {0, 0};
  tessera::cuda::ConvPlan p;
  std::string why;
  ASSERT_TRUE(tessera::cuda::plan_conv_transpose(geometry_of(xs, xst), geometry_of(ws, wst),
                                                 geometry_of(ys, yst), pad, stride, op1, dil, 2, &p, &why))
      << why;
  // cuDNN's x is the transposed convolution's output, its y the input.
  EXPECT_EQ(std::vector<int64_t>(p.x, p.x + 4), ys);
  EXPECT_EQ(std::vector<int64_t>(p.y, p.y + 4), xs);
  EXPECT_EQ(std::vector<int64_t>(p.w, p.w + 4), ws);
  EXPECT_EQ(p.groups, 2);
  EXPECT_EQ(p.layout, ConvLayout::NCHW);
  EXPECT_FALSE(p.copy_x || p.copy_w || p.copy_y);
  // Without output_padding the output is [1, 6, 9, 9]; an output the input cannot come from (12 x 12
  // would be the convolution of a 6 x 6 input) is refused.
  const std::vector<int64_t> y9 = {1, 6, 9, 9}, y12 = {1, 6, 12, 12};
  const std::vector<int64_t> y9st = packed(y9, false), y12st = packed(y12, false);
  EXPECT_TRUE(tessera::cuda::plan_conv_transpose(geometry_of(xs, xst), geometry_of(ws, wst),
                                                 geometry_of(y9, y9st), pad, stride, op0, dil, 2, &p, &why))
      << why;
  EXPECT_FALSE(tessera::cuda::plan_conv_transpose(geometry_of(xs, xst), geometry_of(ws, wst),
                                                  geometry_of(y12, y12st), pad, stride, op1, dil, 2, &p,
                                                  &why));
  // The format follows the output (the input of cuDNN's y is re-packed).
  const std::vector<int64_t> ycl = packed(ys, true);
  ASSERT_TRUE(tessera::cuda::plan_conv_transpose(geometry_of(xs, xst), geometry_of(ws, wst),
                                                 geometry_of(ys, ycl), pad, stride, op1, dil, 2, &p, &why));
  EXPECT_EQ(p.layout, ConvLayout::NHWC);
  EXPECT_FALSE(p.copy_x);
  EXPECT_TRUE(p.copy_y && p.copy_w);
  // output_padding at or above the stride (PyTorch allows it below the dilation): refused.
  const int64_t op2[2] = {2, 0}, dil3[2] = {3, 1};
  const std::vector<int64_t> y13 = {1, 6, 15, 10};  // (5 - 1) * 2 - 2 + 3 * 2 + 2 + 1
  const std::vector<int64_t> y13st = packed(y13, false);
  EXPECT_FALSE(tessera::cuda::plan_conv_transpose(geometry_of(xs, xst), geometry_of(ws, wst),
                                                  geometry_of(y13, y13st), pad, stride, op2, dil3, 2, &p,
                                                  &why));
  EXPECT_NE(why.find("output_padding"), std::string::npos) << why;
}

// Note [Pooling on cuDNN]: the descriptors of max_pool2d / avg_pool2d problems, and what stays on the
// plugin's kernel.
TEST(PoolPlanning, CudnnDescriptorsAndRefusals) {
  using tessera::cuda::CudnnPool;
  using tessera::cuda::plan_cudnn_pool;
  const int64_t x[4] = {2, 5, 13, 12}, y[4] = {2, 5, 7, 6};
  const std::vector<int64_t> xst = packed({2, 5, 13, 12}, false), yst = packed({2, 5, 7, 6}, false);
  const int64_t window[2] = {3, 2}, padding[2] = {1, 1}, stride[2] = {2, 2}, one[2] = {1, 1};
  CudnnPool p;
  ASSERT_EQ(plan_cudnn_pool(tessera::cuda::kDtF16, x, xst.data(), y, yst.data(), window, padding, stride, one, &p), "");
  EXPECT_EQ(std::vector<int>(p.x, p.x + 4), (std::vector<int>{2, 5, 13, 12}));
  EXPECT_EQ(std::vector<int>(p.x_strides, p.x_strides + 4), (std::vector<int>{780, 156, 12, 1}));
  EXPECT_EQ(std::vector<int>(p.y, p.y + 4), (std::vector<int>{2, 5, 7, 6}));
  EXPECT_EQ(std::vector<int>(p.y_strides, p.y_strides + 4), (std::vector<int>{210, 42, 6, 1}));
  EXPECT_EQ(p.window[0], 3);
  EXPECT_EQ(p.window[1], 2);
  EXPECT_EQ(p.padding[1], 1);
  EXPECT_EQ(p.stride[0], 2);
  // Channels-last input and output: their strides as they lie (C innermost).
  const std::vector<int64_t> xcl = packed({2, 5, 13, 12}, true), ycl = packed({2, 5, 7, 6}, true);
  ASSERT_EQ(plan_cudnn_pool(tessera::cuda::kDtF32, x, xcl.data(), y, ycl.data(), window, padding, stride, one, &p), "");
  EXPECT_EQ(std::vector<int>(p.x_strides, p.x_strides + 4), (std::vector<int>{780, 1, 60, 5}));
  // A 3-D input is N = 1 with stride 0: the stride says nothing and becomes the span of the rest.
  const int64_t x1[4] = {1, 5, 13, 12}, y1[4] = {1, 5, 7, 6};
  const int64_t x1st[4] = {0, 156, 12, 1}, y1st[4] = {0, 42, 6, 1};
  ASSERT_EQ(plan_cudnn_pool(tessera::cuda::kDtF64, x1, x1st, y1, y1st, window, padding, stride, one, &p), "");
  EXPECT_EQ(p.x_strides[0], 780);
  EXPECT_EQ(p.y_strides[0], 210);
  // Refused: dilation, integers, sizes beyond int, an empty tensor.
  const int64_t two[2] = {2, 1};
  EXPECT_NE(plan_cudnn_pool(tessera::cuda::kDtF32, x, xst.data(), y, yst.data(), window, padding, stride, two, &p)
                .find("dilation"),
            std::string::npos);
  EXPECT_NE(plan_cudnn_pool(tessera::cuda::kDtI64, x, xst.data(), y, yst.data(), window, padding, stride, one, &p)
                .find("floating"),
            std::string::npos);
  const int64_t huge[4] = {1, 1, int64_t(1) << 31, 4}, huge_st[4] = {0, 0, 4, 1};
  EXPECT_NE(plan_cudnn_pool(tessera::cuda::kDtF32, huge, huge_st, y, yst.data(), window, padding, stride, one, &p)
                .find("beyond int"),
            std::string::npos);
  const int64_t wide[4] = {1, 70000, 70000, 1}, wide_st[4] = {0, 70000, 1, 1};  // a span of 4.9e9 elements
  EXPECT_NE(plan_cudnn_pool(tessera::cuda::kDtF32, wide, wide_st, y, yst.data(), window, padding, stride, one, &p),
            "");
  const int64_t empty[4] = {0, 5, 13, 12};
  EXPECT_NE(plan_cudnn_pool(tessera::cuda::kDtF32, empty, xst.data(), y, yst.data(), window, padding, stride, one, &p),
            "");
}

// Note [batch_norm on cuDNN]: 2 to 4 dims as 4-D descriptors (trailing 1s), channels-last strides
// as they lie; 5 dims, integers and sizes beyond int stay on the plugin's path.
TEST(BatchNormPlanning, CudnnDescriptorsAndRefusals) {
  using tessera::cuda::CudnnBatchNorm;
  using tessera::cuda::plan_cudnn_batch_norm;
  CudnnBatchNorm p;
  ASSERT_EQ(plan_cudnn_batch_norm(tessera::cuda::kDtF32, {5, 6}, {6, 1}, {6, 1}, &p), "");
  EXPECT_EQ(std::vector<int>(p.x, p.x + 4), (std::vector<int>{5, 6, 1, 1}));
  EXPECT_EQ(std::vector<int>(p.x_strides, p.x_strides + 4), (std::vector<int>{6, 1, 30, 30}));
  ASSERT_EQ(plan_cudnn_batch_norm(tessera::cuda::kDtBF16, {4, 6, 11}, {66, 11, 1}, {66, 11, 1}, &p), "");
  EXPECT_EQ(std::vector<int>(p.x, p.x + 4), (std::vector<int>{4, 6, 11, 1}));
  EXPECT_EQ(std::vector<int>(p.x_strides, p.x_strides + 4), (std::vector<int>{66, 11, 1, 264}));
  const std::vector<int64_t> cl = packed({3, 6, 9, 7}, true), nchw = packed({3, 6, 9, 7}, false);
  ASSERT_EQ(plan_cudnn_batch_norm(tessera::cuda::kDtF16, {3, 6, 9, 7}, cl, nchw, &p), "");
  EXPECT_EQ(std::vector<int>(p.x_strides, p.x_strides + 4), (std::vector<int>{378, 1, 42, 6}));
  EXPECT_EQ(std::vector<int>(p.y_strides, p.y_strides + 4), (std::vector<int>{378, 63, 7, 1}));
  EXPECT_NE(plan_cudnn_batch_norm(tessera::cuda::kDtF32, {2, 6, 3, 4, 5}, {360, 60, 20, 5, 1}, {360, 60, 20, 5, 1}, &p)
                .find("rank 5"),
            std::string::npos);
  EXPECT_NE(plan_cudnn_batch_norm(tessera::cuda::kDtI32, {5, 6}, {6, 1}, {6, 1}, &p).find("floating"), std::string::npos);
  EXPECT_NE(plan_cudnn_batch_norm(tessera::cuda::kDtF32, {int64_t(1) << 31, 2}, {2, 1}, {2, 1}, &p), "");
  EXPECT_NE(plan_cudnn_batch_norm(tessera::cuda::kDtF32, {0, 6}, {6, 1}, {6, 1}, &p), "");
}

// ---------------------------------------------------------------- _resize

TEST(ResizeTaps, MatchValuesWorkedOutByHand) {
  using namespace tessera::resize;
  // nearest, asymmetric, floor, 3 -> 5: x = o * 3 / 5 = 0, 0.6, 1.2, 1.8, 2.4.
  Taps t = dim_taps("nearest", Coord::Asymmetric, Nearest::Floor, 3, 5, 5.0 / 3.0, -0.75, false);
  EXPECT_EQ(t.n, 1);
  EXPECT_EQ(t.index, (std::vector<int64_t>{0, 0, 1, 1, 2}));
  // linear, half_pixel, 4 -> 8: x = (o + 0.5) / 2 - 0.5. o = 0: x = -0.25, taps (-1, 0) clamped to
  // (0, 0) with weights (0.25, 0.75); o = 3: x = 1.25, taps (1, 2), weights (0.75, 0.25).
  t = dim_taps("linear", Coord::HalfPixel, Nearest::RoundPreferFloor, 4, 8, 2.0, -0.75, false);
  EXPECT_EQ(t.n, 2);
  EXPECT_EQ(t.index[0], 0);
  EXPECT_EQ(t.index[1], 0);
  EXPECT_DOUBLE_EQ(t.weight[0], 0.25);
  EXPECT_DOUBLE_EQ(t.weight[1], 0.75);
  EXPECT_EQ(t.index[6], 1);
  EXPECT_EQ(t.index[7], 2);
  EXPECT_DOUBLE_EQ(t.weight[6], 0.75);
  EXPECT_DOUBLE_EQ(t.weight[7], 0.25);
  // cubic weights of any ratio sum to 1 (Keys' kernel), and an integral coordinate is that pixel.
  t = dim_taps("cubic", Coord::AlignCorners, Nearest::RoundPreferFloor, 5, 9, 9.0 / 5.0, -0.5, false);
  EXPECT_EQ(t.n, 4);
  for (int64_t o = 0; o < 9; ++o) {
    double sum = 0;
    for (int k = 0; k < 4; ++k) sum += t.weight[size_t(o * 4 + k)];
    EXPECT_NEAR(sum, 1.0, 1e-12) << o;
  }
  // align_corners maps o = 8 to x = 4 exactly: weights (0, 0, 1, 0) around base 3.
  EXPECT_NEAR(t.weight[8 * 4 + 2], 1.0, 1e-12);
  EXPECT_EQ(t.index[8 * 4 + 2], 4);
}

// The CUDA kernels resize one dim at a time (the weights of the dims multiply): that equals the CPU
// backend's N-d loops over fresh random data, for every mode and several coordinate modes.
TEST(ResizeTaps, OneDimAtATimeEqualsTheCpuBackend) {
  using namespace tessera::resize;
  const std::vector<int64_t> in_sizes = {2, 3, 5, 6}, size = {7, 4};
  const tessera::Tensor x = tessera::randn(in_sizes, tessera::dtype(tessera::kFloat64));
  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* coord : {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"})
      for (bool exclude : {false, true}) {
        tessera::Stack r =
            d.call_boxed(d.op("_resize"), tessera::Stack{x, size, std::string(mode), std::string(coord),
                                                         std::string("round_prefer_ceil"), -0.75, exclude});
        const tessera::Tensor want = std::get<tessera::Tensor>(r[0]).contiguous();
        // dims 2 and 3, one after the other, in double.
        std::vector<double> cur(x.contiguous().data_ptr<double>(),
                                x.contiguous().data_ptr<double>() + x.numel());
        std::vector<int64_t> sizes = in_sizes;
        for (int j = 0; j < 2; ++j) {
          const int dim = 2 + j;
          const int64_t n_in = sizes[size_t(dim)], n_out = size[size_t(j)];
          const Taps t = dim_taps(mode, coord_mode(coord), nearest_mode("round_prefer_ceil"), n_in, n_out,
                                  double(n_out) / double(n_in), -0.75, exclude);
          int64_t outer = 1, inner = 1;
          for (int q = 0; q < dim; ++q) outer *= sizes[size_t(q)];
          for (size_t q = size_t(dim) + 1; q < sizes.size(); ++q) inner *= sizes[q];
          std::vector<double> next(size_t(outer * n_out * inner), 0.0);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t a = 0; a < n_out; ++a)
              for (int64_t i = 0; i < inner; ++i) {
                double acc = 0;
                for (int k = 0; k < t.n; ++k)
                  acc += t.weight[size_t(a * t.n + k)] *
                         cur[size_t((o * n_in + t.index[size_t(a * t.n + k)]) * inner + i)];
                next[size_t((o * n_out + a) * inner + i)] = acc;
              }
          cur = std::move(next);
          sizes[size_t(dim)] = n_out;
        }
        ASSERT_EQ(want.sizes(), sizes);
        const double* w = want.data_ptr<double>();
        for (size_t e = 0; e < cur.size(); ++e)
          ASSERT_NEAR(cur[e], w[e], 1e-12 * (1 + std::fabs(w[e])))
              << mode << " " << coord << " exclude " << exclude << " at " << e;
      }
}

// ---------------------------------------------------------------- fake_quantize

TEST(FakeQuantizeRule, MatchesValuesWorkedOutByHand) {
  const float scale = 0.1f, inv = 1.0f / scale;
  // 1.234 / 0.1 = 12.34 -> 12, + 10 = 22 -> (22 - 10) * 0.1
  EXPECT_EQ(tessera::fake_quantize_value(1.234f, scale, inv, 10, 0, 255), 12.0f * scale);
  // below quant_min: clamped to 0 -> (0 - 10) * 0.1
  EXPECT_EQ(tessera::fake_quantize_value(-5.0f, scale, inv, 10, 0, 255), -10.0f * scale);
  // above quant_max: 255 -> 245 * 0.1
  EXPECT_EQ(tessera::fake_quantize_value(1e6f, scale, inv, 10, 0, 255), 245.0f * scale);
  // NaN gives quant_min
  EXPECT_EQ(tessera::fake_quantize_value(std::nanf(""), scale, inv, 10, 0, 255), -10.0f * scale);
  // ties round to even: 0.25 * 10 = 2.5 -> 2, and 0.35 * 10 = 3.5 -> 4
  EXPECT_EQ(tessera::fake_quantize_value(0.25f, 1.0f / 10, 10.0f, 0, -128, 127), 2.0f * (1.0f / 10));
  EXPECT_EQ(tessera::fake_quantize_value(3.5f, 1.0f, 1.0f, 0, -128, 127), 4.0f);
  EXPECT_EQ(tessera::fake_quantize_value(-2.5f, 1.0f, 1.0f, 0, -128, 127), -2.0f);
}

}  // namespace

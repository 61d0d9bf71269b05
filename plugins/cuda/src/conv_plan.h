// How conv2d is described to cuDNN (Note [conv2d on cuDNN], ops.cpp): pure C++, unit-tested on the
// host (tests/cuda/test_launch_planning.cpp, ConvPlanning.*).
// cuDNN's 4-D descriptors take int sizes and strides, and its fast algorithms want the input, the
// filter and the output packed in one format. The format is the output's: NHWC when the dispatcher
// made it channels-last (PyTorch's rule: a channels-last input or weight gives a channels-last
// output), else NCHW. An operand not packed in that format is re-packed first (the output: computed
// into a packed temporary, then copied). A 3-D (unbatched) input is [1, C, H, W].
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "tensor_iter.h"

namespace tessera::cuda {

enum class ConvLayout { NCHW, NHWC };

// Packed strides of [N, C, H, W] sizes in `layout`.
inline void conv_packed_strides(const int64_t sizes[4], ConvLayout layout, int64_t strides[4]) {
  if (layout == ConvLayout::NCHW) {
    strides[3] = 1;
    strides[2] = sizes[3];
    strides[1] = sizes[2] * sizes[3];
    strides[0] = sizes[1] * sizes[2] * sizes[3];
  } else {
    strides[1] = 1;
    strides[3] = sizes[1];
    strides[2] = sizes[3] * sizes[1];
    strides[0] = sizes[2] * sizes[3] * sizes[1];
  }
}

struct ConvPlan {
  ConvLayout layout = ConvLayout::NCHW;
  int64_t x[4] = {}, w[4] = {}, y[4] = {};  // [N, C, H, W], [O, C / groups, kh, kw], [N, O, OH, OW]
  bool copy_x = false, copy_w = false, copy_y = false;
  int32_t pad[2] = {}, stride[2] = {}, dilation[2] = {}, groups = 1;
};

namespace detail {
// `g` (3-D unbatched or 4-D) as [N, C, H, W] sizes and strides.
inline bool conv_dims(const Geometry& g, int64_t sizes[4], int64_t strides[4]) {
  if (g.ndim != 3 && g.ndim != 4) return false;
  const int off = 4 - g.ndim;
  sizes[0] = 1;
  strides[0] = 0;
  for (int i = 0; i < g.ndim; ++i) {
    sizes[i + off] = g.sizes[i];
    strides[i + off] = g.strides[i];
  }
  return true;
}
inline bool conv_is_packed(const int64_t sizes[4], const int64_t strides[4], ConvLayout layout) {
  int64_t packed[4];
  conv_packed_strides(sizes, layout, packed);
  for (int i = 0; i < 4; ++i)
    if (sizes[i] != 1 && strides[i] != packed[i]) return false;
  return true;
}
inline bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); }
inline bool numel_fits_int(const int64_t sizes[4]) {
  int64_t n = 1;
  for (int i = 0; i < 4; ++i)
    if (__builtin_mul_overflow(n, sizes[i], &n) || !fits_int(n)) return false;
  return true;
}
}  // namespace detail

// False, with the reason, when cuDNN cannot be given this problem (the CPU fallback takes it).
// The memory format is y's (the output of conv2d), or x's when `format_of_x` (conv_transpose2d).
inline bool plan_conv(const Geometry& x, const Geometry& w, const Geometry& y, const int64_t pad[2],
                      const int64_t stride[2], const int64_t dilation[2], int64_t groups, ConvPlan* plan,
                      std::string* why, bool format_of_x = false) {
  int64_t xs[4], ws[4], ys[4];
  if (!detail::conv_dims(x, plan->x, xs) || w.ndim != 4 || !detail::conv_dims(y, plan->y, ys) || x.ndim != y.ndim) {
    *why = "conv2d needs a 3-D or 4-D input and output and a 4-D weight";
    return false;
  }
  for (int i = 0; i < 4; ++i) {
    plan->w[i] = w.sizes[i];
    ws[i] = w.strides[i];
  }
  if (!detail::numel_fits_int(plan->x) || !detail::numel_fits_int(plan->w) || !detail::numel_fits_int(plan->y)) {
    *why = "an operand of more than 2^31 - 1 elements (cuDNN's 4-D descriptors take int strides)";
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    if (!detail::fits_int(pad[i]) || stride[i] < 1 || !detail::fits_int(stride[i]) || dilation[i] < 1 ||
        !detail::fits_int(dilation[i])) {
      *why = "padding, stride or dilation outside cuDNN's int range";
      return false;
    }
    plan->pad[i] = int32_t(pad[i]);
    plan->stride[i] = int32_t(stride[i]);
    plan->dilation[i] = int32_t(dilation[i]);
  }
  if (groups < 1 || !detail::fits_int(groups) || plan->x[1] != plan->w[1] * groups || plan->w[0] % groups != 0 ||
      plan->y[1] != plan->w[0] || plan->y[0] != plan->x[0]) {
    *why = "channels that do not match the weight and groups";
    return false;
  }
  plan->groups = int32_t(groups);
  const int64_t* fs = format_of_x ? plan->x : plan->y;
  const int64_t* fst = format_of_x ? xs : ys;
  plan->layout = y.ndim == 4 && !detail::conv_is_packed(fs, fst, ConvLayout::NCHW) &&
                         detail::conv_is_packed(fs, fst, ConvLayout::NHWC)
                     ? ConvLayout::NHWC
                     : ConvLayout::NCHW;
  plan->copy_x = !detail::conv_is_packed(plan->x, xs, plan->layout);
  plan->copy_w = !detail::conv_is_packed(plan->w, ws, plan->layout);
  plan->copy_y = !detail::conv_is_packed(plan->y, ys, plan->layout);
  return true;
}

// conv_transpose2d as cuDNN's backward-data pass of the convolution it transposes (Note
// [conv_transpose2d on cuDNN], ops.cpp): that convolution maps the transposed one's output to its
// input, so the plan is plan_conv(output, weight, input) (the weight [C_in, C_out / groups, kh, kw]
// as it lies is that convolution's [K, C / groups, kh, kw] filter), in the output's memory format.
// cuDNN derives the input's size from the output's, so output_padding must stay below the stride
// (PyTorch also allows it below the dilation; that case goes to the CPU fallback).
inline bool plan_conv_transpose(const Geometry& input, const Geometry& w, const Geometry& out,
                                const int64_t pad[2], const int64_t stride[2],
                                const int64_t output_padding[2], const int64_t dilation[2], int64_t groups,
                                ConvPlan* plan, std::string* why) {
  if (!plan_conv(out, w, input, pad, stride, dilation, groups, plan, why, /*format_of_x=*/true)) return false;
  for (int i = 0; i < 2; ++i) {
    const int64_t span = plan->x[2 + i] + 2 * pad[i] - dilation[i] * (plan->w[2 + i] - 1) - 1;
    if (output_padding[i] < 0 || output_padding[i] >= stride[i]) {
      *why = "output_padding " + std::to_string(output_padding[i]) + " not below the stride " +
             std::to_string(stride[i]) + " (cuDNN's backward data derives the input size from the output's)";
      return false;
    }
    if (span < 0 || span / stride[i] + 1 != plan->y[2 + i]) {
      *why = "an output whose convolution is not the input's size";
      return false;
    }
  }
  return true;
}

// The dtypes cuDNN's pooling and batch norm take.
inline bool cudnn_floating(int32_t dtype) {
  return dtype == kDtF16 || dtype == kDtBF16 || dtype == kDtF32 || dtype == kDtF64;
}

// A 4-D tensor as cuDNN's descriptors take it: int sizes and strides, none empty. A stride of a dim
// of size 1 says nothing (a 3-D input is N = 1 with stride 0): it becomes the span of the other
// dims, which cuDNN accepts. False when something does not fit an int.
inline bool cudnn_4d(const int64_t sizes[4], const int64_t strides[4], int dims[4], int out_strides[4]) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  int64_t span = 1;
  for (int d = 0; d < 4; ++d) {
    if (sizes[d] <= 0 || sizes[d] > kMax) return false;
    if (sizes[d] > 1 && (strides[d] <= 0 || strides[d] > kMax)) return false;
    if (sizes[d] > 1) span = std::max(span, strides[d] * sizes[d]);
  }
  if (span > kMax) return false;
  for (int d = 0; d < 4; ++d) {
    dims[d] = int(sizes[d]);
    out_strides[d] = int(sizes[d] > 1 ? strides[d] : span);
  }
  return true;
}

// Note [Pooling on cuDNN]
// max_pool2d and avg_pool2d of float16, bfloat16, float32 and float64 run cuDNN's pooling forward
// (cuDNN 9's legacy API) on the input and the output where they lie: their 4-D strides go into the
// descriptors, so NCHW and channels-last need no copy. Max is CUDNN_POOLING_MAX_DETERMINISTIC with
// NaN propagated (a window holding a NaN gives NaN, as PyTorch); avg is COUNT_INCLUDE_PADDING,
// PyTorch's count_include_pad=True: in floor mode every window lies inside the padded input, so
// both divide by kh * kw. What cuDNN's pooling cannot say runs on the plugin's kernel
// (plan_cudnn_pool's refusal): dilation above 1, integer dtypes, sizes or strides beyond int; and so
// does what cuDNN itself refuses before it queues anything (logged once). TESSERA_CUDA_CUDNN_POOLING=0
// turns the path off (bench_cuda times both).
struct CudnnPool {
  int x[4] = {}, x_strides[4] = {}, y[4] = {}, y_strides[4] = {};  // [N, C, H, W] sizes, element strides
  int window[2] = {}, padding[2] = {}, stride[2] = {};
};

// The descriptors of a pooling problem ([N, C, H, W] sizes and strides of input and output, window,
// padding, stride, dilation) for cuDNN, or why it does not take it.
inline std::string plan_cudnn_pool(int32_t dtype, const int64_t x[4], const int64_t x_strides[4], const int64_t y[4],
                                   const int64_t y_strides[4], const int64_t window[2], const int64_t padding[2],
                                   const int64_t stride[2], const int64_t dilation[2], CudnnPool* out) {
  if (!cudnn_floating(dtype)) return "not a floating dtype";
  if (dilation[0] != 1 || dilation[1] != 1) return "dilation (cuDNN's pooling has none)";
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  auto fits = [&](int64_t v) { return v >= 0 && v <= kMax; };
  if (!cudnn_4d(x, x_strides, out->x, out->x_strides)) return "input sizes or strides beyond int, or empty";
  if (!cudnn_4d(y, y_strides, out->y, out->y_strides)) return "output sizes or strides beyond int, or empty";
  for (int i = 0; i < 2; ++i) {
    if (!fits(window[i]) || !fits(padding[i]) || !fits(stride[i])) return "window, padding or stride beyond int";
    out->window[i] = int(window[i]);
    out->padding[i] = int(padding[i]);
    out->stride[i] = int(stride[i]);
  }
  return {};
}

// Note [batch_norm on cuDNN]
// batch_norm in inference mode (training=False) of float16, bfloat16, float32 and float64 inputs of
// 2 to 4 dims runs cudnnBatchNormalizationForwardInference (spatial mode) on the input and output
// where they lie: [N, C] is [N, C, 1, 1] and [N, C, L] is [N, C, L, 1]. One pass over the tensor,
// y = weight * (x - mean) / sqrt(var + eps) + bias with the statistics in float (double for
// float64), as PyTorch's CUDA batch_norm, which also calls cuDNN here; the plugin's own path
// (per-channel scale and shift, then a multiply and an add over the tensor) takes 2 to 3 passes.
// An absent weight is ones and an absent bias zeros. What plan_cudnn_batch_norm refuses (5 or more
// dims, integer dtypes, sizes or strides beyond int) and what cuDNN refuses before queueing run the
// plugin's path. TESSERA_CUDA_CUDNN_BATCH_NORM=0 turns cuDNN off (bench_cuda times both).
struct CudnnBatchNorm {
  int x[4] = {}, x_strides[4] = {}, y_strides[4] = {};
};

inline std::string plan_cudnn_batch_norm(int32_t dtype, const std::vector<int64_t>& sizes,
                                         const std::vector<int64_t>& x_strides,
                                         const std::vector<int64_t>& y_strides, CudnnBatchNorm* out) {
  if (!cudnn_floating(dtype)) return "not a floating dtype";
  if (sizes.size() < 2 || sizes.size() > 4 || x_strides.size() != sizes.size() || y_strides.size() != sizes.size())
    return "rank " + std::to_string(sizes.size()) + " (cuDNN's 4-D descriptors: 2 to 4 dims)";
  int64_t s4[4] = {1, 1, 1, 1}, xs4[4] = {0, 0, 0, 0}, ys4[4] = {0, 0, 0, 0};
  for (size_t d = 0; d < sizes.size(); ++d) {
    s4[d] = sizes[d];
    xs4[d] = x_strides[d];
    ys4[d] = y_strides[d];
  }
  int unused[4];
  if (!cudnn_4d(s4, xs4, out->x, out->x_strides) || !cudnn_4d(s4, ys4, unused, out->y_strides))
    return "sizes or strides beyond int, or an empty tensor";
  return {};
}

}  // namespace tessera::cuda

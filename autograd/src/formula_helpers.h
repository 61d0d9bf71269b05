// Helpers the backward formulas of dispatcher/ops/derivatives.json call (its "helpers" list names
// each; gen_derivatives.py refuses a formula that calls anything else but contract ops). Every
// helper is written with contract ops only, so it runs on every device and traces.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/ops.h"

namespace tessera::autograd::formulas {

using Sizes = std::vector<int64_t>;

// An input's sizes as a formula reads them ('<arg>_sizes'). Under a capture with dynamic shapes
// (Note [Dynamic sizes in backward formulas]) `like` is the input itself, a tracing tensor without
// memory, and `dynamic` says which of its dims are symbolic; both are empty otherwise.
struct SavedSizes : Sizes {
  SavedSizes() = default;
  SavedSizes(Sizes sizes, Tensor like = Tensor(), std::vector<bool> dynamic = {})  // NOLINT(google-explicit-constructor)
      : Sizes(std::move(sizes)), like(std::move(like)), dynamic(std::move(dynamic)) {}
  Tensor like;
  std::vector<bool> dynamic;
};

Tensor scale_grad(const Tensor& grad, const Scalar& alpha);
Tensor mask_grad(const Tensor& grad, const Tensor& mask);
Tensor zero_where(const Tensor& grad, const Tensor& mask);
Tensor sign_of(const Tensor& x);
Tensor pow_backward(const Tensor& grad, const Tensor& self, const Scalar& exponent);
Tensor pow_backward_self(const Tensor& grad, const Tensor& self, const Tensor& exponent);
Tensor pow_backward_exponent(const Tensor& grad, const Tensor& self, const Tensor& result);
Tensor erf_backward(const Tensor& grad, const Tensor& self);
Tensor gelu_backward(const Tensor& grad, const Tensor& self, const std::string& approximate);
Tensor silu_backward(const Tensor& grad, const Tensor& self);
Tensor clamp_backward(const Tensor& grad, const Tensor& self, const std::optional<Scalar>& min,
                      const std::optional<Scalar>& max);
// prelu: weight holds 1 value or one per channel (dim 1 of self); returns {d self, d weight}.
std::vector<Tensor> prelu_backward(const Tensor& grad, const Tensor& self, const Tensor& weight);
// _prelu_kernel: weight broadcast against self; d weight unreduced (the engine sums it to shape).
std::vector<Tensor> prelu_kernel_backward(const Tensor& grad, const Tensor& self, const Tensor& weight);
// repeat: grad as [r0, s0, r1, s1, ...] summed over the repeats.
Tensor repeat_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& repeats);
// pad: "constant": the grad padded by the negated amounts (a crop; a negative pad's cropped
// elements get zeros); "reflect", "replicate", "circular": each padded element's gradient added to
// the input element it copied, dim by dim.
Tensor pad_backward(const Tensor& grad, const Sizes& pad, const std::string& mode);
// _resize: grad times each resized dim's weights transposed (Note [Resize backward]).
Tensor resize_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& size, const std::string& mode,
                       const std::string& coordinate_transformation_mode, const std::string& nearest_mode,
                       double cubic_coeff_a, bool exclude_outside, const std::optional<Tensor>& scales);
// linalg_vector_norm: PyTorch's norm_backward (ord 0, 1, 2, inf/-inf, any other p; 0 where the norm is 0).
Tensor vector_norm_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Scalar& ord,
                            const Sizes& dim, bool keepdim);
// group_norm over (N, C, *) in num_groups groups of C / num_groups channels; {d input, d weight, d bias}.
std::vector<Tensor> group_norm_backward(const Tensor& grad, const Tensor& input, int64_t num_groups,
                                        const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                                        double eps);
// batch_norm with the running statistics (the contract's op refuses training=True):
// {d input, d weight, d bias}; the running statistics get none.
std::vector<Tensor> batch_norm_backward(const Tensor& grad, const Tensor& input, const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& bias, const std::optional<Tensor>& running_mean,
                                        const std::optional<Tensor>& running_var, bool training, double eps);
// prod: PyTorch's zero-aware rule: result / x without zeros; with one zero, the product of the others
// at the zero and 0 elsewhere; with more, 0.
Tensor prod_backward(const Tensor& grad, const Tensor& self, const Sizes& dim, bool keepdim);
// slice_copy: grad placed back at the slice's positions of zeros of self's sizes (a pad for step 1,
// a scatter for a larger step).
Tensor slice_copy_backward(const Tensor& grad, const Sizes& self_sizes, int64_t dim, std::optional<int64_t> start,
                           std::optional<int64_t> end, int64_t step);
// scatter_reduce: {d self, d src} for every reduce ("sum", "prod", "mean", "amax", "amin"), with and
// without include_self, as PyTorch's scatter_reduce_backward (formula_helpers_nn.cpp says how).
std::vector<Tensor> scatter_reduce_backward(const Tensor& grad, const Tensor& self, int64_t dim, const Tensor& index,
                                            const Tensor& src, const std::string& reduce, bool include_self,
                                            const Tensor& result);
// Note [Fake quantize] (dispatcher/src/meta_quantized.cpp): the straight-through estimator, grad
// where quant_min <= zero_point + round(self / scale) <= quant_max. axis < 0: per-tensor.
Tensor fake_quantize_backward(const Tensor& grad, const Tensor& self, const Tensor& scale, const Tensor& zero_point,
                              int64_t axis, int64_t quant_min, int64_t quant_max);
// The activations' derivatives as PyTorch's *_backward kernels compute them (elu's for x <= 0 from
// x, not from the result).
Tensor elu_backward(const Tensor& grad, const Tensor& self, const Scalar& alpha, const Scalar& scale,
                    const Scalar& input_scale);
Tensor selu_backward(const Tensor& grad, const Tensor& self);
Tensor celu_backward(const Tensor& grad, const Tensor& self, const Scalar& alpha);
Tensor hardsigmoid_backward(const Tensor& grad, const Tensor& self);
Tensor hardswish_backward(const Tensor& grad, const Tensor& self);
Tensor hardtanh_backward(const Tensor& grad, const Tensor& self, const Scalar& min_val, const Scalar& max_val);
Tensor softplus_backward(const Tensor& grad, const Tensor& self, const Scalar& beta, const Scalar& threshold);
Tensor mish_backward(const Tensor& grad, const Tensor& self);
// exp(self - result) times grad, both brought back over the reduced dims.
Tensor logsumexp_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& dim, bool keepdim);
// The reversed cumulative sum of grad along dim.
Tensor cumsum_backward(const Tensor& grad, int64_t dim);
Tensor minmax_backward(const Tensor& grad, const Tensor& self, const Tensor& other, bool is_max);
// sum and mean: grad brought back over the reduced dims. Over a dynamic dim of a capture the
// broadcast and mean's count come from sizes.like (Note [Dynamic sizes in backward formulas]).
Tensor sum_backward(const Tensor& grad, const SavedSizes& sizes, const Sizes& dim, bool keepdim);
Tensor mean_backward(const Tensor& grad, const SavedSizes& sizes, const Sizes& dim, bool keepdim);
Tensor amax_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& dim, bool keepdim);
Tensor var_backward(const Tensor& grad, const Tensor& self, const Sizes& dim, int64_t correction, bool keepdim);
std::vector<Tensor> matmul_backward(const Tensor& grad, const Tensor& self, const Tensor& other);
std::vector<Tensor> linear_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                    const std::optional<Tensor>& bias);
Tensor softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim);
std::vector<Tensor> layer_norm_backward(const Tensor& grad, const Tensor& input, const Sizes& normalized_shape,
                                        const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                                        double eps);
std::vector<Tensor> rms_norm_backward(const Tensor& grad, const Tensor& input, const Sizes& normalized_shape,
                                      const std::optional<Tensor>& weight, std::optional<double> eps);
Tensor embedding_backward(const Tensor& grad, const Sizes& weight_sizes, const Tensor& indices);
Tensor index_select_backward(const Tensor& grad, const Sizes& self_sizes, int64_t dim, const Tensor& index);
std::vector<Tensor> cat_backward(const Tensor& grad, int64_t dim, const std::vector<Sizes>& sizes);
std::vector<Tensor> stack_backward(const Tensor& grad, int64_t dim, const std::vector<Sizes>& sizes);
// conv2d and conv_transpose2d for any stride, padding, dilation and groups: {d input, d weight,
// d bias}, each the other's input gradient, the weight's a convolution per group.
std::vector<Tensor> conv2d_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                    const std::optional<Tensor>& bias, const Sizes& stride, const Sizes& padding,
                                    const Sizes& dilation, int64_t groups);
std::vector<Tensor> conv_transpose2d_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias, const Sizes& stride,
                                              const Sizes& padding, int64_t groups, const Sizes& dilation);
// max_pool2d and avg_pool2d (3-D or 4-D input) for any kernel, stride, padding and dilation,
// overlapping windows included (Note [Pooling backward] in formula_helpers_nn.cpp). Max pooling gives
// each output's gradient to the one element PyTorch's kernels pick: the window's first maximum in
// row-major order, or its last NaN. avg_pool2d divides by kh * kw (padding counted).
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& kernel_size,
                           const Sizes& stride, const Sizes& padding, const Sizes& dilation);
Tensor avg_pool2d_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& kernel_size, const Sizes& stride,
                           const Sizes& padding);
std::vector<Tensor> sdpa_backward(const Tensor& grad, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const std::optional<Tensor>& attn_mask, bool is_causal, std::optional<double> scale);

}  // namespace tessera::autograd::formulas

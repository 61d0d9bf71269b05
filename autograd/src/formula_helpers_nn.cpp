// The helpers of the convolution, pooling, pad and scatter_reduce formulas (formula_helpers.h):
// contract ops only.
#include <algorithm>
#include <array>
#include <sstream>

#include "formula_helpers.h"

namespace tessera::autograd::formulas {

namespace {
// pad's amounts that pad only dim d of an nd-dim tensor, by lo before and hi after.
Sizes amounts_at(int64_t nd, int64_t d, int64_t lo, int64_t hi) {
  Sizes a;  // pad's order: the last dim first, down to d
  for (int64_t i = nd - 1; i > d; --i) a.insert(a.end(), {0, 0});
  a.insert(a.end(), {lo, hi});
  return a;
}
// g with `part` added at [at, at + part.size(d)) along d.
Tensor add_at(const Tensor& g, const Tensor& part, int64_t d, int64_t at) {
  const int64_t n = g.size(d), m = part.size(d);
  return g + tessera::pad(part, amounts_at(g.dim(), d, at, n - at - m), "constant", 0.0);
}
// The gradient of pad's non-constant modes along dim d, padded by lo, hi >= 0: each padded element
// read one input element (the CPU kernel's pad_source), so its gradient folds back onto it.
Tensor fold_padding(const Tensor& g, int64_t d, int64_t lo, int64_t hi, const std::string& mode) {
  const int64_t n = g.size(d) - lo - hi;
  Tensor core = g.narrow(d, lo, n);
  const Tensor before = g.narrow(d, 0, lo), after = g.narrow(d, lo + n, hi);
  if (mode == "reflect") {  // before[lo - k] read input k (k = 1..lo); after[t] read n - 2 - t
    if (lo > 0) core = add_at(core, flip(before, {d}), d, 1);
    if (hi > 0) core = add_at(core, flip(after, {d}), d, n - 1 - hi);
  } else if (mode == "replicate") {  // every element before read input 0; every one after, n - 1
    if (lo > 0) core = add_at(core, sum(before, {d}, true), d, 0);
    if (hi > 0) core = add_at(core, sum(after, {d}, true), d, n - 1);
  } else {  // circular: before read the last lo inputs, after the first hi
    if (lo > 0) core = add_at(core, before, d, n - lo);
    if (hi > 0) core = add_at(core, after, d, 0);
  }
  return core;
}
}  // namespace

Tensor pad_backward(const Tensor& grad, const Sizes& pad, const std::string& mode) {
  const bool constant = mode == "constant";
  Sizes uncrop;  // a negative amount cropped: those elements get zeros back (constant: a crop too)
  bool crops = false;
  for (int64_t p : pad) {
    uncrop.push_back(constant ? -p : std::max<int64_t>(-p, 0));
    crops = crops || p < 0;
  }
  Tensor g = constant || crops ? tessera::pad(grad, uncrop, "constant", 0.0) : grad;
  if (constant) return g;
  // The forward pads (reading the whole input) and then crops, so after the crop's gradient each
  // dim folds its padding back, the dims one at a time.
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = g.dim() - 1 - int64_t(k);
    g = fold_padding(g, d, std::max<int64_t>(pad[2 * k], 0), std::max<int64_t>(pad[2 * k + 1], 0), mode);
  }
  return g;
}
namespace {
Tensor number(double v) { return scalar_tensor(v, kFloat64); }  // 0-dim CPU: joins tensors of any device
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_reduce(self, dim, index, src, "sum", true);
}
// "prod": PyTorch's zero-aware rule. self's gradient is the product of the rest of its group, got
// by reducing into self with its zeros made ones; src's is result / src unless src holds the
// group's only zero among src, which gets the product of the others (reduced with it made one).
// Two zeros or more give 0, right for first order.
std::vector<Tensor> scatter_prod_backward(const Tensor& grad, const Tensor& self, int64_t dim, const Tensor& index,
                                          const Tensor& src, bool include_self, const Tensor& result) {
  const Tensor zero = number(0), one = number(1);
  const Tensor masked_self = where(eq(self, zero), one, self);
  const Tensor gself = grad * scatter_reduce(masked_self, dim, index, src, "prod", include_self) / masked_self;
  const Tensor src_zero = eq(src, zero);
  const Tensor zeros_in_group = gather(scatter_add(zeros_like(self), dim, index, src_zero.to(self.dtype())), dim, index);
  const Tensor single_zero = logical_and(src_zero, eq(zeros_in_group, one));
  const Tensor others = scatter_reduce(self, dim, index, where(single_zero, one, src), "prod", include_self);
  const Tensor gsrc = where(single_zero, gather(grad * others, dim, index),
                            gather(grad * result, dim, index) / where(src_zero, one, src));
  return {gself, gsrc};
}
// "amax" / "amin": the gradient shared evenly by the elements, of self and of src, equal to the
// result. As PyTorch's, self counts in the share also with include_self=false (a written position's
// old value equal to the result takes a share, which the caller then zeroes).
std::vector<Tensor> scatter_extreme_backward(const Tensor& grad, const Tensor& self, int64_t dim, const Tensor& index,
                                             const Tensor& src, const Tensor& result) {
  const Tensor self_at = eq(self, result).to(grad.dtype());
  const Tensor src_at = eq(src, gather(result, dim, index)).to(grad.dtype());
  const Tensor share = grad / scatter_add(self_at, dim, index, src_at);
  return {self_at * share, src_at * gather(share, dim, index)};
}
}  // namespace

// PyTorch's scatter_reduce_backward (FunctionsManual.cpp), reduction by reduction; without
// include_self the written positions of self were replaced and get no gradient.
std::vector<Tensor> scatter_reduce_backward(const Tensor& grad, const Tensor& self, int64_t dim, const Tensor& index,
                                            const Tensor& src, const std::string& reduce, bool include_self,
                                            const Tensor& result) {
  std::vector<Tensor> g;
  if (reduce == "sum") {
    g = {grad, gather(grad, dim, index)};
  } else if (reduce == "prod") {
    g = scatter_prod_backward(grad, self, dim, index, src, include_self, result);
  } else if (reduce == "mean") {  // each output divided by its count (self included or not); 0 counts as 1
    Tensor count = scatter_add(include_self ? ones_like(grad) : zeros_like(grad), dim, index, ones_like(src));
    count = where(eq(count, number(0)), number(1), count);
    g = {grad / count, gather(grad, dim, index) / gather(count, dim, index)};
  } else {
    TESSERA_CHECK(reduce == "amax" || reduce == "amin", "scatter_reduce backward: reduce must be \"sum\", \"prod\", "
                  "\"mean\", \"amax\" or \"amin\", got \"", reduce, "\"");
    g = scatter_extreme_backward(grad, self, dim, index, src, result);
  }
  if (!include_self) g[0] = tessera::scatter(g[0], dim, index, zeros_like(g[1]));
  return g;
}
namespace {
// An int[2] argument (one value stands for both), `def` when absent.
std::array<int64_t, 2> pair_of(const Sizes& v, std::array<int64_t, 2> def) {
  return v.empty() ? def : std::array<int64_t, 2>{v[0], v.size() > 1 ? v[1] : v[0]};
}
std::array<int64_t, 2> pair_of(const Sizes& v, int64_t def) { return pair_of(v, {def, def}); }
// The gradient of conv2d(input, w) with respect to w (sizes [grad's channels, input's channels /
// groups, kh, kw]): per group, the input with its channels as the batch convolved with the gradient
// with its batch as the channels, the stride and dilation trading places; the rows and columns past
// the kernel (input the convolution never reached) are dropped.
Tensor conv2d_weight_grad(const Tensor& input, const Tensor& grad, int64_t kh, int64_t kw, std::array<int64_t, 2> s,
                          std::array<int64_t, 2> p, std::array<int64_t, 2> d, int64_t groups) {
  const int64_t cin = input.size(1) / groups, cout = grad.size(1) / groups;
  std::vector<Tensor> per_group;
  for (int64_t g = 0; g < groups; ++g) {
    const Tensor x = (groups == 1 ? input : input.narrow(1, g * cin, cin)).transpose(0, 1).contiguous();
    const Tensor k = (groups == 1 ? grad : grad.narrow(1, g * cout, cout)).transpose(0, 1).contiguous();
    const Tensor full = conv2d(x, k, std::nullopt, {d[0], d[1]}, {p[0], p[1]}, {s[0], s[1]});  // [cin, cout, >=kh, >=kw]
    per_group.push_back(full.narrow(2, 0, kh).narrow(3, 0, kw).transpose(0, 1));
  }
  return groups == 1 ? per_group[0].contiguous() : cat(per_group, 0);
}
}  // namespace

// conv2d's gradients for any stride, padding, dilation and groups: the input's is the transposed
// convolution of the gradient with the same kernel (output_padding recovers the rows a stride
// dropped); the kernel's is conv2d_weight_grad; the bias's the gradient summed per channel.
std::vector<Tensor> conv2d_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                    const std::optional<Tensor>& bias, const Sizes& stride, const Sizes& padding,
                                    const Sizes& dilation, int64_t groups) {
  const auto s = pair_of(stride, 1), p = pair_of(padding, 0), d = pair_of(dilation, 1);
  const int64_t kh = weight.size(2), kw = weight.size(3);
  std::array<int64_t, 2> out_pad{};
  for (int i = 0; i < 2; ++i) {
    const int64_t k = i == 0 ? kh : kw, in = input.size(2 + i), out = grad.size(2 + i);
    out_pad[size_t(i)] = in - ((out - 1) * s[size_t(i)] - 2 * p[size_t(i)] + d[size_t(i)] * (k - 1) + 1);
  }
  const Tensor gx = conv_transpose2d(grad, weight, std::nullopt, {s[0], s[1]}, {p[0], p[1]}, {out_pad[0], out_pad[1]},
                                     groups, {d[0], d[1]});
  const Tensor gw = conv2d_weight_grad(input, grad, kh, kw, s, p, d, groups);
  Tensor gb;
  if (bias) gb = sum(grad, {0, 2, 3});
  return {gx, gw, gb};
}

// conv_transpose2d is conv2d's input gradient: its input's gradient is that conv2d of the gradient,
// and its kernel's is conv2d_weight_grad with the two roles exchanged.
std::vector<Tensor> conv_transpose2d_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias, const Sizes& stride,
                                              const Sizes& padding, int64_t groups, const Sizes& dilation) {
  const auto s = pair_of(stride, 1), p = pair_of(padding, 0), d = pair_of(dilation, 1);
  const Tensor gx = conv2d(grad, weight, std::nullopt, {s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}, groups);
  const Tensor gw = conv2d_weight_grad(grad, input, weight.size(2), weight.size(3), s, p, d, groups);
  Tensor gb;
  if (bias) gb = sum(grad, {0, 2, 3});
  return {gx, gw, gb};
}

Tensor pool2d_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& kernel_size,
                       const Sizes& stride, const Sizes& padding, const Sizes& dilation, bool is_max) {
  const auto k = pair_of(kernel_size, 1), s = pair_of(stride, k), p = pair_of(padding, 0), d = pair_of(dilation, 1);
  if (self.dim() != 4 || s != k || p[0] != 0 || p[1] != 0 || d[0] != 1 || d[1] != 1) {
    std::ostringstream os;
    os << "the derivative for '" << (is_max ? "max_pool2d" : "avg_pool2d")
       << "' is implemented for 4-D inputs with stride equal to the kernel, no padding and dilation 1 only (got "
          "input "
       << self.sizes() << ", kernel " << IntArrayRef(kernel_size) << ", stride " << IntArrayRef(stride)
       << ", padding " << IntArrayRef(padding) << "; TODO(#31))";
    tessera::detail::throw_error(ErrorCode::Unimplemented, os.str());
  }
  const int64_t n = self.size(0), c = self.size(1), h = self.size(2), w = self.size(3);
  const int64_t ho = result.size(2), wo = result.size(3), hc = ho * k[0], wc = wo * k[1];
  Tensor g = grad.reshape({n, c, ho, 1, wo, 1}).expand({n, c, ho, k[0], wo, k[1]});
  Tensor gin;
  if (is_max) {
    Tensor windows = self.narrow(2, 0, hc).narrow(3, 0, wc).reshape({n, c, ho, k[0], wo, k[1]});
    Tensor mask = eq(windows, result.reshape({n, c, ho, 1, wo, 1})).to(grad.dtype());
    gin = g * mask / sum(mask, {3, 5}, true);
  } else {
    gin = g / double(k[0] * k[1]);
  }
  gin = gin.reshape({n, c, hc, wc});
  const TensorOptions to = TensorOptions(grad.device()).dtype(grad.dtype());
  if (hc < h) gin = cat({gin, zeros({n, c, h - hc, wc}, to)}, 2);
  if (wc < w) gin = cat({gin, zeros({n, c, h, w - wc}, to)}, 3);
  return gin;
}

}  // namespace tessera::autograd::formulas

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
std::vector<Tensor> scatter_reduce_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                                            const std::string& reduce, bool include_self) {
  TESSERA_CHECK(reduce == "sum", "the derivative of scatter_reduce with reduce \"", reduce,
                "\" is not implemented (TODO(#31)); \"sum\" has one, or compute it under NoGradGuard");
  // With include_self the kept values of self add to the sum; without, the written positions of self
  // are replaced and get no gradient.
  const Tensor gsrc = gather(grad, dim, index);
  const Tensor gself = include_self ? grad : tessera::scatter(grad, dim, index, zeros_like(gsrc));
  return {gself, gsrc};
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

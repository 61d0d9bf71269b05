// The helpers of the backward formulas (formula_helpers.h): contract ops only.
#include <algorithm>
#include "formula_helpers.h"

#include <cmath>
#include <limits>

#include "autograd_internal.h"
#include "tessera/autograd.h"

namespace tessera::autograd::formulas {
namespace {

Tensor number(double v) { return scalar_tensor(v, kFloat64); }  // 0-dim CPU: joins tensors of any device
Tensor one_hot(const Tensor& index, int64_t n, DType dtype) {
  Tensor flat = index.reshape({-1});
  Tensor classes = arange(n, TensorOptions(index.device()).dtype(index.dtype()));
  return eq(flat.unsqueeze(1), classes.unsqueeze(0)).to(dtype);
}
std::vector<int64_t> wrap_dims(const Sizes& dim, int64_t ndim) {
  std::vector<int64_t> d;
  if (dim.empty()) {
    for (int64_t i = 0; i < ndim; ++i) d.push_back(i);
  } else {
    for (int64_t x : dim) d.push_back(wrap_dim(x, ndim));
  }
  std::sort(d.begin(), d.end());
  return d;
}
// grad of a reduction over `dim` without keepdim, with the reduced dims put back as size 1.
Tensor unsqueeze_reduced(const Tensor& g, const Sizes& sizes, const Sizes& dim, bool keepdim) {
  if (keepdim) return g;
  Tensor r = g;
  for (int64_t d : wrap_dims(dim, int64_t(sizes.size()))) r = r.unsqueeze(d);
  return r;
}
int64_t reduced_numel(const Sizes& sizes, const Sizes& dim) {
  int64_t n = 1;
  for (int64_t d : wrap_dims(dim, int64_t(sizes.size()))) n *= sizes[size_t(d)];
  return n;
}
double machine_eps(DType t) {
  switch (t) {
    case kFloat64: return std::numeric_limits<double>::epsilon();
    case kFloat16: return 0.0009765625;
    case kBFloat16: return 0.0078125;
    default: return double(std::numeric_limits<float>::epsilon());
  }
}
Tensor tr(const Tensor& t) { return t.transpose(-2, -1); }

}  // namespace

Tensor scale_grad(const Tensor& grad, const Scalar& alpha) {
  if (!alpha.is_floating() && alpha.to_int() == 1) return grad;
  return grad * alpha;
}
Tensor mask_grad(const Tensor& grad, const Tensor& mask) { return where(mask, grad, number(0)); }
Tensor zero_where(const Tensor& grad, const Tensor& mask) { return where(mask, number(0), grad); }
Tensor sign_of(const Tensor& x) {
  return gt(x, number(0)).to(x.dtype()) - lt(x, number(0)).to(x.dtype());
}
Tensor pow_backward(const Tensor& grad, const Tensor& self, const Scalar& exponent) {
  const double e = exponent.to_double();
  if (e == 0) return grad * 0.0;
  return grad * (pow(self, Scalar(e - 1)) * e);
}
Tensor pow_backward_self(const Tensor& grad, const Tensor& self, const Tensor& exponent) {
  return grad * exponent * pow(self, exponent - 1);
}
Tensor pow_backward_exponent(const Tensor& grad, const Tensor& self, const Tensor& result) {
  return grad * result * log(self);
}
Tensor erf_backward(const Tensor& grad, const Tensor& self) {
  return grad * exp(neg(self * self)) * (2.0 / std::sqrt(M_PI));
}
Tensor gelu_backward(const Tensor& grad, const Tensor& self, const std::string& approximate) {
  if (approximate == "tanh") {
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Tensor x2 = self * self;
    Tensor t = tanh((self + x2 * self * c) * k);
    Tensor dt = (1.0 - t * t) * ((x2 * (3 * c) + 1.0) * k);
    return grad * ((t + 1.0) * 0.5 + self * dt * 0.5);
  }
  Tensor cdf = (erf(self * (1.0 / std::sqrt(2.0))) + 1.0) * 0.5;
  Tensor pdf = exp(self * self * -0.5) * (1.0 / std::sqrt(2.0 * M_PI));
  return grad * (cdf + self * pdf);
}
Tensor silu_backward(const Tensor& grad, const Tensor& self) {
  Tensor s = sigmoid(self);
  return grad * s * (self * (1.0 - s) + 1.0);
}
Tensor clamp_backward(const Tensor& grad, const Tensor& self, const std::optional<Scalar>& min,
                      const std::optional<Scalar>& max) {
  Tensor keep;
  if (min) keep = ge(self, number(min->to_double()));
  if (max) {
    Tensor below = le(self, number(max->to_double()));
    keep = keep.defined() ? logical_and(keep, below) : below;
  }
  return keep.defined() ? mask_grad(grad, keep) : grad;
}
Tensor fake_quantize_backward(const Tensor& grad, const Tensor& self, const Tensor& scale, const Tensor& zero_point,
                              int64_t axis, int64_t quant_min, int64_t quant_max) {
  // The parameters as float32 along `axis` (per-tensor: one element), so that they broadcast; the
  // rounding in float32 as the kernel's (x * (1 / scale), half to even).
  std::vector<int64_t> shape(size_t(self.dim()), 1);
  if (axis >= 0) shape[size_t(axis)] = scale.numel();
  const Tensor s = scale.to(kFloat32).reshape(axis >= 0 ? shape : std::vector<int64_t>{});
  const Tensor z = zero_point.to(kFloat32).reshape(axis >= 0 ? shape : std::vector<int64_t>{});
  const Tensor q = round(self * reciprocal(s)) + z;
  return mask_grad(grad, logical_and(ge(q, number(double(quant_min))), le(q, number(double(quant_max)))));
}
Tensor elu_backward(const Tensor& grad, const Tensor& self, const Scalar& alpha, const Scalar& scale,
                    const Scalar& input_scale) {
  const double a = alpha.to_double(), sc = scale.to_double(), is = input_scale.to_double();
  // x > 0: scale; else scale * alpha * input_scale * exp(x * input_scale).
  return where(gt(self, number(0)), grad * sc, grad * (exp(self * is) * (sc * a * is)));
}
Tensor selu_backward(const Tensor& grad, const Tensor& self) {
  return elu_backward(grad, self, Scalar(1.6732632423543772), Scalar(1.0507009873554805), Scalar(1.0));
}
Tensor celu_backward(const Tensor& grad, const Tensor& self, const Scalar& alpha) {
  return elu_backward(grad, self, alpha, Scalar(1.0), Scalar(1.0 / alpha.to_double()));
}
Tensor hardsigmoid_backward(const Tensor& grad, const Tensor& self) {
  return mask_grad(grad, logical_and(gt(self, number(-3)), lt(self, number(3)))) / 6.0;
}
Tensor hardswish_backward(const Tensor& grad, const Tensor& self) {
  // x < -3: 0; -3 <= x <= 3: x / 3 + 1/2; x > 3: 1 (PyTorch's hardswish_backward).
  Tensor mid = grad * (self / 3.0 + 0.5);
  return where(lt(self, number(-3)), number(0), where(le(self, number(3)), mid, grad));
}
Tensor hardtanh_backward(const Tensor& grad, const Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  return mask_grad(grad, logical_and(gt(self, number(min_val.to_double())), lt(self, number(max_val.to_double()))));
}
Tensor softplus_backward(const Tensor& grad, const Tensor& self, const Scalar& beta, const Scalar& threshold) {
  // Above the threshold softplus is x itself; below, its derivative is sigmoid(beta x).
  Tensor bx = self * beta.to_double();
  return where(gt(bx, number(threshold.to_double())), grad, grad * sigmoid(bx));
}
Tensor mish_backward(const Tensor& grad, const Tensor& self) {
  // d/dx x tanh(softplus(x)) = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
  Tensor t = tanh(softplus(self));
  return grad * (t + self * sigmoid(self) * (1.0 - t * t));
}
Tensor logsumexp_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& dim, bool keepdim) {
  const Sizes sizes(self.sizes().begin(), self.sizes().end());
  return unsqueeze_reduced(grad, sizes, dim, keepdim) * exp(self - unsqueeze_reduced(result, sizes, dim, keepdim));
}
namespace {
// (1, C, 1, ...) of a per-channel vector for an (N, C, ...) input.
Tensor per_channel(const Tensor& v, int64_t ndim) {
  Sizes shape(size_t(ndim), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}
// Every dim of an (N, C, ...) input but the channel dim.
Sizes all_but_channel(int64_t ndim) {
  Sizes d{0};
  for (int64_t i = 2; i < ndim; ++i) d.push_back(i);
  return d;
}
}  // namespace
std::vector<Tensor> prelu_backward(const Tensor& grad, const Tensor& self, const Tensor& weight) {
  const bool channels = weight.numel() != 1;
  TESSERA_CHECK(!channels || self.dim() >= 2, "prelu backward: ", weight.numel(),
                " weights need a channel dim (dim 1)");
  const Tensor w = channels ? per_channel(weight, self.dim()) : weight.reshape({});
  const Tensor positive = gt(self, zeros_like(self));
  const Tensor gx = where(positive, grad, grad * w);
  const Tensor gw_all = zero_where(grad * self, positive);
  // One weight: summed over every dim (a 0-dim self has none); one per channel: over all but dim 1.
  const Sizes others = channels ? all_but_channel(self.dim()) : wrap_dims({}, self.dim());
  const Tensor gw = others.empty() ? gw_all : sum(gw_all, others, false);
  return {gx, gw.reshape(weight.sizes())};
}
std::vector<Tensor> prelu_kernel_backward(const Tensor& grad, const Tensor& self, const Tensor& weight) {
  const Tensor positive = gt(self, zeros_like(self));
  return {where(positive, grad, grad * weight), zero_where(grad * self, positive)};
}
Tensor repeat_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& repeats) {
  const size_t n = repeats.size(), k = self_sizes.size();
  Sizes padded(n - k, 1), split, repeat_dims;
  padded.insert(padded.end(), self_sizes.begin(), self_sizes.end());
  for (size_t i = 0; i < n; ++i) {
    split.push_back(repeats[i]);
    split.push_back(padded[i]);
    repeat_dims.push_back(int64_t(2 * i));
  }
  if (n == 0) return grad.reshape(self_sizes);
  return sum(grad.reshape(split), repeat_dims, false).reshape(self_sizes);
}
Tensor vector_norm_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Scalar& ord,
                            const Sizes& dim, bool keepdim) {
  const Sizes sizes(self.sizes().begin(), self.sizes().end());
  const double p = ord.to_double();
  if (p == 0) return zeros_like(self);
  const Tensor g = unsqueeze_reduced(grad, sizes, dim, keepdim).to(self.dtype());
  const Tensor norm = unsqueeze_reduced(result, sizes, dim, keepdim).to(self.dtype());
  if (p == 1) return sign_of(self) * g;
  if (std::isinf(p)) {
    // The gradient goes to the elements whose |x| is the norm, shared evenly, as PyTorch's.
    const Tensor at = eq(abs(self), norm).to(self.dtype());
    const Tensor count = sum(at, wrap_dims(dim, int64_t(sizes.size())), true);
    return sign_of(self) * at * g / count;
  }
  const Tensor scaled = p == 2 ? self * (g / norm) : self * pow(abs(self), p - 2) * (g / pow(norm, p - 1));
  Tensor out = zero_where(scaled, eq(norm, zeros_like(norm)));
  if (p < 2) out = zero_where(out, eq(self, zeros_like(self)));  // |x|^(p-2) at 0: the derivative there is 0
  return out;
}
Tensor prod_backward(const Tensor& grad, const Tensor& self, const Sizes& dim, bool keepdim) {
  const Sizes sizes(self.sizes().begin(), self.sizes().end());
  const Sizes dims = wrap_dims(dim, int64_t(sizes.size()));
  const Tensor g = unsqueeze_reduced(grad, sizes, dim, keepdim);
  if (dims.empty()) return g;  // a 0-dim self: its product is itself
  const Tensor is_zero = eq(self, zeros_like(self));
  const Tensor safe = where(is_zero, ones_like(self), self);
  const Tensor others = prod(safe, dims, true);  // the product of the nonzero elements
  const Tensor zeros = sum(is_zero.to(self.dtype()), dims, true);
  const Tensor no_zero = others / safe;                  // = result / x
  const Tensor at_the_zero = zero_where(others.expand(sizes), logical_not(is_zero));
  const Tensor factor = where(eq(zeros, zeros_like(zeros)), no_zero,
                              zero_where(at_the_zero, logical_not(eq(zeros, ones_like(zeros)))));
  return g * factor;
}
Tensor slice_copy_backward(const Tensor& grad, const Sizes& self_sizes, int64_t dim, std::optional<int64_t> start,
                           std::optional<int64_t> end, int64_t step) {
  const int64_t nd = int64_t(self_sizes.size()), d = wrap_dim(dim, nd), size = self_sizes[size_t(d)];
  // PyTorch's slice bounds: negative from the end, clamped to [0, size], end not before start.
  int64_t lo = start.value_or(0), hi = end.value_or(size);
  if (lo < 0) lo += size;
  if (hi < 0) hi += size;
  lo = std::clamp<int64_t>(lo, 0, size);
  hi = std::clamp<int64_t>(hi, lo, size);
  const int64_t n = grad.size(d);
  if (step == 1) {
    Sizes amounts;  // pad's order: the last dim first, down to d
    for (int64_t i = nd - 1; i > d; --i) amounts.insert(amounts.end(), {0, 0});
    amounts.insert(amounts.end(), {lo, size - lo - n});
    return tessera::pad(grad, amounts, "constant", 0.0);
  }
  Tensor out = zeros(self_sizes, TensorOptions(grad.device()).dtype(grad.dtype()));
  if (n == 0) return out;
  Sizes shape(size_t(nd), 1);
  shape[size_t(d)] = n;
  const Tensor positions = arange(lo, lo + n * step, step, TensorOptions(grad.device()).dtype(kInt64)).reshape(shape);
  const Sizes grad_sizes(grad.sizes().begin(), grad.sizes().end());
  return tessera::scatter(out, d, expand_copy(positions, grad_sizes), grad);
}
Tensor cumsum_backward(const Tensor& grad, int64_t dim) {
  const int64_t d = wrap_dim(dim, std::max<int64_t>(grad.dim(), 1));
  if (grad.dim() == 0) return grad;
  return flip(cumsum(flip(grad, {d}), d), {d});
}
Tensor minmax_backward(const Tensor& grad, const Tensor& self, const Tensor& other, bool is_max) {
  // PyTorch: ties split the gradient evenly; the losing side gets zero.
  Tensor g = where(eq(self, other), grad * 0.5, grad);
  return zero_where(g, is_max ? lt(self, other) : gt(self, other));
}
// Note [Dynamic sizes in backward formulas]
// A formula reads an input's sizes as integers ('self_sizes'), which under a capture are the
// example's: sum's backward expands the gradient to them and mean's divides by their product, so a
// captured training step would fix a dynamic batch to the example's (PyTorch passes SymInts there).
// The capture tells autograd which dims of a tracing tensor are symbolic (set_dynamic_dims_query);
// the node keeps such an input (a tracing tensor: no memory) in SavedSizes::like. When the gradient
// is broadcast over a dim that is dynamic, the formula builds the broadcast from the input instead:
// grad * ones_like(like) (exact: x * 1 is x for every x, -0 and NaN included), and mean's count is
// numel(like) / numel(grad), both counted in float64 (exact below 2^53) and divided as a 0-dim
// tensor, which keeps grad's dtype. Broadcasts over static dims, and every eager backward, still
// take the view. The capture keeps the symbolic sizes of the dims an expand does not broadcast
// (Note [Captured views]), so a sum over the features of a dynamic batch needs neither.
namespace {
bool broadcasts_a_dynamic_dim(const Tensor& g, const SavedSizes& sizes) {
  if (!sizes.like.defined() || g.dim() != int64_t(sizes.size())) return false;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes.dynamic[d] && g.sizes()[d] == 1) return true;
  return false;
}
}  // namespace
Tensor sum_backward(const Tensor& grad, const SavedSizes& sizes, const Sizes& dim, bool keepdim) {
  const Tensor g = unsqueeze_reduced(grad, sizes, dim, keepdim);
  if (broadcasts_a_dynamic_dim(g, sizes)) return g * ones_like(sizes.like).to(g.dtype());
  return g.expand(sizes);
}
Tensor mean_backward(const Tensor& grad, const SavedSizes& sizes, const Sizes& dim, bool keepdim) {
  if (broadcasts_a_dynamic_dim(unsqueeze_reduced(grad, sizes, dim, keepdim), sizes)) {
    const Tensor count = ones_like(sizes.like).to(kFloat64).sum() / ones_like(grad).to(kFloat64).sum();
    return sum_backward(grad, sizes, dim, keepdim) / count;
  }
  const int64_t n = reduced_numel(sizes, dim);
  return sum_backward(grad, sizes, dim, keepdim) / double(n == 0 ? 1 : n);
}
Tensor amax_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& dim, bool keepdim) {
  const Sizes sizes(self.sizes().begin(), self.sizes().end());
  Tensor r = unsqueeze_reduced(result, sizes, dim, keepdim);
  Tensor g = unsqueeze_reduced(grad, sizes, dim, keepdim);
  Tensor mask = eq(self, r).to(grad.dtype());
  Tensor count = sum(mask, wrap_dims(dim, self.dim()), true);
  return mask * g / count;
}
Tensor var_backward(const Tensor& grad, const Tensor& self, const Sizes& dim, int64_t correction, bool keepdim) {
  const Sizes sizes(self.sizes().begin(), self.sizes().end());
  const int64_t n = reduced_numel(sizes, dim);
  Tensor g = unsqueeze_reduced(grad, sizes, dim, keepdim);
  Tensor centred = self - mean(self, wrap_dims(dim, self.dim()), true);
  // Over a dynamic dim of a capture the count comes from self (Note [Dynamic sizes in backward formulas]).
  const std::vector<bool> dynamic = detail::dynamic_dims(self);
  bool counts_dynamic = false;
  for (int64_t d : wrap_dims(dim, self.dim())) counts_dynamic = counts_dynamic || (!dynamic.empty() && dynamic[size_t(d)]);
  if (counts_dynamic) {
    const Tensor count = ones_like(self).to(kFloat64).sum() / ones_like(grad).to(kFloat64).sum();
    return g * centred * (2.0 / (count - double(correction)));
  }
  return g * centred * (2.0 / double(n - correction));
}
std::vector<Tensor> matmul_backward(const Tensor& grad, const Tensor& self, const Tensor& other) {
  if (self.dim() == 1 && other.dim() == 1) return {grad * other, grad * self};
  if (self.dim() == 1) {
    Tensor gs = matmul(grad.unsqueeze(-2), tr(other)).squeeze(-2);
    Tensor go = matmul(self.unsqueeze(-1), grad.unsqueeze(-2));
    return {gs, go};
  }
  if (other.dim() == 1) {
    Tensor gs = matmul(grad.unsqueeze(-1), other.unsqueeze(0));
    Tensor go = matmul(tr(self), grad.unsqueeze(-1)).squeeze(-1);
    return {gs, go};
  }
  return {matmul(grad, tr(other)), matmul(tr(self), grad)};
}
std::vector<Tensor> linear_backward(const Tensor& grad, const Tensor& input, const Tensor& weight,
                                    const std::optional<Tensor>& bias) {
  const int64_t out = weight.dim() == 1 ? 1 : weight.size(0);
  Tensor g2 = grad.reshape({-1, out});
  Tensor x2 = input.reshape({-1, input.size(-1)});
  Tensor w2 = weight.dim() == 1 ? weight.unsqueeze(0) : weight;
  // A flattened batch of dynamic dims cannot be split back ([batch*seq, in] -> [batch, seq, in]):
  // under such a capture the input's gradient is one broadcast matmul instead.
  const std::vector<bool> dynamic = detail::dynamic_dims(input);
  const bool keep_batch = input.dim() > 2 && weight.dim() == 2 && !dynamic.empty() &&
                          std::count(dynamic.begin(), dynamic.end() - 1, true) > 1;
  Tensor gx = keep_batch ? matmul(grad, w2) : matmul(g2, w2).reshape(input.sizes());
  Tensor gw = matmul(tr(g2), x2).reshape(weight.sizes());
  Tensor gb;
  if (bias) gb = sum(g2, {0}).reshape(bias->sizes());
  return {gx, gw, gb};
}
Tensor softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim) {
  return result * (grad - sum(grad * result, {dim}, true));
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim) {
  return grad - exp(result) * sum(grad, {dim}, true);
}
std::vector<Tensor> layer_norm_backward(const Tensor& grad, const Tensor& input, const Sizes& normalized_shape,
                                        const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                                        double eps) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < normalized_shape.size(); ++i) dims.push_back(input.dim() - int64_t(normalized_shape.size()) + int64_t(i));
  Tensor mu = mean(input, dims, true);
  Tensor xc = input - mu;
  Tensor rstd = rsqrt(mean(xc * xc, dims, true) + eps);
  Tensor xhat = xc * rstd;
  Tensor gxhat = weight ? grad * *weight : grad;
  Tensor gx = rstd * (gxhat - mean(gxhat, dims, true) - xhat * mean(gxhat * xhat, dims, true));
  Tensor gw, gb;
  if (weight) gw = autograd::sum_to(grad * xhat, weight->sizes());
  if (bias) gb = autograd::sum_to(grad, bias->sizes());
  return {gx, gw, gb};
}
std::vector<Tensor> group_norm_backward(const Tensor& grad, const Tensor& input, int64_t num_groups,
                                        const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                                        double eps) {
  const Sizes sizes(input.sizes().begin(), input.sizes().end());
  const Sizes grouped{sizes[0], num_groups, -1};
  const Tensor x = input.reshape(grouped);
  const Tensor mu = mean(x, {2}, true);
  const Tensor xc = x - mu;
  const Tensor rstd = rsqrt(mean(xc * xc, {2}, true) + eps);
  const Tensor xhat = xc * rstd;  // (N, G, M)
  const Tensor gxhat = (weight ? grad * per_channel(*weight, input.dim()) : grad).reshape(grouped);
  const Tensor gx = (rstd * (gxhat - mean(gxhat, {2}, true) - xhat * mean(gxhat * xhat, {2}, true))).reshape(sizes);
  Tensor gw, gb;
  if (weight) gw = sum(grad * xhat.reshape(sizes), all_but_channel(input.dim()), false);
  if (bias) gb = sum(grad, all_but_channel(input.dim()), false);
  return {gx, gw, gb};
}
std::vector<Tensor> batch_norm_backward(const Tensor& grad, const Tensor& input, const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& bias, const std::optional<Tensor>& running_mean,
                                        const std::optional<Tensor>& running_var, bool training, double eps) {
  TESSERA_CHECK(!training && running_mean && running_var,
                "batch_norm backward: only the inference form (running statistics) has a formula (TODO(#31))");
  const int64_t nd = input.dim();
  const Tensor rstd = per_channel(rsqrt(*running_var + eps), nd);
  const Tensor gx = weight ? grad * (per_channel(*weight, nd) * rstd) : grad * rstd;
  Tensor gw, gb;
  if (weight) gw = sum(grad * ((input - per_channel(*running_mean, nd)) * rstd), all_but_channel(nd), false);
  if (bias) gb = sum(grad, all_but_channel(nd), false);
  return {gx, gw, gb};
}
std::vector<Tensor> rms_norm_backward(const Tensor& grad, const Tensor& input, const Sizes& normalized_shape,
                                      const std::optional<Tensor>& weight, std::optional<double> eps) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < normalized_shape.size(); ++i) dims.push_back(input.dim() - int64_t(normalized_shape.size()) + int64_t(i));
  Tensor r = rsqrt(mean(input * input, dims, true) + eps.value_or(machine_eps(input.dtype())));
  Tensor xhat = input * r;
  Tensor gxhat = weight ? grad * *weight : grad;
  Tensor gx = r * (gxhat - xhat * mean(gxhat * xhat, dims, true));
  Tensor gw;
  if (weight) gw = autograd::sum_to(grad * xhat, weight->sizes());
  return {gx, gw};
}
Tensor embedding_backward(const Tensor& grad, const Sizes& weight_sizes, const Tensor& indices) {
  const int64_t dim = weight_sizes.back();
  Tensor oh = one_hot(indices, weight_sizes[0], grad.dtype());
  return matmul(tr(oh), grad.reshape({-1, dim}));
}
Tensor index_select_backward(const Tensor& grad, const Sizes& self_sizes, int64_t dim, const Tensor& index) {
  if (self_sizes.empty()) return grad.reshape({});
  const int64_t d = wrap_dim(dim, int64_t(self_sizes.size()));
  Tensor oh = one_hot(index, self_sizes[size_t(d)], grad.dtype());  // (k, n)
  Tensor moved = grad.transpose(d, -1);                              // (..., k)
  return matmul(moved, oh).transpose(d, -1);
}
std::vector<Tensor> cat_backward(const Tensor& grad, int64_t dim, const std::vector<Sizes>& sizes) {
  std::vector<Tensor> r;
  const int64_t d = wrap_dim(dim, grad.dim());
  int64_t at = 0;
  for (const Sizes& s : sizes) {
    if (s.size() == 1 && s[0] == 0 && grad.dim() != 1) {  // a legacy empty input takes no part
      r.push_back(zeros({0}, TensorOptions(grad.device()).dtype(grad.dtype())));
      continue;
    }
    r.push_back(grad.narrow(d, at, s[size_t(d)]));
    at += s[size_t(d)];
  }
  return r;
}
std::vector<Tensor> stack_backward(const Tensor& grad, int64_t dim, const std::vector<Sizes>& sizes) {
  std::vector<Tensor> r;
  const int64_t d = wrap_dim(dim, grad.dim());
  for (size_t i = 0; i < sizes.size(); ++i) r.push_back(grad.select(d, int64_t(i)));
  return r;
}
std::vector<Tensor> sdpa_backward(const Tensor& grad, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const std::optional<Tensor>& attn_mask, bool is_causal, std::optional<double> scale) {
  const double sc = scale.value_or(1.0 / std::sqrt(double(query.size(-1))));
  Tensor s = matmul(query, tr(key)) * sc;
  const Tensor ninf = number(-std::numeric_limits<double>::infinity());
  if (is_causal && !detail::dynamic_dims(query).empty()) {
    // Under a capture with dynamic sizes the mask takes its sizes from the scores, not from arange
    // of example sizes (Note [Dynamic sizes in backward formulas]).
    s = where(gt(tril(ones_like(s)), zeros_like(s)), s, ninf);
  } else if (is_causal) {
    const int64_t l = query.size(-2), n = key.size(-2);
    Tensor rows = arange(l, TensorOptions(query.device())).unsqueeze(1);
    Tensor cols = arange(n, TensorOptions(query.device())).unsqueeze(0);
    s = where(ge(rows, cols), s, ninf);
  }
  if (attn_mask) s = attn_mask->dtype() == kBool ? where(*attn_mask, s, ninf) : s + *attn_mask;
  Tensor p = softmax(s, -1);
  Tensor gv = matmul(tr(p), grad);
  Tensor gp = matmul(grad, tr(value));
  Tensor gs = p * (gp - sum(gp * p, {-1}, true));
  return {matmul(gs, key) * sc, matmul(tr(gs), query) * sc, gv};
}

}  // namespace tessera::autograd::formulas

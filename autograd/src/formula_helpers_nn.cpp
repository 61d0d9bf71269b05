// The helpers of the convolution, pooling, pad and scatter_reduce formulas (formula_helpers.h):
// contract ops only.
#include <algorithm>
#include <array>
#include <limits>

#include "formula_helpers.h"
#include "tessera/dispatcher.h"

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
  const auto undo_crops = [&](const Tensor& g) { return constant || crops ? tessera::pad(g, uncrop, "constant", 0.0) : g; };
  if (constant) return undo_crops(grad);
  // Each dim folds its padding back onto the elements it copied, the dims one at a time.
  const auto fold = [&](Tensor g) {
    for (size_t k = 0; k < pad.size() / 2; ++k) {
      const int64_t d = g.dim() - 1 - int64_t(k);
      g = fold_padding(g, d, std::max<int64_t>(pad[2 * k], 0), std::max<int64_t>(pad[2 * k + 1], 0), mode);
    }
    return g;
  };
  // Reflect and replicate pad (reading the whole input) and then crop: the crop's gradient comes
  // first. Circular crops first and wraps within what is left (Note [Circular pad crops first]): the
  // padding folds back onto the kept elements first, and the cropped ones get zeros after.
  return mode == "circular" ? undo_crops(fold(grad)) : fold(undo_crops(grad));
}
namespace {
Tensor number(double v) { return scalar_tensor(v, kFloat64); }  // 0-dim CPU: joins tensors of any device
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_reduce(self, dim, index, src, "sum", true);
}
// "prod": PyTorch's zero-aware rule. self's gradient is the product of the rest of its group, got
// by reducing into self with its zeros made ones; src's is result / src, except for a zero that is
// the only one among its group's src elements, which gets the product of the others (reduced with
// it made one). Two zeros or more give 0, right for first order.
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

namespace {
// Note [Pooling backward]: kernel offset (i, j) of a pooling window reads, for every output element
// (oh, ow), the padded input's element (oh * s0 + i * d0, ow * s1 + j * d1): one strided slice of the
// padded input per offset, of the output's shape, and each offset's gradient goes back through the
// same slice. Adding every offset's gradient into a zeroed input-sized tensor would cost K passes
// over the input; instead the padded rows r are split into the stride's phases (r = q * s0 + f):
// offset i writes phase f = i * d0 % s0 from q = i * d0 / s0 on, a dense block of the output's size
// (columns alike). The adds cost the output's size, and one interleave of the s0 * s1 phases
// rebuilds the input. Every op is a contract op, so it runs on every device.
struct PoolShape {
  std::array<int64_t, 2> k, s, p, d;  // kernel, stride, padding, dilation
  std::array<int64_t, 2> in, out;     // the input's and the output's spatial sizes
};
PoolShape pool_shape(IntArrayRef in, IntArrayRef out, const Sizes& kernel_size, const Sizes& stride,
                     const Sizes& padding, const Sizes& dilation) {
  PoolShape g;
  g.k = pair_of(kernel_size, 1), g.s = pair_of(stride, g.k), g.p = pair_of(padding, 0), g.d = pair_of(dilation, 1);
  g.in = {in[in.size() - 2], in[in.size() - 1]};
  g.out = {out[out.size() - 2], out[out.size() - 1]};
  return g;
}
// The slice of the padded input that kernel offset (i, j) reads (the output's spatial shape).
Tensor window(const Tensor& padded, const PoolShape& g, int64_t i, int64_t j) {
  const int64_t r = i * g.d[0], c = j * g.d[1];
  return padded.slice(-2, r, r + (g.out[0] - 1) * g.s[0] + 1, g.s[0])
      .slice(-1, c, c + (g.out[1] - 1) * g.s[1] + 1, g.s[1]);
}
// The sum of the kernel offsets' gradients as the input's gradient (Note [Pooling backward]).
class WindowGradSum {
 public:
  explicit WindowGradSum(const PoolShape& g) : g_(g), phases_(size_t(g.s[0] * g.s[1])) {
    for (size_t a = 0; a < 2; ++a) q_[a] = (g.in[a] + 2 * g.p[a] + g.s[a] - 1) / g.s[a];  // phase length
  }
  // Adds `grad` (the output's shape) at the elements kernel offset (i, j) read.
  void add(int64_t i, int64_t j, const Tensor& grad) {
    const int64_t r = i * g_.d[0], c = j * g_.d[1], qr = r / g_.s[0], qc = c / g_.s[1];
    const Tensor block = tessera::pad(grad, {qc, q_[1] - qc - g_.out[1], qr, q_[0] - qr - g_.out[0]}, "constant", 0.0);
    Tensor& phase = phases_[size_t((r % g_.s[0]) * g_.s[1] + c % g_.s[1])];
    phase = phase.defined() ? phase + block : block;
  }
  // The phases interleaved into the padded input's gradient, the padding cropped. Phase (0, 0), of
  // offset (0, 0), is always there.
  Tensor sum() const {
    Tensor full = phases_[0];
    if (phases_.size() > 1) {
      const int64_t nd = full.dim();
      std::vector<Tensor> rows;
      for (int64_t f = 0; f < g_.s[0]; ++f) {
        std::vector<Tensor> row;
        for (int64_t e = 0; e < g_.s[1]; ++e) {
          const Tensor& phase = phases_[size_t(f * g_.s[1] + e)];
          row.push_back(phase.defined() ? phase : zeros_like(full));
        }
        rows.push_back(stack(row, nd));  // (.., q0, q1, s1)
      }
      Sizes sizes(full.sizes().begin(), full.sizes().end() - 2);
      sizes.insert(sizes.end(), {q_[0] * g_.s[0], q_[1] * g_.s[1]});
      full = stack(rows, nd - 1).reshape(sizes);  // (.., q0, s0, q1, s1): padded rows and columns in order
    }
    const int64_t end0 = q_[0] * g_.s[0] - g_.in[0] - g_.p[0], end1 = q_[1] * g_.s[1] - g_.in[1] - g_.p[1];
    if (g_.p[0] == 0 && g_.p[1] == 0 && end0 == 0 && end1 == 0) return full;
    return tessera::pad(full, {-g_.p[1], -end1, -g_.p[0], -end0}, "constant", 0.0);
  }

 private:
  PoolShape g_;
  std::array<int64_t, 2> q_{};
  std::vector<Tensor> phases_;  // row-major over (row phase, column phase); undefined: nothing added
};
// Per output element, the kernel offset (i * kw + j) that max_pool2d took it from: PyTorch's kernels
// scan the window in row-major order keeping `v > max || isnan(v)`, so the first maximum, or the last
// NaN. Padding (-inf here) never counts: a window of -inf takes its first real element.
Tensor max_offsets(const Tensor& self, const Tensor& result, const PoolShape& g) {
  const bool padded = g.p[0] > 0 || g.p[1] > 0;
  const Sizes pads{g.p[1], g.p[1], g.p[0], g.p[0]};
  const Tensor x = padded ? tessera::pad(self, pads, "constant", -std::numeric_limits<double>::infinity()) : self;
  Tensor real;  // nonzero at the padded plane's real elements
  if (padded) real = tessera::pad(ones({g.in[0], g.in[1]}, TensorOptions(self.device()).dtype(self.dtype())), pads, "constant", 0.0);
  const int64_t kw = g.k[1], taps = g.k[0] * kw;
  // -1 as a 0-dim seed that the first where() broadcasts to the output's shape (a full() of the
  // result's sizes would fix a dynamic batch under a capture: Note [Dynamic sizes in backward formulas]).
  Tensor first = scalar_tensor(-1, kInt64).to(result.device()), last_nan = first;
  for (int64_t t = taps - 1; t >= 0; --t) {  // backwards: the earliest hit is written last
    Tensor hit = eq(window(x, g, t / kw, t % kw), result);
    if (padded) hit = logical_and(hit, ne(window(real, g, t / kw, t % kw), scalar_tensor(0.0, kFloat64)));
    first = where(hit, scalar_tensor(t, kInt64), first);
  }
  for (int64_t t = 0; t < taps; ++t)  // NaN is never padding
    last_nan = where(isnan(window(x, g, t / kw, t % kw)), scalar_tensor(t, kInt64), last_nan);
  return where(isnan(result), last_nan, first);
}
}  // namespace

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& self, const Tensor& result, const Sizes& kernel_size,
                           const Sizes& stride, const Sizes& padding, const Sizes& dilation) {
  const PoolShape g = pool_shape(self.sizes(), result.sizes(), kernel_size, stride, padding, dilation);
  const Tensor taken = max_offsets(self, result, g);
  WindowGradSum input_grad(g);
  for (int64_t t = 0; t < g.k[0] * g.k[1]; ++t)
    input_grad.add(t / g.k[1], t % g.k[1], mask_grad(grad, eq(taken, scalar_tensor(t, kInt64))));
  return input_grad.sum();
}

Tensor avg_pool2d_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& kernel_size, const Sizes& stride,
                           const Sizes& padding) {
  const PoolShape g = pool_shape(self_sizes, grad.sizes(), kernel_size, stride, padding, {1, 1});
  const double taps = double(g.k[0] * g.k[1]);  // count_include_pad: the divisor counts the padding
  if (g.s == g.k && g.p[0] == 0 && g.p[1] == 0) {
    // Windows that tile the input: one expand of the share (faster than the phases); rows and
    // columns past the last window get zeros.
    Sizes tiles(self_sizes.begin(), self_sizes.end() - 2), windows = tiles, tiled = tiles;
    tiles.insert(tiles.end(), {g.out[0], 1, g.out[1], 1});
    windows.insert(windows.end(), {g.out[0], g.k[0], g.out[1], g.k[1]});
    tiled.insert(tiled.end(), {g.out[0] * g.k[0], g.out[1] * g.k[1]});
    const Tensor gin = (grad.reshape(tiles).expand(windows) / taps).reshape(tiled);  // the division writes it densely
    const int64_t rest0 = g.in[0] - tiled.end()[-2], rest1 = g.in[1] - tiled.back();
    return rest0 == 0 && rest1 == 0 ? gin : tessera::pad(gin, {0, rest1, 0, rest0}, "constant", 0.0);
  }
  const Tensor share = grad / taps;
  WindowGradSum input_grad(g);
  for (int64_t i = 0; i < g.k[0]; ++i)
    for (int64_t j = 0; j < g.k[1]; ++j) input_grad.add(i, j, share);
  return input_grad.sum();
}

namespace {
// Note [Resize backward]
// _resize (ONNX Resize) is separable: every mode resamples one resized dim at a time, output index o
// of dim d a fixed weighted sum of input indices (nearest: one weight 1; linear: two; cubic: four,
// renormalised per dim by exclude_outside). So the forward is x times a matrix W_d (in_d x out_d) per
// dim, and the gradient is grad times W_d^T per dim. W_d comes from the forward itself, applied to
// the identity along the dim (rows of an in_d x in_d identity resized to out_d columns, the same
// mode, coordinate transformation and scale): no second statement of the sampling rules, and every
// device's _resize kernel gives its own weights.
Tensor resize_weights(const Tensor& grad, int64_t in, int64_t out, const std::string& mode, const std::string& ctm,
                      const std::string& nearest_mode, double cubic_coeff_a, bool exclude_outside,
                      const std::optional<Tensor>& scale) {
  const TensorOptions opts = TensorOptions(grad.device()).dtype(kInt64);
  Tensor eye = eq(arange(in, opts).unsqueeze(1), arange(in, opts).unsqueeze(0)).to(grad.dtype());
  Dispatcher& d = Dispatcher::instance();
  static OperatorEntry& op = d.op("_resize");
  Stack args{eye, std::vector<int64_t>{out}, mode, ctm, nearest_mode, cubic_coeff_a, exclude_outside, scale};
  return std::get<Tensor>(d.call_boxed(op, std::move(args)).at(0));  // [in, out]
}
}  // namespace

Tensor resize_backward(const Tensor& grad, const Sizes& self_sizes, const Sizes& size, const std::string& mode,
                       const std::string& coordinate_transformation_mode, const std::string& nearest_mode,
                       double cubic_coeff_a, bool exclude_outside, const std::optional<Tensor>& scales) {
  const int64_t rank = int64_t(self_sizes.size()), k = int64_t(size.size());
  Tensor g = grad;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t dim = rank - k + i, in = self_sizes[size_t(dim)], out = size[size_t(i)];
    if (in == out && !scales) continue;  // every mode maps a dim to its own size by the identity
    std::optional<Tensor> scale;
    if (scales) scale = scales->narrow(0, i, 1);
    const Tensor w = resize_weights(g, in, out, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                                    exclude_outside, scale);
    // g [..., out_d, ...] with dim and the last exchanged, times W_d^T [out, in], exchanged back.
    g = matmul(g.transpose(dim, rank - 1), w.transpose(0, 1)).transpose(dim, rank - 1);
  }
  return g;
}

}  // namespace tessera::autograd::formulas

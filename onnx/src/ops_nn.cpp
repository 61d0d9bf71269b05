// Converters of the network family: MatMul/Gemm, Conv and pooling, normalisations, softmax,
// reductions, ArgMax/ArgMin.
#include <cmath>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

Tensor scalar_like(double v, const Tensor& x) { return host_scalar(v, x.dtype()); }

void MatMul(NodeCtx& c) { c.out(0, tessera::matmul(c.in(0), c.in(1))); }

void Gemm(NodeCtx& c) {
  Tensor a = c.in(0), b = c.in(1);
  const double alpha = c.attr_float("alpha", 1.0), beta = c.attr_float("beta", 1.0);
  if (c.attr_int("transA", 0)) a = a.t();
  std::optional<Tensor> bias = c.opt(2);
  if (c.attr_int("transB", 0) && alpha == 1.0 && (!bias || (beta == 1.0 && bias->dim() <= 1 && bias->numel() > 1))) {
    c.out(0, tessera::linear(a, b, bias));
    return;
  }
  if (c.attr_int("transB", 0)) b = b.t();
  Tensor y = tessera::matmul(a, b);
  if (alpha != 1.0) y = tessera::mul(y, scalar_like(alpha, y));
  if (bias) y = tessera::add(y, beta == 1.0 ? *bias : tessera::mul(*bias, scalar_like(beta, *bias)));
  c.out(0, y);
}

// Softmax / LogSoftmax: opsets < 13 normalise over the flattened dims from `axis` (default 1).
template <bool Log>
void softmax(NodeCtx& c) {
  Tensor x = c.in(0);
  auto fn = [](const Tensor& t, int64_t d) { return Log ? tessera::log_softmax(t, d) : tessera::softmax(t, d); };
  if (c.opset() >= 13) return c.out(0, fn(x, norm_axis(c, c.attr_int("axis", -1), x.dim())));
  const int64_t axis = norm_axis(c, c.attr_int("axis", 1), x.dim());
  if (axis == x.dim() - 1) return c.out(0, fn(x, axis));
  Sizes s = c.sizes(x);
  Tensor y = fn(reshape_to(c, x, {product(s, 0, size_t(axis)), product(s, size_t(axis), s.size())}), 1);
  c.out(0, reshape_to(c, y, s));
}

// The window of a Conv or pooling node over 1 or 2 spatial dims, pads resolved (auto_pad too).
struct Window {
  std::vector<int64_t> kernel, stride, dilation, begin, end;
};

Window window(NodeCtx& c, const Tensor& x, std::vector<int64_t> kernel) {
  const size_t n = kernel.size();
  if (n != 1 && n != 2) c.fail(std::to_string(n) + "-D windows are not supported (1-D and 2-D are)");
  if (x.dim() != int64_t(n) + 2) c.fail("a " + std::to_string(n) + "-D window needs a " + std::to_string(n + 2) + "-D input, got " + std::to_string(x.dim()) + "-D");
  for (int64_t k : kernel)
    if (k <= 0) c.fail("kernel sizes must be positive");
  Window w;
  w.kernel = kernel;
  w.stride = c.attr_ints("strides", std::vector<int64_t>(n, 1));
  w.dilation = c.attr_ints("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (w.stride.size() != n || w.dilation.size() != n || pads.size() != 2 * n) c.fail("strides/dilations/pads do not match the kernel's rank");
  for (size_t i = 0; i < n; ++i)
    if (w.stride[i] <= 0 || w.dilation[i] <= 0 || pads[i] < 0 || pads[i + n] < 0 || w.stride[i] > (1 << 20) ||
        w.dilation[i] > (1 << 20) || pads[i] > (1 << 20) || pads[i + n] > (1 << 20) || kernel[i] > (1 << 20))
      c.fail("strides and dilations must be in [1, 2^20], pads in [0, 2^20], kernel sizes at most 2^20");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  Sizes s = c.sizes(x);
  for (size_t i = 0; i < n; ++i) {
    int64_t b = pads[i], e = pads[i + n];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const SymSize& in = s[s.size() - n + i];
      if (!in.is_constant()) c.fail("auto_pad " + auto_pad + " on the dynamic size " + in.str());
      const int64_t out = (in.constant() + w.stride[i] - 1) / w.stride[i];
      const int64_t total = std::max<int64_t>((out - 1) * w.stride[i] + (kernel[i] - 1) * w.dilation[i] + 1 - in.constant(), 0);
      b = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      e = total - b;
    } else if (auto_pad == "VALID") {
      b = e = 0;
    } else if (auto_pad != "NOTSET") {
      c.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    }
    w.begin.push_back(b);
    w.end.push_back(e);
  }
  return w;
}

// Runs `op(x, padding)` on a 4-D input: symmetric pads go to the op; asymmetric ones pad the input
// first with `pad_value` (the contract's pad), and the op runs unpadded.
template <typename Op>
Tensor with_padding(NodeCtx& c, const Tensor& x, const Window& w, Op op, double pad_value) {
  const size_t n = w.kernel.size();
  bool symmetric = true;
  for (size_t i = 0; i < n; ++i) symmetric = symmetric && w.begin[i] == w.end[i];
  if (symmetric) return op(x, w.begin);
  std::vector<int64_t> list;  // [last_lo, last_hi, prev_lo, prev_hi]
  for (size_t i = n; i-- > 0;) {
    list.push_back(w.begin[i]);
    list.push_back(w.end[i]);
  }
  Tensor padded = call_op(c, "pad", {x, list, std::string("constant"), pad_value});
  return op(padded, std::vector<int64_t>(n, 0));
}

// A 1-D window runs as 2-D with a height of 1.
Tensor to_2d(NodeCtx& c, const Tensor& x) {
  Sizes s = c.sizes(x);
  s.insert(s.end() - 1, SymSize(int64_t(1)));
  return reshape_to(c, x, s);
}
Tensor from_2d(NodeCtx& c, const Tensor& y) {
  Sizes s = c.sizes(y);
  s.erase(s.end() - 2);
  return reshape_to(c, y, s);
}
Window widen(Window w) {
  for (auto* v : {&w.kernel, &w.stride, &w.dilation}) v->insert(v->begin(), 1);
  w.begin.insert(w.begin.begin(), 0);
  w.end.insert(w.end.begin(), 0);
  return w;
}

void Conv(NodeCtx& c) {
  Tensor x = c.in(0), wt = c.in(1);
  if (wt.dim() < 3) c.fail("the weight must be 3-D or 4-D");
  std::optional<Tensor> bias = c.opt(2);
  std::vector<int64_t> kernel(wt.sizes().begin() + 2, wt.sizes().end());
  kernel = c.attr_ints("kernel_shape", kernel);
  Window w = window(c, x, kernel);
  const int64_t groups = c.attr_int("group", 1);
  const bool one_d = kernel.size() == 1;
  if (one_d) {
    x = to_2d(c, x);
    wt = to_2d(c, wt);
    w = widen(w);
  }
  Tensor y = with_padding(c, x, w, [&](const Tensor& in, const std::vector<int64_t>& pad) {
    return tessera::conv2d(in, wt, bias, w.stride, pad, w.dilation, groups);
  }, 0.0);
  c.out(0, one_d ? from_2d(c, y) : y);
}

template <bool Max>
void pool(NodeCtx& c) {
  Tensor x = c.in(0);
  if (c.attr_int("ceil_mode", 0)) c.fail("ceil_mode=1 is not supported");
  if (Max && c.output_used(1)) c.fail("the Indices output is not supported");
  if (Max && c.attr_int("storage_order", 0)) c.fail("storage_order=1 is not supported");
  Window w = window(c, x, c.attr_ints("kernel_shape", {}));
  if (!Max) {
    for (int64_t d : w.dilation) if (d != 1) c.fail("dilations are not supported for AveragePool");
  }
  const bool one_d = w.kernel.size() == 1;
  if (one_d) {
    x = to_2d(c, x);
    w = widen(w);
  }
  auto run = [&](const Tensor& in, const std::vector<int64_t>& pad) {
    return Max ? tessera::max_pool2d(in, w.kernel, w.stride, pad, w.dilation) : tessera::avg_pool2d(in, w.kernel, w.stride, pad);
  };
  Tensor y = with_padding(c, x, w, run, Max ? -INFINITY : 0.0);
  bool padded = false;
  for (size_t i = 0; i < w.begin.size(); ++i) padded = padded || w.begin[i] || w.end[i];
  const bool include_pad = c.attr_int("count_include_pad", 0) != 0;
  if (!Max && padded && !include_pad) {
    // The mean over the valid elements only: the same pooling of a ones plane gives each window's
    // share of valid elements.
    Sizes s = c.sizes(x);
    std::vector<int64_t> plane{1, 1};
    for (size_t i = s.size() - 2; i < s.size(); ++i) {
      if (!s[i].is_constant()) c.fail("count_include_pad=0 with pads on the dynamic size " + s[i].str());
      plane.push_back(s[i].constant());
    }
    Tensor ones;
    {
      ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
      ones = tessera::ones(plane, tessera::dtype(x.dtype()));
    }
    y = tessera::div(y, with_padding(c, ones, w, run, 0.0));
  }
  c.out(0, one_d ? from_2d(c, y) : y);
}

template <bool Max>
void global_pool(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  c.out(0, Max ? tessera::amax(x, dims, true) : tessera::mean(x, dims, true));
}

// The static sizes from `axis` on (the normalised shape of a layer or RMS norm).
std::vector<int64_t> normalized_shape(NodeCtx& c, const Tensor& x, int64_t axis) {
  Sizes s = c.sizes(x);
  std::vector<int64_t> out;
  for (size_t i = size_t(norm_axis(c, axis, x.dim())); i < s.size(); ++i) {
    if (!s[i].is_constant()) c.fail("normalises over the dynamic size " + s[i].str());
    out.push_back(s[i].constant());
  }
  return out;
}

void LayerNormalization(NodeCtx& c) {
  c.ignore_attrs({"stash_type"});
  Tensor x = c.in(0);
  const int64_t axis = c.attr_int("axis", -1);
  const double eps = c.attr_float("epsilon", 1e-5);
  std::vector<int64_t> shape = normalized_shape(c, x, axis);
  c.out(0, tessera::layer_norm(x, shape, c.opt(1), c.opt(2), eps));
  if (c.output_used(1) || c.output_used(2)) {  // Mean and InvStdDev, kept dims
    std::vector<int64_t> dims;
    for (int64_t d = norm_axis(c, axis, x.dim()); d < x.dim(); ++d) dims.push_back(d);
    c.out(1, tessera::mean(x, dims, true));
    c.out(2, tessera::rsqrt(tessera::add(tessera::var(x, dims, 0, true), scalar_like(eps, x))));
  }
}

void RMSNormalization(NodeCtx& c) {
  c.ignore_attrs({"stash_type"});
  Tensor x = c.in(0);
  std::vector<int64_t> shape = normalized_shape(c, x, c.attr_int("axis", -1));
  c.out(0, tessera::rms_norm(x, shape, c.opt(1), c.attr_float("epsilon", 1e-5)));
}

// Per-channel [C] -> [C, 1, ...] for an input of rank `rank` (channels at dim 1).
Tensor channel(NodeCtx& c, const Tensor& v, int64_t rank) {
  Sizes s = c.sizes(v);
  for (int64_t i = 2; i < rank; ++i) s.push_back(SymSize(int64_t(1)));
  return reshape_to(c, v, s);
}

void BatchNormalization(NodeCtx& c) {
  c.ignore_attrs({"momentum"});
  if (c.attr_int("spatial", 1) != 1) c.fail("spatial=0 is not supported");
  if (c.attr_int("training_mode", 0)) c.fail("training_mode=1 is not supported (inference only)");
  for (int i = 1; i < c.num_outputs(); ++i)
    if (c.output_used(i)) c.fail("the running mean/var outputs are not supported (inference only)");
  Tensor x = c.in(0);
  const double eps = c.attr_float("epsilon", 1e-5);
  Tensor scale, shift;
  if (c.val(1).constant && c.val(2).constant && c.val(3).constant && c.val(4).constant) {
    // Folded at import: scale / sqrt(var + eps) and bias - mean * that.
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    Tensor g = c.in(1).to(kFloat64), b = c.in(2).to(kFloat64), m = c.in(3).to(kFloat64), v = c.in(4).to(kFloat64);
    Tensor s = tessera::div(g, tessera::sqrt(tessera::add(v, tessera::full({}, eps, tessera::dtype(kFloat64)))));
    scale = s.to(x.dtype());
    shift = tessera::sub(b, tessera::mul(m, s)).to(x.dtype());
  } else {
    Tensor v = tessera::add(c.in(4), scalar_like(eps, c.in(4)));
    scale = tessera::mul(c.in(1), tessera::rsqrt(v));
    shift = tessera::sub(c.in(2), tessera::mul(c.in(3), scale));
  }
  c.out(0, tessera::add(tessera::mul(x, channel(c, scale, x.dim())), channel(c, shift, x.dim())));
}

// LRN: x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta; the window
// sum is an average pool over the channels (zero padded, padding counted) times `size`.
void LRN(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t size = c.attr_int("size", 0);
  if (size <= 0 || size > 4096) c.fail("size must be in [1, 4096]");
  if (x.dim() < 3) c.fail("the input must be at least 3-D");
  const double alpha = c.attr_float("alpha", 1e-4), beta = c.attr_float("beta", 0.75), bias = c.attr_float("bias", 1.0);
  Sizes s = c.sizes(x);
  Tensor sq = reshape_to(c, tessera::mul(x, x), {s[0], SymSize(int64_t(1)), s[1], product(s, 2, s.size())});
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Tensor padded = call_op(c, "pad", {sq, std::vector<int64_t>{0, 0, lo, hi}, std::string("constant"), 0.0});
  Tensor sum = tessera::mul(tessera::avg_pool2d(padded, {size, 1}, {1, 1}, {0, 0}), scalar_like(double(size), x));
  Tensor den = tessera::add(tessera::mul(sum, scalar_like(alpha / double(size), x)), scalar_like(bias, x));
  c.out(0, tessera::div(x, reshape_to(c, tessera::pow(den, Scalar(beta)), s)));
}

void InstanceNormalization(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor mean = tessera::mean(x, dims, true);
  Tensor var = tessera::var(x, dims, 0, true);
  Tensor y = tessera::mul(tessera::sub(x, mean), tessera::rsqrt(tessera::add(var, scalar_like(c.attr_float("epsilon", 1e-5), x))));
  c.out(0, tessera::add(tessera::mul(y, channel(c, c.in(1), x.dim())), channel(c, c.in(2), x.dim())));
}

// Reductions: axes from the attribute (older opsets) or input 1; noop_with_empty_axes.
Tensor reduce(NodeCtx& c, const Tensor& x, Tensor (*fn)(const Tensor&, IntArrayRef, bool), bool* noop) {
  std::optional<std::vector<int64_t>> axes = c.axes(1, "axes");
  const bool keep = c.attr_int("keepdims", 1) != 0;
  const bool noop_empty = c.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> dims;
  if (axes && !axes->empty()) {
    for (int64_t a : *axes) dims.push_back(norm_axis(c, a, x.dim()));
  } else if (noop_empty) {
    *noop = true;
    return x;
  } else {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  *noop = false;
  return fn(x, dims, keep);
}
Tensor sum_fn(const Tensor& x, IntArrayRef d, bool k) { return tessera::sum(x, d, k); }
Tensor mean_fn(const Tensor& x, IntArrayRef d, bool k) { return tessera::mean(x, d, k); }
Tensor max_fn(const Tensor& x, IntArrayRef d, bool k) { return tessera::amax(x, d, k); }
Tensor min_fn(const Tensor& x, IntArrayRef d, bool k) { return tessera::amin(x, d, k); }
Tensor prod_fn(const Tensor& x, IntArrayRef d, bool k) { return tessera::prod(x, d, k); }

template <Tensor (*Fn)(const Tensor&, IntArrayRef, bool)>
void reduce_op(NodeCtx& c) {
  bool noop = false;
  c.out(0, reduce(c, c.in(0), Fn, &noop));
}
void ReduceL1(NodeCtx& c) { bool noop = false; c.out(0, reduce(c, tessera::abs(c.in(0)), sum_fn, &noop)); }
void ReduceSumSquare(NodeCtx& c) {
  Tensor x = c.in(0);
  bool noop = false;
  c.out(0, reduce(c, tessera::mul(x, x), sum_fn, &noop));
}
void ReduceL2(NodeCtx& c) {
  Tensor x = c.in(0);
  bool noop = false;
  Tensor y = reduce(c, tessera::mul(x, x), sum_fn, &noop);
  c.out(0, noop ? tessera::abs(x) : tessera::sqrt(y));
}
void ReduceLogSum(NodeCtx& c) {
  bool noop = false;
  Tensor y = reduce(c, c.in(0), sum_fn, &noop);
  c.out(0, tessera::log(y));
}
void ReduceLogSumExp(NodeCtx& c) {
  Tensor x = c.in(0);
  bool noop = false;
  // log(sum(exp(x - m))) + m with m the max (kept), so large inputs do not overflow.
  Tensor m = reduce(c, x, [](const Tensor& t, IntArrayRef d, bool) { return tessera::amax(t, d, true); }, &noop);
  if (noop) return c.out(0, x);
  Tensor s = reduce(c, tessera::exp(tessera::sub(x, m)), sum_fn, &noop);
  Tensor mk = reduce(c, m, max_fn, &noop);  // m with the reduced dims dropped when keepdims=0
  c.out(0, tessera::add(tessera::log(s), mk));
}

template <bool Min>
void arg_reduce(NodeCtx& c) {
  static_assert(!Min, "ArgMin maps onto the contract's argmin (ops_index.cpp)");
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (!c.attr_int("select_last_index", 0)) return c.out(0, tessera::argmax(x, axis, keep));
  // The last of equal maxima: the first in the flipped tensor, counted from the end.
  const SymSize n = c.sizes(x)[size_t(axis)];
  if (!n.is_constant()) c.fail("select_last_index=1 on the dynamic dim " + n.str());
  Tensor i = tessera::argmax(call_op(c, "flip", {x, std::vector<int64_t>{axis}}), axis, keep);
  c.out(0, tessera::sub(host_scalar(double(n.constant() - 1), kInt64), i));
}

}  // namespace

void add_nn_converters(ConverterTable& t) {
  t["MatMul"] = MatMul; t["Gemm"] = Gemm; t["Softmax"] = softmax<false>; t["LogSoftmax"] = softmax<true>;
  t["Conv"] = Conv; t["MaxPool"] = pool<true>; t["AveragePool"] = pool<false>;
  t["GlobalAveragePool"] = global_pool<false>; t["GlobalMaxPool"] = global_pool<true>;
  t["LayerNormalization"] = LayerNormalization; t["RMSNormalization"] = RMSNormalization;
  t["BatchNormalization"] = BatchNormalization; t["LRN"] = LRN; t["InstanceNormalization"] = InstanceNormalization;
  t["ReduceSum"] = reduce_op<sum_fn>; t["ReduceMean"] = reduce_op<mean_fn>; t["ReduceMax"] = reduce_op<max_fn>;
  t["ReduceMin"] = reduce_op<min_fn>; t["ReduceProd"] = reduce_op<prod_fn>; t["ReduceL1"] = ReduceL1;
  t["ReduceL2"] = ReduceL2; t["ReduceSumSquare"] = ReduceSumSquare; t["ReduceLogSum"] = ReduceLogSum;
  t["ReduceLogSumExp"] = ReduceLogSumExp; t["ArgMax"] = arg_reduce<false>;
}

}  // namespace tessera::onnx::detail

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

// The window of a Conv or pooling node over 1 to 3 spatial dims, pads resolved (auto_pad too).
struct Window {
  std::vector<int64_t> kernel, stride, dilation, begin, end;
};

// Convs take 1-D and 2-D windows (max_n 2), pooling also 3-D ones.
Window window(NodeCtx& c, const Tensor& x, std::vector<int64_t> kernel, size_t max_n = 2) {
  const size_t n = kernel.size();
  if (n < 1 || n > max_n)
    c.fail(std::to_string(n) + "-D windows are not supported (1-D to " + std::to_string(max_n) + "-D are)");
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

// A 3-D convolution as 2-D ones: the input padded, then for each kernel depth t the depth slices
// z * stride + t * dilation (an index list made at import) as a batch of planes, convolved with
// W[:, :, t] and summed over t.
Tensor conv3d(NodeCtx& c, const Tensor& x, const Tensor& wt, const std::optional<Tensor>& bias, const Window& w,
              int64_t groups) {
  Tensor xp = x;
  bool padded = false;
  std::vector<int64_t> list;  // the contract's pad: last dim first
  for (size_t i = 3; i-- > 0;) {
    list.push_back(w.begin[i]);
    list.push_back(w.end[i]);
    padded = padded || w.begin[i] || w.end[i];
  }
  if (padded) xp = call_op(c, "pad", {x, list, std::string("constant"), 0.0});
  Sizes xs = c.sizes(xp), ws = c.sizes(wt);
  for (size_t i = 2; i < 5; ++i)
    if (!ws[i].is_constant()) c.fail("the weight's dynamic size " + ws[i].str());
  if (!xs[2].is_constant()) c.fail("a 3-D convolution over the dynamic depth " + xs[2].str());
  const int64_t depth = xs[2].constant(), kd = ws[2].constant();
  const int64_t span = (kd - 1) * w.dilation[0] + 1;
  if (depth < span) c.fail("the kernel is deeper than the padded input");
  const int64_t out_depth = (depth - span) / w.stride[0] + 1;
  Tensor sum;
  for (int64_t t = 0; t < kd; ++t) {
    std::vector<int64_t> idx;
    for (int64_t z = 0; z < out_depth; ++z) idx.push_back(z * w.stride[0] + t * w.dilation[0]);
    Tensor slices = tessera::index_select(xp, 2, host_tensor(idx, {out_depth}, kInt64));  // [N, C, OD, H, W]
    slices = reshape_to(c, slices.permute({0, 2, 1, 3, 4}), {xs[0] * SymSize(out_depth), xs[1], xs[3], xs[4]});
    Tensor plane = reshape_to(c, call_op(c, "slice_copy.Tensor", {wt, int64_t(2), t, t + 1, int64_t(1)}),
                              {ws[0], ws[1], ws[3], ws[4]});
    Tensor y = tessera::conv2d(slices, plane, std::nullopt, {w.stride[1], w.stride[2]}, {0, 0},
                               {w.dilation[1], w.dilation[2]}, groups);
    sum = t == 0 ? y : tessera::add(sum, y);
  }
  Sizes ys = c.sizes(sum);  // [N * OD, O, OH, OW]
  Tensor y = reshape_to(c, sum, {xs[0], SymSize(out_depth), ys[1], ys[2], ys[3]}).permute({0, 2, 1, 3, 4});
  if (bias) y = tessera::add(y, reshape_to(c, *bias, {c.sizes(*bias)[0], SymSize(int64_t(1)), SymSize(int64_t(1)), SymSize(int64_t(1))}));
  return y;
}

// A Conv node's convolution of x by wt (its window, pads and groups from the node's attributes).
Tensor conv_of(NodeCtx& c, Tensor x, Tensor wt, const std::optional<Tensor>& bias) {
  if (wt.dim() < 3) c.fail("the weight must be 3-D to 5-D");
  std::vector<int64_t> kernel(wt.sizes().begin() + 2, wt.sizes().end());
  kernel = c.attr_ints("kernel_shape", kernel);
  Window w = window(c, x, kernel, 3);
  const int64_t groups = c.attr_int("group", 1);
  if (kernel.size() == 3) return conv3d(c, x, wt, bias, w, groups);
  const bool one_d = kernel.size() == 1;
  if (one_d) {
    x = to_2d(c, x);
    wt = to_2d(c, wt);
    w = widen(w);
  }
  Tensor y = with_padding(c, x, w, [&](const Tensor& in, const std::vector<int64_t>& pad) {
    return tessera::conv2d(in, wt, bias, w.stride, pad, w.dilation, groups);
  }, 0.0);
  return one_d ? from_2d(c, y) : y;
}

void Conv(NodeCtx& c) { c.out(0, conv_of(c, c.in(0), c.in(1), c.opt(2))); }

// x - zero_point in double (exact for every integer type); a 1-D zero point is per output channel
// (dim 0) of a weight.
Tensor centred(NodeCtx& c, const Tensor& v, int zp_input, bool per_channel) {
  Tensor d = v.to(kFloat64);
  if (!c.has(zp_input)) return d;
  Tensor zp = c.in(zp_input).to(kFloat64);
  if (zp.numel() == 1) return tessera::sub(d, reshape_to(c, zp, {}));
  if (!per_channel || zp.dim() != 1) c.fail("input " + std::to_string(zp_input) + ": a zero point must be a scalar (or 1-D per output channel of a weight)");
  Sizes s{c.sizes(zp)[0]};
  for (int64_t i = 1; i < v.dim(); ++i) s.push_back(SymSize(int64_t(1)));
  return tessera::sub(d, reshape_to(c, zp, s));
}

// ConvInteger: the conv of the zero-point-shifted integers, exact in double, as int32.
void ConvInteger(NodeCtx& c) {
  c.out(0, conv_of(c, centred(c, c.in(0), 2, false), centred(c, c.in(1), 3, true), std::nullopt).to(kInt32));
}

// QLinearConv: the integer conv (plus the int32 bias) times x_scale * w_scale / y_scale (per output
// channel for a 1-D w_scale; in the scales' type, as the reference), plus y_zero_point, saturated,
// then rounded half to even.
void QLinearConv(NodeCtx& c) {
  Tensor x = c.in(0);
  Tensor acc = conv_of(c, centred(c, x, 2, false), centred(c, c.in(3), 5, true), std::nullopt);
  if (c.has(8)) {
    Sizes bs{c.sizes(c.in(8))[0]};
    for (int64_t i = 2; i < acc.dim(); ++i) bs.push_back(SymSize(int64_t(1)));
    acc = tessera::add(acc, reshape_to(c, c.in(8).to(kFloat64), bs));
  }
  Tensor xs = c.in(1), ws = c.in(4), ys = c.in(6);
  if (xs.numel() != 1 || ys.numel() != 1) c.fail("x_scale and y_scale must be scalars");
  Tensor scale = reshape_to(c, xs, {});
  if (ws.numel() == 1) {
    scale = tessera::div(tessera::mul(scale, reshape_to(c, ws, {}).to(xs.dtype())), reshape_to(c, ys, {}).to(xs.dtype()));
  } else {
    Sizes s{c.sizes(ws)[0]};
    for (int64_t i = 2; i < acc.dim(); ++i) s.push_back(SymSize(int64_t(1)));
    scale = tessera::div(tessera::mul(scale, reshape_to(c, ws, s).to(xs.dtype())), reshape_to(c, ys, {}).to(xs.dtype()));
  }
  Tensor y = tessera::mul(acc, scale.to(kFloat64));
  DType out = x.dtype();
  if (c.has(7)) {
    out = c.in(7).dtype();
    y = tessera::add(y, reshape_to(c, c.in(7), {}).to(kFloat64));
  }
  if (out != kInt8 && out != kUInt8) c.fail("the output must be int8 or uint8");
  const double lo = out == kInt8 ? -128.0 : 0.0, hi = out == kInt8 ? 127.0 : 255.0;
  c.out(0, tessera::round(tessera::clamp(y, Scalar(lo), Scalar(hi))).to(out));
}

// ceil_mode=1: the end padding that makes a floor-sized pooling give the ceil size; a window that
// would start past the input and its begin pad is dropped (the spec's rule). The extra never counts
// as an element of a window.
std::vector<int64_t> ceil_extra(NodeCtx& c, const Tensor& x, const Window& w) {
  const size_t n = w.kernel.size();
  Sizes s = c.sizes(x);
  std::vector<int64_t> extra(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const SymSize& in = s[s.size() - n + i];
    if (!in.is_constant()) c.fail("ceil_mode=1 on the dynamic size " + in.str());
    const int64_t len = in.constant() + w.begin[i] + w.end[i], span = (w.kernel[i] - 1) * w.dilation[i] + 1;
    if (len < span) continue;  // no window fits: the pooling op says so
    int64_t out = (len - span + w.stride[i] - 1) / w.stride[i] + 1;
    if ((out - 1) * w.stride[i] >= in.constant() + w.begin[i]) --out;
    extra[i] = std::max<int64_t>((out - 1) * w.stride[i] + span - len, 0);
  }
  return extra;
}

// The mean (or max) of each window of an unpadded 4-D input over a 2-D window. A dilated mean is a
// depthwise conv with weights 1/K (avg_pool2d has no dilation).
Tensor pool2d_plain(NodeCtx& c, bool max, const Tensor& x, const std::vector<int64_t>& k,
                    const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  if (max) return tessera::max_pool2d(x, k, s, {0, 0}, d);
  if (d[0] == 1 && d[1] == 1) return tessera::avg_pool2d(x, k, s, {0, 0});
  Sizes sz = c.sizes(x);
  Tensor flat = reshape_to(c, x, {sz[0] * sz[1], SymSize(int64_t(1)), sz[2], sz[3]});
  Tensor wt;
  {
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    wt = tessera::full({1, 1, k[0], k[1]}, 1.0 / double(k[0] * k[1]), tessera::dtype(x.dtype()));
  }
  Tensor y = tessera::conv2d(flat, wt, std::nullopt, s, {0, 0}, d, 1);
  Sizes ys = c.sizes(y);
  return reshape_to(c, y, {sz[0], sz[1], ys[2], ys[3]});
}

// Pools an already padded input over a 1-, 2- or 3-D window (pads of `w` ignored). A 3-D window is
// separable: the max (or mean) over each (H, W) plane, then over D.
Tensor pool_plain(NodeCtx& c, bool max, const Tensor& x, const Window& w) {
  const size_t n = w.kernel.size();
  if (n == 1) {
    Tensor y = pool2d_plain(c, max, to_2d(c, x), {1, w.kernel[0]}, {1, w.stride[0]}, {1, w.dilation[0]});
    return from_2d(c, y);
  }
  if (n == 2) return pool2d_plain(c, max, x, w.kernel, w.stride, w.dilation);
  Sizes s = c.sizes(x);
  const SymSize one(int64_t(1));
  Tensor a = reshape_to(c, x, {s[0], s[1] * s[2], s[3], s[4]});
  a = pool2d_plain(c, max, a, {w.kernel[1], w.kernel[2]}, {w.stride[1], w.stride[2]},
                   {w.dilation[1], w.dilation[2]});
  Sizes as = c.sizes(a);
  Tensor b = reshape_to(c, a, {s[0] * s[1], one, s[2], as[2] * as[3]});
  b = pool2d_plain(c, max, b, {w.kernel[0], 1}, {w.stride[0], 1}, {w.dilation[0], 1});
  return reshape_to(c, b, {s[0], s[1], c.sizes(b)[2], as[2], as[3]});
}

// Pads the last n dims of x by [begin, end + extra] with `value` (the contract's pad).
Tensor pad_window(NodeCtx& c, const Tensor& x, const Window& w, const std::vector<int64_t>& extra,
                  double value) {
  std::vector<int64_t> list;  // [last_lo, last_hi, prev_lo, prev_hi, ...]
  bool any = false;
  for (size_t i = w.kernel.size(); i-- > 0;) {
    list.push_back(w.begin[i]);
    list.push_back(w.end[i] + extra[i]);
    any = any || w.begin[i] || w.end[i] + extra[i];
  }
  if (!any) return x;
  return call_op(c, "pad", {x, list, std::string("constant"), value});
}

// The lowest value of a dtype: what a max pooling pads with.
double lowest(DType t) {
  switch (t) {
    case kUInt8:
    case kBool:
      return 0.0;
    case kInt8:
      return -128.0;
    case kInt16:
      return -32768.0;
    case kInt32:
      return -2147483648.0;
    case kInt64:
      return -9223372036854775808.0;
    default:
      return -INFINITY;
  }
}

// The window size over the number of elements it counts (the input's, and the pads' too with
// count_include_pad=1; never the ceil_mode extra), per output position: what turns the mean over
// the whole padded window into the mean the spec asks for. Empty when it is 1 everywhere.
std::optional<Tensor> mean_correction(NodeCtx& c, const Tensor& x, const Window& w,
                                      const std::vector<int64_t>& extra, bool include_pad) {
  const size_t n = w.kernel.size();
  Sizes s = c.sizes(x);
  std::vector<std::vector<int64_t>> counts(n);
  std::vector<int64_t> out_sizes;
  int64_t total = 1;
  bool all_full = true;
  for (size_t i = 0; i < n; ++i) {
    const SymSize& in = s[s.size() - n + i];
    if (!in.is_constant()) {
      if (extra[i] || (!include_pad && (w.begin[i] || w.end[i])))
        c.fail("an averaging window with uncounted pads on the dynamic size " + in.str() +
               " (its divisor is made at import; fix the dim with ImportOptions::fixed_dims)");
      counts[i] = {w.kernel[i]};  // no pads, or pads that count: every window is full
      out_sizes.push_back(1);
      continue;
    }
    const int64_t span = (w.kernel[i] - 1) * w.dilation[i] + 1;
    const int64_t len = in.constant() + w.begin[i] + w.end[i] + extra[i];
    const int64_t out = len < span ? 0 : (len - span) / w.stride[i] + 1;
    const int64_t lo = include_pad ? -w.begin[i] : 0,
                  hi = include_pad ? in.constant() + w.end[i] : in.constant();
    for (int64_t o = 0; o < out; ++o) {
      int64_t k = 0;
      for (int64_t t = 0; t < w.kernel[i]; ++t) {
        const int64_t p = o * w.stride[i] + t * w.dilation[i] - w.begin[i];
        k += p >= lo && p < hi;
      }
      counts[i].push_back(k);
      all_full = all_full && k == w.kernel[i];
    }
    out_sizes.push_back(out);
    if (__builtin_mul_overflow(total, out, &total)) total = INT64_MAX;
  }
  if (all_full) return std::nullopt;
  c.check_elements(total, "the averaging correction");
  std::vector<double> factor(static_cast<size_t>(total), 0.0);
  int64_t window = 1;
  for (int64_t k : w.kernel) window *= k;
  for (int64_t idx = 0; idx < total; ++idx) {
    int64_t rest = idx, count = 1;
    for (size_t i = n; i-- > 0;) {
      const int64_t sz = out_sizes[i];
      count *= counts[i][size_t(sz == 1 && counts[i].size() == 1 ? 0 : rest % sz)];
      rest /= sz;
    }
    factor[size_t(idx)] =
        double(window) / double(count);  // count 0 (no element): NaN, as the mean of nothing
  }
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  Tensor f = tessera::tensor(factor, {total}, tessera::dtype(kFloat64)).reshape(out_sizes);
  return f.to(x.dtype());
}

// MaxPool with its Indices output (1-D or 2-D, static sizes): the windows are gathered from the
// padded input by an index list made at import, their argmax (the first of equal maxima) picks each
// window's input position from a table made alongside: (n * C + c) * H * W + h * W + w, or
// h + w * H within a plane for storage_order=1.
void max_pool_with_indices(NodeCtx& c) {
  Tensor x = c.in(0);
  const bool column_major = c.attr_int("storage_order", 0) != 0;
  Window w = window(c, x, c.attr_ints("kernel_shape", {}), 2);
  const std::vector<int64_t> extra =
      c.attr_int("ceil_mode", 0) ? ceil_extra(c, x, w) : std::vector<int64_t>(w.kernel.size(), 0);
  const bool one_d = w.kernel.size() == 1;
  if (one_d) {
    x = to_2d(c, x);
    w = widen(w);
  }
  std::vector<int64_t> ex = one_d ? std::vector<int64_t>{0, extra[0]} : extra;
  Sizes s = c.sizes(x);
  for (const SymSize& d : s)
    if (!d.is_constant()) c.fail("the Indices output with the dynamic size " + d.str());
  const int64_t batch = s[0].constant(), ch = s[1].constant(), h = s[2].constant(), wd = s[3].constant();
  std::vector<int64_t> len(2), out(2);
  for (size_t i = 0; i < 2; ++i) {
    len[i] = s[2 + i].constant() + w.begin[i] + w.end[i] + ex[i];
    const int64_t span = (w.kernel[i] - 1) * w.dilation[i] + 1;
    if (len[i] < span) c.fail("the window is larger than the padded input");
    out[i] = (len[i] - span) / w.stride[i] + 1;
  }
  const int64_t taps = w.kernel[0] * w.kernel[1];
  int64_t count = 0, planes = 0;
  if (__builtin_mul_overflow(out[0] * out[1], taps, &count) || __builtin_mul_overflow(batch, ch, &planes))
    count = INT64_MAX;
  c.check_elements(count, "the MaxPool window index list");
  c.check_elements(planes, "the MaxPool plane offsets");
  std::vector<int64_t> gather_idx, position;
  gather_idx.reserve(size_t(count));
  position.reserve(size_t(count));
  for (int64_t oh = 0; oh < out[0]; ++oh)
    for (int64_t ow = 0; ow < out[1]; ++ow)
      for (int64_t th = 0; th < w.kernel[0]; ++th)
        for (int64_t tw = 0; tw < w.kernel[1]; ++tw) {
          const int64_t ph = oh * w.stride[0] + th * w.dilation[0],
                        pw = ow * w.stride[1] + tw * w.dilation[1];
          gather_idx.push_back(ph * len[1] + pw);
          const int64_t ih = ph - w.begin[0], iw = pw - w.begin[1];
          const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < wd;
          position.push_back(!inside ? -1 : column_major ? ih + iw * h : ih * wd + iw);
        }
  Tensor xp = pad_window(c, x, w, ex, lowest(x.dtype()));
  const SymSize one(int64_t(1));
  Tensor flat = reshape_to(c, xp, {s[0], s[1], SymSize(len[0] * len[1])});
  Tensor windows = tessera::index_select(flat, 2, host_tensor(gather_idx, {count}, kInt64));
  windows = reshape_to(c, windows, {s[0], s[1], SymSize(out[0]), SymSize(out[1]), SymSize(taps)});
  Tensor values = tessera::amax(windows, {4}, false);
  Tensor pick = tessera::argmax(windows, 4, false);  // [N, C, OH, OW]: the tap
  std::vector<int64_t> window_base, plane_base;
  for (int64_t o = 0; o < out[0] * out[1]; ++o) window_base.push_back(o * taps);
  for (int64_t p = 0; p < planes; ++p) plane_base.push_back(p * h * wd);
  pick = tessera::add(pick, host_tensor(window_base, {out[0], out[1]}, kInt64));
  Tensor at = tessera::index_select(host_tensor(position, {count}, kInt64), 0,
                                    reshape_to(c, pick, {SymSize(planes * out[0] * out[1])}));
  at = tessera::add(reshape_to(c, at, {s[0], s[1], SymSize(out[0]), SymSize(out[1])}),
                    host_tensor(plane_base, {batch, ch, 1, 1}, kInt64));
  c.out(0, one_d ? from_2d(c, values) : values);
  c.out(1, one_d ? from_2d(c, at) : at);
}

template <bool Max>
void pool(NodeCtx& c) {
  Tensor x = c.in(0);
  const bool ceil = c.attr_int("ceil_mode", 0) != 0;
  if (Max && c.output_used(1)) return max_pool_with_indices(c);
  if (Max) c.ignore_attrs({"storage_order"});  // it orders only the Indices output
  Window w = window(c, x, c.attr_ints("kernel_shape", {}), 3);
  const std::vector<int64_t> extra = ceil ? ceil_extra(c, x, w) : std::vector<int64_t>(w.kernel.size(), 0);
  if (Max) {
    // Symmetric pads of at most half the window go to the op; others pad the input first.
    bool native = w.kernel.size() <= 2;
    for (size_t i = 0; i < w.kernel.size(); ++i)
      native = native && !extra[i] && w.begin[i] == w.end[i] && 2 * w.begin[i] <= w.kernel[i];
    if (native) {
      const bool one_d = w.kernel.size() == 1;
      Window v = one_d ? widen(w) : w;
      Tensor y = tessera::max_pool2d(one_d ? to_2d(c, x) : x, v.kernel, v.stride, v.begin, v.dilation);
      return c.out(0, one_d ? from_2d(c, y) : y);
    }
    return c.out(0, pool_plain(c, true, pad_window(c, x, w, extra, lowest(x.dtype())), w));
  }
  const bool include_pad = c.attr_int("count_include_pad", 0) != 0;
  Tensor y = pool_plain(c, false, pad_window(c, x, w, extra, 0.0), w);
  if (std::optional<Tensor> f = mean_correction(c, x, w, extra, include_pad)) y = tessera::mul(y, *f);
  c.out(0, y);
}

// LpPool: (sum of |x|^p over the window)^(1/p); pads add nothing to the sum.
void LpPool(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t p = c.attr_int("p", 2);
  if (p < 1 || p > 64) c.fail("p must be in [1, 64], got " + std::to_string(p));
  const bool ceil = c.attr_int("ceil_mode", 0) != 0;
  Window w = window(c, x, c.attr_ints("kernel_shape", {}), 3);
  const std::vector<int64_t> extra = ceil ? ceil_extra(c, x, w) : std::vector<int64_t>(w.kernel.size(), 0);
  Tensor a = p == 1   ? tessera::abs(x)
             : p == 2 ? tessera::mul(x, x)
                      : tessera::pow(tessera::abs(x), Scalar(double(p)));
  int64_t window = 1;
  for (int64_t k : w.kernel) window *= k;
  Tensor sum =
      tessera::mul(pool_plain(c, false, pad_window(c, a, w, extra, 0.0), w), scalar_like(double(window), x));
  // A window cut by ceil_mode's extra is scaled to the full window (K times its mean, as the
  // reference and PyTorch compute it).
  if (std::optional<Tensor> f = mean_correction(c, x, w, extra, true)) sum = tessera::mul(sum, *f);
  c.out(0, p == 1 ? sum : p == 2 ? tessera::sqrt(sum) : tessera::pow(sum, Scalar(1.0 / double(p))));
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

// BatchNormalization with training_mode=1 (opset 14): normalised by the batch's own mean and
// (population) variance per channel; the running mean/var outputs blend the given ones with them
// by momentum.
void batch_norm_training(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() < 2) c.fail("the input must be at least 2-D");
  const double eps = c.attr_float("epsilon", 1e-5), momentum = c.attr_float("momentum", 0.9);
  for (int i = 3; i < c.num_outputs(); ++i)
    if (c.output_used(i)) c.fail("the saved mean/var outputs (opsets before 14) are not supported");
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Tensor mean = tessera::mean(x, dims, true), var = tessera::var(x, dims, 0, true);
  Tensor y = tessera::mul(tessera::sub(x, mean), tessera::rsqrt(tessera::add(var, scalar_like(eps, x))));
  c.out(0, tessera::add(tessera::mul(y, channel(c, c.in(1), x.dim())), channel(c, c.in(2), x.dim())));
  auto blend = [&](int input, const Tensor& batch) {
    const Sizes flat{c.sizes(c.in(input))[0]};
    return tessera::add(tessera::mul(c.in(input), scalar_like(momentum, x)),
                        tessera::mul(reshape_to(c, batch, flat), scalar_like(1.0 - momentum, x)));
  };
  if (c.output_used(1)) c.out(1, blend(3, mean));
  if (c.output_used(2)) c.out(2, blend(4, var));
}

void BatchNormalization(NodeCtx& c) {
  if (c.attr_int("spatial", 1) != 1) c.fail("spatial=0 is not supported");
  if (c.attr_int("training_mode", 0)) return batch_norm_training(c);
  c.ignore_attrs({"momentum"});
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
  t["Conv"] = Conv; t["MaxPool"] = pool<true>; t["AveragePool"] = pool<false>; t["LpPool"] = LpPool;
  t["ConvInteger"] = ConvInteger; t["QLinearConv"] = QLinearConv;
  t["GlobalAveragePool"] = global_pool<false>; t["GlobalMaxPool"] = global_pool<true>;
  t["LayerNormalization"] = LayerNormalization; t["RMSNormalization"] = RMSNormalization;
  t["BatchNormalization"] = BatchNormalization; t["LRN"] = LRN; t["InstanceNormalization"] = InstanceNormalization;
  t["ReduceSum"] = reduce_op<sum_fn>; t["ReduceMean"] = reduce_op<mean_fn>; t["ReduceMax"] = reduce_op<max_fn>;
  t["ReduceMin"] = reduce_op<min_fn>; t["ReduceProd"] = reduce_op<prod_fn>; t["ReduceL1"] = ReduceL1;
  t["ReduceL2"] = ReduceL2; t["ReduceSumSquare"] = ReduceSumSquare; t["ReduceLogSum"] = ReduceLogSum;
  t["ReduceLogSumExp"] = ReduceLogSumExp; t["ArgMax"] = arg_reduce<false>;
}

}  // namespace tessera::onnx::detail

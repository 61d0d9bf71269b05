// More nn converters (normalisations, activations, convs, one-hot and cumulative ops, signal
// windows and transforms, quantisation), decomposed at import onto ops of the contract.
#include <algorithm>
#include <cmath>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

Tensor scalar_like(double v, const Tensor& x) { return host_scalar(v, x.dtype()); }

// The static size of dim `d` of x (fails naming a dynamic one).
int64_t static_dim(const NodeCtx& c, const Tensor& x, int64_t d, const char* what) {
  const SymSize s = c.sizes(x)[size_t(d)];
  if (!s.is_constant()) c.fail(std::string(what) + " over the dynamic size " + s.str());
  return s.constant();
}

// 0, 1, ..., n - 1 of `dtype`, shaped to broadcast along dim `axis` of a rank `rank` tensor.
Tensor iota_along(const NodeCtx& c, int64_t n, int64_t axis, int64_t rank, DType dtype) {
  c.check_elements(n, "an index range");
  std::vector<int64_t> values(static_cast<size_t>(n)), shape(static_cast<size_t>(rank), 1);
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = i;
  shape[size_t(axis)] = n;
  return host_tensor(values, shape, dtype);
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere. Before opset 13 the input is seen
// as 2-D, [prod(dims before axis), prod(dims from axis)] (axis defaults to 1).
void Hardmax(NodeCtx& c) {
  Tensor x = c.in(0);
  if (c.opset() < 13) {
    const int64_t axis = norm_axis(c, c.attr_int("axis", 1), x.dim());
    Sizes s = c.sizes(x);
    Sizes flat{product(s, 0, size_t(axis)), product(s, size_t(axis), s.size())};
    if (!flat[1].is_constant()) c.fail("Hardmax over the dynamic size " + flat[1].str());
    Tensor f = reshape_to(c, x, flat);
    Tensor hot = tessera::eq(tessera::argmax(f, 1, true), iota_along(c, flat[1].constant(), 1, 2, kInt64));
    return c.out(0, reshape_to(c, hot.to(x.dtype()), s));
  }
  const int64_t axis = norm_axis(c, c.attr_int("axis", -1), x.dim());
  const int64_t n = static_dim(c, x, axis, "Hardmax");
  Tensor hot = tessera::eq(tessera::argmax(x, axis, true), iota_along(c, n, axis, x.dim(), kInt64));
  c.out(0, hot.to(x.dtype()));
}

// LpNormalization: x / ||x||_p along the axis (p 1 or 2); a zero norm gives 0.
void LpNormalization(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_int("axis", -1), x.dim());
  const int64_t p = c.attr_int("p", 2);
  if (p != 1 && p != 2) c.fail("p must be 1 or 2, got " + std::to_string(p));
  const std::vector<int64_t> dims{axis};
  Tensor norm = p == 1 ? tessera::sum(tessera::abs(x), dims, true)
                       : tessera::sqrt(tessera::sum(tessera::mul(x, x), dims, true));
  Tensor zero = scalar_like(0.0, x);
  Tensor is_zero = tessera::eq(norm, zero);
  Tensor safe = tessera::where(is_zero, scalar_like(1.0, x), norm);
  c.out(0, tessera::where(is_zero, zero, tessera::div(x, safe)));
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default [0, 2, 3]), the
// variance the population one.
void MeanVarianceNormalization(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> dims;
  for (int64_t a : c.attr_ints("axes", {0, 2, 3})) dims.push_back(norm_axis(c, a, x.dim()));
  Tensor mean = tessera::mean(x, dims, true);
  Tensor sd = tessera::sqrt(tessera::var(x, dims, 0, true));
  c.out(0, tessera::div(tessera::sub(x, mean), tessera::add(sd, scalar_like(1e-9, x))));
}

// CumProd: the contract has no cumulative product, so along an axis of static size n each output
// is the product of the input masked to its prefix: x as [.., 1, n, ..] where a constant [n, n]
// mask (j <= i; j < i exclusive; the mirror for reverse) keeps it, else 1, then prod over j.
void CumProd(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() == 0) c.fail("the input must be at least 1-D");
  const int64_t axis = norm_axis(c, int64_t(c.const_scalar(1)), x.dim());
  const bool reverse = c.attr_int("reverse", 0) != 0, exclusive = c.attr_int("exclusive", 0) != 0;
  const int64_t n = static_dim(c, x, axis, "CumProd");
  int64_t square = 0, total = 0;
  if (__builtin_mul_overflow(n, n, &square) ||
      __builtin_mul_overflow(square, x.numel() / std::max<int64_t>(n, 1), &total))
    total = INT64_MAX;
  c.check_elements(total, "CumProd's masked copy of the input");
  std::vector<int64_t> mask(static_cast<size_t>(square));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const bool before = reverse ? j > i : j < i;
      mask[size_t(i * n + j)] = before || (!exclusive && i == j);
    }
  std::vector<int64_t> mask_shape{n, n};
  for (int64_t d = axis + 1; d < x.dim(); ++d) mask_shape.push_back(1);
  Sizes s = c.sizes(x);
  Sizes spread = s;
  spread.insert(spread.begin() + axis, SymSize(int64_t(1)));
  Tensor masked =
      tessera::where(host_tensor(mask, mask_shape, kBool), reshape_to(c, x, spread), scalar_like(1.0, x));
  c.out(0, tessera::prod(masked, {axis + 1}, false));
}

// Swish: x * sigmoid(alpha * x).
void Swish(NodeCtx& c) {
  Tensor x = c.in(0);
  const double alpha = c.attr_float("alpha", 1.0);
  if (alpha == 1.0) return c.out(0, tessera::silu(x));
  c.out(0, tessera::mul(x, tessera::sigmoid(tessera::mul(x, scalar_like(alpha, x)))));
}

// SwiGLU: Swish(A) * B, Swish's alpha scaling the sigmoid's input.
void SwiGLU(NodeCtx& c) {
  Tensor a = c.in(0), b = c.in(1);
  const double alpha = c.attr_float("alpha", 1.0);
  Tensor gate = alpha == 1.0 ? tessera::silu(a)
                             : tessera::mul(a, tessera::sigmoid(tessera::mul(a, scalar_like(alpha, a))));
  c.out(0, tessera::mul(gate, b));
}

// CausalConvWithState: a depthwise 1-D conv over [past_state (zeros when absent), input] with no
// padding, then SiLU when asked; present_state is the last k - 1 steps of that padded input.
void CausalConvWithState(NodeCtx& c) {
  Tensor x = c.in(0), w = c.in(1);
  std::optional<Tensor> bias = c.opt(2), past = c.opt(3);
  const std::string act = c.attr_string("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    c.fail("activation '" + act + "' is not one of none, silu, swish");
  if (x.dim() != 3 || w.dim() != 3) c.fail("input and weight must be 3-D ([B, C, L] and [C, 1, k])");
  Sizes xs = c.sizes(x), ws = c.sizes(w);
  if (!ws[2].is_constant() || ws[2].constant() < 1 || ws[2].constant() > (1 << 20))
    c.fail("the kernel size must be static, in [1, 2^20]");
  if (!xs[1].is_constant()) c.fail("the dynamic channel count " + xs[1].str() + " (the conv's groups)");
  const int64_t k = ws[2].constant(), channels = xs[1].constant();
  Tensor padded = past ? tessera::cat({*past, x}, 2)
                  : k > 1
                      ? call_op(c, "pad", {x, std::vector<int64_t>{k - 1, 0}, std::string("constant"), 0.0})
                      : x;
  const SymSize one(int64_t(1));
  Sizes ps = c.sizes(padded);
  Tensor y =
      tessera::conv2d(reshape_to(c, padded, {ps[0], ps[1], one, ps[2]}),
                      reshape_to(c, w, {ws[0], ws[1], one, ws[2]}), bias, {1, 1}, {0, 0}, {1, 1}, channels);
  Sizes ys = c.sizes(y);
  y = reshape_to(c, y, {ys[0], ys[1], ys[3]});
  c.out(0, act == "none" ? y : tessera::silu(y));
  if (c.output_used(1)) {
    if (!ps[2].is_constant()) c.fail("present_state over the dynamic length " + ps[2].str());
    const int64_t len = ps[2].constant();
    c.out(1, call_op(c, "slice_copy.Tensor", {padded, int64_t(2), len - (k - 1), len, int64_t(1)}));
  }
}

// DeformConv (2-D, static sizes): each tap of each output position samples the input at its
// place plus the learned offset, bilinearly with zeros outside (GridSample with align_corners, as
// the reference), weighted by the mask; the samples [N, C * K, OH * OW] then meet the weight in
// one grouped matmul. The four corners are gathers of the flattened input at run-time indices.
void DeformConv(NodeCtx& c) {
  Tensor x = c.in(0), w = c.in(1), offset = c.in(2);
  std::optional<Tensor> bias = c.opt(3), mask = c.opt(4);
  if (x.dim() != 4 || w.dim() != 4 || offset.dim() != 4)
    c.fail("only 2-D DeformConv (4-D input, weight and offset) is supported");
  for (const Tensor* t : {&x, &w, &offset})
    for (const SymSize& d : c.sizes(*t))
      if (!d.is_constant()) c.fail("needs static sizes, got the dynamic size " + d.str());
  auto dims = [&](const Tensor& t) { return c.example(c.sizes(t)); };
  const std::vector<int64_t> xs = dims(x), wsz = dims(w), os = dims(offset);
  const int64_t n = xs[0], ch = xs[1], h = xs[2], wd = xs[3], oc = wsz[0];
  std::vector<int64_t> kernel = c.attr_ints("kernel_shape", {wsz[2], wsz[3]});
  if (kernel != std::vector<int64_t>{wsz[2], wsz[3]}) c.fail("kernel_shape differs from the weight's");
  const std::vector<int64_t> stride = c.attr_ints("strides", {1, 1}), dil = c.attr_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = c.attr_ints("pads", {0, 0, 0, 0});
  const int64_t group = c.attr_int("group", 1), og = c.attr_int("offset_group", 1);
  if (stride.size() != 2 || dil.size() != 2 || pads.size() != 4)
    c.fail("strides/dilations/pads must have 2/2/4 entries");
  for (int64_t v : {stride[0], stride[1], dil[0], dil[1]})
    if (v < 1 || v > (1 << 20)) c.fail("strides and dilations must be in [1, 2^20]");
  for (int64_t v : pads)
    if (v < 0 || v > (1 << 20)) c.fail("pads must be in [0, 2^20]");
  if (group < 1 || og < 1 || ch % group || oc % group || ch % og || wsz[1] * group != ch)
    c.fail("group and offset_group must divide the channels, and the weight have C / group input channels");
  const int64_t kh = kernel[0], kw = kernel[1], taps = kh * kw, oh = os[2], ow = os[3];
  if (os[0] != n || os[1] != og * taps * 2) c.fail("offset must be [N, offset_group * kH * kW * 2, OH, OW]");
  if (oh != (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) / stride[0] + 1 ||
      ow != (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) / stride[1] + 1)
    c.fail("the offset's spatial sizes do not match the convolution's output");
  int64_t count = 0;
  if (__builtin_mul_overflow(taps * oh, ow, &count)) count = INT64_MAX;
  c.check_elements(count, "DeformConv's sampling grid");
  // The tap positions without offsets, [K, OH, OW] per axis.
  std::vector<int64_t> base_y, base_x;
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          base_y.push_back(i * stride[0] + a * dil[0] - pads[0]);
          base_x.push_back(j * stride[1] + b * dil[1] - pads[1]);
        }
  const DType dt = x.dtype();
  const SymSize N(n), G(og), K(taps), OH(oh), OW(ow);
  Tensor off = reshape_to(c, offset, {N, G, K, SymSize(int64_t(2)), OH, OW});
  auto axis = [&](int64_t i) {
    return reshape_to(c, call_op(c, "slice_copy.Tensor", {off, int64_t(3), i, i + 1, int64_t(1)}),
                      {N, G, K, OH, OW});
  };
  Tensor py = tessera::add(axis(0), host_tensor(base_y, {taps, oh, ow}, dt));
  Tensor px = tessera::add(axis(1), host_tensor(base_x, {taps, oh, ow}, dt));
  Tensor y0 = tessera::floor(py), x0 = tessera::floor(px);
  Tensor ly = tessera::sub(py, y0), lx = tessera::sub(px, x0);
  Tensor one = scalar_like(1.0, x);
  Tensor m = mask ? reshape_to(c, *mask, {N, G, K, OH, OW}) : Tensor();
  const int64_t cg = ch / og;
  Tensor planes = reshape_to(c, x, {N, G, SymSize(cg), SymSize(h * wd)});
  Tensor sampled;
  for (int corner = 0; corner < 4; ++corner) {
    const bool down = corner & 2, right = corner & 1;
    Tensor yy = down ? tessera::add(y0, one) : y0, xx = right ? tessera::add(x0, one) : x0;
    Tensor wgt = tessera::mul(down ? ly : tessera::sub(one, ly), right ? lx : tessera::sub(one, lx));
    Tensor inside =
        tessera::logical_and(tessera::logical_and(tessera::ge(yy, scalar_like(0.0, x)),
                                                  tessera::le(yy, scalar_like(double(h - 1), x))),
                             tessera::logical_and(tessera::ge(xx, scalar_like(0.0, x)),
                                                  tessera::le(xx, scalar_like(double(wd - 1), x))));
    wgt = tessera::mul(wgt, inside.to(dt));
    if (mask) wgt = tessera::mul(wgt, m);
    Tensor iy = tessera::clamp(yy, Scalar(0.0), Scalar(double(h - 1))).to(kInt64);
    Tensor ix = tessera::clamp(xx, Scalar(0.0), Scalar(double(wd - 1))).to(kInt64);
    Tensor flat = tessera::add(tessera::mul(iy, host_scalar(double(wd), kInt64)), ix);  // [N, G, K, OH, OW]
    Tensor index = tessera::expand_copy(reshape_to(c, flat, {N, G, SymSize(int64_t(1)), SymSize(count)}),
                                        {n, og, cg, count});
    Tensor v = tessera::gather(planes, 3, index);  // [N, G, Cg, K * OH * OW]
    v = tessera::mul(v, reshape_to(c, wgt, {N, G, SymSize(int64_t(1)), SymSize(count)}));
    sampled = corner == 0 ? v : tessera::add(sampled, v);
  }
  // [N, group, C / group * K, OH * OW] against the weight [group, OC / group, C / group * K].
  Tensor cols = reshape_to(c, sampled, {N, SymSize(group), SymSize(ch / group * taps), SymSize(oh * ow)});
  Tensor wg = reshape_to(c, w, {SymSize(group), SymSize(oc / group), SymSize(ch / group * taps)});
  Tensor y = reshape_to(c, tessera::matmul(wg, cols), {N, SymSize(oc), OH, OW});
  if (bias)
    y = tessera::add(y, reshape_to(c, *bias, {SymSize(oc), SymSize(int64_t(1)), SymSize(int64_t(1))}));
  c.out(0, y);
}

// HannWindow, HammingWindow, BlackmanWindow: constants of the (known) size, computed in double
// and cast to output_datatype (float by default); periodic=1 (the default) divides by N, else by
// N - 1.
enum class WindowKind { kHann, kHamming, kBlackman };
template <WindowKind Kind>
void window_function(NodeCtx& c) {
  const double size_value = c.const_scalar(0);
  if (!(size_value >= 0 && size_value <= double(kMaxImportElements))) c.fail("size must be in [0, 2^28]");
  const int64_t size = int64_t(size_value);
  const int64_t type = c.attr_int("output_datatype", 1);
  std::optional<DType> dt = dtype_of_onnx(int32_t(type));
  if (!dt) c.fail("output_datatype " + std::to_string(type) + " is an ONNX type Tessera has no dtype for");
  const double denom = double(c.attr_int("periodic", 1) ? size : size - 1);
  std::vector<double> values(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double t = double(i) / denom;
    double v = 0;
    if (Kind == WindowKind::kHann) v = std::pow(std::sin(M_PI * t), 2);
    if (Kind == WindowKind::kHamming) v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(2 * M_PI * t);
    if (Kind == WindowKind::kBlackman)
      v = 0.42 - 0.5 * std::cos(2 * M_PI * t) + 0.08 * std::cos(4 * M_PI * t);
    values[static_cast<size_t>(i)] = v;
  }
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  c.out(0, constant_val(tessera::tensor(values, {size}, tessera::dtype(kFloat64)).to(*dt)));
}

// The discrete Fourier transform of a signal along `axis` (static size n) as matmuls with constant
// cos/sin matrices [n, K] (made in double at import): re/im of the output, the input's imaginary
// part optional. Forward: K = L (onesided: L / 2 + 1) frequencies of the signal cut or zero-padded
// to L. Inverse: L samples, 1/L scaled; onesided reads the first L / 2 + 1 frequencies of a
// Hermitian spectrum (numpy's irfft: each inner frequency counts twice) and gives the real part.
struct Complex {
  Tensor re, im;  // im undefined: zero
};
Complex dft_along(NodeCtx& c, const Complex& x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  const int64_t rank = x.re.dim();
  const int64_t n = static_dim(c, x.re, axis, "DFT");
  const int64_t used_in = std::min(n, inverse && onesided ? length / 2 + 1 : length);
  const int64_t k_out = inverse ? length : onesided ? length / 2 + 1 : length;
  int64_t count = 0;
  if (__builtin_mul_overflow(n, k_out, &count)) count = INT64_MAX;
  c.check_elements(count, "the DFT matrix");
  std::vector<double> cosm(static_cast<size_t>(count), 0.0), sinm(static_cast<size_t>(count), 0.0);
  for (int64_t t = 0; t < used_in; ++t)
    for (int64_t k = 0; k < k_out; ++k) {
      // angle 2 pi t k / L, reduced exactly in integers first
      const double angle = 2.0 * M_PI * double((t * k) % length) / double(length);
      double scale = 1.0;
      if (inverse)
        scale = (onesided && t != 0 && !(length % 2 == 0 && t == length / 2) ? 2.0 : 1.0) / double(length);
      cosm[static_cast<size_t>(t * k_out + k)] = scale * std::cos(angle);
      sinm[static_cast<size_t>(t * k_out + k)] = scale * std::sin(angle);
    }
  // In double: an output near zero (the imaginary part of a real signal) must come out near zero.
  const DType dt = x.re.dtype();
  Tensor cm, sm;
  {
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    cm = tessera::tensor(cosm, {n, k_out}, tessera::dtype(kFloat64));
    sm = tessera::tensor(sinm, {n, k_out}, tessera::dtype(kFloat64));
  }
  std::vector<int64_t> perm, back(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) perm.push_back(d);
  perm.push_back(axis);
  for (int64_t d = 0; d < rank; ++d) back[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
  auto mm = [&](const Tensor& v, const Tensor& m) {
    return tessera::matmul(v.to(kFloat64).permute(perm), m);
  };
  // forward: re = xr cos + xi sin, im = xi cos - xr sin; inverse: re = xr cos - xi sin, im = xr sin + xi cos
  const double sign = inverse ? -1.0 : 1.0;
  Tensor re = mm(x.re, cm), im = tessera::mul(mm(x.re, sm), host_scalar(-sign, kFloat64));
  if (x.im.defined()) {
    re = tessera::add(re, tessera::mul(mm(x.im, sm), host_scalar(sign, kFloat64)));
    im = tessera::add(im, mm(x.im, cm));
  }
  return {re.permute(back).to(dt), im.permute(back).to(dt)};
}

// The real and imaginary parts of a [..., 1 or 2] tensor, the last dim dropped.
Complex split_complex(NodeCtx& c, const Tensor& x) {
  Sizes s = c.sizes(x);
  const SymSize last = s.back();
  if (!last.is_constant() || (last.constant() != 1 && last.constant() != 2))
    c.fail("the last dim must be 1 (real) or 2 (complex)");
  s.pop_back();
  auto part = [&](int64_t i) {
    return reshape_to(c, call_op(c, "slice_copy.Tensor", {x, int64_t(x.dim() - 1), i, i + 1, int64_t(1)}), s);
  };
  return {part(0), last.constant() == 2 ? part(1) : Tensor()};
}

void DFT(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() < 2) c.fail("the input must be at least 2-D");
  const int64_t axis_value =
      c.opset() >= 20 ? (c.has(2) ? int64_t(c.const_scalar(2)) : -2) : c.attr_int("axis", 1);
  const int64_t axis = norm_axis(c, axis_value, x.dim());
  if (axis == x.dim() - 1) c.fail("axis may not be the last (real/imaginary) dim");
  const bool inverse = c.attr_int("inverse", 0) != 0, onesided = c.attr_int("onesided", 0) != 0;
  const int64_t n = static_dim(c, x, axis, "DFT");
  int64_t length = inverse && onesided ? 2 * (n - 1) : n;
  if (c.has(1)) length = int64_t(c.const_scalar(1));
  if (length < 1 || length > (int64_t(1) << 24))
    c.fail("dft_length must be in [1, 2^24], got " + std::to_string(length));
  Complex in = split_complex(c, x);
  if (inverse && onesided && in.im.defined() == false)
    c.fail("an inverse one-sided DFT needs a complex input");
  Complex y = dft_along(c, in, axis, length, inverse, onesided);
  if (inverse && onesided) {
    Sizes s = c.sizes(y.re);
    s.push_back(SymSize(int64_t(1)));
    return c.out(0, reshape_to(c, y.re, s));
  }
  c.out(0, tessera::stack({y.re, y.im}, -1));
}

// STFT: the frames of the signal (gathered by an index list made at import), times the window,
// then the DFT of each frame (one-sided by default).
void STFT(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() != 3) c.fail("the signal must be 3-D [batch, length, 1 or 2]");
  const int64_t step = int64_t(c.const_scalar(1));
  std::optional<Tensor> window = c.opt(2);
  const int64_t total = static_dim(c, x, 1, "STFT");
  int64_t frame = c.has(3) ? int64_t(c.const_scalar(3)) : window ? static_dim(c, *window, 0, "STFT") : total;
  if (window && (window->dim() != 1 || static_dim(c, *window, 0, "STFT") != frame))
    c.fail("the window must be 1-D of frame_length " + std::to_string(frame));
  if (step < 1 || frame < 1 || frame > total || frame > (1 << 24))
    c.fail("frame_step must be positive and frame_length in [1, signal length]");
  const bool onesided = c.attr_int("onesided", 1) != 0;
  const int64_t frames = 1 + (total - frame) / step;
  int64_t count = 0;
  if (__builtin_mul_overflow(frames, frame, &count)) count = INT64_MAX;
  c.check_elements(count, "STFT's frame index list");
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(count));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < frame; ++t) idx.push_back(f * step + t);
  Complex sig = split_complex(c, x);  // [B, T]
  const Sizes shape{c.sizes(x)[0], SymSize(frames), SymSize(frame)};
  auto framed = [&](const Tensor& part) {
    if (!part.defined()) return part;
    Tensor f = reshape_to(c, tessera::index_select(part, 1, host_tensor(idx, {count}, kInt64)), shape);
    return window ? tessera::mul(f, *window) : f;
  };
  Complex y = dft_along(c, {framed(sig.re), framed(sig.im)}, 2, frame, false, onesided);
  c.out(0, tessera::stack({y.re, y.im}, -1));
}

// A quantisation parameter (scale or zero point) shaped to broadcast against x: one value, one per
// index of `axis` (1-D), or blocks of block_size along `axis` (the rank of x), repeated.
// (The axis counts only then: it is normalised here.)
Tensor quant_param(NodeCtx& c, const Tensor& p, const Tensor& x, int64_t axis_attr, int64_t block) {
  if (block <= 0 && (p.numel() == 1 || p.dim() == 0)) return p.dim() == 0 ? p : reshape_to(c, p, {});
  const int64_t axis = norm_axis(c, axis_attr, x.dim());
  if (block > 0) {
    if (p.dim() != x.dim()) c.fail("a blocked scale/zero point must have the input's rank");
    const int64_t d = static_dim(c, x, axis, "blocked quantisation");
    if (block > d && d > 0 && static_dim(c, p, axis, "blocked quantisation") != 1)
      c.fail("block_size is larger than the axis");
    std::vector<int64_t> idx(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) idx[static_cast<size_t>(i)] = i / block;
    if (!idx.empty() && idx.back() >= static_dim(c, p, axis, "blocked quantisation"))
      c.fail("the blocked scale/zero point has too few blocks along the axis");
    return tessera::index_select(p, axis, host_tensor(idx, {d}, kInt64));
  }
  if (p.dim() != 1) c.fail("a scale/zero point must be a scalar or 1-D (or blocked with block_size)");
  Sizes s{c.sizes(p)[0]};
  for (int64_t d = axis + 1; d < x.dim(); ++d) s.push_back(SymSize(int64_t(1)));
  return reshape_to(c, p, s);
}

// The range of an integer quantised type (uint8, int8, int16).
std::pair<double, double> quant_range(NodeCtx& c, DType t) {
  switch (t) {
    case kUInt8:
      return {0.0, 255.0};
    case kInt8:
      return {-128.0, 127.0};
    case kInt16:
      return {-32768.0, 32767.0};
    default:
      c.fail("quantising to " + std::string(dtype_name(t)) + " is not supported (uint8, int8, int16 are)");
  }
}

// QuantizeLinear: saturate(round_half_even(x / scale) + zero_point) in the zero point's type
// (output_dtype, or uint8).
// The inputs and the axis/block_size attributes QuantizeLinear and DequantizeLinear share.
struct QuantArgs {
  Tensor x, scale;
  std::optional<Tensor> zp;
  int64_t axis, block;
};
QuantArgs quant_args(NodeCtx& c) {
  QuantArgs a{c.in(0), c.in(1), c.opt(2), c.attr_int("axis", 1), c.attr_int("block_size", 0)};
  if (a.block < 0) c.fail("block_size must not be negative");
  return a;
}

void QuantizeLinear(NodeCtx& c) {
  const auto [x, scale, zp, axis, block] = quant_args(c);
  if (!c.attr_int("saturate", 1)) c.fail("saturate=0 (float8 outputs) is not supported");
  const int64_t precision = c.attr_int("precision", 0);
  if (precision != 0 && dtype_of_onnx(int32_t(precision)) != x.dtype())
    c.fail("a precision other than the input's type is not supported");
  DType out = kUInt8;
  if (const int64_t t = c.attr_int("output_dtype", 0)) {
    std::optional<DType> d = dtype_of_onnx(int32_t(t));
    if (!d) c.fail("output_dtype " + std::to_string(t) + " is an ONNX type Tessera has no dtype for");
    out = *d;
  }
  if (zp) out = zp->dtype();
  const auto [lo, hi] = quant_range(c, out);
  Tensor q = tessera::round(tessera::div(x, quant_param(c, scale, x, axis, block)));
  if (zp) q = tessera::add(q, quant_param(c, *zp, x, axis, block).to(x.dtype()));
  c.out(0, tessera::clamp(q, Scalar(lo), Scalar(hi)).to(out));
}

// DequantizeLinear: (x - zero_point) * scale, in the scale's type (or output_dtype).
void DequantizeLinear(NodeCtx& c) {
  const auto [x, scale, zp, axis, block] = quant_args(c);
  DType out = scale.dtype();
  if (const int64_t t = c.attr_int("output_dtype", 0)) {
    std::optional<DType> d = dtype_of_onnx(int32_t(t));
    if (!d || *d != out) c.fail("an output_dtype other than the scale's type is not supported");
  }
  if (!is_floating(out)) c.fail("the scale must be a floating type");
  Tensor v = x.to(kFloat32);
  if (zp) v = tessera::sub(v, quant_param(c, *zp, x, axis, block).to(kFloat32));
  c.out(0, tessera::mul(v, quant_param(c, scale, x, axis, block).to(kFloat32)).to(out));
}

// DynamicQuantizeLinear: uint8 with scale (max(0, max x) - min(0, min x)) / 255 and the zero point
// that maps 0 exactly.
void DynamicQuantizeLinear(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < x.dim(); ++d) all.push_back(d);
  Tensor zero = scalar_like(0.0, x);
  Tensor hi = tessera::maximum(tessera::amax(x, all, false), zero),
         lo = tessera::minimum(tessera::amin(x, all, false), zero);
  Tensor scale = tessera::div(tessera::sub(hi, lo), scalar_like(255.0, x));
  Tensor zp =
      tessera::clamp(tessera::round(tessera::sub(zero, tessera::div(lo, scale))), Scalar(0.0), Scalar(255.0));
  Tensor q = tessera::add(tessera::round(tessera::div(x, scale)), zp);
  c.out(0, tessera::clamp(q, Scalar(0.0), Scalar(255.0)).to(kUInt8));
  c.out(1, scale);
  c.out(2, zp.to(kUInt8));
}

// QLinearMatMul: the integer product (a - a_zp)(b - b_zp), exact in double, times
// a_scale * b_scale / y_scale (in the scales' type, as the reference), plus y_zp, rounded half to
// even and saturated to y_zp's type. Per-tensor scales and zero points.
void QLinearMatMul(NodeCtx& c) {
  Tensor a = c.in(0), as = c.in(1), b = c.in(3), bs = c.in(4), ys = c.in(6);
  for (const Tensor* t : {&as, &bs, &ys})
    if (t->numel() != 1) c.fail("only per-tensor scales are supported");
  auto centred = [&](const Tensor& v, int zp_input) {
    Tensor d = v.to(kFloat64);
    if (!c.has(zp_input)) return d;
    Tensor zp = c.in(zp_input);
    if (zp.numel() != 1) c.fail("only per-tensor zero points are supported");
    return tessera::sub(d, reshape_to(c, zp, {}).to(kFloat64));
  };
  Tensor prod = tessera::matmul(centred(a, 2), centred(b, 5));
  Tensor scale = tessera::div(tessera::mul(reshape_to(c, as, {}), reshape_to(c, bs, {}).to(as.dtype())),
                              reshape_to(c, ys, {}).to(as.dtype()));
  Tensor y = tessera::mul(prod, scale.to(kFloat64));
  DType out = a.dtype();
  if (c.has(7)) {
    Tensor zp = c.in(7);
    if (zp.numel() != 1) c.fail("only per-tensor zero points are supported");
    out = zp.dtype();
    y = tessera::add(y, reshape_to(c, zp, {}).to(kFloat64));
  }
  const auto [lo, hi] = quant_range(c, out);
  c.out(0, tessera::clamp(tessera::round(y), Scalar(lo), Scalar(hi)).to(out));
}

// MatMulInteger: (A - a_zero_point)(B - b_zero_point), exact in double, as int32. A 1-D
// a_zero_point is per row of A, a 1-D b_zero_point per column of B.
void MatMulInteger(NodeCtx& c) {
  auto shifted = [&](int v, int zp_input, bool rows) {
    Tensor d = c.in(v).to(kFloat64);
    if (!c.has(zp_input)) return d;
    Tensor zp = c.in(zp_input).to(kFloat64);
    if (zp.numel() == 1) return tessera::sub(d, reshape_to(c, zp, {}));
    if (zp.dim() != 1) c.fail("a zero point must be a scalar or 1-D");
    return tessera::sub(d, rows ? reshape_to(c, zp, {c.sizes(zp)[0], SymSize(int64_t(1))}) : zp);
  };
  c.out(0, tessera::matmul(shifted(0, 2, true), shifted(1, 3, false)).to(kInt32));
}

// Det of [..., n, n] with a static n <= 6 (the contract has no determinant): Leibniz's sum over the
// n! permutations, each the product of the elements it picks (one gather by an index list made at
// import) times its sign. Larger matrices are refused.
void Det(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() < 2) c.fail("the input must be at least 2-D");
  const int64_t n = static_dim(c, x, x.dim() - 1, "Det");
  if (static_dim(c, x, x.dim() - 2, "Det") != n) c.fail("the matrices must be square");
  if (n < 1 || n > 6) c.fail("matrices of size " + std::to_string(n) + " need a determinant op (sizes 1 to 6 are decomposed)");
  std::vector<int64_t> perm(static_cast<size_t>(n)), picks, signs;
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  do {
    int64_t inversions = 0;
    for (int64_t i = 0; i < n; ++i) {
      picks.push_back(i * n + perm[static_cast<size_t>(i)]);
      for (int64_t j = i + 1; j < n; ++j) inversions += perm[static_cast<size_t>(i)] > perm[static_cast<size_t>(j)];
    }
    signs.push_back(inversions % 2 ? -1 : 1);
  } while (std::next_permutation(perm.begin(), perm.end()));
  const int64_t terms = int64_t(signs.size());
  Sizes s = c.sizes(x);
  Sizes batch(s.begin(), s.end() - 2);
  Sizes flat = batch, grid = batch;
  flat.push_back(SymSize(n * n));
  grid.push_back(SymSize(terms));
  grid.push_back(SymSize(n));
  // (in double: the n! terms cancel)
  Tensor picked = tessera::index_select(reshape_to(c, x, flat).to(kFloat64), int64_t(batch.size()),
                                        host_tensor(picks, {terms * n}, kInt64));
  Tensor products = tessera::prod(reshape_to(c, picked, grid), {int64_t(batch.size()) + 1}, false);
  Tensor det = tessera::sum(tessera::mul(products, host_tensor(signs, {terms}, kFloat64)), {int64_t(batch.size())}, false);
  c.out(0, det.to(x.dtype()));
}

// RoiAlign with a fixed sampling_ratio G: each output bin averages (or, mode=max, takes the
// largest weighted corner of) G x G bilinear samples inside the box, in double as the reference.
// The samples are separable: per box, one-hot rows [samples, H] and [samples, W] weighted by the
// corner weights (zero outside [-1, size]) meet the box's batch image in two matmuls per corner.
void RoiAlign(NodeCtx& c) {
  Tensor x = c.in(0), rois = c.in(1), batch = c.in(2);
  if (x.dim() != 4 || rois.dim() != 2) c.fail("the input must be 4-D and rois [num_rois, 4]");
  const std::string mode = c.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") c.fail("mode '" + mode + "' is not one of avg, max");
  const std::string ctm = c.attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    c.fail("coordinate_transformation_mode '" + ctm + "' is not one of half_pixel, output_half_pixel");
  const int64_t oh = c.attr_int("output_height", 1), ow = c.attr_int("output_width", 1),
                g = c.attr_int("sampling_ratio", 0);
  const double scale = c.attr_float("spatial_scale", 1.0);
  if (oh < 1 || ow < 1 || oh > 4096 || ow > 4096)
    c.fail("output_height and output_width must be in [1, 4096]");
  if (g <= 0)
    c.fail(
        "sampling_ratio=0 (a per-box sample count that depends on the boxes' sizes at run time) is not "
        "supported");
  if (g > 64) c.fail("sampling_ratio must be at most 64");
  const int64_t h = static_dim(c, x, 2, "RoiAlign"), w = static_dim(c, x, 3, "RoiAlign");
  const bool half_pixel = ctm == "half_pixel";
  Sizes rs = c.sizes(rois);
  const SymSize r = rs[0], one(int64_t(1));
  if (!rs[1].is_constant() || rs[1].constant() != 4) c.fail("rois must be [num_rois, 4]");
  c.check_elements(std::max(oh, ow) * g * std::max(h, w), "RoiAlign's sampling rows");
  Tensor box = rois.to(kFloat64);
  auto col = [&](int64_t i) {
    Tensor v =
        reshape_to(c, call_op(c, "slice_copy.Tensor", {box, int64_t(1), i, i + 1, int64_t(1)}), {r, one});
    return tessera::sub(tessera::mul(v, host_scalar(scale, kFloat64)),
                        host_scalar(half_pixel ? 0.5 : 0.0, kFloat64));
  };
  Tensor sw = col(0), sh = col(1), ew = col(2), eh = col(3);
  Tensor rw = tessera::sub(ew, sw), rh = tessera::sub(eh, sh);
  if (!half_pixel) {
    rw = tessera::maximum(rw, host_scalar(1.0, kFloat64));
    rh = tessera::maximum(rh, host_scalar(1.0, kFloat64));
  }
  // Per axis: the sample positions [R, out * G], then their one-hot rows [R, out * G, size] times
  // the low and high corner weights.
  auto rows = [&](const Tensor& start, const Tensor& extent, int64_t out, int64_t size) {
    std::vector<double> at;
    for (int64_t p = 0; p < out; ++p)
      for (int64_t i = 0; i < g; ++i) at.push_back(double(p) + (double(i) + 0.5) / double(g));
    Tensor offs;
    {
      ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
      offs = tessera::tensor(at, {1, out * g}, tessera::dtype(kFloat64));
    }
    Tensor pos =
        tessera::add(start, tessera::mul(tessera::div(extent, host_scalar(double(out), kFloat64)), offs));
    Tensor valid = tessera::logical_and(tessera::ge(pos, host_scalar(-1.0, kFloat64)),
                                        tessera::le(pos, host_scalar(double(size), kFloat64)));
    Tensor p = tessera::maximum(pos, host_scalar(0.0, kFloat64));
    Tensor low = tessera::floor(p);
    Tensor last = host_scalar(double(size - 1), kFloat64);
    Tensor at_end = tessera::ge(low, last);
    low = tessera::where(at_end, last, low);
    Tensor high = tessera::where(at_end, last, tessera::add(low, host_scalar(1.0, kFloat64)));
    Tensor frac = tessera::where(at_end, host_scalar(0.0, kFloat64), tessera::sub(p, low));
    Tensor v = valid.to(kFloat64);
    Tensor w_low = tessera::mul(tessera::sub(host_scalar(1.0, kFloat64), frac), v),
           w_high = tessera::mul(frac, v);
    Tensor grid = iota_along(c, size, 2, 3, kFloat64);  // [1, 1, size]
    const Sizes col3{r, SymSize(out * g), one};
    auto hot = [&](const Tensor& idx, const Tensor& wt) {
      return tessera::mul(tessera::eq(reshape_to(c, idx, col3), grid).to(kFloat64), reshape_to(c, wt, col3));
    };
    return std::pair<Tensor, Tensor>{hot(low, w_low), hot(high, w_high)};  // [R, out * G, size]
  };
  auto [y_low, y_high] = rows(sh, rh, oh, h);
  auto [x_low, x_high] = rows(sw, rw, ow, w);
  Tensor images = tessera::index_select(x, 0, batch.to(kInt64)).to(kFloat64);  // [R, C, H, W]
  const Sizes ys{r, one, SymSize(oh * g), SymSize(h)}, xs{r, one, SymSize(w), SymSize(ow * g)};
  Tensor acc;
  int corner = 0;
  for (const Tensor* yr : {&y_low, &y_high})
    for (const Tensor* xr : {&x_low, &x_high}) {
      Tensor v = tessera::matmul(tessera::matmul(reshape_to(c, *yr, ys), images),
                                 reshape_to(c, xr->permute({0, 2, 1}), xs));
      acc = corner++ == 0 ? v : mode == "avg" ? tessera::add(acc, v) : tessera::maximum(acc, v);
    }
  Sizes as = c.sizes(acc);  // [R, C, OH * G, OW * G]
  Tensor bins = reshape_to(c, acc, {as[0], as[1], SymSize(oh), SymSize(g), SymSize(ow), SymSize(g)});
  Tensor y = mode == "avg"
                 ? tessera::div(tessera::sum(bins, {3, 5}, false), host_scalar(double(g * g), kFloat64))
                 : tessera::amax(bins, {3, 5}, false);
  c.out(0, y.to(x.dtype()));
}

// MelWeightMatrix: triangular filters [dft_length / 2 + 1, num_mel_bins] between mel-spaced
// frequency bins. The sizes must be known at import; the edge frequencies may come at run time, so
// the bins are computed by tensor ops in the reference's types (float32 mel of the edges, the rest
// in double) and each filter by comparisons with the bin positions.
void MelWeightMatrix(NodeCtx& c) {
  const int64_t mels = int64_t(c.const_scalar(0)), dft = int64_t(c.const_scalar(1)), rate = int64_t(c.const_scalar(2));
  if (mels < 1 || mels > (1 << 16) || dft < 1 || dft > (1 << 24) || rate < 1) c.fail("num_mel_bins, dft_length and sample_rate must be positive (and bounded)");
  const int64_t bins = dft / 2 + 1;
  c.check_elements(bins * mels, "MelWeightMatrix's output");
  const int64_t type = c.attr_int("output_datatype", 1);
  std::optional<DType> dt = dtype_of_onnx(int32_t(type));
  if (!dt) c.fail("output_datatype " + std::to_string(type) + " is an ONNX type Tessera has no dtype for");
  const double ln10 = std::log(10.0);
  auto mel = [&](int input) {
    Tensor hz = reshape_to(c, c.in(input), {});
    Tensor m = tessera::mul(tessera::log1p(tessera::div(hz, scalar_like(700.0, hz))), scalar_like(2595.0, hz));
    return tessera::div(m.to(kFloat64), host_scalar(ln10, kFloat64));
  };
  Tensor low = mel(3), high = mel(4);
  Tensor step = tessera::div(tessera::sub(high, low), host_scalar(double(mels + 2), kFloat64));
  std::vector<double> k(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) k[static_cast<size_t>(i)] = double(i);
  Tensor ks;
  {
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    ks = tessera::tensor(k, {mels + 2}, tessera::dtype(kFloat64));
  }
  Tensor f = tessera::add(tessera::mul(ks, step), low);
  f = tessera::mul(tessera::expm1(tessera::mul(tessera::div(f, host_scalar(2595.0, kFloat64)), host_scalar(ln10, kFloat64))),
                   host_scalar(700.0, kFloat64));
  f = tessera::floor(tessera::div(tessera::mul(f, host_scalar(double(dft + 1), kFloat64)), host_scalar(double(rate), kFloat64)));
  auto edge = [&](int64_t first) {  // [1, mels]: bins first .. first + mels - 1
    return reshape_to(c, call_op(c, "slice_copy.Tensor", {f, int64_t(0), first, first + mels, int64_t(1)}),
                      {SymSize(int64_t(1)), SymSize(mels)});
  };
  Tensor lo = edge(0), mid = edge(1), hi = edge(2);
  Tensor j = iota_along(c, bins, 0, 2, kFloat64);  // [bins, 1]
  Tensor zero = host_scalar(0.0, kFloat64), one = host_scalar(1.0, kFloat64);
  Tensor rising = tessera::logical_and(tessera::logical_and(tessera::ge(j, lo), tessera::le(j, mid)), tessera::gt(mid, lo));
  Tensor centre = tessera::logical_and(tessera::eq(j, mid), tessera::eq(mid, lo));
  Tensor falling = tessera::logical_and(tessera::ge(j, mid), tessera::lt(j, hi));
  Tensor up = tessera::div(tessera::sub(j, lo), tessera::where(tessera::gt(mid, lo), tessera::sub(mid, lo), one));
  Tensor down = tessera::div(tessera::sub(hi, j), tessera::where(tessera::gt(hi, mid), tessera::sub(hi, mid), one));
  Tensor w = tessera::where(falling, down, tessera::where(centre, one, tessera::where(rising, up, zero)));
  c.out(0, w.to(*dt));
}

// EyeLike: a constant of the input's (static) 2-D shape with ones on diagonal k.
void EyeLike(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() != 2) c.fail("the input must be 2-D, got " + std::to_string(x.dim()) + "-D");
  const int64_t rows = static_dim(c, x, 0, "EyeLike"), cols = static_dim(c, x, 1, "EyeLike");
  DType dt = x.dtype();
  if (c.has_attr("dtype")) {
    const int64_t t = c.attr_int("dtype", 0);
    std::optional<DType> d = dtype_of_onnx(int32_t(t));
    if (!d) c.fail("dtype " + std::to_string(t) + " is an ONNX type Tessera has no dtype for");
    dt = *d;
  }
  const int64_t k = c.attr_int("k", 0);
  int64_t count = 0;
  if (__builtin_mul_overflow(rows, cols, &count)) count = INT64_MAX;
  c.check_elements(count, "EyeLike's output");
  std::vector<int64_t> values(static_cast<size_t>(count), 0);
  if (k > -rows && k < cols)  // (else no diagonal element lies inside; also keeps i + k from overflowing)
    for (int64_t i = 0; i < rows; ++i)
      if (i + k >= 0 && i + k < cols) values[size_t(i * cols + i + k)] = 1;
  c.out(0, constant_val(host_tensor(values, {rows, cols}, dt)));
}

// OneHot: on where the index (negative ones wrapped by depth) equals the position along the new
// axis, off elsewhere (an index out of range matches nothing). depth must be known at import: it
// is an output size.
void OneHot(NodeCtx& c) {
  Tensor idx = c.in(0), values = c.in(2);
  if (!c.val(1).constant && !c.has_ints(1))
    c.fail("depth (input 1) must be known at import: it is the size of the output's new axis");
  const double depth_value = c.const_scalar(1);
  if (!(depth_value >= 1 && depth_value <= double(kMaxImportElements))) c.fail("depth must be in [1, 2^28]");
  const int64_t depth = int64_t(depth_value);
  if (values.dim() != 1 || values.numel() != 2) c.fail("values must hold [off_value, on_value]");
  const int64_t rank = idx.dim() + 1;
  const int64_t axis = norm_axis(c, c.attr_int("axis", -1), rank);
  Tensor d = scalar_like(double(depth), idx);
  Tensor wrapped = tessera::where(tessera::lt(idx, scalar_like(0.0, idx)), tessera::add(idx, d), idx);
  Sizes s = c.sizes(idx);
  s.insert(s.begin() + axis, SymSize(int64_t(1)));
  Tensor hot = tessera::eq(reshape_to(c, wrapped, s), iota_along(c, depth, axis, rank, idx.dtype()));
  Tensor off = tessera::index_select(values, 0, host_tensor({0}, {1}, kInt64));
  Tensor on = tessera::index_select(values, 0, host_tensor({1}, {1}, kInt64));
  c.out(0, tessera::where(hot, on, off));
}

// MaxUnpool: the values scattered to their Indices (flat over the whole output) in zeros of the
// inferred size, (in - 1) * stride + kernel - pads; an output_shape larger than that pads the end of
// each spatial dim with zeros (the reference's reading of it).
void MaxUnpool(NodeCtx& c) {
  Tensor x = c.in(0), idx = c.in(1);
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape", {});
  const size_t n = kernel.size();
  if (n < 1 || x.dim() != int64_t(n) + 2) c.fail("kernel_shape must match the input's spatial rank");
  const std::vector<int64_t> stride = c.attr_ints("strides", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (stride.size() != n || pads.size() != 2 * n) c.fail("strides/pads do not match kernel_shape");
  std::vector<int64_t> inferred;
  for (int64_t d = 0; d < 2; ++d) inferred.push_back(static_dim(c, x, d, "MaxUnpool"));
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = static_dim(c, x, int64_t(i) + 2, "MaxUnpool");
    if (stride[i] < 1 || stride[i] > (1 << 20) || kernel[i] < 1 || kernel[i] > (1 << 20) || pads[i] < 0 ||
        pads[i] > (1 << 20) || pads[i + n] < 0 || pads[i + n] > (1 << 20))
      c.fail("strides and kernel sizes must be in [1, 2^20], pads in [0, 2^20]");
    inferred.push_back((in - 1) * stride[i] + kernel[i] - pads[i] - pads[i + n]);
  }
  int64_t total = 1;
  for (int64_t d : inferred)
    if (d < 0 || __builtin_mul_overflow(total, d, &total))
      c.fail("the output shape is negative or overflows");
  c.check_elements(total, "MaxUnpool's output");
  std::vector<int64_t> out = inferred;
  if (c.has(2)) {
    out = c.const_ints(2);
    if (out.size() != n + 2) c.fail("output_shape must have " + std::to_string(n + 2) + " entries");
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] < inferred[i] || (i < 2 && out[i] != inferred[i]) || out[i] - inferred[i] > (1 << 20))
        c.fail("output_shape dim " + std::to_string(i) + " is " + std::to_string(out[i]) +
               "; it must be at least " + std::to_string(inferred[i]) +
               " (N and C equal), and at most 2^20 more");
  }
  Tensor zeros;
  {
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    zeros = tessera::zeros({total}, tessera::dtype(x.dtype()));
  }
  const Sizes flat{product(c.sizes(x), 0, size_t(x.dim()))};
  Tensor y = call_op(c, "scatter.src", {zeros, int64_t(0), reshape_to(c, idx, flat), reshape_to(c, x, flat)});
  Sizes shape;
  for (int64_t d : inferred) shape.push_back(SymSize(d));
  y = reshape_to(c, y, shape);
  if (out != inferred) {
    std::vector<int64_t> list;  // the contract's pad: [last_lo, last_hi, prev_lo, ...]
    for (size_t i = out.size(); i-- > 2;) {
      list.push_back(0);
      list.push_back(out[i] - inferred[i]);
    }
    y = call_op(c, "pad", {y, list, std::string("constant"), 0.0});
  }
  c.out(0, y);
}

}  // namespace

void add_more_nn_converters(ConverterTable& t) {
  t["Hardmax"] = Hardmax;
  t["LpNormalization"] = LpNormalization;
  t["MeanVarianceNormalization"] = MeanVarianceNormalization;
  t["CumProd"] = CumProd;
  t["Swish"] = Swish;
  t["EyeLike"] = EyeLike;
  t["OneHot"] = OneHot;
  t["MaxUnpool"] = MaxUnpool;
  t["SwiGLU"] = SwiGLU;
  t["CausalConvWithState"] = CausalConvWithState;
  t["DeformConv"] = DeformConv;
  t["HannWindow"] = window_function<WindowKind::kHann>;
  t["HammingWindow"] = window_function<WindowKind::kHamming>;
  t["BlackmanWindow"] = window_function<WindowKind::kBlackman>;
  t["DFT"] = DFT;
  t["STFT"] = STFT;
  t["QuantizeLinear"] = QuantizeLinear;
  t["DequantizeLinear"] = DequantizeLinear;
  t["DynamicQuantizeLinear"] = DynamicQuantizeLinear;
  t["QLinearMatMul"] = QLinearMatMul;
  t["RoiAlign"] = RoiAlign;
  t["MatMulInteger"] = MatMulInteger;
  t["Det"] = Det;
  t["MelWeightMatrix"] = MelWeightMatrix;
}

}  // namespace tessera::onnx::detail

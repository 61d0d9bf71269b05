// Converters that map onto the contract's structural ops: Pad, TopK, CumSum, Trilu,
// ScatterElements, ArgMin, GroupNormalization, ConvTranspose.
#include <cmath>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

void Pad(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t r = x.dim();
  std::vector<int64_t> pads = c.opset() < 11 ? c.attr_ints("pads", {}) : c.const_ints(1);
  std::vector<int64_t> axes;
  if (c.has(3)) {
    for (int64_t a : c.const_ints(3)) axes.push_back(norm_axis(c, a, r));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) c.fail("pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  std::vector<int64_t> begin(size_t(r), 0), end(size_t(r), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    begin[size_t(axes[i])] = pads[i];
    end[size_t(axes[i])] = pads[i + axes.size()];
  }
  const std::string mode = c.attr_string("mode", "constant");
  // "wrap" (opset 19) is the contract's "circular": crop first, then wrap (Note [Circular pad crops
  // first], the order ONNX Runtime follows too).
  static const std::map<std::string, std::string> kModes = {
      {"constant", "constant"}, {"reflect", "reflect"}, {"edge", "replicate"}, {"wrap", "circular"}};
  auto m = kModes.find(mode);
  if (m == kModes.end()) c.fail("mode '" + mode + "' is not supported (constant, reflect, edge, wrap are)");
  // The value: an attribute before opset 11, then input 2, a constant or a value of the graph.
  const bool value_at_run_time = c.opset() >= 11 && c.has(2) && !c.val(2).constant && !c.val(2).ints;
  double value = c.opset() < 11 ? c.attr_float("value", 0.0) : (c.has(2) && !value_at_run_time ? c.const_scalar(2) : 0.0);
  // The contract's pad list runs from the last dim backwards ([last_lo, last_hi, prev_lo, ...]).
  std::vector<int64_t> list;
  int64_t first = 0;
  while (first < r && begin[size_t(first)] == 0 && end[size_t(first)] == 0) ++first;
  for (int64_t d = r - 1; d >= first; --d) {
    list.push_back(begin[size_t(d)]);
    list.push_back(end[size_t(d)]);
  }
  if (list.empty()) return c.out(0, x);
  Stack args;
  args.emplace_back(x);
  args.emplace_back(list);
  args.emplace_back(m->second);
  if (m->second == "constant") args.emplace_back(value);
  if (m->second != "constant" || !value_at_run_time) return c.out(0, call_op(c, "pad", std::move(args)));
  // A value known only at run time: pad with zeros, then put the value where a padding mask (pad's
  // zeros around ones of x's shape) says so. A cropped dim keeps no padding and the mask follows it.
  Tensor v = c.in(2);
  for (const SymSize& s : c.sizes(v))
    if (!s.is_constant() || s.constant() != 1) c.fail("the constant_value input must hold one element; it has a dim of size " + s.str());
  Tensor padded = call_op(c, "pad", std::move(args));
  Tensor inside = call_op(c, "pad", {tessera::ones_like(x).to(kBool), list, std::string("constant"), 0.0});
  c.out(0, tessera::where(inside, padded, v.reshape({}).to(x.dtype())));
}

void TopK(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t k = c.opset() < 10 ? c.attr_int("k", 1) : int64_t(c.const_scalar(1));
  const int64_t axis = norm_axis(c, c.attr_int("axis", -1), x.dim());
  std::vector<Tensor> out = call_op_outputs(c, "topk", {x, k, axis, c.attr_int("largest", 1) != 0, c.attr_int("sorted", 1) != 0});
  c.out(0, out.at(0));
  c.out(1, out.at(1));
}

void CumSum(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, int64_t(c.const_scalar(1)), x.dim());
  const bool reverse = c.attr_int("reverse", 0) != 0, exclusive = c.attr_int("exclusive", 0) != 0;
  const std::vector<int64_t> dims{axis};
  Tensor in = reverse ? call_op(c, "flip", {x, dims}) : x;
  Tensor y = call_op(c, "cumsum", {in, axis, x.dtype()});
  if (exclusive) y = tessera::sub(y, in);
  c.out(0, reverse ? call_op(c, "flip", {y, dims}) : y);
}

void Trilu(NodeCtx& c) {
  const int64_t k = c.has(1) ? int64_t(c.const_scalar(1)) : 0;
  c.out(0, call_op(c, c.attr_int("upper", 1) ? "triu" : "tril", {c.in(0), k}));
}

void ScatterElements(NodeCtx& c) {
  Tensor x = c.in(0), idx = c.in(1), src = c.in(2);
  const int64_t axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  const std::string red = c.attr_string("reduction", "none");
  if (red == "none") return c.out(0, call_op(c, "scatter.src", {x, axis, idx, src}));
  static const std::map<std::string, std::string> kReduce = {{"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
  auto r = kReduce.find(red);
  if (r == kReduce.end()) c.fail("reduction '" + red + "' is not supported");
  c.out(0, call_op(c, "scatter_reduce.two", {x, axis, idx, src, r->second, true}));
}

void ArgMin(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (!c.attr_int("select_last_index", 0)) return c.out(0, call_op(c, "argmin", {x, axis, keep}));
  const SymSize n = c.sizes(x)[size_t(axis)];  // the last of equal minima, as ArgMax does it
  if (!n.is_constant()) c.fail("select_last_index=1 on the dynamic dim " + n.str());
  Tensor i = call_op(c, "argmin", {call_op(c, "flip", {x, std::vector<int64_t>{axis}}), axis, keep});
  c.out(0, tessera::sub(host_scalar(double(n.constant() - 1), kInt64), i));
}

void GroupNormalization(NodeCtx& c) {
  c.ignore_attrs({"stash_type"});
  Tensor x = c.in(0), scale = c.in(1), bias = c.in(2);
  const int64_t groups = c.attr_int("num_groups", 0);
  if (groups <= 0 || x.dim() < 2) c.fail("num_groups must be positive and the input at least 2-D");
  const SymSize ch = c.sizes(x)[1];
  if (!ch.is_constant() || ch.constant() % groups != 0) c.fail("the channels are not a multiple of num_groups");
  if (c.opset() < 21 && scale.numel() == groups && groups != ch.constant()) {
    // Opset 18 gives scale and bias per group: repeated to every channel of the group.
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < ch.constant(); ++i) idx.push_back(i / (ch.constant() / groups));
    Tensor ci = host_tensor(idx, {ch.constant()}, kInt64);
    scale = tessera::index_select(scale, 0, ci);
    bias = tessera::index_select(bias, 0, ci);
  }
  c.out(0, call_op(c, "group_norm", {x, groups, std::optional<Tensor>(scale), std::optional<Tensor>(bias),
                                      c.attr_float("epsilon", 1e-5), true}));
}

// Floor division (Python's //), for the pads a negative total padding gives.
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// The 3-D transposed convolution with no pads, no output padding and no bias (natural size
// (in - 1) * stride + (k - 1) * dilation + 1 per dim), from 2-D ones: for each kernel depth t, the
// 2-D transposed conv of every input depth slice with W[:, :, t], spread along the output depth
// to d * stride + t * dilation (zeros between), summed over t.
Tensor conv_transpose3d_natural(NodeCtx& c, const Tensor& x, const Tensor& w,
                                const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                                int64_t groups) {
  Sizes xs = c.sizes(x), ws = c.sizes(w);
  const SymSize& depth = xs[2];
  if (!depth.is_constant()) c.fail("a 3-D transposed convolution over the dynamic depth " + depth.str());
  const int64_t d = depth.constant(), kd = ws[2].constant();
  const int64_t natural = (d - 1) * stride[0] + (kd - 1) * dilation[0] + 1;
  const SymSize one(int64_t(1));
  Tensor slices =
      reshape_to(c, x.permute({0, 2, 1, 3, 4}), {xs[0] * xs[2], xs[1], xs[3], xs[4]});  // [N*D, C, H, W]
  Tensor sum;
  for (int64_t t = 0; t < kd; ++t) {
    Tensor wt = reshape_to(c, call_op(c, "slice_copy.Tensor", {w, int64_t(2), t, t + 1, int64_t(1)}),
                           {ws[0], ws[1], ws[3], ws[4]});
    Tensor p = call_op(c, "conv_transpose2d.input",
                       {slices, wt, std::optional<Tensor>(), std::vector<int64_t>{stride[1], stride[2]},
                        std::vector<int64_t>{0, 0}, std::vector<int64_t>{0, 0}, groups,
                        std::vector<int64_t>{dilation[1], dilation[2]}});
    Sizes ps = c.sizes(p);  // [N*D, O, H', W']
    const SymSize plane = ps[1] * ps[2] * ps[3];
    Tensor spread = reshape_to(c, p, {xs[0], depth, one, plane});
    if (stride[0] > 1)  // d -> d * stride: zeros after each slice
      spread = call_op(c, "pad",
                       {spread, std::vector<int64_t>{0, 0, 0, stride[0] - 1}, std::string("constant"), 0.0});
    spread = reshape_to(c, spread, {xs[0], SymSize(d * stride[0]), plane});
    spread = call_op(c, "slice_copy.Tensor",
                     {spread, int64_t(1), int64_t(0), (d - 1) * stride[0] + 1, int64_t(1)});
    const int64_t before = t * dilation[0], after = natural - before - ((d - 1) * stride[0] + 1);
    if (before || after)
      spread = call_op(c, "pad",
                       {spread, std::vector<int64_t>{0, 0, before, after}, std::string("constant"), 0.0});
    sum = t == 0 ? spread : tessera::add(sum, spread);
    if (t + 1 == kd) {
      Tensor y = reshape_to(c, sum, {xs[0], SymSize(natural), ps[1], ps[2], ps[3]});
      return y.permute({0, 2, 1, 3, 4});
    }
  }
  c.fail("the weight's kernel depth must be positive");
}

// The transposed conv of x [N, C, *in] by w [C, M / groups, *k] (1-D to 3-D windows, static
// sizes): the output positions [begin, begin + out) of its natural (unpadded) result of size
// `natural`, zeros where that reaches outside it, then biased.
Tensor conv_transpose_cropped(NodeCtx& c, const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias,
                              const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                              int64_t groups, const std::vector<int64_t>& begin,
                              const std::vector<int64_t>& out, const std::vector<int64_t>& natural) {
  const size_t n = stride.size();
  Sizes xs = c.sizes(x), ws = c.sizes(w);
  Tensor y;
  if (n == 3) {
    y = conv_transpose3d_natural(c, x, w, stride, dilation, groups);
  } else {
    const bool one_d = n == 1;
    Tensor x2 = one_d ? reshape_to(c, x, {xs[0], xs[1], SymSize(int64_t(1)), xs[2]}) : x;
    Tensor w2 = one_d ? reshape_to(c, w, {ws[0], ws[1], SymSize(int64_t(1)), ws[2]}) : w;
    std::vector<int64_t> s2 = one_d ? std::vector<int64_t>{1, stride[0]} : stride;
    std::vector<int64_t> d2 = one_d ? std::vector<int64_t>{1, dilation[0]} : dilation;
    y = call_op(c, "conv_transpose2d.input",
                {x2, w2, std::optional<Tensor>(), s2, std::vector<int64_t>{0, 0}, std::vector<int64_t>{0, 0},
                 groups, d2});
    if (one_d) {
      Sizes ys = c.sizes(y);
      y = reshape_to(c, y, {ys[0], ys[1], ys[3]});
    }
  }
  // Crop [begin, begin + out) of the natural output, zeros where that reaches outside it.
  std::vector<int64_t> ext;  // the contract's pad list, last dim first
  bool extend = false;
  for (size_t i = n; i-- > 0;) {
    ext.push_back(std::max<int64_t>(-begin[i], 0));
    ext.push_back(std::max<int64_t>(begin[i] + out[i] - natural[i], 0));
    extend = extend || ext[ext.size() - 2] || ext.back();
  }
  if (extend) y = call_op(c, "pad", {y, ext, std::string("constant"), 0.0});
  for (size_t i = 0; i < n; ++i) {
    const int64_t start = begin[i] + std::max<int64_t>(-begin[i], 0);
    const int64_t full = natural[i] + ext[2 * (n - 1 - i)] + ext[2 * (n - 1 - i) + 1];
    if (start != 0 || out[i] != full)
      y = call_op(c, "slice_copy.Tensor", {y, int64_t(2 + i), start, start + out[i], int64_t(1)});
  }
  if (bias) {
    Sizes bs{c.sizes(*bias)[0]};
    for (size_t i = 0; i < n; ++i) bs.push_back(SymSize(int64_t(1)));
    y = tessera::add(y, reshape_to(c, *bias, bs));
  }
  return y;
}

// ConvTranspose over 1-D (run as 2-D with a height of 1), 2-D and 3-D windows. Pads, auto_pad and
// output_shape resolve to a begin pad and an output size per dim (the reference's rules: with
// output_shape and no SAME auto_pad, the given pads and the output's end grows or is cropped). The
// contract's op takes symmetric pads; other cases run unpadded and the result is cropped or
// extended with zeros, then biased.
void ConvTranspose(NodeCtx& c) {
  Tensor x = c.in(0), w = c.in(1);
  std::optional<Tensor> bias = c.opt(2);
  if (x.dim() < 3 || x.dim() > 5 || w.dim() != x.dim())
    c.fail("input and weight must both be 3-D, 4-D or 5-D (1-D to 3-D windows), got " +
           std::to_string(x.dim()) + "-D and " + std::to_string(w.dim()) + "-D");
  const size_t n = size_t(x.dim() - 2);
  Sizes ws = c.sizes(w), xs = c.sizes(x);
  std::vector<int64_t> kernel;
  for (size_t i = 2; i < ws.size(); ++i) {
    if (!ws[i].is_constant()) c.fail("the weight's dynamic size " + ws[i].str());
    kernel.push_back(ws[i].constant());
  }
  if (c.attr_ints("kernel_shape", kernel) != kernel)
    c.fail("kernel_shape differs from the weight's spatial sizes");
  const std::vector<int64_t> stride = c.attr_ints("strides", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> dilation = c.attr_ints("dilations", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> out_pad = c.attr_ints("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  const int64_t groups = c.attr_int("group", 1);
  if (stride.size() != n || dilation.size() != n || out_pad.size() != n || pads.size() != 2 * n)
    c.fail("strides/dilations/output_padding/pads do not match the window's rank " + std::to_string(n));
  for (size_t i = 0; i < n; ++i)
    if (stride[i] < 1 || stride[i] > (1 << 20) || dilation[i] < 1 || dilation[i] > (1 << 20) ||
        out_pad[i] < 0 || out_pad[i] > (1 << 20) || pads[i] < 0 || pads[i] > (1 << 20) || pads[i + n] < 0 ||
        pads[i + n] > (1 << 20) || kernel[i] < 1 || kernel[i] > (1 << 20))
      c.fail(
          "strides, dilations and kernel sizes must be in [1, 2^20], pads and output_padding in [0, 2^20]");
  if (groups < 1) c.fail("group must be positive");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    c.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  if (auto_pad == "VALID") pads.assign(2 * n, 0);
  std::vector<int64_t> out_shape = c.attr_ints("output_shape", {});
  if (!out_shape.empty()) {
    if (out_shape.size() == n + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.size() != n)
      c.fail("output_shape must have " + std::to_string(n) + " (or " + std::to_string(n + 2) + ") entries");
    for (int64_t v : out_shape)
      if (v < 1 || v > (int64_t(1) << 30)) c.fail("output_shape entries must be in [1, 2^30]");
  }
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  // Per dim: the natural size (no pads), the first output position in it, the output size.
  std::vector<int64_t> natural(n), begin(n), out(n);
  bool is_static = true;
  for (size_t i = 0; i < n; ++i) is_static = is_static && xs[2 + i].is_constant();
  bool native = n <= 2;
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = (kernel[i] - 1) * dilation[i] + 1;
    if (!same && out_shape.empty()) {
      // The plain case: symbolic sizes are fine as long as the op does it all.
      begin[i] = pads[i];
      native = native && pads[i] == pads[i + n] && out_pad[i] < std::max(stride[i], dilation[i]);
      if (is_static) {
        natural[i] = (xs[2 + i].constant() - 1) * stride[i] + span;
        out[i] = natural[i] + out_pad[i] - pads[i] - pads[i + n];
      }
      continue;
    }
    if (!xs[2 + i].is_constant()) c.fail("auto_pad or output_shape on the dynamic size " + xs[2 + i].str());
    const int64_t in = xs[2 + i].constant();
    natural[i] = (in - 1) * stride[i] + span;
    if (same) {
      out[i] = out_shape.empty() ? in * stride[i] : out_shape[i];
      const int64_t total = natural[i] + out_pad[i] - out[i];
      begin[i] = auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
    } else {
      out[i] = out_shape[i];
      begin[i] = pads[i];
    }
    native = native && begin[i] >= 0 && 2 * begin[i] + out[i] - natural[i] >= 0 &&
             2 * begin[i] + out[i] - natural[i] < std::max(stride[i], dilation[i]);
  }
  if (native) {
    std::vector<int64_t> p(n), op(n);
    for (size_t i = 0; i < n; ++i) {
      p[i] = begin[i];
      op[i] = (!same && out_shape.empty()) ? out_pad[i] : 2 * begin[i] + out[i] - natural[i];
    }
    auto widen = [&](std::vector<int64_t> v, int64_t first) {
      if (n == 1) v.insert(v.begin(), first);
      return v;
    };
    Tensor x2 = x, w2 = w;
    if (n == 1) {
      x2 = reshape_to(c, x, {xs[0], xs[1], SymSize(int64_t(1)), xs[2]});
      w2 = reshape_to(c, w, {ws[0], ws[1], SymSize(int64_t(1)), ws[2]});
    }
    Tensor y =
        call_op(c, "conv_transpose2d.input",
                {x2, w2, bias, widen(stride, 1), widen(p, 0), widen(op, 0), groups, widen(dilation, 1)});
    if (n == 1) {
      Sizes ys = c.sizes(y);
      y = reshape_to(c, y, {ys[0], ys[1], ys[3]});
    }
    return c.out(0, y);
  }
  if (!is_static)
    for (size_t i = 0; i < n; ++i)
      if (!xs[2 + i].is_constant()) c.fail("asymmetric pads on the dynamic size " + xs[2 + i].str());
  for (size_t i = 0; i < n; ++i)
    if (out[i] < 1)
      c.fail("the output's spatial dim " + std::to_string(i) + " would be " + std::to_string(out[i]));
  c.out(0, conv_transpose_cropped(c, x, w, bias, stride, dilation, groups, begin, out, natural));
}

}  // namespace

void add_index_converters(ConverterTable& t) {
  t["Pad"] = Pad; t["TopK"] = TopK; t["CumSum"] = CumSum; t["Trilu"] = Trilu; t["ScatterElements"] = ScatterElements;
  t["Scatter"] = ScatterElements; t["ArgMin"] = ArgMin; t["GroupNormalization"] = GroupNormalization;
  t["ConvTranspose"] = ConvTranspose;
}

}  // namespace tessera::onnx::detail

// Resize and the sampling family (GridSample, AffineGrid, Col2Im) at import.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

// Note [Resize at import]
// Resize is separable: onnx.reference (op_resize.py) resizes one axis at a time, each output index o
// reading n input indices (edge-clamped) with weights from its source coordinate. For a static
// axis the importer computes those taps in double, as the reference does, and applies them with
// ops every device has: nearest is an index_select (exact for every dtype), the other modes a sum
// of index_selects times per-row weights (or a matmul by the dense out x in matrix when the
// antialias footprint is wide). tf_crop_and_resize's extrapolated rows are then set by a where.
// Integer inputs of the weighted modes are computed in double, then rounded and saturated.
// Nearest and linear resizes of the spatial dims (what CNNs use) keep the contract's _resize, which
// computes the same thing in one kernel, given the model's exact scales.
// Cubic weights are doubles, as in the node tests' expected outputs; onnx.reference's evaluator
// holds cubic_coeff_a as a float32 and so rounds them to float32 (an integer result can then differ
// by one where it is near a half).

struct AxisPlan {
  int64_t axis = 0, in = 0, out = 0;
  double scale = 1;
  double roi_start = 0, roi_end = 1;
};

struct Taps {
  int64_t n = 0;                // taps per output index
  std::vector<int64_t> index;   // [out * n], clamped into [0, in)
  std::vector<double> weight;   // [out * n]
  std::vector<uint8_t> extrap;  // [out]: tf_crop_and_resize rows outside the input
};

struct ResizeAttrs {
  std::string mode, ctm, nearest_mode;
  bool antialias = false, exclude_outside = false;
  double cubic_a = -0.75, extrapolation = 0;
};

double source_coord(const ResizeAttrs& a, const AxisPlan& p, int64_t o, bool* extrap) {
  const double y = double(o), in = double(p.in), width = p.scale * in;
  const std::string& m = a.ctm;
  if (m == "align_corners") return width == 1 ? 0.0 : y * (in - 1) / (width - 1);
  if (m == "asymmetric") return y / p.scale;
  if (m == "tf_crop_and_resize") {
    const double d = p.roi_end - p.roi_start;
    double x = width == 1 ? d * (in - 1) / 2 : y * d * (in - 1) / (width - 1);
    x = x + p.roi_start * (in - 1);
    *extrap = x < 0 || x > in - 1;
    return x;
  }
  if (m == "pytorch_half_pixel") return width == 1 ? -0.5 : (y + 0.5) / p.scale - 0.5;
  if (m == "half_pixel_symmetric") {
    const double offset = in / 2 * (1 - double(p.out) / width);
    return offset + (y + 0.5) / p.scale - 0.5;
  }
  if (m == "tf_half_pixel_for_nearest") return (y + 0.5) / p.scale;
  return (y + 0.5) / p.scale - 0.5;  // half_pixel
}

// The weights of one output index whose source coordinate is `ratio` (in (0, 1]) past the pixel on
// its left (op_resize.py's *_coeffs).
std::vector<double> coeffs(const ResizeAttrs& a, double ratio, double scale) {
  if (a.mode == "nearest") {
    if (ratio == 1) return {0, 1};
    if (a.nearest_mode == "round_prefer_ceil") return {double(ratio < 0.5), double(ratio >= 0.5)};
    if (a.nearest_mode == "floor") return {1, 0};
    if (a.nearest_mode == "ceil") return {0, 1};
    return {double(ratio <= 0.5), double(ratio > 0.5)};
  }
  const double A = a.cubic_a;
  if (a.mode == "linear" && !a.antialias) return {1 - ratio, ratio};
  if (a.mode == "cubic" && !a.antialias) {
    const double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
    return {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A, ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
            ((A + 2) * q - (A + 3)) * q * q + 1, ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A};
  }
  const double s = std::min(scale, 1.0);
  std::vector<double> w;
  if (a.mode == "linear") {
    const int64_t start = int64_t(std::floor(-1 / s) + 1), footprint = 2 - 2 * start;
    for (int64_t i = start; i < start + footprint; ++i)
      w.push_back(std::clamp(1 - std::abs((double(i) - ratio) * s), 0.0, 1.0));
  } else {
    const int64_t start = int64_t(std::floor(-2 / s) + 1), end = 2 - start;
    for (int64_t i = start; i < end; ++i) {
      const double x = std::abs(s * (double(i) - ratio)), x2 = x * x, x3 = x * x2;
      w.push_back(x <= 1  ? (A + 2) * x3 - (A + 3) * x2 + 1
                  : x < 2 ? A * x3 - 5 * A * x2 + 8 * A * x - 4 * A
                          : 0.0);
    }
  }
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v /= sum;
  return w;
}

// The taps of one axis, as op_resize.py's _interpolate_1d_along_axis picks them.
Taps axis_taps(const NodeCtx& c, const ResizeAttrs& a, const AxisPlan& p) {
  Taps t;
  if (a.antialias && 4 / std::min(p.scale, 1.0) > double(kMaxImportElements))
    c.fail("antialias at scale " + std::to_string(p.scale) + " of axis " + std::to_string(p.axis) +
           " reads too many taps");
  t.extrap.assign(size_t(p.out), 0);
  for (int64_t o = 0; o < p.out; ++o) {
    bool ex = false;
    const double x = source_coord(a, p, o, &ex);
    if (!std::isfinite(x) || std::abs(x) > 1e15)
      c.fail("the source coordinate of output " + std::to_string(o) + " along axis " +
             std::to_string(p.axis) + " is not finite");
    t.extrap[size_t(o)] = ex;
    const double xi = std::floor(x);
    std::vector<double> w = coeffs(a, x == xi ? 1.0 : x - xi, p.scale);
    const int64_t n = int64_t(w.size());
    if (o == 0) {
      t.n = n;
      c.check_elements(p.out * n, "the taps of Resize");
    }
    const int64_t pad = (n + 1) / 2;
    const double xp = x + double(pad), pp = std::floor(xp), frac = xp - pp;
    const int64_t offset = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1)
                                      : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
    const int64_t first = int64_t(pp) + offset - pad;
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        if (first + k < 0 || first + k >= p.in) w[size_t(k)] = 0;
        sum += w[size_t(k)];
      }
      if (sum == 0) sum = 1;
      for (double& v : w) v /= sum;
    }
    for (int64_t k = 0; k < n; ++k) {
      t.index.push_back(std::clamp<int64_t>(first + k, 0, p.in - 1));
      t.weight.push_back(w[size_t(k)]);
    }
  }
  return t;
}

// A host tensor (outside the capture, like host_tensor) holding `values`.
Tensor host_doubles(const std::vector<double>& values, IntArrayRef sizes, DType dtype) {
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  return tessera::tensor(values, {int64_t(values.size())}, tessera::dtype(kFloat64)).reshape(sizes).to(dtype);
}

// [out, 1, ..., 1]: broadcasts a per-row value against a tensor of `rank` dims along `axis`.
std::vector<int64_t> row_shape(int64_t out, int64_t axis, int64_t rank) {
  std::vector<int64_t> s(size_t(rank - axis), 1);
  s[0] = out;
  return s;
}

// Resizes `x` along one axis (Note [Resize at import]); `x` is floating unless every row is a copy.
Tensor resize_axis(const NodeCtx& c, const Tensor& x, const AxisPlan& p, const Taps& t,
                   const ResizeAttrs& a) {
  const int64_t rank = x.dim(), n = t.n;
  // A copy when every row has one weight of exactly 1 or none (nearest; a row exclude_outside
  // emptied is 0), else a weighted sum.
  std::vector<int64_t> pick, empty_row;
  for (int64_t o = 0; o < p.out; ++o) {
    int64_t at = -1, nonzero = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double w = t.weight[size_t(o * n + k)];
      if (w != 0) ++nonzero;
      if (w == 1) at = t.index[size_t(o * n + k)];
    }
    if (nonzero > 1 || (nonzero == 1 && at < 0)) break;
    pick.push_back(nonzero == 0 ? 0 : at);
    empty_row.push_back(nonzero == 0);
  }
  Tensor y;
  if (int64_t(pick.size()) == p.out) {
    y = tessera::index_select(x, p.axis, host_tensor(pick, {p.out}, kInt64));
    if (std::find(empty_row.begin(), empty_row.end(), 1) != empty_row.end())
      y = tessera::where(host_tensor(empty_row, row_shape(p.out, p.axis, rank), kBool),
                         host_scalar(0, y.dtype()), y);
  } else if (!is_floating(x.dtype())) {
    c.fail("mode " + a.mode + " weighs a " + std::string(dtype_name(x.dtype())) +
           " input");  // (widened before)
  } else if (n <= 8) {
    for (int64_t k = 0; k < n; ++k) {
      std::vector<int64_t> idx;
      std::vector<double> w;
      for (int64_t o = 0; o < p.out; ++o) {
        idx.push_back(t.index[size_t(o * n + k)]);
        w.push_back(t.weight[size_t(o * n + k)]);
      }
      Tensor term = tessera::mul(tessera::index_select(x, p.axis, host_tensor(idx, {p.out}, kInt64)),
                                 host_doubles(w, row_shape(p.out, p.axis, rank), x.dtype()));
      y = k == 0 ? term : tessera::add(y, term);
    }
  } else {  // a wide footprint: one matmul by the dense [in, out] matrix, the axis moved last
    c.check_elements(p.in * p.out, "the Resize matrix");
    std::vector<double> m(size_t(p.in * p.out), 0.0);
    for (int64_t o = 0; o < p.out; ++o)
      for (int64_t k = 0; k < n; ++k)
        m[size_t(t.index[size_t(o * n + k)] * p.out + o)] += t.weight[size_t(o * n + k)];
    y = tessera::matmul(x.transpose(p.axis, rank - 1), host_doubles(m, {p.in, p.out}, x.dtype()))
            .transpose(p.axis, rank - 1);
  }
  if (std::find(t.extrap.begin(), t.extrap.end(), 1) != t.extrap.end()) {
    std::vector<int64_t> mask(t.extrap.begin(), t.extrap.end());
    y = tessera::where(host_tensor(mask, row_shape(p.out, p.axis, rank), kBool),
                       host_scalar(a.extrapolation, y.dtype()), y);
  }
  return y;
}

// Resizes the `axes` of x (distinct, in the order they are resized) by `scales` or to `sizes` (one of
// them is empty); `roi` has 2 * axes.size() entries for tf_crop_and_resize, else none.
Tensor resize(const NodeCtx& c, const Tensor& x, const ResizeAttrs& a, const std::vector<int64_t>& axes,
              const std::vector<double>& scales, const Sizes& sizes, const std::vector<double>& roi,
              const std::string& policy) {
  const Sizes s = c.sizes(x);
  const int64_t rank = int64_t(s.size());
  const size_t na = axes.size();
  // Per resized axis: its scale and output size, as op_resize.py's _interpolate_nd sets them.
  std::vector<AxisPlan> plans;
  std::vector<bool> identity;
  auto static_in = [&](size_t i, const char* why) {
    if (!s[size_t(axes[i])].is_constant())
      c.fail(std::string(why) + " the dynamic size " + s[size_t(axes[i])].str() + " of axis " +
             std::to_string(axes[i]));
    return s[size_t(axes[i])].constant();
  };
  double aspect = 0;
  if (scales.empty() && policy != "stretch") {
    for (size_t i = 0; i < na; ++i) {
      if (!sizes[i].is_constant())
        c.fail("sizes entry " + std::to_string(i) + " is not constant (" + sizes[i].str() + ")");
      const int64_t in = static_in(i, "keep_aspect_ratio_policy needs");
      if (in == 0) c.fail("keep_aspect_ratio_policy on the empty axis " + std::to_string(axes[i]));
      const double r = double(sizes[i].constant()) / double(in);
      aspect = i == 0 ? r : policy == "not_larger" ? std::min(aspect, r) : std::max(aspect, r);
    }
  }
  for (size_t i = 0; i < na; ++i) {
    AxisPlan p;
    p.axis = axes[i];
    if (!roi.empty()) p.roi_start = roi[i], p.roi_end = roi[na + i];
    const bool roi_trivial = roi.empty() || (p.roi_start == 0 && std::abs(p.roi_end - 1) <= 1e-9);
    const SymSize& dim = s[size_t(p.axis)];
    if (!scales.empty()) {
      p.scale = scales[i];
      if (!(p.scale > 0) || !std::isfinite(p.scale))
        c.fail("scale " + std::to_string(p.scale) + " of axis " + std::to_string(p.axis) +
               " is not positive and finite");
      if (!dim.is_constant() && std::abs(p.scale - 1) <= 1e-9 && roi_trivial) {
        identity.push_back(true);
        plans.push_back(p);
        continue;
      }
      p.in = static_in(i, "resizes by a scale");
      const double v = std::floor(double(p.in) * p.scale);
      if (v > double(kMaxImportElements))
        c.fail("scale " + std::to_string(p.scale) + " of axis " + std::to_string(p.axis) +
               " gives more than " + std::to_string(kMaxImportElements) + " elements");
      p.out = int64_t(v);
    } else if (policy != "stretch") {
      p.in = static_in(i, "keep_aspect_ratio_policy needs");
      p.scale = aspect;
      const double v = aspect * double(p.in) + 0.5;
      if (!(v <= double(kMaxImportElements)))
        c.fail("keep_aspect_ratio_policy gives axis " + std::to_string(p.axis) + " more than " +
               std::to_string(kMaxImportElements) + " elements");
      p.out = int64_t(v);
    } else {
      if (c.same(sizes[i], dim) && roi_trivial) {
        identity.push_back(true);
        plans.push_back(p);
        continue;
      }
      if (!sizes[i].is_constant())
        c.fail("sizes entry " + std::to_string(i) + " is not constant (" + sizes[i].str() + ")");
      p.in = static_in(i, "resizes");
      p.out = sizes[i].constant();
      if (p.out < 0 || p.out > kMaxImportElements)
        c.fail("size " + std::to_string(p.out) + " of axis " + std::to_string(p.axis) + " is out of range");
      if (p.in == 0 && p.out != 0)
        c.fail("resizes the empty axis " + std::to_string(p.axis) + " to " + std::to_string(p.out));
      p.scale = p.in == 0 ? 1.0 : double(p.out) / double(p.in);
    }
    identity.push_back((std::abs(p.scale - 1) <= 1e-9 && p.out == p.in && roi_trivial) ||
                       (p.in == 0 && p.out == 0));
    plans.push_back(p);
  }

  // The contract's _resize: nearest/linear of trailing spatial dims of a 3-D or larger input.
  bool fast = rank >= 3 && (a.mode == "nearest" || (a.mode == "linear" && is_floating(x.dtype()))) &&
              !a.antialias && !a.exclude_outside && a.ctm != "tf_crop_and_resize";
  std::vector<int64_t> spatial(size_t(std::max<int64_t>(rank - 2, 0)), -1);
  std::vector<double> spatial_scale(spatial.size(), 1.0);
  for (size_t i = 0; fast && i < na; ++i) {
    const AxisPlan& p = plans[i];
    if (!identity[i] && (p.axis < 2 || p.out == 0)) {  // (the kernel takes no empty output)
      fast = false;
    } else if (p.axis >= 2) {
      spatial[size_t(p.axis - 2)] =
          identity[i] ? (s[size_t(p.axis)].is_constant() ? s[size_t(p.axis)].constant() : -1) : p.out;
      spatial_scale[size_t(p.axis - 2)] = identity[i] ? 1.0 : p.scale;
    }
  }
  for (size_t d = 0; fast && d < spatial.size(); ++d) {
    if (spatial[d] >= 0) continue;
    if (!s[d + 2].is_constant())
      fast = false;
    else
      spatial[d] = s[d + 2].constant();
  }
  if (fast) {
    Tensor sc = host_doubles(spatial_scale, {int64_t(spatial_scale.size())}, kFloat64);
    return call_op(c, "_resize", {x, spatial, a.mode, a.ctm, a.nearest_mode, a.cubic_a, false, sc});
  }

  for (size_t i = 0; i < na; ++i) {
    if (identity[i] || plans[i].out != 0) continue;
    // An empty result: only its shape matters (and the kernels need not take empty operands).
    Tensor y = tessera::index_select(x, plans[i].axis, host_tensor({}, {0}, kInt64));
    for (size_t j = 0; j < na; ++j)
      if (!identity[j] && j != i)
        y = tessera::index_select(
            y, plans[j].axis,
            host_tensor(std::vector<int64_t>(size_t(plans[j].out), 0), {plans[j].out}, kInt64));
    return y;
  }
  const DType dt = x.dtype();
  Tensor y = x;
  bool widened = false;
  for (size_t i = 0; i < na; ++i) {
    if (identity[i]) continue;
    const Taps t = axis_taps(c, a, plans[i]);
    if (a.mode != "nearest" && !is_floating(y.dtype())) {
      if (dt == kBool) c.fail("mode " + a.mode + " of a bool input is not supported (nearest is)");
      y = y.to(kFloat64);  // integers: computed in double, then rounded and saturated as op_resize.py does
      widened = true;
    } else if (a.mode != "nearest" && (y.dtype() == kFloat16 || y.dtype() == kBFloat16)) {
      y = y.to(kFloat32);
      widened = true;
    }
    y = resize_axis(c, y, plans[i], t, a);
  }
  if (widened && is_integral(dt)) {
    double lo = 0, hi = 0;
    switch (dt) {
      case kUInt8:
        lo = 0, hi = 255;
        break;
      case kInt8:
        lo = -128, hi = 127;
        break;
      case kInt16:
        lo = -32768, hi = 32767;
        break;
      case kInt32:
        lo = -2147483648.0, hi = 2147483647.0;
        break;
      default:
        lo = -9223372036854775808.0, hi = 9223372036854774784.0;  // (the last double below 2^63)
        break;
    }
    y = tessera::clamp(tessera::round(y), lo, hi);
  }
  return widened ? y.to(dt) : y;
}

void Resize(NodeCtx& c) {
  Tensor x = c.in(0);
  const Sizes s = c.sizes(x);
  const int64_t rank = int64_t(s.size());
  ResizeAttrs a;
  a.mode = c.attr_string("mode", "nearest");
  if (a.mode != "nearest" && a.mode != "linear" && a.mode != "cubic")
    c.fail("mode '" + a.mode + "' is not one of nearest, linear, cubic");
  a.ctm = c.attr_string("coordinate_transformation_mode", "half_pixel");
  static const char* kModes[] = {"half_pixel",        "half_pixel_symmetric", "pytorch_half_pixel",
                                 "align_corners",     "asymmetric",           "tf_half_pixel_for_nearest",
                                 "tf_crop_and_resize"};
  if (std::find(std::begin(kModes), std::end(kModes), a.ctm) == std::end(kModes))
    c.fail("coordinate_transformation_mode '" + a.ctm + "' is not known");
  a.nearest_mode = c.attr_string("nearest_mode", "round_prefer_floor");
  if (a.nearest_mode != "round_prefer_floor" && a.nearest_mode != "round_prefer_ceil" &&
      a.nearest_mode != "floor" && a.nearest_mode != "ceil")
    c.fail("nearest_mode '" + a.nearest_mode + "' is not known");
  a.antialias = c.attr_int("antialias", 0) != 0;
  if (a.antialias && a.mode == "nearest")
    c.fail("antialias applies to the linear and cubic modes, not nearest");
  a.exclude_outside = c.attr_int("exclude_outside", 0) != 0;
  a.cubic_a = c.attr_float("cubic_coeff_a", -0.75);
  a.extrapolation = c.attr_float("extrapolation_value", 0.0);
  const std::string policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    c.fail("keep_aspect_ratio_policy '" + policy + "' is not known");

  std::vector<int64_t> axes;
  for (int64_t v : c.attr_ints("axes", {})) {
    const int64_t d = norm_axis(c, v, rank);
    if (std::find(axes.begin(), axes.end(), d) != axes.end())
      c.fail("axes names axis " + std::to_string(d) + " twice");
    axes.push_back(d);
  }
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  const size_t na = axes.size();

  // scales (input 2) or sizes (input 3); an empty tensor counts as absent.
  std::vector<double> scales;
  Sizes sizes;
  if (c.has(2)) scales = c.const_doubles(2);
  if (c.has(3)) sizes = c.ints(3);
  if (!scales.empty() && !sizes.empty()) c.fail("both scales and sizes are given");
  if (scales.empty() && sizes.empty()) c.fail("neither scales nor sizes is given");
  const size_t given = scales.empty() ? sizes.size() : scales.size();
  if (given != na)
    c.fail((scales.empty() ? "sizes" : "scales") + std::string(" has ") + std::to_string(given) +
           " entries for " + std::to_string(na) + " resized axes");
  std::vector<double> roi;
  if (a.ctm == "tf_crop_and_resize") {
    if (c.has(1)) roi = c.const_doubles(1);
    if (roi.size() != 2 * na)
      c.fail("tf_crop_and_resize needs roi with " + std::to_string(2 * na) + " entries, got " +
             std::to_string(roi.size()));
  }
  c.out(0, resize(c, x, a, axes, scales, sizes, roi, policy));
}

// GridSample as onnx.reference computes it (op_grid_sample.py), with run-time ops: the grid's
// coordinates are denormalized, rounded (nearest) and brought inside the border per padding_mode;
// each tap (1, 2 or 4 per spatial dim) gathers from the flattened input at its flat index with the
// product of its per-dim weights.
void GridSample(NodeCtx& c) {
  Tensor x = c.in(0), grid = c.in(1);
  std::string mode = c.attr_string("mode", c.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    c.fail("mode '" + mode + "' is not one of nearest, linear, cubic");
  const std::string padding = c.attr_string("padding_mode", "zeros");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    c.fail("padding_mode '" + padding + "' is not one of zeros, border, reflection");
  const bool align = c.attr_int("align_corners", 0) != 0;
  const Sizes xs = c.sizes(x), gs = c.sizes(grid);
  const int64_t r = int64_t(xs.size()), k = r - 2;
  if (k < 1) c.fail("X must have a batch, a channel and at least one spatial dim");
  const double reads = std::pow(mode == "nearest" ? 1.0 : mode == "linear" ? 2.0 : 4.0, double(k));
  if (reads > 64)
    c.fail("mode " + mode + " over " + std::to_string(k) + " spatial dims reads " +
           std::to_string(int64_t(reads)) + " pixels per output (64 are supported)");
  if (int64_t(gs.size()) != r || !gs.back().is_constant() || gs.back().constant() != k)
    c.fail("grid must be [N, spatial..., " + std::to_string(k) + "] for a " + std::to_string(r) + "-D X");
  if (!is_floating(grid.dtype())) c.fail("grid must be floating");
  if (!is_floating(x.dtype()) && mode != "nearest")
    c.fail("mode " + mode + " of a " + std::string(dtype_name(x.dtype())) +
           " X is not supported (nearest is)");
  std::vector<int64_t> dims;
  int64_t pixels = 1;
  for (int64_t i = 0; i < k; ++i) {
    if (!xs[size_t(2 + i)].is_constant())
      c.fail("samples the dynamic size " + xs[size_t(2 + i)].str() + " of X's dim " + std::to_string(2 + i));
    dims.push_back(xs[size_t(2 + i)].constant());
    if (__builtin_mul_overflow(pixels, dims.back(), &pixels)) c.fail("X's spatial size overflows");
  }
  const SymSize n = xs[0], ch = xs[1], m = product(gs, 1, size_t(r - 1));
  const DType ft = kFloat32;  // op_grid_sample.py denormalizes in float32 whatever the grid's dtype
  if (grid.dtype() != ft) grid = grid.to(ft);
  auto sc = [&](double v) { return host_scalar(v, ft); };
  Tensor xf = reshape_to(c, x, {n, ch, SymSize(pixels)});

  struct Tap {
    Tensor index, weight;  // [N, M] (float index; weight undefined means 1)
  };
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const double d = double(dims[size_t(i)]), lo = align ? 0.0 : -0.5, hi = align ? d - 1 : d - 0.5;
    // The grid's last dim lists coordinates innermost dim first.
    Tensor g = reshape_to(c, call_op(c, "slice_copy.Tensor", {grid, r - 1, k - 1 - i, k - i, int64_t(1)}),
                          {gs[0], m});
    Tensor v = align ? tessera::mul(tessera::div(tessera::add(g, sc(1)), sc(2)), sc(d - 1))
                     : tessera::div(tessera::sub(tessera::mul(tessera::add(g, sc(1)), sc(d)), sc(1)), sc(2));
    if (mode == "nearest") v = tessera::round(v);  // halves to even, as np.rint
    auto reflect = [&](const Tensor& p) {
      const double span = hi - lo;
      if (!(span > 0)) c.fail("padding_mode reflection with align_corners needs spatial sizes above 1");
      auto fold = [&](const Tensor& dx, double near, double far) {
        Tensor turns = tessera::trunc(tessera::div(dx, sc(span)));
        Tensor rest = tessera::sub(dx, tessera::mul(turns, sc(span)));
        Tensor odd = tessera::ne(tessera::fmod(turns, sc(2)), sc(0));
        Tensor toward_near = near < far ? tessera::add(sc(near), rest) : tessera::sub(sc(near), rest);
        Tensor toward_far = near < far ? tessera::sub(sc(far), rest) : tessera::add(sc(far), rest);
        return tessera::where(odd, toward_far, toward_near);
      };
      return tessera::where(tessera::lt(p, sc(lo)), fold(tessera::sub(sc(lo), p), lo, hi),
                            tessera::where(tessera::gt(p, sc(hi)), fold(tessera::sub(p, sc(hi)), hi, lo), p));
    };
    if (padding == "border")  // only coordinates outside [lo, hi] move (to the edge pixel)
      v = tessera::where(tessera::lt(v, sc(lo)), sc(0), tessera::where(tessera::gt(v, sc(hi)), sc(d - 1), v));
    if (padding == "reflection") v = reflect(v);
    // The pixel of tap index p per padding_mode: zeros weighs taps outside by 0.
    auto pixel = [&](Tensor p, Tensor w) {
      if (padding == "zeros") {
        Tensor inside = tessera::logical_and(tessera::ge(p, sc(0)), tessera::lt(p, sc(d)));
        w = w.defined() ? tessera::mul(w, inside.to(ft)) : inside.to(ft);
      } else if (padding == "reflection") {
        p = tessera::trunc(reflect(p));
      }
      return Tap{tessera::clamp(p, 0.0, d - 1), w};
    };
    std::vector<Tap>& t = taps[size_t(i)];
    if (mode == "nearest") {
      t.push_back(pixel(tessera::trunc(v), Tensor()));
      continue;
    }
    Tensor x0 = tessera::floor(v), f = tessera::sub(v, x0);
    if (mode == "linear") {
      t.push_back(pixel(x0, tessera::sub(sc(1), f)));
      t.push_back(pixel(tessera::add(x0, sc(1)), f));
      continue;
    }
    const double A = -0.75;
    auto outer = [&](const Tensor& u) {  // ((A u - 5A) u + 8A) u - 4A
      return tessera::sub(
          tessera::mul(
              tessera::add(tessera::mul(tessera::sub(tessera::mul(u, sc(A)), sc(5 * A)), u), sc(8 * A)), u),
          sc(4 * A));
    };
    auto inner = [&](const Tensor& u) {  // ((A + 2) u - (A + 3)) u u + 1
      return tessera::add(
          tessera::mul(tessera::mul(tessera::sub(tessera::mul(u, sc(A + 2)), sc(A + 3)), u), u), sc(1));
    };
    Tensor q = tessera::sub(sc(1), f);
    const Tensor w[4] = {outer(tessera::add(f, sc(1))), inner(f), inner(q), outer(tessera::add(q, sc(1)))};
    for (int j = 0; j < 4; ++j) t.push_back(pixel(tessera::add(x0, sc(j - 1)), w[j]));
  }

  if (!ch.is_constant()) c.fail("samples the dynamic channel count " + ch.str());
  c.check_elements(ch.constant(), "the channel index of GridSample");
  const Tensor channel_zeros =
      host_tensor(std::vector<int64_t>(size_t(ch.constant()), 0), {1, ch.constant(), 1}, kInt64);
  int64_t combos = 1;
  for (const auto& t : taps) combos *= int64_t(t.size());
  Tensor y;
  for (int64_t combo = 0; combo < combos; ++combo) {
    Tensor flat, weight;
    int64_t rest = combo, stride = 1;
    for (int64_t i = k - 1; i >= 0; --i) {
      const auto& t = taps[size_t(i)];
      const Tap& tap = t[size_t(rest % int64_t(t.size()))];
      rest /= int64_t(t.size());
      Tensor at = tap.index.to(kInt64);  // exact for any image size, unlike float32
      if (stride != 1) at = tessera::mul(at, host_scalar(double(stride), kInt64));
      flat = flat.defined() ? tessera::add(flat, at) : at;
      if (tap.weight.defined()) weight = weight.defined() ? tessera::mul(weight, tap.weight) : tap.weight;
      stride *= dims[size_t(i)];
    }
    // [N, 1, M] broadcast over the channels by adding zeros (the batch may be dynamic).
    Tensor index = tessera::add(reshape_to(c, flat, {gs[0], SymSize(int64_t(1)), m}), channel_zeros);
    Tensor term = tessera::gather(xf, 2, index);
    if (weight.defined()) {  // (nearest: 0 or 1, the zeros padding)
      Tensor w = reshape_to(c, weight, {gs[0], SymSize(int64_t(1)), m});
      term = is_floating(x.dtype()) ? tessera::mul(term, w.to(x.dtype()))
                                    : tessera::where(tessera::ne(w, sc(0)), term, host_scalar(0, x.dtype()));
    }
    y = y.defined() ? tessera::add(y, term) : term;
  }
  Sizes out{n, ch};
  for (int64_t i = 1; i < r - 1; ++i) out.push_back(gs[size_t(i)]);
  c.out(0, reshape_to(c, y, out));
}

// AffineGrid (op_affine_grid.py): the base grid of normalized coordinates (x, y[, z], 1) per output
// pixel is a constant, each batch's theta [k, k + 1] maps it: grid = base @ theta^T.
void AffineGrid(NodeCtx& c) {
  Tensor theta = c.in(0);
  const bool align = c.attr_int("align_corners", 0) != 0;
  const std::vector<int64_t> size = c.const_ints(1);
  if (size.size() != 4 && size.size() != 5)
    c.fail("size must be [N, C, H, W] or [N, C, D, H, W], it has " + std::to_string(size.size()) +
           " entries");
  const int64_t k = int64_t(size.size()) - 2;
  const Sizes ts = c.sizes(theta);
  if (ts.size() != 3 || !ts[1].is_constant() || ts[1].constant() != k || !ts[2].is_constant() ||
      ts[2].constant() != k + 1)
    c.fail("theta must be [N, " + std::to_string(k) + ", " + std::to_string(k + 1) + "] for " +
           std::to_string(k) + " spatial dims");
  if (!is_floating(theta.dtype())) c.fail("theta must be floating");
  int64_t count = 1;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = size[size_t(2 + i)];
    if (d < 1 || (align && d < 2))
      c.fail("spatial size " + std::to_string(d) + " is not supported" +
             (align ? " with align_corners (needs 2 or more)" : ""));
    if (__builtin_mul_overflow(count, d, &count)) c.fail("the grid's size overflows");
  }
  c.check_elements(count * (k + 1), "the base grid of AffineGrid");
  // Per spatial dim, the normalized coordinate of each index (np.arange's start + i * step).
  std::vector<std::vector<double>> axis(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = size[size_t(2 + i)];
    const double step = align ? 2.0 / double(d - 1) : 2.0 / double(d), start = align ? -1.0 : -1 + step / 2;
    for (int64_t j = 0; j < d; ++j) axis[size_t(i)].push_back(start + double(j) * step);
  }
  std::vector<double> base;
  base.reserve(size_t(count * (k + 1)));
  for (int64_t p = 0; p < count; ++p) {
    std::vector<int64_t> at(static_cast<size_t>(k));
    for (int64_t i = k - 1, rest = p; i >= 0; --i) {
      at[size_t(i)] = rest % size[size_t(2 + i)];
      rest /= size[size_t(2 + i)];
    }
    for (int64_t i = k - 1; i >= 0; --i) base.push_back(axis[size_t(i)][size_t(at[size_t(i)])]);  // x first
    base.push_back(1.0);
  }
  Tensor grid = tessera::matmul(host_doubles(base, {count, k + 1}, theta.dtype()),
                                theta.transpose(1, 2));  // [N, count, k]
  Sizes out{ts[0]};
  for (int64_t i = 0; i < k; ++i) out.push_back(SymSize(size[size_t(2 + i)]));
  out.push_back(SymSize(k));
  c.out(0, reshape_to(c, grid, out));
}

// Col2Im (op_col2im.py): every (kernel offset, block) element adds into one image pixel or falls in
// the padding; as a constant 0/1 matrix [K * L, pixels] that [N, C, K * L] is multiplied by.
void Col2Im(NodeCtx& c) {
  Tensor x = c.in(0);
  const std::vector<int64_t> image = c.const_ints(1), block = c.const_ints(2);
  const size_t nd = image.size();
  if (nd == 0 || block.size() != nd)
    c.fail("image_shape and block_shape must have the same, non-zero length");
  const std::vector<int64_t> dil = c.attr_ints("dilations", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> stride = c.attr_ints("strides", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
  if (dil.size() != nd || stride.size() != nd || pads.size() != 2 * nd)
    c.fail("dilations, strides and pads must match image_shape's " + std::to_string(nd) + " dims");
  const Sizes xs = c.sizes(x);
  if (xs.size() != 3 || !xs[1].is_constant() || !xs[2].is_constant())
    c.fail("input must be [N, C * prod(block_shape), L] with static C and L");
  int64_t kernel = 1, pixels = 1, blocks = 1;
  std::vector<int64_t> nblk(nd);
  for (size_t i = 0; i < nd; ++i) {
    if (image[i] < 1 || block[i] < 1 || dil[i] < 1 || stride[i] < 1 || pads[i] < 0 || pads[i + nd] < 0 ||
        image[i] > kMaxImportElements || block[i] > kMaxImportElements || dil[i] > kMaxImportElements ||
        stride[i] > kMaxImportElements || pads[i] > kMaxImportElements || pads[i + nd] > kMaxImportElements)
      c.fail("image_shape, block_shape, dilations and strides must be positive and pads non-negative (dim " +
             std::to_string(i) + ")");
    nblk[i] = (image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) / stride[i] + 1;
    if (nblk[i] < 1) c.fail("the blocks of dim " + std::to_string(i) + " do not fit the padded image");
    if (__builtin_mul_overflow(kernel, block[i], &kernel) ||
        __builtin_mul_overflow(pixels, image[i], &pixels) || __builtin_mul_overflow(blocks, nblk[i], &blocks))
      c.fail("the sizes overflow");
  }
  const int64_t ck = xs[1].constant(), len = xs[2].constant();
  if (ck % kernel != 0)
    c.fail("input's dim 1 (" + std::to_string(ck) + ") is not a multiple of the kernel size " +
           std::to_string(kernel));
  if (len != blocks)
    c.fail("input's dim 2 is " + std::to_string(len) + ", the blocks number " + std::to_string(blocks));
  int64_t rows = 0, cells = 0;
  if (__builtin_mul_overflow(kernel, len, &rows) || __builtin_mul_overflow(rows, pixels, &cells))
    c.fail("the sizes overflow");
  c.check_elements(cells, "the Col2Im matrix");
  std::vector<double> m(size_t(cells), 0.0);
  std::vector<int64_t> off(nd), at(nd);
  for (int64_t k = 0; k < kernel; ++k) {
    for (int64_t i = int64_t(nd) - 1, rest = k; i >= 0; --i)
      off[size_t(i)] = rest % block[size_t(i)], rest /= block[size_t(i)];
    for (int64_t l = 0; l < len; ++l) {
      for (int64_t i = int64_t(nd) - 1, rest = l; i >= 0; --i)
        at[size_t(i)] = rest % nblk[size_t(i)], rest /= nblk[size_t(i)];
      int64_t flat = 0;
      bool inside = true;
      for (size_t i = 0; i < nd && inside; ++i) {
        const int64_t p = at[i] * stride[i] - pads[i] + off[i] * dil[i];
        inside = p >= 0 && p < image[i];
        flat = flat * image[i] + p;
      }
      if (inside) m[size_t((k * len + l) * pixels + flat)] = 1;
    }
  }
  const DType dt = x.dtype();
  if (dt == kBool) c.fail("a bool input is not supported");
  const DType work = is_floating(dt) ? dt : kFloat64;  // integers: exact sums in double
  const SymSize channels(ck / kernel);
  Tensor y = tessera::matmul(reshape_to(c, x, {xs[0], channels, SymSize(kernel * len)}).to(work),
                             host_doubles(m, {kernel * len, pixels}, work));
  Sizes out{xs[0], channels};
  for (int64_t v : image) out.push_back(SymSize(v));
  y = reshape_to(c, y, out);
  c.out(0, work == dt ? y : y.to(dt));
}

}  // namespace

void add_resize_converters(ConverterTable& t) {
  t["Resize"] = Resize;
  t["GridSample"] = GridSample;
  t["AffineGrid"] = AffineGrid;
  t["Col2Im"] = Col2Im;
}

}  // namespace tessera::onnx::detail

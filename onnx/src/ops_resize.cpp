// Resize (and the sampling family: GridSample, AffineGrid) at import.
#include <cmath>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

void Resize(NodeCtx& c) {
  Tensor x = c.in(0);
  const std::string mode = c.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear") c.fail("mode '" + mode + "' is not supported (nearest, linear are)");
  if (c.attr_int("antialias", 0)) c.fail("antialias is not supported");
  if (c.attr_int("exclude_outside", 0)) c.fail("exclude_outside is not supported");
  if (c.has_attr("axes")) c.fail("axes is not supported");
  if (c.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") c.fail("only keep_aspect_ratio_policy=stretch is supported");
  const std::string ctm = c.attr_string("coordinate_transformation_mode", "half_pixel");
  c.ignore_attrs({"cubic_coeff_a", "extrapolation_value"});  // cubic and tf_crop_and_resize only
  if (ctm == "tf_crop_and_resize") c.fail("coordinate_transformation_mode tf_crop_and_resize is not supported");
  Sizes s = c.sizes(x);
  std::vector<int64_t> out;
  if (c.has(3)) {
    out = c.const_ints(3);
  } else if (c.has(2)) {
    std::vector<double> scales = c.const_doubles(2);
    if (scales.size() != s.size()) c.fail("scales has " + std::to_string(scales.size()) + " entries for rank " + std::to_string(s.size()));
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_constant()) c.fail("resizes the dynamic size " + s[i].str() + " by a scale");
      const double v = double(s[i].constant()) * scales[i];
      if (!(v >= 0) || v > double(kMaxImportElements) || std::floor(v) != v)
        c.fail("scale " + std::to_string(scales[i]) + " of size " + s[i].str() + " does not give a whole size; give sizes instead");
      out.push_back(int64_t(v));
    }
  } else {
    c.fail("neither scales nor sizes is given");
  }
  if (out.size() != s.size() || out.size() < 3) c.fail("sizes must give every dim of a 3-D or larger input");
  for (size_t i = 0; i < 2 && i + 2 < out.size(); ++i)
    if (s[i].maybe_constant() != std::optional<int64_t>(out[i]) && !(s[i].is_constant() == false && i < 2 && c.example(s[i]) == out[i]))
      c.fail("only the spatial dims (after batch and channels) can be resized");
  std::vector<int64_t> spatial(out.begin() + 2, out.end());
  c.out(0, call_op(c, "_resize", {x, spatial, mode, ctm, c.attr_string("nearest_mode", "round_prefer_floor")}));
}

}  // namespace

void add_resize_converters(ConverterTable& t) {
  t["Resize"] = Resize;
}

}  // namespace tessera::onnx::detail

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
  static const std::map<std::string, std::string> kModes = {{"constant", "constant"}, {"reflect", "reflect"}, {"edge", "replicate"}};
  auto m = kModes.find(mode);
  if (m == kModes.end()) c.fail("mode '" + mode + "' is not supported (constant, reflect, edge are)");
  double value = c.opset() < 11 ? c.attr_float("value", 0.0) : (c.has(2) ? c.const_scalar(2) : 0.0);
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
  args.emplace_back(std::move(list));
  args.emplace_back(m->second);
  if (m->second == "constant") args.emplace_back(value);
  c.out(0, call_op(c, "pad", std::move(args)));
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

void ConvTranspose(NodeCtx& c) {
  Tensor x = c.in(0), w = c.in(1);
  if (c.has_attr("output_shape")) c.fail("output_shape is not supported (give pads and output_padding)");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") c.fail("auto_pad '" + auto_pad + "' is not supported");
  if (w.dim() != 4 || x.dim() != 4) c.fail("only 2-D transposed convolutions (4-D input and weight) are supported");
  std::vector<int64_t> pads = auto_pad == "VALID" ? std::vector<int64_t>(4, 0) : c.attr_ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) c.fail("only symmetric pads are supported");
  std::vector<int64_t> stride = c.attr_ints("strides", {1, 1}), dilation = c.attr_ints("dilations", {1, 1});
  std::vector<int64_t> out_pad = c.attr_ints("output_padding", {0, 0});
  c.out(0, call_op(c, "conv_transpose2d.input", {x, w, c.opt(2), stride, std::vector<int64_t>{pads[0], pads[1]}, out_pad,
                                                 c.attr_int("group", 1), dilation}));
}

}  // namespace

void add_index_converters(ConverterTable& t) {
  t["Pad"] = Pad; t["TopK"] = TopK; t["CumSum"] = CumSum; t["Trilu"] = Trilu; t["ScatterElements"] = ScatterElements;
  t["Scatter"] = ScatterElements; t["ArgMin"] = ArgMin; t["GroupNormalization"] = GroupNormalization;
  t["ConvTranspose"] = ConvTranspose;
}

}  // namespace tessera::onnx::detail

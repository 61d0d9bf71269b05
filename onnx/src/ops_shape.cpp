// Converters of the shape family: Shape, Reshape, Transpose, Squeeze/Unsqueeze, Concat, Gather,
// Slice, Split, Expand, Tile, ConstantOfShape, Range. Known integers are folded (Note [Known
// integers] in convert.h); reshapes are views whose symbolic sizes the capture recovers.
#include <climits>
#include <cmath>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

void Shape(NodeCtx& c) {
  Sizes s = c.has_ints(0) ? Sizes{SymSize(int64_t(c.ints(0).size()))} : c.sizes(c.in(0));
  if (c.has_ints(0) && c.val(0).scalar) s.clear();
  const int64_t r = int64_t(s.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", r);
  start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
  end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
  c.out_ints(0, Sizes(s.begin() + start, s.begin() + std::max(start, end)), false);
}

void Size(NodeCtx& c) {
  Sizes s = c.has_ints(0) ? Sizes{SymSize(int64_t(c.ints(0).size()))} : c.sizes(c.in(0));
  if (c.has_ints(0) && c.val(0).scalar) s.clear();
  c.out_ints(0, {product(s, 0, s.size())}, true);
}

// The sizes a Reshape gives: 0 copies the input's dim (unless allowzero), -1 takes the rest.
Sizes reshape_sizes(NodeCtx& c, const Sizes& in, const Sizes& shape, bool allowzero) {
  Sizes out;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    auto v = shape[i].maybe_constant();
    if (v && *v == 0 && !allowzero) {
      if (i >= in.size()) c.fail("shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " + std::to_string(in.size()));
      out.push_back(in[i]);
    } else if (v && *v == -1) {
      if (infer >= 0) c.fail("the shape has more than one -1");
      infer = int(i);
      out.push_back(1);
    } else {
      if (v && *v < -1) c.fail("the shape has the negative entry " + std::to_string(*v));
      out.push_back(shape[i]);
    }
  }
  if (infer >= 0) {
    SymSize rest = product(out, 0, out.size());
    const SymSize numel = product(in, 0, in.size());
    const int64_t ex_rest = c.example(rest);
    if (ex_rest == 0 || c.example(numel) % ex_rest != 0)
      c.fail("cannot infer the -1 of the shape: the input's element count is not a multiple of the other entries");
    out[size_t(infer)] = floordiv(numel, rest);
  }
  return out;
}

void Reshape(NodeCtx& c) {
  Sizes shape = c.opset() < 5 ? Sizes() : c.ints(1);
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  if (c.has_ints(0)) {  // a size list reshaped to [n] or a scalar stays known; to rank 2+, a tensor
    Sizes v = c.ints(0);
    Sizes in = c.val(0).scalar ? Sizes{} : Sizes{SymSize(int64_t(v.size()))};
    Sizes out = reshape_sizes(c, in, shape, allowzero);
    if (out.size() <= 1) return c.out_ints(0, v, out.empty(), c.val(0).int_dtype);
  }
  Tensor x = c.in(0);
  c.out(0, reshape_to(c, x, reshape_sizes(c, c.sizes(x), shape, allowzero)));
}

void Flatten(NodeCtx& c) {
  Tensor x = c.in(0);
  Sizes s = c.sizes(x);
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += int64_t(s.size());
  if (axis < 0 || axis > int64_t(s.size())) c.fail("axis " + std::to_string(axis) + " is out of range");
  c.out(0, reshape_to(c, x, {product(s, 0, size_t(axis)), product(s, size_t(axis), s.size())}));
}

void Transpose(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> perm = c.attr_ints("perm", {});
  if (perm.empty())
    for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
  if (int64_t(perm.size()) != x.dim()) c.fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(x.dim()));
  for (int64_t& p : perm) p = norm_axis(c, p, x.dim());
  c.out(0, x.permute(perm));
}

void Squeeze(NodeCtx& c) {
  std::optional<std::vector<int64_t>> axes = c.axes(1, "axes");
  if (c.has_ints(0)) {
    if (c.ints(0).size() != 1) c.fail("squeezes a size list of more than one element");
    return c.out_ints(0, c.ints(0), true, c.val(0).int_dtype);
  }
  Tensor x = c.in(0);
  Sizes s = c.sizes(x), out;
  std::vector<bool> drop(s.size(), false);
  if (axes) {
    for (int64_t a : *axes) {
      const int64_t d = norm_axis(c, a, x.dim());
      if (s[size_t(d)].maybe_constant() != std::optional<int64_t>(1)) c.fail("axis " + std::to_string(a) + " has size " + s[size_t(d)].str() + ", not 1");
      drop[size_t(d)] = true;
    }
  } else {
    for (size_t d = 0; d < s.size(); ++d) drop[d] = s[d].maybe_constant() == std::optional<int64_t>(1);
  }
  for (size_t d = 0; d < s.size(); ++d)
    if (!drop[d]) out.push_back(s[d]);
  c.out(0, reshape_to(c, x, out));
}

void Unsqueeze(NodeCtx& c) {
  std::optional<std::vector<int64_t>> axes = c.axes(1, "axes");
  if (!axes) c.fail("axes are required");
  if (c.has_ints(0) && c.val(0).scalar) {
    if (axes->size() != 1) c.fail("unsqueezes a scalar size to rank > 1");
    return c.out_ints(0, c.ints(0), false, c.val(0).int_dtype);
  }
  Tensor x = c.in(0);
  Sizes s = c.sizes(x);
  const int64_t rank = int64_t(s.size() + axes->size());
  std::vector<bool> ones(size_t(rank), false);
  for (int64_t a : *axes) {
    const int64_t d = norm_axis(c, a, rank);
    if (ones[size_t(d)]) c.fail("axis " + std::to_string(a) + " is given twice");
    ones[size_t(d)] = true;
  }
  Sizes out;
  size_t k = 0;
  for (int64_t d = 0; d < rank; ++d) out.push_back(ones[size_t(d)] ? SymSize(int64_t(1)) : s.at(k++));
  c.out(0, reshape_to(c, x, out));
}

void Concat(NodeCtx& c) {
  const int64_t axis_attr = c.attr_int("axis", 0);
  bool all_ints = true;
  for (int i = 0; i < c.num_inputs(); ++i) all_ints = all_ints && c.has_ints(i) && !c.val(i).scalar;
  if (all_ints && (axis_attr == 0 || axis_attr == -1)) {
    Sizes out;
    for (int i = 0; i < c.num_inputs(); ++i)
      for (const SymSize& s : c.ints(i)) out.push_back(s);
    return c.out_ints(0, out, false, c.val(0).int_dtype);
  }
  std::vector<Tensor> xs;
  for (int i = 0; i < c.num_inputs(); ++i) {
    Tensor t = c.in(i);
    if (t.numel() == 0 && t.dim() == 1) continue;  // an empty 1-D piece adds nothing
    xs.push_back(t);
  }
  if (xs.empty()) c.fail("every input is empty");
  const int64_t axis = norm_axis(c, axis_attr, xs[0].dim());
  c.out(0, xs.size() == 1 ? xs[0] : tessera::cat(xs, axis));
}

void Gather(NodeCtx& c) {
  const int64_t axis_attr = c.attr_int("axis", 0);
  if (c.has_ints(0) && c.has_ints(1)) {  // an element of a size list
    Sizes data = c.ints(0);
    Sizes out;
    for (int64_t i : c.const_ints(1)) {
      const int64_t n = int64_t(data.size());
      if (i < -n || i >= n) c.fail("index " + std::to_string(i) + " is out of range for " + std::to_string(n) + " elements");
      out.push_back(data[size_t(i < 0 ? i + n : i)]);
    }
    return c.out_ints(0, out, c.val(1).scalar, c.val(0).int_dtype);
  }
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, axis_attr, x.dim());
  Sizes s = c.sizes(x);
  Tensor idx;
  Sizes idx_sizes;
  if (c.val(1).constant || c.has_ints(1)) {
    const int64_t n = s[size_t(axis)].is_constant() ? s[size_t(axis)].constant() : -1;
    std::vector<int64_t> v;
    for (double d : c.const_doubles(1)) {
      int64_t i = int64_t(d);
      if (i < 0) {
        if (n < 0) c.fail("a negative index on a dynamic dim");
        i += n;
      }
      if (i < 0 || (n >= 0 && i >= n)) c.fail("index " + std::to_string(int64_t(d)) + " is out of range");
      v.push_back(i);
    }
    Tensor ci = c.in(1);
    for (int64_t d : ci.sizes()) idx_sizes.push_back(d);
    idx = host_tensor(v, {int64_t(v.size())}, kInt64);
  } else {
    idx = c.in(1);  // indices computed at run time: taken as non-negative
    idx_sizes = c.sizes(idx);
    if (axis == 0 && x.dim() == 2) return c.out(0, tessera::embedding(x, idx));
    idx = reshape_to(c, idx, {product(idx_sizes, 0, idx_sizes.size())});
  }
  Tensor y = tessera::index_select(x, axis, idx);
  Sizes out(s.begin(), s.begin() + axis);
  out.insert(out.end(), idx_sizes.begin(), idx_sizes.end());
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  c.out(0, reshape_to(c, y, out));
}

void GatherElements(NodeCtx& c) {
  Tensor x = c.in(0);
  c.out(0, tessera::gather(x, norm_axis(c, c.attr_int("axis", 0), x.dim()), c.in(1)));
}

// Python-style slice bounds of [start, end) step `step` over a dim of size n.
std::vector<int64_t> slice_indices(int64_t n, int64_t start, int64_t end, int64_t step) {
  auto clampi = [&](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
  if (start < 0) start += n;
  if (end < 0) end += n;
  std::vector<int64_t> out;
  if (step > 0) {
    start = clampi(start, 0, n);
    end = clampi(end, 0, n);
    for (int64_t i = start; i < end; i += step) out.push_back(i);
  } else {
    start = clampi(start, -1, n - 1);
    end = clampi(end, -1, n - 1);
    for (int64_t i = start; i > end; i += step) out.push_back(i);
  }
  return out;
}

void Slice(NodeCtx& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts", {});
    ends = c.attr_ints("ends", {});
    axes = c.attr_ints("axes", {});
  } else {
    if (c.has(3)) axes = c.const_ints(3);
    if (c.has(4)) steps = c.const_ints(4);
    // A bound that is the sliced dim's own (symbolic) size reads as "to the end".
    const Sizes st = c.ints(1), en = c.ints(2);
    const Sizes dims = c.has_ints(0) ? Sizes{SymSize(int64_t(c.ints(0).size()))} : c.sizes(c.in(0));
    for (size_t k = 0; k < st.size() && k < en.size(); ++k) {
      const int64_t axis = axes.size() > k ? axes[k] : int64_t(k);
      const int64_t d = norm_axis(c, axis, int64_t(dims.size()));
      for (int which = 0; which < 2; ++which) {
        const SymSize& v = which ? en[k] : st[k];
        if (v.is_constant()) (which ? ends : starts).push_back(v.constant());
        else if (v.same_as(dims[size_t(d)])) (which ? ends : starts).push_back(INT64_MAX);
        else c.fail("slices axis " + std::to_string(axis) + " at the dynamic bound " + v.str() + ", which is not that dim's size");
      }
    }
    if (st.size() != en.size()) c.fail("starts and ends differ in length");
  }
  if (starts.size() != ends.size()) c.fail("starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) c.fail("axes/steps differ in length from starts");
  if (c.has_ints(0)) {
    Sizes v = c.ints(0), out;
    if (axes.size() != 1 || (axes[0] != 0 && axes[0] != -1)) c.fail("slices a size list along an axis other than 0");
    if (steps[0] == 0) c.fail("step 0");
    for (int64_t i : slice_indices(int64_t(v.size()), starts[0], ends[0], steps[0])) out.push_back(v[size_t(i)]);
    return c.out_ints(0, out, false, c.val(0).int_dtype);
  }
  Tensor x = c.in(0);
  Sizes s = c.sizes(x);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t d = norm_axis(c, axes[k], x.dim());
    if (steps[k] == 0) c.fail("step 0 on axis " + std::to_string(axes[k]));
    const SymSize& n = s[size_t(d)];
    if (starts[k] == 0 && steps[k] == 1 && ends[k] >= INT32_MAX) continue;  // the whole dim
    if (n.is_constant()) {
      std::vector<int64_t> idx = slice_indices(n.constant(), starts[k], ends[k], steps[k]);
      if (int64_t(idx.size()) == n.constant() && steps[k] == 1) continue;
    }
    // ONNX's clamping of huge bounds (INT64_MAX, -INT64_MAX) is the contract's clamping too.
    const int64_t big = int64_t(1) << 62;
    x = call_op(c, "slice_copy.Tensor", {x, d, std::clamp(starts[k], -big, big), std::clamp(ends[k], -big, big), steps[k]});
    s = c.sizes(x);
  }
  c.out(0, x);
}

void Split(NodeCtx& c) {
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_int("axis", 0), x.dim());
  const SymSize n = c.sizes(x)[size_t(axis)];
  if (!n.is_constant()) c.fail("splits the dynamic dim " + n.str());
  c.check_elements(n.constant(), "the split's index list");
  c.ignore_attrs({"num_outputs"});
  std::vector<int64_t> parts = c.has(1) ? c.const_ints(1) : c.attr_ints("split", {});
  for (int64_t p : parts)
    if (p < 0 || p > n.constant()) c.fail("a split part of size " + std::to_string(p));
  if (parts.empty()) {
    const int64_t k = c.attr_int("num_outputs", c.num_outputs());
    if (k <= 0) c.fail("num_outputs must be positive");
    const int64_t each = (n.constant() + k - 1) / k;
    for (int64_t left = n.constant(); left > 0; left -= each) parts.push_back(std::min(each, left));
  }
  int64_t begin = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < parts[i]; ++j) idx.push_back(begin + j);
    begin += parts[i];
    if (begin > n.constant()) c.fail("the parts are longer than the dim");
    if (c.output_used(int(i))) c.out(int(i), tessera::index_select(x, axis, host_tensor(idx, {int64_t(idx.size())}, kInt64)));
  }
}

void Expand(NodeCtx& c) {
  Tensor x = c.in(0);
  Sizes s = c.sizes(x), shape = c.ints(1);
  const size_t rank = std::max(s.size(), shape.size());
  Sizes out(rank);
  bool all_static = true;
  for (size_t i = 0; i < rank; ++i) {
    const bool has_x = i + s.size() >= rank, has_t = i + shape.size() >= rank;
    SymSize a = has_x ? s[i + s.size() - rank] : SymSize(int64_t(1));
    SymSize b = has_t ? shape[i + shape.size() - rank] : SymSize(int64_t(1));
    if (b.maybe_constant() == std::optional<int64_t>(1) || a.same_as(b)) out[i] = a;
    else if (a.maybe_constant() == std::optional<int64_t>(1)) out[i] = b;
    else c.fail("cannot broadcast " + a.str() + " to " + b.str() + " at dim " + std::to_string(i));
    all_static = all_static && out[i].is_constant();
  }
  Sizes padded(rank - s.size(), SymSize(int64_t(1)));
  padded.insert(padded.end(), s.begin(), s.end());
  bool same = true;
  for (size_t i = 0; i < rank; ++i) same = same && padded[i].same_as(out[i]);
  if (same) return c.out(0, reshape_to(c, x, out));
  if (!all_static) return c.out(0, tessera::where(symbolic_ones(c, out), x, x));  // broadcast to a symbolic shape
  std::vector<int64_t> sizes = c.example(out);
  int64_t numel = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(numel, s, &numel)) numel = INT64_MAX;
  c.check_elements(numel, "the expanded constant");
  c.out(0, call_op(c, "expand_copy", {reshape_to(c, x, padded), sizes}));
}

void Tile(NodeCtx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> reps = c.const_ints(1);
  if (int64_t(reps.size()) != x.dim()) c.fail("repeats has " + std::to_string(reps.size()) + " entries for rank " + std::to_string(x.dim()));
  bool all_one = true;
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) c.fail("a negative repeat");
    if (reps[d] > 4096) c.fail("a repeat of " + std::to_string(reps[d]) + " (more than 4096) is not supported");
    all_one = all_one && reps[d] == 1;
  }
  c.out(0, all_one ? x : call_op(c, "repeat", {x, reps}));
}

void ConstantOfShape(NodeCtx& c) {
  Sizes shape = c.ints(0);
  bool dynamic = false;
  for (const SymSize& s : shape) dynamic = dynamic || !s.is_constant();
  if (dynamic) {
    Tensor value = host_scalar(0.0, kFloat32);
    if (const ::onnx::TensorProto* p = c.attr_tensor("value")) value = tensor_from_proto(*p, "");
    if (value.numel() != 1) c.fail("value must hold one element");
    Tensor v = reshape_to(c, value, {});
    return c.out(0, tessera::where(symbolic_ones(c, shape), v, v));
  }
  std::vector<int64_t> sizes;
  int64_t numel = 1;
  for (const SymSize& s : shape) {
    if (!s.is_constant()) c.fail("the shape has the dynamic size " + s.str() + "; only constant shapes are supported");
    if (s.constant() < 0) c.fail("the shape has the negative size " + std::to_string(s.constant()));
    if (__builtin_mul_overflow(numel, s.constant(), &numel)) numel = INT64_MAX;
    sizes.push_back(s.constant());
  }
  c.check_elements(numel, "the constant");
  Tensor value = host_scalar(0.0, kFloat32);
  if (const ::onnx::TensorProto* p = c.attr_tensor("value")) value = tensor_from_proto(*p, "");
  if (value.numel() != 1) c.fail("value must hold one element");
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  Tensor t = tessera::full(sizes, value.reshape({}).item(), tessera::dtype(value.dtype()));
  c.out(0, constant_val(t));
}

void Range(NodeCtx& c) {
  Tensor start = c.in(0);
  const DType dt = start.dtype();
  if (c.has_ints(0) && c.has_ints(1) && c.has_ints(2)) {
    Sizes a = c.ints(0), b = c.ints(1), d = c.ints(2);
    if (a.size() != 1 || b.size() != 1 || d.size() != 1) c.fail("start, limit and delta must be scalars");
    if (a[0].is_constant() && b[0].is_constant() && d[0].is_constant()) {
      std::vector<int64_t> v;
      if (d[0].constant() == 0) c.fail("delta is 0");
      for (int64_t i = a[0].constant(); d[0].constant() > 0 ? i < b[0].constant() : i > b[0].constant(); i += d[0].constant()) {
        v.push_back(i);
        if (v.size() > 64) break;
      }
      if (v.size() <= 64) return c.out_ints(0, Sizes(v.begin(), v.end()), false, dt);
    }
  }
  if (c.has_ints(0) && c.has_ints(1) && c.has_ints(2) && c.ints(1).size() == 1 && !c.ints(1)[0].is_constant()) {
    // arange(start, n) with a symbolic n - start: the running count of a symbolic all-ones vector.
    const Sizes a = c.ints(0), d = c.ints(2);
    if (a.size() != 1 || d.size() != 1 || d[0].maybe_constant() != std::optional<int64_t>(1) || !a[0].is_constant())
      c.fail("a range over the dynamic limit " + c.ints(1)[0].str() + " needs a constant start and delta 1");
    Tensor ones = symbolic_ones(c, {c.ints(1)[0] - a[0]}).to(dt);
    Tensor idx = call_op(c, "cumsum", {ones, int64_t(0), dt});
    return c.out(0, tessera::add(idx, host_scalar(double(a[0].constant() - 1), dt)));
  }
  const double s = c.const_scalar(0), e = c.const_scalar(1), d = c.const_scalar(2);
  if (d == 0 || !std::isfinite(s) || !std::isfinite(e) || !std::isfinite(d)) c.fail("start, limit and delta must be finite, delta non-zero");
  const double count = std::ceil((e - s) / d);
  c.check_elements(count > 0 ? (count > double(kMaxImportElements) ? kMaxImportElements + 1 : int64_t(count)) : 0, "the range");
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  Tensor t = is_floating(dt) ? tessera::arange(Scalar(s), Scalar(e), Scalar(d), tessera::dtype(dt))
                             : tessera::arange(Scalar(int64_t(s)), Scalar(int64_t(e)), Scalar(int64_t(d)), tessera::dtype(dt));
  c.out(0, constant_val(t));
}

}  // namespace

void add_shape_converters(ConverterTable& t) {
  t["Shape"] = Shape; t["Size"] = Size; t["Reshape"] = Reshape; t["Flatten"] = Flatten; t["Transpose"] = Transpose;
  t["Squeeze"] = Squeeze; t["Unsqueeze"] = Unsqueeze; t["Concat"] = Concat; t["Gather"] = Gather;
  t["GatherElements"] = GatherElements; t["Slice"] = Slice; t["Split"] = Split; t["Expand"] = Expand;
  t["Tile"] = Tile; t["ConstantOfShape"] = ConstantOfShape; t["Range"] = Range;
}

}  // namespace tessera::onnx::detail
